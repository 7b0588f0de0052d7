/// Named arguments (`:name` in a statement) as JSON text: an object, or "" for none.
///
/// The one reader of `--args`, of the `arguments_json` of admin requests, and of
/// the arguments of subscriptions a peer sends or a verdict names, so that each
/// refuses the same text with the same words. It is as strict as a DQL object
/// literal: `JSON.parse` refuses bytes that are not UTF-8, a key given twice, a
/// number it cannot keep as written, nesting past `JSON.maximumDepth`, and text cut
/// short or followed by more, each naming the byte where it is.
public enum ArgumentsJSON {
    /// Why a text is not arguments; `message(naming:)` says it of `--args` or of `arguments`.
    public struct Error: Swift.Error, Sendable, Hashable, CustomStringConvertible {
        /// What is wrong, without naming what was read: "invalid JSON at byte 7: …".
        public var problem: String

        public init(problem: String) { self.problem = problem }

        /// `"<name>: <problem>"`.
        public func message(naming name: String = "arguments") -> String { "\(name): \(problem)" }

        public var description: String { message() }
    }

    /// The arguments `text` holds: none when it is empty.
    public static func parse(_ text: String) throws(Error) -> [String: Value] {
        guard !text.isEmpty else { return [:] }
        let value: Value
        do {
            value = try JSON.parse(text)
        } catch {
            throw Error(problem: error.description)
        }
        return try object(value)
    }

    /// The arguments UTF-8 `bytes` hold: none when there are none.
    public static func parse(bytes: some Collection<UInt8>) throws(Error) -> [String: Value] {
        guard !bytes.isEmpty else { return [:] }
        let value: Value
        do {
            value = try JSON.parse(bytes: bytes)
        } catch {
            throw Error(problem: error.description)
        }
        return try object(value)
    }

    /// The text of `arguments`: their canonical JSON, or "" for none.
    public static func encode(_ arguments: [String: Value]) -> String {
        arguments.isEmpty ? "" : Value.object(arguments).canonicalJSON
    }

    static func object(_ value: Value) throws(Error) -> [String: Value] {
        guard case .object(let fields) = value else {
            throw Error(problem: "\(value.kindName), not a JSON object like {\"id\": \"a\"}")
        }
        return fields
    }
}

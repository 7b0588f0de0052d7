public import ShoalCRDT

/// The value an ATTACHMENT field holds: a last-writer-wins token naming bytes by
/// their SHA-256. The bytes live outside documents and travel only when asked for.
///
/// ```
/// {"attachment": "<64 hex digits>", "length": 1234, "metadata": {"name": "photo.jpg"}}
/// ```
public struct AttachmentToken: Sendable, Hashable {
    public var hash: String
    public var length: Int
    public var metadata: [String: Value]

    public init(hash: String, length: Int, metadata: [String: Value] = [:]) {
        self.hash = hash
        self.length = length
        self.metadata = metadata
    }

    /// Reads a token value, or a bare hash string.
    public init?(_ value: Value) {
        if case .string(let hash) = value, Self.isHash(hash) {
            self.init(hash: hash, length: -1)
            return
        }
        guard case .string(let hash)? = value["attachment"], Self.isHash(hash), case .int(let length)? = value["length"]
        else { return nil }
        self.init(hash: hash, length: Int(length), metadata: value["metadata"]?.objectValue ?? [:])
    }

    public var value: Value {
        ["attachment": .string(hash), "length": .int(Int64(length)), "metadata": .object(metadata)]
    }

    /// Whether `s` is 64 lowercase hex digits, the form of an attachment ID.
    public static func isHash(_ s: String) -> Bool {
        s.utf8.count == 64 && s.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// The SHA-256 of `bytes` as 64 lowercase hex digits.
    public static func hash(of bytes: some Sequence<UInt8>) -> String {
        var digest = AttachmentDigest()
        digest.update(Array(bytes))
        return digest.finalize()
    }
}

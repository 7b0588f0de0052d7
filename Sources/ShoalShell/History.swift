import Foundation

/// The lines entered before, and where Up and Down are in them.
///
/// Browsing keeps the line being typed: Up from it saves it, Down past the newest
/// entry brings it back. Entering a line adds it (not when blank, nor twice in a
/// row) and ends the browsing. At most `limit` entries are kept, the oldest go first.
public struct History: Sendable, Hashable {
    public private(set) var entries: [String]
    public let limit: Int
    /// The entry shown, or nil while on the line being typed.
    private var index: Int?
    private var draft = ""

    public init(entries: [String] = [], limit: Int = 1000) {
        self.entries = Array(entries.suffix(limit))
        self.limit = limit
    }

    /// The older line to show instead of `current`, or nil at the oldest.
    public mutating func previous(current: String) -> String? {
        let target = (index ?? entries.count) - 1
        guard target >= 0 else { return nil }
        if index == nil { draft = current }
        index = target
        return entries[target]
    }

    /// The newer line to show, the typed one after the newest; nil when not browsing.
    public mutating func next() -> String? {
        guard let shown = index else { return nil }
        if shown + 1 < entries.count {
            index = shown + 1
            return entries[shown + 1]
        }
        index = nil
        return draft
    }

    /// Records an entered line and ends the browsing.
    public mutating func add(_ line: String) {
        index = nil
        draft = ""
        guard !line.allSatisfy(\.isWhitespace), entries.last != line else { return }
        entries.append(line)
        if entries.count > limit { entries.removeFirst(entries.count - limit) }
    }

    /// `$SHOAL_HISTORY`, else `~/.shoal_history`.
    public static var defaultPath: String? {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["SHOAL_HISTORY"], !path.isEmpty { return path }
        guard let home = environment["HOME"], !home.isEmpty else { return nil }
        return home + "/.shoal_history"
    }

    /// The history in a file, one entry a line (a line that held newlines is saved
    /// with them as `\n`); empty when the file does not exist.
    public static func load(path: String, limit: Int = 1000) -> History {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return History(limit: limit) }
        let lines = text.split(separator: "\n").map { $0.replacingOccurrences(of: "\\n", with: "\n") }
        return History(entries: lines, limit: limit)
    }

    /// Writes the entries to `path`, readable by its owner only (statements can hold data).
    public func save(path: String) throws(ShellError) {
        let text = entries.map { $0.replacingOccurrences(of: "\n", with: "\\n") + "\n" }.joined()
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        else { throw ShellError("cannot write the shell history to \(path)") }
    }
}

/// A problem with a DQL query: a syntax error found while parsing (with its
/// position), or an error found while evaluating (usually without one).
public struct QueryError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, naming what was expected and what was found.
    public var message: String
    /// Where in the query text the problem is, when known.
    public var position: SourcePosition?
    /// The full query text, when known, so the offending line can be shown.
    public var query: String?

    /// Creates an error with a message and, optionally, where it happened.
    public init(_ message: String, position: SourcePosition? = nil, query: String? = nil) {
        self.message = message
        self.position = position
        self.query = query
    }

    /// `line 1, column 22: expected FROM after the projection, found 'FORM'`.
    public var description: String {
        guard let position else { return message }
        return "\(position): \(message)"
    }

    /// The description followed, when the query text is known, by the offending
    /// line and a caret under the column.
    public var detailedDescription: String {
        guard let position, let query else { return description }
        let lines = query.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
        guard position.line >= 1, position.line <= lines.count else { return description }
        let line = lines[position.line - 1]
        // Keep tabs so the caret lines up however the terminal expands them.
        let width = max(0, position.column - 1)
        let indent =
            line.prefix(width).map { $0 == "\t" ? "\t" : " " }.joined()
            + String(repeating: " ", count: max(0, width - line.count))
        return "\(description)\n\(line)\n\(indent)^"
    }
}

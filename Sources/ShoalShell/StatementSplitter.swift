/// Cuts the shell's input into statements at each `;` outside string literals,
/// quoted names and comments, however the lines break.
///
/// Lines go in one at a time (`add`); every statement the line completes comes out,
/// without its `;` and trimmed. What follows the last `;` waits for more lines:
/// `isEmpty` says whether anything does (the shell's prompt changes while it does).
///
/// ```
///   code ── ' ──► 'string' ── ' ──► code      ('' inside reads as close then reopen)
///        ── ` ──► `name`   ── ` ──► code
///        ── " ──► "json"   ── " ──► code      (\" and \\ escape)
///        ── -- ─► comment  ── end of line ──► code
/// ```
public struct StatementSplitter: Sendable, Hashable {
    enum Mode: Sendable, Hashable {
        case code
        case quoted(Character)
        /// Inside a `"…"` string, just after a backslash.
        case escaped
        case comment
    }

    private var pending = ""
    private var mode = Mode.code

    public init() {}

    /// Whether no statement text is waiting for its `;` (white space and comments do not count).
    public var isEmpty: Bool { Self.isBlank(pending) }

    /// Whether the waiting text ends inside a string literal or a quoted name.
    public var isInsideQuotes: Bool { mode != .code && mode != .comment }

    /// Adds one line (without its newline) and returns the statements it completes.
    public mutating func add(line: String) -> [String] {
        var statements: [String] = []
        var previous: Character?
        for c in line {
            switch mode {
            case .code:
                if c == ";" {
                    let statement = Self.trimmed(pending)
                    if !Self.isBlank(statement) { statements.append(statement) }
                    pending = ""
                    previous = nil
                    continue
                }
                if c == "'" || c == "`" || c == "\"" { mode = .quoted(c) }
                if c == "-" && previous == "-" { mode = .comment }
            case .quoted(let quote):
                if c == quote {
                    mode = .code
                } else if quote == "\"" && c == "\\" {
                    mode = .escaped
                }
            case .escaped:
                mode = .quoted("\"")
            case .comment:
                break
            }
            pending.append(c)
            previous = c
        }
        if mode == .comment || mode == .escaped { mode = mode == .comment ? .code : .quoted("\"") }
        pending.append("\n")
        return statements
    }

    /// Takes what waits for a `;` as a last statement (at the end of the input);
    /// nil when there is none.
    public mutating func finish() -> String? {
        defer {
            pending = ""
            mode = .code
        }
        return isEmpty ? nil : Self.trimmed(pending)
    }

    /// Forgets what waits for a `;` (Ctrl-C at a continuation prompt).
    public mutating func reset() {
        pending = ""
        mode = .code
    }

    static func trimmed(_ text: String) -> String {
        String(text.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
    }

    /// Whether `text` holds nothing but white space and `--` comments.
    static func isBlank(_ text: String) -> Bool {
        text.split(whereSeparator: \.isNewline).allSatisfy { line in
            let rest = line.drop { $0.isWhitespace }
            return rest.isEmpty || rest.hasPrefix("--")
        }
    }
}

/// One statement typed into the shell: a transaction command the shell sends as
/// its own admin request, or DQL for the node.
///
/// ```
/// BEGIN [TRANSACTION] [READ ONLY] [HINT 'text']     (READ ONLY and HINT in either order)
/// COMMIT [TRANSACTION]
/// ROLLBACK [TRANSACTION]
/// ```
///
/// Keywords are case-insensitive; the hint is a single-quoted string in which `''`
/// stands for one quote. Anything that does not start with one of these three
/// words is DQL, passed on as typed.
public enum ShellStatement: Sendable, Hashable {
    case begin(readOnly: Bool, hint: String?)
    case commit
    case rollback
    case dql(String)

    /// Reads one statement (as `StatementSplitter` cut it, without its `;`).
    public static func parse(_ text: String) throws(ShellError) -> ShellStatement {
        var words = Words(text)
        guard let first = words.keyword() else { return .dql(text) }
        switch first {
        case "BEGIN":
            var readOnly = false
            var hint: String?
            if words.peekKeyword() == "TRANSACTION" { _ = words.keyword() }
            while !words.atEnd {
                switch words.keyword() {
                case "READ" where !readOnly:
                    guard words.keyword() == "ONLY" else { throw usage(text, "READ must be followed by ONLY") }
                    readOnly = true
                case "HINT" where hint == nil:
                    hint = try words.quoted(in: text)
                default:
                    throw usage(text, "after BEGIN come only READ ONLY and HINT 'text', each at most once")
                }
            }
            return .begin(readOnly: readOnly, hint: hint)
        case "COMMIT", "ROLLBACK":
            if words.peekKeyword() == "TRANSACTION" { _ = words.keyword() }
            guard words.atEnd else { throw usage(text, "\(first) takes nothing after it") }
            return first == "COMMIT" ? .commit : .rollback
        default:
            return .dql(text)
        }
    }

    static func usage(_ text: String, _ problem: String) -> ShellError {
        ShellError("cannot read '\(text)': \(problem) (BEGIN [READ ONLY] [HINT 'text'], COMMIT, ROLLBACK)")
    }

    /// The words of a statement, read left to right.
    struct Words {
        private var rest: Substring

        init(_ text: String) { rest = Substring(text) }

        var atEnd: Bool {
            mutating get {
                skipSpace()
                return rest.isEmpty
            }
        }

        private mutating func skipSpace() {
            rest = rest.drop { $0.isWhitespace }
        }

        /// The next bare word, upper-cased; nil when the next thing is not a word.
        mutating func keyword() -> String? {
            skipSpace()
            let word = rest.prefix { $0.isLetter }
            guard !word.isEmpty else { return nil }
            rest = rest.dropFirst(word.count)
            return word.uppercased()
        }

        mutating func peekKeyword() -> String? {
            var copy = self
            return copy.keyword()
        }

        /// A `'…'` string, `''` standing for one quote.
        mutating func quoted(in text: String) throws(ShellError) -> String {
            skipSpace()
            guard rest.first == "'" else { throw ShellStatement.usage(text, "HINT takes a quoted string, like HINT 'nightly fix'") }
            rest = rest.dropFirst()
            var out = ""
            while let c = rest.first {
                rest = rest.dropFirst()
                if c == "'" {
                    guard rest.first == "'" else { return out }
                    rest = rest.dropFirst()
                }
                out.append(c)
            }
            throw ShellStatement.usage(text, "the hint has no closing quote")
        }
    }
}

public import Foundation

/// The example blocks of `Protocol/DQL.md`, read so that the parser, evaluator and
/// subscription tests run every one of them (DQL.md section 5 gives their formats).
///
/// A line the formats do not allow is kept as a `problem`, which a test reports: an
/// example that cannot be read must fail rather than be skipped.
public struct DQLExamples: Sendable {
    /// `ok:` or `error:` of a `dql-statements` or `dql-subscriptions` block.
    public struct Parse: Sendable, CustomStringConvertible {
        public var text: String
        public var accepted: Bool
        /// A fragment of the reference parser's message, for an `error:`.
        public var says: String?
        public var line: Int
        public var description: String { "DQL.md:\(line) \(accepted ? "ok" : "error"): \(text)" }
    }

    /// A `true:`, `false:` or `error:` line of a `dql-match` block.
    public struct Match: Sendable, CustomStringConvertible {
        public enum Outcome: String, Sendable { case `true`, `false`, error }
        public var document: String
        /// The arguments object as JSON, `{}` when the block set none.
        public var arguments: String
        public var expression: String
        public var outcome: Outcome
        public var line: Int
        public var description: String { "DQL.md:\(line) \(outcome): \(expression)" }
    }

    /// One example of a `dql-narrower` block.
    public struct Narrower: Sendable, CustomStringConvertible {
        public struct Query: Sendable {
            public var text: String
            /// The arguments object as JSON, `""` for none.
            public var arguments: String
        }
        public var r: [Query] = []
        public var s: [Query] = []
        public var collection = ""
        public var narrower = false
        public var line: Int
        public var description: String { "DQL.md:\(line) \(narrower ? "narrower" : "not narrower") on \(collection)" }
    }

    public private(set) var statements: [Parse] = []
    public private(set) var subscriptions: [Parse] = []
    public private(set) var matches: [Match] = []
    public private(set) var narrower: [Narrower] = []
    /// Lines that follow none of the formats, as `DQL.md:LINE: text`.
    public private(set) var problems: [String] = []

    public static var file: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Protocol/DQL.md")
    }

    /// The examples of `Protocol/DQL.md`; a file that cannot be read is one problem.
    public static let all: DQLExamples = {
        guard let text = try? String(contentsOf: file, encoding: .utf8) else {
            var examples = DQLExamples()
            examples.problems = ["cannot read \(file.path)"]
            return examples
        }
        return DQLExamples(text)
    }()

    init() {}

    public init(_ text: String) {
        var block: String?
        var lines: [(Int, String)] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if let open = block {
                if line == "```" {
                    read(open, lines)
                    block = nil
                    lines = []
                } else {
                    lines.append((index + 1, line))
                }
            } else if line.hasPrefix("```dql-") {
                block = String(line.dropFirst(3))
            }
        }
        if let block { problems.append("DQL.md: the \(block) block is never closed") }
    }

    /// `word: rest`, or nil when the line does not start with a word and a colon.
    static func split(_ line: String) -> (word: String, rest: String)? {
        guard let colon = line.firstIndex(of: ":") else { return nil }
        let word = line[..<colon]
        guard !word.isEmpty, word.allSatisfy({ $0.isLetter || $0 == "-" }) else { return nil }
        return (String(word), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
    }

    mutating func read(_ kind: String, _ lines: [(Int, String)]) {
        switch kind {
        case "dql-statements": statements += parses(lines)
        case "dql-subscriptions": subscriptions += parses(lines)
        case "dql-match": readMatches(lines)
        case "dql-narrower": readNarrower(lines)
        default: problems.append("DQL.md:\(lines.first?.0 ?? 0): unknown example block \(kind)")
        }
    }

    mutating func parses(_ lines: [(Int, String)]) -> [Parse] {
        var out: [Parse] = []
        for (number, line) in lines where !line.isEmpty {
            switch Self.split(line) {
            case ("ok", let rest)?: out.append(Parse(text: rest, accepted: true, line: number))
            case ("error", let rest)?: out.append(Parse(text: rest, accepted: false, line: number))
            case ("says", let rest)? where out.last.map({ !$0.accepted && $0.says == nil }) == true:
                out[out.count - 1].says = rest
            default: problems.append("DQL.md:\(number): \(line)")
            }
        }
        return out
    }

    mutating func readMatches(_ lines: [(Int, String)]) {
        var document: String?
        var arguments = "{}"
        for (number, line) in lines where !line.isEmpty {
            switch Self.split(line) {
            case ("document", let rest)?:
                document = rest
                arguments = "{}"
            case ("arguments", let rest)?:
                arguments = rest
            case (let word, let rest)? where Match.Outcome(rawValue: word) != nil && document != nil:
                matches.append(
                    Match(document: document!, arguments: arguments, expression: rest, outcome: Match.Outcome(rawValue: word)!, line: number))
            default:
                problems.append("DQL.md:\(number): \(line)")
            }
        }
    }

    mutating func readNarrower(_ lines: [(Int, String)]) {
        var current: Narrower?
        var lastWasR = true
        for (number, line) in lines + [(0, "")] {
            if line.isEmpty {
                if let done = current {
                    if done.collection.isEmpty { problems.append("DQL.md:\(done.line): an example without '=> … on C'") }
                    narrower.append(done)
                }
                current = nil
                continue
            }
            var example = current ?? Narrower(line: number)
            if let (word, rest) = Self.split(line), word == "R" || word == "S" {
                let query = Narrower.Query(text: rest, arguments: "")
                lastWasR = word == "R"
                if lastWasR { example.r.append(query) } else { example.s.append(query) }
            } else if line.hasPrefix("with "), !(lastWasR ? example.r : example.s).isEmpty {
                let arguments = String(line.dropFirst(5))
                if lastWasR { example.r[example.r.count - 1].arguments = arguments } else { example.s[example.s.count - 1].arguments = arguments }
            } else if line.hasPrefix("=> "), let on = line.range(of: " on ") {
                let verdict = line[line.index(line.startIndex, offsetBy: 3)..<on.lowerBound]
                guard verdict == "narrower" || verdict == "not narrower" else {
                    problems.append("DQL.md:\(number): \(line)")
                    continue
                }
                example.narrower = verdict == "narrower"
                example.collection = String(line[on.upperBound...])
            } else {
                problems.append("DQL.md:\(number): \(line)")
            }
            current = example
        }
    }
}

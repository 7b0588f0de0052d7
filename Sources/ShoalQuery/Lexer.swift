/// Splits DQL text into tokens, tracking positions in Characters.
public struct Lexer {
    private let text: String
    private let chars: [Character]
    private var index = 0
    private var line = 1
    private var column = 1

    /// A lexer at the start of `text`.
    public init(_ text: String) {
        self.text = text
        self.chars = Array(text)
    }

    /// Every token of `text`, the last one being `.end`.
    public static func tokenize(_ text: String) throws(QueryError) -> [Token] {
        var lexer = Lexer(text)
        var tokens: [Token] = []
        repeat {
            tokens.append(try lexer.next())
        } while tokens.last?.kind != .end
        return tokens
    }

    /// The next token, or an `.end` token once the text is used up.
    public mutating func next() throws(QueryError) -> Token {
        skipSpaceAndComments()
        let start = position
        guard let c = peek() else { return Token(kind: .end, text: "", position: start) }
        let kind: Token.Kind
        switch c {
        case _ where Self.isNameStart(c):
            kind = Self.classify(readWhile(Self.isNameContinuation))
        case "0"..."9": kind = try number(from: start)
        case "'": kind = .string(try quoted(by: "'", what: "string literal", from: start))
        case "`":
            let name = try quoted(by: "`", what: "quoted identifier", from: start)
            if name.isEmpty { throw error("empty quoted identifier: write a name between the backticks", at: start) }
            kind = .identifier(name)
        case "\"": kind = .string(try jsonString(from: start))
        case ":" where peek(1).map(Self.isNameStart) == true:
            advance()
            kind = .parameter(readWhile(Self.isNameContinuation))
        default:
            kind = .symbol(try symbol(from: start))
        }
        return Token(kind: kind, text: String(chars[start.offset..<index]), position: start)
    }

    /// A bare word as a keyword (matched case-insensitively) or an identifier.
    static func classify(_ word: String) -> Token.Kind {
        let keyword = word.allSatisfy(\.isASCII) ? Token.Keyword(rawValue: word.uppercased()) : nil
        return keyword.map { .keyword($0) } ?? .identifier(word)
    }

    static func isNameStart(_ c: Character) -> Bool { c.isLetter || c == "_" }
    static func isNameContinuation(_ c: Character) -> Bool { c.isLetter || c.isNumber || c == "_" }

    private var position: SourcePosition { SourcePosition(offset: index, line: line, column: column) }

    private func peek(_ ahead: Int = 0) -> Character? {
        index + ahead < chars.count ? chars[index + ahead] : nil
    }

    private mutating func advance() {
        if chars[index].isNewline {
            line += 1
            column = 1
        } else {
            column += 1
        }
        index += 1
    }

    private mutating func readWhile(_ predicate: (Character) -> Bool) -> String {
        let start = index
        while let c = peek(), predicate(c) { advance() }
        return String(chars[start..<index])
    }

    private func error(_ message: String, at position: SourcePosition) -> QueryError {
        QueryError(message, position: position, query: text)
    }

    private mutating func skipSpaceAndComments() {
        while let c = peek() {
            if c.isWhitespace {
                advance()
            } else if c == "-", peek(1) == "-" {
                while let c = peek(), !c.isNewline { advance() }
            } else {
                return
            }
        }
    }

    private mutating func number(from start: SourcePosition) throws(QueryError) -> Token.Kind {
        let isDigit: (Character) -> Bool = { ("0"..."9").contains($0) }
        var isInteger = true
        _ = readWhile(isDigit)
        if peek() == ".", let d = peek(1), isDigit(d) {
            isInteger = false
            advance()
            _ = readWhile(isDigit)
        }
        if let e = peek(), e == "e" || e == "E" {
            let signed = peek(1) == "+" || peek(1) == "-"
            if let d = peek(signed ? 2 : 1), isDigit(d) {
                isInteger = false
                advance()
                if signed { advance() }
                _ = readWhile(isDigit)
            }
        }
        if let c = peek(), Self.isNameContinuation(c) {
            _ = readWhile(Self.isNameContinuation)
            let word = String(chars[start.offset..<index])
            throw error(
                "invalid number '\(word)': names cannot start with a digit (quote them with backticks)", at: start)
        }
        let literal = String(chars[start.offset..<index])
        if isInteger {
            guard let value = Int64(literal) else {
                throw error(
                    "integer \(literal) does not fit in 64 bits (the largest is \(Int64.max)); "
                        + "write it with a decimal point for an approximate value",
                    at: start)
            }
            return .integer(value)
        }
        guard let value = Double(literal), value.isFinite else {
            throw error("number \(literal) is out of range", at: start)
        }
        return .decimal(value)
    }

    /// A `'...'` string or `` `...` `` name, where a doubled quote stands for one.
    private mutating func quoted(by quote: Character, what: String, from start: SourcePosition) throws(QueryError)
        -> String
    {
        advance()
        var out = ""
        while true {
            guard let c = peek() else {
                throw error("unterminated \(what): add a closing \(quote)", at: start)
            }
            advance()
            if c == quote {
                guard peek() == quote else { return out }
                advance()
            }
            out.append(c)
        }
    }

    /// A `"..."` string with JSON escapes.
    private mutating func jsonString(from start: SourcePosition) throws(QueryError) -> String {
        advance()
        var out = ""
        while true {
            guard let c = peek() else {
                throw error("unterminated string literal: add a closing \"", at: start)
            }
            if c == "\"" {
                advance()
                return out
            }
            guard c == "\\" else {
                out.append(c)
                advance()
                continue
            }
            let escape = position
            advance()
            let e = peek()
            if e != nil { advance() }
            switch e {
            case "\"": out.append("\"")
            case "\\": out.append("\\")
            case "/": out.append("/")
            case "b": out.append("\u{8}")
            case "f": out.append("\u{C}")
            case "n": out.append("\n")
            case "r": out.append("\r")
            case "t": out.append("\t")
            case "u": out.unicodeScalars.append(try unicodeEscape(at: escape))
            default:
                let shown = e.map { "'\\\($0)'" } ?? "'\\' at the end of the query"
                throw error(
                    "unknown escape \(shown) in string literal: use \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX",
                    at: escape)
            }
        }
    }

    /// The scalar of `\uXXXX` (the `\u` already read), joining a UTF-16 surrogate pair.
    private mutating func unicodeEscape(at escape: SourcePosition) throws(QueryError) -> Unicode.Scalar {
        func hex4(_ lexer: inout Lexer) -> UInt32? {
            var value: UInt32 = 0
            for _ in 0..<4 {
                guard let c = lexer.peek(), let digit = c.hexDigitValue, c.isASCII else { return nil }
                value = value * 16 + UInt32(digit)
                lexer.advance()
            }
            return value
        }
        guard var code = hex4(&self) else {
            throw error("invalid \\u escape: expected four hexadecimal digits, as in \\u00e9", at: escape)
        }
        if (0xD800...0xDBFF).contains(code) {
            let low = position
            guard peek() == "\\", peek(1) == "u" else {
                throw error(
                    "unpaired UTF-16 surrogate in \\u escape: follow it with a \\uDC00-\\uDFFF escape", at: escape)
            }
            advance()
            advance()
            guard let second = hex4(&self), (0xDC00...0xDFFF).contains(second) else {
                throw error("invalid low surrogate: expected a \\uDC00-\\uDFFF escape", at: low)
            }
            code = 0x10000 + ((code - 0xD800) << 10) + (second - 0xDC00)
        }
        guard let scalar = Unicode.Scalar(code) else {
            throw error("unpaired UTF-16 surrogate in \\u escape", at: escape)
        }
        return scalar
    }

    private mutating func symbol(from start: SourcePosition) throws(QueryError) -> Token.Symbol {
        if let c = peek(), let d = peek(1), let two = Token.Symbol(rawValue: String([c, d])) {
            advance()
            advance()
            return two
        }
        let c = chars[index]
        if let one = Token.Symbol(rawValue: String(c)) {
            advance()
            return one
        }
        let hint =
            switch c {
            case "!": ": use NOT for negation or != for inequality"
            case "&": ": use AND"
            case "|": ": use OR"
            default: ""
            }
        throw error("unexpected character '\(c)'\(hint)", at: start)
    }
}

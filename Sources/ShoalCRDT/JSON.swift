/// Reading and writing `Value` as JSON text.
///
/// Shoal stores and sends field values as canonical JSON: object keys sorted,
/// no insignificant white space, integers without a fraction. Two replicas that
/// hold equal values therefore hold equal bytes, which is what lets tests compare
/// stores byte for byte and lets the wire carry values without re-encoding them.
public enum JSON {
    /// What went wrong reading JSON text, and where (a byte offset, from 0).
    public struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        public var offset: Int
        public var message: String
        public var description: String { "invalid JSON at byte \(offset): \(message)" }

        public init(offset: Int, message: String) {
            self.offset = offset
            self.message = message
        }
    }

    /// The deepest nesting accepted, so hostile input cannot exhaust the stack.
    public static let maximumDepth = 128

    /// Parses one JSON value; anything but white space after it is an error.
    public static func parse(_ text: String) throws(ParseError) -> Value {
        var parser = Parser(bytes: Array(text.utf8))
        return try parser.parseDocument()
    }

    /// Parses one JSON value from UTF-8 bytes.
    public static func parse(bytes: some Collection<UInt8>) throws(ParseError) -> Value {
        var parser = Parser(bytes: Array(bytes))
        return try parser.parseDocument()
    }

    /// Whether `text` is already the canonical JSON of a scalar that needs no parse
    /// to tell: `null`, `true`, `false`, an integer of at most 18 digits (no sign on
    /// zero, no leading zero), or a string with nothing to escape. False says only
    /// that the quick look cannot tell: the text may still be valid, canonical JSON.
    public static func isCanonicalScalar(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { isCanonicalScalar(UnsafeRawBufferPointer($0)) }
    }

    /// `isCanonicalScalar` of the UTF-8 bytes of a text.
    public static func isCanonicalScalar(_ utf8: UnsafeRawBufferPointer) -> Bool {
        guard let first = utf8.first else { return false }
        switch first {
        case UInt8(ascii: "\""):
            guard utf8.count >= 2, utf8[utf8.count - 1] == UInt8(ascii: "\"") else { return false }
            // Between the quotes: no quote, backslash or control character.
            return !utf8[1..<(utf8.count - 1)].contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let digits = first == UInt8(ascii: "-") ? utf8[1...] : utf8[...]
            guard let lead = digits.first, digits.count <= 18 else { return false }
            // `0` alone; otherwise no leading zero (and so no `-0`).
            if lead == UInt8(ascii: "0") { return digits.count == 1 && first != UInt8(ascii: "-") }
            return digits.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
        default:
            return utf8.elementsEqual("null".utf8) || utf8.elementsEqual("true".utf8) || utf8.elementsEqual("false".utf8)
        }
    }

    /// The canonical encoding of `value`.
    public static func encode(_ value: Value) -> String {
        var out = ""
        write(value, to: &out)
        return out
    }

    static func write(_ value: Value, to out: inout String) {
        switch value {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .int(let i): out += String(i)
        case .double(let d):
            if d.isNaN || d.isInfinite {
                out += "null"
            } else {
                out += "\(d)"
            }
        case .string(let s): writeString(s, to: &out)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                write(item, to: &out)
            }
            out += "]"
        case .object(let fields):
            out += "{"
            var first = true
            for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
                if !first { out += "," }
                first = false
                writeString(key, to: &out)
                out += ":"
                write(value, to: &out)
            }
            out += "}"
        }
    }

    static func writeString(_ s: String, to out: inout String) {
        out += "\""
        // Most strings need no escape: appended whole.
        if !s.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out += s
            out += "\""
            return
        }
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let c where c.value < 0x20:
                let hex = String(c.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    struct Parser {
        let bytes: [UInt8]
        var index = 0
        var depth = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        mutating func parseDocument() throws(ParseError) -> Value {
            skipWhitespace()
            let value = try parseValue()
            skipWhitespace()
            if index != bytes.count { throw error("unexpected text after the value") }
            return value
        }

        func error(_ message: String, at offset: Int? = nil) -> ParseError { ParseError(offset: offset ?? index, message: message) }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x0A, 0x0D, 0x09: index += 1
                default: return
                }
            }
        }

        mutating func parseValue() throws(ParseError) -> Value {
            guard index < bytes.count else { throw error("unexpected end of input") }
            switch bytes[index] {
            case UInt8(ascii: "{"): return try parseObject()
            case UInt8(ascii: "["): return try parseArray()
            case UInt8(ascii: "\""): return .string(try parseString())
            case UInt8(ascii: "t"): try expectWord("true"); return .bool(true)
            case UInt8(ascii: "f"): try expectWord("false"); return .bool(false)
            case UInt8(ascii: "n"): try expectWord("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
            case 0x80...:
                let valid = bytes.withUnsafeBufferPointer { UTF8Text.firstInvalidByte(UnsafeBufferPointer(rebasing: $0[index...])) != 0 }
                throw error(valid ? "unexpected text: a value starts with {, [, \", a digit, -, true, false or null" : "invalid UTF-8")
            default: throw error("unexpected character '\(Character(UnicodeScalar(bytes[index])))'")
            }
        }

        mutating func expectWord(_ word: StaticString) throws(ParseError) {
            let w = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
            guard index + w.count <= bytes.count, bytes[index..<index + w.count].elementsEqual(w) else {
                throw error("expected '\(word)'")
            }
            index += w.count
        }

        mutating func enter() throws(ParseError) {
            depth += 1
            if depth > JSON.maximumDepth { throw error("nesting deeper than \(JSON.maximumDepth) levels") }
        }

        mutating func parseObject() throws(ParseError) -> Value {
            try enter()
            index += 1
            var fields: [String: Value] = [:]
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                depth -= 1
                return .object(fields)
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a quoted key") }
                let keyStart = index
                let key = try parseString()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
                index += 1
                skipWhitespace()
                // A key given twice is refused, as DQL refuses it in an object literal:
                // keeping either value would lose the other without a word.
                if fields.updateValue(try parseValue(), forKey: key) != nil {
                    throw error(Self.twice(key, earlier: fields.keys[fields.index(forKey: key)!]), at: keyStart)
                }
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end of input in an object") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                if bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    depth -= 1
                    return .object(fields)
                }
                throw error("expected ',' or '}'")
            }
        }

        /// Why an object cannot hold `key` beside `earlier`, a key equal to it.
        static func twice(_ key: String, earlier: String) -> String {
            guard key.utf8.elementsEqual(earlier.utf8) else {
                // Swift compares text by canonical equivalence: "é" as one scalar or as
                // "e" and a combining accent are one dictionary key.
                return "keys '\(earlier)' and '\(key)' are one key to Shoal (the same text in two Unicode forms): an object holds one of them"
            }
            return "key '\(key)' appears twice in an object"
        }

        mutating func parseArray() throws(ParseError) -> Value {
            try enter()
            index += 1
            var items: [Value] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                depth -= 1
                return .array(items)
            }
            while true {
                skipWhitespace()
                items.append(try parseValue())
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end of input in an array") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                if bytes[index] == UInt8(ascii: "]") {
                    index += 1
                    depth -= 1
                    return .array(items)
                }
                throw error("expected ',' or ']'")
            }
        }

        mutating func parseHex4() throws(ParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw error("truncated \\u escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let c = bytes[index]
                let d: UInt32
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
                default: throw error("bad hex digit in \\u escape")
                }
                v = v * 16 + d
                index += 1
            }
            return v
        }

        mutating func parseString() throws(ParseError) -> String {
            index += 1
            let start = index
            // Most strings have no escape: their bytes become the string as they stand.
            var end = index
            while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\"), bytes[end] >= 0x20 {
                end += 1
            }
            if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
                let text = bytes.withUnsafeBufferPointer { UTF8Text.string(validating: UnsafeBufferPointer(rebasing: $0[index..<end])) }
                guard let s = text else { throw invalidUTF8(from: start) }
                index = end + 1
                return s
            }
            var out: [UInt8] = Array(bytes[index..<end])
            index = end
            while true {
                guard index < bytes.count else { throw error("unterminated string") }
                let c = bytes[index]
                if c == UInt8(ascii: "\"") {
                    index += 1
                    break
                }
                if c < 0x20 { throw error("control character in a string") }
                if c != UInt8(ascii: "\\") {
                    out.append(c)
                    index += 1
                    continue
                }
                index += 1
                guard index < bytes.count else { throw error("unterminated escape") }
                let e = bytes[index]
                index += 1
                switch e {
                case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): out.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try parseHex4()
                    if (0xD800...0xDBFF).contains(code) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw error("unpaired surrogate") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(code) {
                        throw error("unpaired surrogate")
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw error("invalid code point") }
                    out.append(contentsOf: Array(String(Character(scalar)).utf8))
                default: throw error("unknown escape '\\\(Character(UnicodeScalar(e)))'")
                }
            }
            guard let s = out.withUnsafeBufferPointer({ UTF8Text.string(validating: $0) }) else { throw invalidUTF8(from: start) }
            return s
        }

        /// The error for a string, from `start`, whose bytes are not all UTF-8: at the
        /// first that is not (escapes are ASCII, so it is among the raw bytes).
        func invalidUTF8(from start: Int) -> ParseError {
            let offset = bytes.withUnsafeBufferPointer { UTF8Text.firstInvalidByte(UnsafeBufferPointer(rebasing: $0[start...])) }
            return error("invalid UTF-8 in a string", at: start + (offset ?? 0))
        }

        mutating func parseNumber() throws(ParseError) -> Value {
            let start = index
            var isInteger = true
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            func digits(_ p: inout Parser) -> Int {
                var n = 0
                while p.index < p.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(p.bytes[p.index]) {
                    p.index += 1
                    n += 1
                }
                return n
            }
            let integerStart = index
            if digits(&self) == 0 { throw error("expected digits") }
            if index - integerStart > 1, bytes[integerStart] == UInt8(ascii: "0") {
                index = integerStart + 1
                throw error("a number may not start with 0")
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                isInteger = false
                index += 1
                if digits(&self) == 0 { throw error("expected digits after '.'") }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                isInteger = false
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                    index += 1
                }
                if digits(&self) == 0 { throw error("expected exponent digits") }
            }
            if isInteger, index - start <= 18 {
                // Up to 18 digits fit an Int64: summed here, with no text made.
                var magnitude: Int64 = 0
                for byte in bytes[integerStart..<index] { magnitude = magnitude * 10 + Int64(byte - UInt8(ascii: "0")) }
                return .int(bytes[start] == UInt8(ascii: "-") ? -magnitude : magnitude)
            }
            do throws(InexactNumber) {
                return try JSON.number(bytes[start..<index], isInteger: isInteger)
            } catch {
                throw self.error("\(error): write it as a string to keep it exact", at: start)
            }
        }
    }
}

extension Value {
    /// The canonical JSON text of this value.
    public var canonicalJSON: String { JSON.encode(self) }
}

import Foundation

/// Shoal's reader for TOML 1.0, the format of the config and permissions files.
///
/// Written for Shoal rather than taken from a library: a file a user edits by hand must
/// never stop the node, and a reader that asserts on malformed input (as the C++ one
/// Shoal used did) turns a typo, or a bad edit followed by SIGHUP, into a crash. This
/// one reads the whole of TOML 1.0 (dates and times are kept as their text, since no
/// key of Shoal's takes one) and answers every mistake with its line and column.
/// Nesting is limited to ``TOML/maximumDepth`` so that no input can exhaust the stack.
package enum TOML {
    /// How deeply arrays and inline tables may nest.
    package static let maximumDepth = 64

    /// Parses a document into its root table.
    package static func parse(_ text: String) throws(TOMLError) -> TOMLTable {
        var reader = Reader(bytes: Array(text.utf8))
        return try reader.document()
    }
}

/// A mistake in a TOML document, with where it is.
package struct TOMLError: Error, CustomStringConvertible, Sendable {
    /// 1-based line and column (in characters) of the mistake.
    package var line: Int
    package var column: Int
    package var message: String
    package var description: String { "\(line):\(column): \(message)" }
}

/// A TOML value.
package enum TOMLValue: Equatable, Sendable {
    case string(String)
    case integer(Int)
    case float(Double)
    case boolean(Bool)
    /// A date, a time or both, as written: Shoal reads none, but a file may hold one.
    case dateTime(String)
    case array([TOMLValue])
    case table(TOMLTable)

    package var string: String? { if case .string(let s) = self { s } else { nil } }
    package var int: Int? { if case .integer(let n) = self { n } else { nil } }
    package var double: Double? { if case .float(let d) = self { d } else { nil } }
    package var bool: Bool? { if case .boolean(let b) = self { b } else { nil } }
    package var array: [TOMLValue]? { if case .array(let a) = self { a } else { nil } }
    package var table: TOMLTable? { if case .table(let t) = self { t } else { nil } }

    /// The type's name, for messages ("must be a string, not an integer").
    package var typeName: String {
        switch self {
        case .string: "string"
        case .integer: "integer"
        case .float: "floating-point number"
        case .boolean: "boolean"
        case .dateTime: "date-time"
        case .array: "array"
        case .table: "table"
        }
    }
}

/// A TOML table: its keys in the order the document gives them, and the line of each.
package struct TOMLTable: Equatable, Sendable {
    package private(set) var keys: [String] = []
    private var values: [String: TOMLValue] = [:]
    private var lines: [String: Int] = [:]

    package init() {}

    package subscript(key: String) -> TOMLValue? { values[key] }

    /// The line that gave `key` its value (or opened its table), 1-based.
    package func line(of key: String) -> Int? { lines[key] }

    fileprivate mutating func set(_ key: String, _ value: TOMLValue, line: Int) {
        if values.updateValue(value, forKey: key) == nil {
            keys.append(key)
            lines[key] = line
        }
    }
}

// MARK: - The document's tables while it is read

/// A table being built. Headers and dotted keys reach into tables defined earlier, so
/// they are kept as references until the document ends.
private final class Node {
    enum Entry {
        case value(TOMLValue, line: Int)
        case table(Node, line: Int)
        case tables([Node], line: Int)
    }

    enum Origin {
        /// Made on the way to another (`[a]` for `[a.b]`): a header of its own may follow.
        case implicit
        /// Opened by a `[header]` of its own.
        case header
        /// Made by a dotted key (`a.b = 1`): no header may open it later.
        case dottedKey
        /// An element of an array of tables.
        case arrayElement
    }

    var origin: Origin
    var keys: [String] = []
    var entries: [String: Entry] = [:]

    init(_ origin: Origin) { self.origin = origin }

    func add(_ key: String, _ entry: Entry) {
        keys.append(key)
        entries[key] = entry
    }

    var table: TOMLTable {
        var table = TOMLTable()
        for key in keys {
            switch entries[key]! {
            case .value(let value, let line): table.set(key, value, line: line)
            case .table(let node, let line): table.set(key, .table(node.table), line: line)
            case .tables(let nodes, let line): table.set(key, .array(nodes.map { .table($0.table) }), line: line)
            }
        }
        return table
    }
}

// MARK: - The reader

private struct Reader {
    let bytes: [UInt8]
    var position = 0
    var line = 1
    var lineStart = 0
    var depth = 0

    init(bytes: [UInt8]) {
        self.bytes = bytes
        // A byte-order mark is not part of the document.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { position = 3 }
    }

    // MARK: Bytes

    var atEnd: Bool { position >= bytes.count }
    var current: UInt8? { position < bytes.count ? bytes[position] : nil }
    func peek(_ offset: Int) -> UInt8? { position + offset < bytes.count ? bytes[position + offset] : nil }

    func error(_ message: String, at offset: Int? = nil) -> TOMLError {
        let at = min(offset ?? position, bytes.count)
        var lineNumber = line
        var start = lineStart
        if at < lineStart {
            // An offset before this line (a key's start): count its line again.
            lineNumber = 1
            start = 0
            for i in 0..<at where bytes[i] == UInt8(ascii: "\n") {
                lineNumber += 1
                start = i + 1
            }
        }
        let column = String(decoding: bytes[start..<max(start, at)], as: UTF8.self).count + 1
        return TOMLError(line: lineNumber, column: column, message: message)
    }

    /// The byte at `offset` in words, for "found X" in messages: a multi-byte
    /// character by itself, the end of the input past its last byte.
    func describe(at offset: Int) -> String {
        guard offset < bytes.count else { return "the end of the file" }
        let byte = bytes[offset]
        switch byte {
        case UInt8(ascii: "\n"): return "the end of the line"
        case UInt8(ascii: "\r"): return "a carriage return"
        case UInt8(ascii: "\t"): return "a tab"
        case 0x20..<0x7F: return "'\(Character(Unicode.Scalar(byte)))'"
        default:
            // Name the whole character a multi-byte sequence starts.
            var end = offset + 1
            while end < bytes.count, bytes[end] & 0xC0 == 0x80 { end += 1 }
            let text = String(decoding: bytes[offset..<end], as: UTF8.self)
            return byte < 0x80 ? "the control character U+" + String(format: "%04X", Int(byte)) : "'\(text)'"
        }
    }

    mutating func skipSpaces() {
        while let byte = current, byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") { position += 1 }
    }

    /// A comment runs to the end of the line; it may hold no control character but tab.
    mutating func skipComment() throws(TOMLError) {
        guard current == UInt8(ascii: "#") else { return }
        position += 1
        while let byte = current, byte != UInt8(ascii: "\n") {
            if byte == UInt8(ascii: "\r"), peek(1) == UInt8(ascii: "\n") { return }
            if isControl(byte) { throw error("a comment may not hold \(describe(at: position))") }
            position += 1
        }
    }

    /// Consumes a line break (LF or CRLF) if one is next.
    mutating func newline() -> Bool {
        if current == UInt8(ascii: "\n") {
            position += 1
        } else if current == UInt8(ascii: "\r"), peek(1) == UInt8(ascii: "\n") {
            position += 2
        } else {
            return false
        }
        line += 1
        lineStart = position
        return true
    }

    /// Spaces, comments and line breaks, as inside an array.
    mutating func skipBlank() throws(TOMLError) {
        while true {
            skipSpaces()
            try skipComment()
            if !newline() { return }
        }
    }

    /// After a key/value pair or a header: spaces, a comment, then the line's end.
    mutating func endOfLine(after what: String) throws(TOMLError) {
        skipSpaces()
        try skipComment()
        guard atEnd || newline() else {
            throw error("expected the end of the line after \(what), found \(describe(at: position))")
        }
    }

    func isControl(_ byte: UInt8) -> Bool { (byte < 0x20 && byte != UInt8(ascii: "\t")) || byte == 0x7F }

    // MARK: The document

    mutating func document() throws(TOMLError) -> TOMLTable {
        let root = Node(.header)
        var table = root
        while true {
            try skipBlank()
            guard let byte = current else { break }
            if byte == UInt8(ascii: "[") {
                table = try header(root)
            } else {
                try keyValue(into: table)
                try endOfLine(after: "a value")
            }
        }
        return root.table
    }

    /// `[a.b]` or `[[a.b]]`: the table that the lines below it fill.
    mutating func header(_ root: Node) throws(TOMLError) -> Node {
        let start = position
        let headerLine = line
        position += 1
        let isArray = current == UInt8(ascii: "[")
        if isArray { position += 1 }
        skipSpaces()
        let path = try key()
        skipSpaces()
        guard current == UInt8(ascii: "]"), !isArray || peek(1) == UInt8(ascii: "]") else {
            throw error("expected '\(isArray ? "]]" : "]")' to close the header, found \(describe(at: position))")
        }
        position += isArray ? 2 : 1
        let shown = path.map(Self.shown).joined(separator: ".")
        var node = root
        for (index, part) in path.enumerated() {
            let last = index == path.count - 1
            switch node.entries[part] {
            case nil:
                if last && isArray {
                    let element = Node(.arrayElement)
                    node.add(part, .tables([element], line: headerLine))
                    node = element
                } else {
                    let child = Node(last ? .header : .implicit)
                    node.add(part, .table(child, line: headerLine))
                    node = child
                }
            case .table(let child, _):
                if last {
                    if isArray {
                        throw error("[[\(shown)]] names a table, not an array of tables", at: start)
                    }
                    switch child.origin {
                    case .implicit: child.origin = .header
                    case .header, .arrayElement: throw error("the table [\(shown)] is defined twice", at: start)
                    case .dottedKey: throw error("the table [\(shown)] was already defined by a dotted key", at: start)
                    }
                }
                node = child
            case .tables(let elements, let line):
                if last {
                    guard isArray else { throw error("[\(shown)] names an array of tables, not a table", at: start) }
                    let element = Node(.arrayElement)
                    node.entries[part] = .tables(elements + [element], line: line)
                    node = element
                } else {
                    node = elements[elements.count - 1]
                }
            case .value(let value, _):
                throw error("the header [\(shown)] reaches into \(Self.shown(part)), which is already \(Self.article(value.typeName))", at: start)
            }
        }
        try endOfLine(after: "the header")
        return node
    }

    /// `key = value`, the key possibly dotted, set in `table`.
    mutating func keyValue(into table: Node) throws(TOMLError) {
        let start = position
        let keyLine = line
        let path = try key()
        skipSpaces()
        guard current == UInt8(ascii: "=") else {
            throw error("expected '=' after the key \(path.map(Self.shown).joined(separator: ".")), found \(describe(at: position))")
        }
        position += 1
        skipSpaces()
        let value = try self.value()
        var node = table
        for part in path.dropLast() {
            switch node.entries[part] {
            case nil:
                let child = Node(.dottedKey)
                node.add(part, .table(child, line: keyLine))
                node = child
            case .table(let child, _):
                guard child.origin == .dottedKey else {
                    throw error("the dotted key reaches into \(Self.shown(part)), a table defined by a header", at: start)
                }
                node = child
            case .tables:
                throw error("the dotted key reaches into \(Self.shown(part)), an array of tables", at: start)
            case .value(let existing, _):
                throw error("the dotted key reaches into \(Self.shown(part)), which is already \(Self.article(existing.typeName))", at: start)
            }
        }
        let last = path[path.count - 1]
        guard node.entries[last] == nil else {
            throw error("the key \(path.map(Self.shown).joined(separator: ".")) is defined twice", at: start)
        }
        node.add(last, .value(value, line: keyLine))
    }

    static func shown(_ key: String) -> String {
        let bare = !key.isEmpty && key.utf8.allSatisfy(Reader.isBareKeyByte)
        return bare ? key : "\"\(key)\""
    }

    static func article(_ typeName: String) -> String {
        ("aeiou".contains(typeName.first ?? "x") ? "an " : "a ") + typeName
    }

    static func isBareKeyByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default: false
        }
    }

    /// A key: one or more simple keys joined by dots.
    mutating func key() throws(TOMLError) -> [String] {
        var parts: [String] = []
        while true {
            parts.append(try simpleKey())
            skipSpaces()
            guard current == UInt8(ascii: ".") else { return parts }
            position += 1
            skipSpaces()
        }
    }

    mutating func simpleKey() throws(TOMLError) -> String {
        switch current {
        case UInt8(ascii: "\""):
            if peek(1) == UInt8(ascii: "\""), peek(2) == UInt8(ascii: "\"") { throw error("a key may not be a multi-line string") }
            return try basicString()
        case UInt8(ascii: "'"):
            if peek(1) == UInt8(ascii: "'"), peek(2) == UInt8(ascii: "'") { throw error("a key may not be a multi-line string") }
            return try literalString()
        default:
            let start = position
            while let byte = current, Self.isBareKeyByte(byte) { position += 1 }
            guard position > start else {
                throw error("expected a key (letters, digits, '_' and '-', or a quoted string), found \(describe(at: position))")
            }
            return String(decoding: bytes[start..<position], as: UTF8.self)
        }
    }

    // MARK: Values

    mutating func value() throws(TOMLError) -> TOMLValue {
        switch current {
        case UInt8(ascii: "\""):
            if peek(1) == UInt8(ascii: "\""), peek(2) == UInt8(ascii: "\"") { return .string(try multilineBasicString()) }
            return .string(try basicString())
        case UInt8(ascii: "'"):
            if peek(1) == UInt8(ascii: "'"), peek(2) == UInt8(ascii: "'") { return .string(try multilineLiteralString()) }
            return .string(try literalString())
        case UInt8(ascii: "["):
            return try nested { (reader: inout Reader) throws(TOMLError) in try reader.array() }
        case UInt8(ascii: "{"):
            return try nested { (reader: inout Reader) throws(TOMLError) in try reader.inlineTable() }
        case nil, UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "#"):
            throw error("expected a value, found \(describe(at: position))")
        default:
            return try scalar()
        }
    }

    mutating func nested(_ read: (inout Reader) throws(TOMLError) -> TOMLValue) throws(TOMLError) -> TOMLValue {
        guard depth < TOML.maximumDepth else {
            throw error("arrays and inline tables nest more than \(TOML.maximumDepth) deep")
        }
        depth += 1
        defer { depth -= 1 }
        return try read(&self)
    }

    mutating func array() throws(TOMLError) -> TOMLValue {
        position += 1
        var items: [TOMLValue] = []
        while true {
            try skipBlank()
            if current == UInt8(ascii: "]") {
                position += 1
                return .array(items)
            }
            items.append(try value())
            try skipBlank()
            switch current {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "]"):
                position += 1
                return .array(items)
            default: throw error("expected ',' or ']' in the array, found \(describe(at: position))")
            }
        }
    }

    /// `{ a = 1, b.c = 2 }`, on one line, with no comma after the last pair.
    mutating func inlineTable() throws(TOMLError) -> TOMLValue {
        position += 1
        let node = Node(.header)
        skipSpaces()
        if current == UInt8(ascii: "}") {
            position += 1
            return .table(node.table)
        }
        while true {
            skipSpaces()
            try keyValue(into: node)
            skipSpaces()
            switch current {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "}"):
                position += 1
                return .table(node.table)
            default:
                throw error("expected ',' or '}' in the inline table (which must fit on one line), found \(describe(at: position))")
            }
        }
    }

    // MARK: Strings

    mutating func basicString() throws(TOMLError) -> String {
        let start = position
        position += 1
        var out: [UInt8] = []
        while true {
            guard let byte = current, byte != UInt8(ascii: "\n"), byte != UInt8(ascii: "\r") || peek(1) != UInt8(ascii: "\n") else {
                throw error("the string has no closing '\"' on its line", at: start)
            }
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                try escape(into: &out)
            default:
                if isControl(byte) { throw error("a string may not hold \(describe(at: position)); write it as an escape") }
                out.append(byte)
                position += 1
            }
        }
    }

    mutating func multilineBasicString() throws(TOMLError) -> String {
        let start = position
        position += 3
        _ = newline()
        var out: [UInt8] = []
        while true {
            guard let byte = current else { throw error("the string has no closing '\"\"\"'", at: start) }
            switch byte {
            case UInt8(ascii: "\""):
                if closesMultiline(byte, into: &out) { return String(decoding: out, as: UTF8.self) }
                out.append(byte)
                position += 1
            case UInt8(ascii: "\\"):
                // A backslash at the end of a line joins it to the next non-blank text.
                var look = position + 1
                while look < bytes.count, bytes[look] == UInt8(ascii: " ") || bytes[look] == UInt8(ascii: "\t") { look += 1 }
                if look < bytes.count, bytes[look] == UInt8(ascii: "\n") || (bytes[look] == UInt8(ascii: "\r") && look + 1 < bytes.count && bytes[look + 1] == UInt8(ascii: "\n")) {
                    position = look
                    while true {
                        skipSpaces()
                        if !newline() { break }
                    }
                } else {
                    try escape(into: &out)
                }
            default:
                if newline() {
                    out.append(UInt8(ascii: "\n"))
                } else {
                    if isControl(byte) { throw error("a string may not hold \(describe(at: position)); write it as an escape") }
                    out.append(byte)
                    position += 1
                }
            }
        }
    }

    /// At a `quote`: whether three of them close a multi-line string here, and if so
    /// consumes them; up to two more just before the closing three belong to the string.
    mutating func closesMultiline(_ quote: UInt8, into out: inout [UInt8]) -> Bool {
        guard peek(1) == quote, peek(2) == quote else { return false }
        var extra = 0
        while extra < 2, peek(3 + extra) == quote { extra += 1 }
        out.append(contentsOf: repeatElement(quote, count: extra))
        position += 3 + extra
        return true
    }

    mutating func literalString() throws(TOMLError) -> String {
        let start = position
        position += 1
        let from = position
        while true {
            guard let byte = current, byte != UInt8(ascii: "\n"), byte != UInt8(ascii: "\r") || peek(1) != UInt8(ascii: "\n") else {
                throw error("the string has no closing \"'\" on its line", at: start)
            }
            if byte == UInt8(ascii: "'") {
                let text = String(decoding: bytes[from..<position], as: UTF8.self)
                position += 1
                return text
            }
            if isControl(byte) { throw error("a literal string may not hold \(describe(at: position))") }
            position += 1
        }
    }

    mutating func multilineLiteralString() throws(TOMLError) -> String {
        let start = position
        position += 3
        _ = newline()
        var out: [UInt8] = []
        while true {
            guard let byte = current else { throw error("the string has no closing \"'''\"", at: start) }
            if byte == UInt8(ascii: "'"), closesMultiline(byte, into: &out) { return String(decoding: out, as: UTF8.self) }
            if newline() {
                out.append(UInt8(ascii: "\n"))
            } else {
                if isControl(byte) { throw error("a literal string may not hold \(describe(at: position))") }
                out.append(byte)
                position += 1
            }
        }
    }

    mutating func escape(into out: inout [UInt8]) throws(TOMLError) {
        let start = position
        position += 1
        guard let byte = current else { throw error("the string ends inside an escape", at: start) }
        position += 1
        switch byte {
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
        case UInt8(ascii: "u"), UInt8(ascii: "U"):
            let count = byte == UInt8(ascii: "u") ? 4 : 8
            var code: UInt32 = 0
            for _ in 0..<count {
                guard let digit = current.flatMap(Self.hexDigit) else {
                    throw error("\\\(Character(Unicode.Scalar(byte))) takes \(count) hexadecimal digits", at: start)
                }
                code = code << 4 | UInt32(digit)
                position += 1
            }
            guard let scalar = Unicode.Scalar(code) else {
                throw error("\\\(Character(Unicode.Scalar(byte))) names no Unicode scalar value", at: start)
            }
            out.append(contentsOf: Array(String(Character(scalar)).utf8))
        default:
            let shown = (0x21..<0x7F).contains(byte) ? "'\\\(Character(Unicode.Scalar(byte)))'" : "a backslash before \(describe(at: start + 1))"
            throw error("\(shown) is not an escape; they are \\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX \\UXXXXXXXX", at: start)
        }
    }

    static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    // MARK: Numbers, booleans, dates

    static func isScalarByte(_ byte: UInt8) -> Bool {
        isBareKeyByte(byte) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: ":")
    }

    mutating func scalar() throws(TOMLError) -> TOMLValue {
        let start = position
        while let byte = current, Self.isScalarByte(byte) { position += 1 }
        // A date and a time may be parted by a space: 1979-05-27 07:32:00.
        if position - start == 10, bytes[start + 4] == UInt8(ascii: "-"), current == UInt8(ascii: " "),
            let next = peek(1), next >= UInt8(ascii: "0"), next <= UInt8(ascii: "9")
        {
            position += 1
            while let byte = current, Self.isScalarByte(byte) { position += 1 }
        }
        let token = String(decoding: bytes[start..<position], as: UTF8.self)
        guard !token.isEmpty else {
            throw error("expected a value, found \(describe(at: position)) (strings are quoted)")
        }
        switch token {
        case "true": return .boolean(true)
        case "false": return .boolean(false)
        case "inf", "+inf": return .float(.infinity)
        case "-inf": return .float(-.infinity)
        case "nan", "+nan", "-nan": return .float(.nan)
        default: break
        }
        if let value = Self.dateTime(token) { return value }
        if let value = try integer(token, at: start) { return value }
        if let value = Self.float(token) { return value }
        throw error("'\(token)' is not a value: strings are quoted, and numbers, true, false and dates are written as TOML writes them", at: start)
    }

    /// An integer, or nil when the token is not written as one (it may be a float).
    func integer(_ token: String, at start: Int) throws(TOMLError) -> TOMLValue? {
        var text = Substring(token)
        var negative = false
        if let sign = text.first, sign == "+" || sign == "-" {
            negative = sign == "-"
            text = text.dropFirst()
        }
        var radix = 10
        if text.count > 2, text.hasPrefix("0x") || text.hasPrefix("0o") || text.hasPrefix("0b") {
            guard token.first != "+" && token.first != "-" else { return nil }
            radix = text.hasPrefix("0x") ? 16 : text.hasPrefix("0o") ? 8 : 2
            text = text.dropFirst(2)
        }
        guard Self.digitsWithUnderscores(text, radix: radix) else { return nil }
        if radix == 10, text.count > 1, text.first == "0" {
            throw error("'\(token)': a decimal integer may not start with 0", at: start)
        }
        let digits = text.replacingOccurrences(of: "_", with: "")
        guard let magnitude = UInt64(digits, radix: radix) else {
            throw error("'\(token)' does not fit in 64 bits", at: start)
        }
        if negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { throw error("'\(token)' does not fit in 64 bits", at: start) }
            return .integer(magnitude == UInt64(Int64.max) + 1 ? Int.min : -Int(magnitude))
        }
        guard magnitude <= UInt64(Int64.max) else { throw error("'\(token)' does not fit in 64 bits", at: start) }
        return .integer(Int(magnitude))
    }

    /// Digits of `radix`, each `_` between two of them.
    static func digitsWithUnderscores(_ text: Substring, radix: Int) -> Bool {
        guard !text.isEmpty, text.first != "_", text.last != "_", !text.contains("__") else { return false }
        return text.allSatisfy { $0 == "_" || ($0.hexDigitValue.map { $0 < radix } ?? false) }
    }

    /// A float: an integer part, then a fraction, an exponent or both.
    static func float(_ token: String) -> TOMLValue? {
        var text = Substring(token)
        if let sign = text.first, sign == "+" || sign == "-" { text = text.dropFirst() }
        var mantissa = text
        var exponent: Substring?
        if let e = text.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            mantissa = text[..<e]
            var rest = text[text.index(after: e)...]
            if let sign = rest.first, sign == "+" || sign == "-" { rest = rest.dropFirst() }
            exponent = rest
        }
        var whole = mantissa
        var fraction: Substring?
        if let dot = mantissa.firstIndex(of: ".") {
            whole = mantissa[..<dot]
            fraction = mantissa[mantissa.index(after: dot)...]
        }
        guard fraction != nil || exponent != nil else { return nil }
        guard digitsWithUnderscores(whole, radix: 10), whole.count == 1 || whole.first != "0" else { return nil }
        if let fraction, !digitsWithUnderscores(fraction, radix: 10) { return nil }
        if let exponent, !digitsWithUnderscores(exponent, radix: 10) { return nil }
        guard let value = Double(token.replacingOccurrences(of: "_", with: "")) else { return nil }
        return .float(value)
    }

    /// A date, a time, or both: checked for shape and range, kept as written.
    static func dateTime(_ token: String) -> TOMLValue? {
        let chars = Array(token.utf8)
        func digits(_ from: Int, _ count: Int) -> Int? {
            guard from + count <= chars.count else { return nil }
            var n = 0
            for i in from..<(from + count) {
                guard chars[i] >= UInt8(ascii: "0"), chars[i] <= UInt8(ascii: "9") else { return nil }
                n = n * 10 + Int(chars[i] - UInt8(ascii: "0"))
            }
            return n
        }
        /// A time at `from` (hh:mm:ss with optional fraction); returns where it ends.
        func time(_ from: Int) -> Int? {
            guard let h = digits(from, 2), chars.count > from + 2, chars[from + 2] == UInt8(ascii: ":"),
                let m = digits(from + 3, 2), chars.count > from + 5, chars[from + 5] == UInt8(ascii: ":"),
                let s = digits(from + 6, 2), h < 24, m < 60, s <= 60
            else { return nil }
            var end = from + 8
            if end < chars.count, chars[end] == UInt8(ascii: ".") {
                end += 1
                let digitsStart = end
                while end < chars.count, chars[end] >= UInt8(ascii: "0"), chars[end] <= UInt8(ascii: "9") { end += 1 }
                guard end > digitsStart else { return nil }
            }
            return end
        }
        if let end = time(0) { return end == chars.count ? .dateTime(token) : nil }
        guard let year = digits(0, 4), chars.count >= 10, chars[4] == UInt8(ascii: "-"), let month = digits(5, 2),
            chars[7] == UInt8(ascii: "-"), let day = digits(8, 2), year >= 0, (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        if chars.count == 10 { return .dateTime(token) }
        guard [UInt8(ascii: "T"), UInt8(ascii: "t"), UInt8(ascii: " ")].contains(chars[10]), var end = time(11) else { return nil }
        if end == chars.count { return .dateTime(token) }
        if chars[end] == UInt8(ascii: "Z") || chars[end] == UInt8(ascii: "z") {
            end += 1
        } else if chars[end] == UInt8(ascii: "+") || chars[end] == UInt8(ascii: "-") {
            guard let h = digits(end + 1, 2), chars.count > end + 3, chars[end + 3] == UInt8(ascii: ":"), let m = digits(end + 4, 2),
                h < 24, m < 60
            else { return nil }
            end += 6
        } else {
            return nil
        }
        return end == chars.count ? .dateTime(token) : nil
    }
}

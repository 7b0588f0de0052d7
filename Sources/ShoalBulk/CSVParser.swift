import ShoalCRDT

/// Reads CSV with a header row (RFC 4180): fields separated by `,`, rows by `\n` or
/// `\r\n`, a field in double quotes may hold `,`, newlines and `""` (one quote).
///
/// Each row after the header is one document whose fields the header names. A cell
/// becomes a value by these rules (`value(of:)`): a quoted cell is a string; an
/// unquoted empty cell leaves the field absent; `true` and `false` are booleans; a
/// JSON number is a number, and makes its row bad when a document cannot hold it as
/// written (`JSON.number`); anything else is a string. A row's line is the line it
/// starts on. Blank lines are skipped.
struct CSVParser {
    private enum State {
        /// At the start of a field.
        case fieldStart
        case unquoted
        case quoted
        /// Just after a `"` inside a quoted field: `"` again is a quote, else it ended.
        case quoteInQuoted
        /// After a quoted field's closing quote, before its `,` or newline.
        case afterQuoted
    }

    private struct Cell {
        var bytes: [UInt8] = []
        var quoted = false
    }

    private var state = State.fieldStart
    private var line = 1
    private var rowLine = 1
    private var quoteLine = 1
    private var cells: [Cell] = []
    private var cell = Cell()
    private var rowBytes = 0
    /// What is wrong with the row being read, reported when it ends.
    private var problem: String?
    private var header: [String]?
    private var stopped = false

    mutating func feed(_ bytes: ArraySlice<UInt8>, into out: inout [ImportRecord]) {
        for byte in bytes {
            guard !stopped else { return }
            consume(byte, into: &out)
            if byte == 0x0A { line += 1 }
        }
    }

    mutating func finish(into out: inout [ImportRecord]) {
        guard !stopped else { return }
        if state == .quoted {
            let row = rowLine == quoteLine ? "" : " (in the row starting on line \(rowLine))"
            problem = "the quoted field opened on line \(quoteLine)\(row) is not closed at the end of the file"
        }
        if !cells.isEmpty || !cell.bytes.isEmpty || cell.quoted || problem != nil { endRow(into: &out) }
    }

    private mutating func consume(_ byte: UInt8, into out: inout [ImportRecord]) {
        let quote = UInt8(ascii: "\""), comma = UInt8(ascii: ","), newline = UInt8(0x0A), carriageReturn = UInt8(0x0D)
        switch state {
        case .fieldStart:
            switch byte {
            case quote:
                cell.quoted = true
                quoteLine = line
                state = .quoted
            case comma: endCell()
            case newline: endRow(into: &out)
            default:
                append(byte)
                state = .unquoted
            }
        case .unquoted:
            switch byte {
            case comma: endCell()
            case newline: endRow(into: &out)
            default: append(byte)
            }
        case .quoted:
            if byte == quote { state = .quoteInQuoted } else { append(byte) }
        case .quoteInQuoted, .afterQuoted:
            switch byte {
            case quote where state == .quoteInQuoted:
                append(quote)
                state = .quoted
            case comma: endCell()
            case newline: endRow(into: &out)
            case carriageReturn: state = .afterQuoted
            default:
                state = .afterQuoted
                if problem == nil { problem = "text after the closing quote of field \(cells.count + 1)" }
            }
        }
    }

    private mutating func append(_ byte: UInt8) {
        rowBytes += 1
        if rowBytes <= maximumRecordBytes { cell.bytes.append(byte) }
    }

    private mutating func endCell() {
        // The \r of a \r\n line end.
        if !cell.quoted, cell.bytes.last == 0x0D { cell.bytes.removeLast() }
        cells.append(cell)
        cell = Cell()
        state = .fieldStart
    }

    private mutating func endRow(into out: inout [ImportRecord]) {
        endCell()
        defer {
            cells.removeAll()
            problem = nil
            rowBytes = 0
            rowLine = line + 1
        }
        if cells.count == 1, !cells[0].quoted, cells[0].bytes.isEmpty, problem == nil { return }
        if rowBytes > maximumRecordBytes { problem = "the row is longer than \(maximumRecordBytes >> 20) MiB" }
        guard let header else {
            readHeader(into: &out)
            return
        }
        if let problem {
            out.append(.bad(line: rowLine, message: problem))
        } else if cells.count != header.count {
            out.append(.bad(line: rowLine, message: "\(cells.count) fields, but the header on line \(headerLine) names \(header.count)"))
        } else {
            var document: [String: Value] = [:]
            for (name, cell) in zip(header, cells) {
                guard let text = String(validating: cell.bytes, as: UTF8.self) else {
                    out.append(.bad(line: rowLine, message: "field '\(name)' is not valid UTF-8"))
                    return
                }
                do throws(JSON.InexactNumber) {
                    document[name] = try Self.value(of: text, quoted: cell.quoted)
                } catch {
                    out.append(.bad(line: rowLine, message: "field '\(name)': \(error); quote the cell to keep it as text"))
                    return
                }
            }
            out.append(.document(line: rowLine, .object(document)))
        }
    }

    private var headerLine = 1

    private mutating func readHeader(into out: inout [ImportRecord]) {
        headerLine = rowLine
        func stop(_ message: String) {
            out.append(.fatal(line: rowLine, message: "the CSV header " + message))
            stopped = true
        }
        if let problem { return stop("is not valid: \(problem)") }
        var names: [String] = []
        for (index, cell) in cells.enumerated() {
            guard let name = String(validating: cell.bytes, as: UTF8.self) else { return stop("is not valid UTF-8") }
            if name.isEmpty { return stop("names no field in column \(index + 1)") }
            if names.contains(name) { return stop("names '\(name)' twice") }
            names.append(name)
        }
        header = names
    }

    /// The value of one cell, or nil for an empty unquoted cell (the field is left out).
    static func value(of text: String, quoted: Bool) throws(JSON.InexactNumber) -> Value? {
        if quoted { return .string(text) }
        switch text {
        case "": return nil
        case "true": return .bool(true)
        case "false": return .bool(false)
        default:
            guard let isInteger = jsonNumber(text.utf8) else { return .string(text) }
            return try JSON.number(text.utf8, isInteger: isInteger)
        }
    }

    /// Whether `text` is exactly a JSON number, `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`,
    /// and if so whether an integer (no fraction, no exponent); nil when it is not one.
    static func jsonNumber(_ text: String.UTF8View) -> Bool? {
        var bytes = text[...]
        func digits() -> Int {
            let count = bytes.prefix(while: { (0x30...0x39).contains($0) }).count
            bytes = bytes.dropFirst(count)
            return count
        }
        if bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
        if bytes.first == UInt8(ascii: "0") {
            bytes = bytes.dropFirst()
        } else if digits() == 0 {
            return nil
        }
        var isInteger = true
        if bytes.first == UInt8(ascii: ".") {
            isInteger = false
            bytes = bytes.dropFirst()
            if digits() == 0 { return nil }
        }
        if bytes.first == UInt8(ascii: "e") || bytes.first == UInt8(ascii: "E") {
            isInteger = false
            bytes = bytes.dropFirst()
            if bytes.first == UInt8(ascii: "+") || bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
            if digits() == 0 { return nil }
        }
        return bytes.isEmpty ? isInteger : nil
    }
}

public import ShoalCRDT

/// One record of an import file: a document, or why the text at `line` is not one.
public enum ImportRecord: Sendable, Hashable {
    /// A JSON object, read from the record that starts at `line` (counted from 1).
    case document(line: Int, Value)
    /// A record that is not a document; the import reports it and goes on when asked to.
    case bad(line: Int, message: String)
    /// A mistake after which nothing more can be read (a CSV header that names no
    /// column, a JSON array without its `[`): the import stops, whatever it was asked.
    case fatal(line: Int, message: String)

    public var line: Int {
        switch self {
        case .document(let line, _), .bad(let line, _), .fatal(let line, _): line
        }
    }
}

/// The formats `shoal import` reads.
public enum ImportFormat: String, Sendable, CaseIterable {
    /// One JSON object per line; blank lines are ignored.
    case ndjson
    /// One JSON array of objects, read element by element.
    case json
    /// A header row naming the fields, then one document per row (RFC 4180 quoting).
    case csv

    /// The format a file name says, when it says one: `.ndjson` and `.jsonl` are NDJSON,
    /// `.csv` is CSV. `.json` holds an array or NDJSON, so its content decides.
    public static func fromExtension(_ path: String) -> ImportFormat? {
        guard let dot = path.lastIndex(of: "."), !path[dot...].contains("/") else { return nil }
        switch path[path.index(after: dot)...].lowercased() {
        case "ndjson", "jsonl": return .ndjson
        case "csv": return .csv
        default: return nil
        }
    }

    /// The format the first byte that is not white space says: `[` a JSON array,
    /// `{` NDJSON, anything else CSV.
    public static func fromContent(firstByte: UInt8) -> ImportFormat {
        switch firstByte {
        case UInt8(ascii: "["): .json
        case UInt8(ascii: "{"): .ndjson
        default: .csv
        }
    }
}

/// The largest record a reader holds in memory: a longer line, array element or CSV
/// row is reported as bad, and skipped, without being kept.
public let maximumRecordBytes = 16 << 20

extension UInt8 {
    var isJSONWhitespace: Bool { self == 0x20 || self == 0x0A || self == 0x0D || self == 0x09 }
}

/// Parses JSON text that must be an object, as a record starting at `line`.
func documentRecord(_ bytes: some Collection<UInt8>, line: Int) -> ImportRecord {
    let value: Value
    do {
        value = try JSON.parse(bytes: bytes)
    } catch {
        return .bad(line: line, message: error.description)
    }
    guard case .object = value else {
        return .bad(line: line, message: "expected a JSON object, found \(value.kindName)")
    }
    return .document(line: line, value)
}

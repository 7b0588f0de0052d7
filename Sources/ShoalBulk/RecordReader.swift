/// Turns the bytes of an import file, in chunks of any size, into records.
///
/// The format is the one given, or else the one the first byte that is not white
/// space says (`ImportFormat.fromContent`). A UTF-8 byte order mark at the start is
/// skipped.
public struct RecordReader {
    private enum Parser {
        case ndjson(NDJSONParser)
        case json(JSONArrayParser)
        case csv(CSVParser)
    }

    private var parser: Parser?
    private var requested: ImportFormat?
    /// The bytes read before the format is known: the byte order mark and white space.
    private var pending: [UInt8] = []

    public init(format: ImportFormat? = nil) {
        requested = format
    }

    /// The format being read, once known.
    public var format: ImportFormat? {
        switch parser {
        case .ndjson: .ndjson
        case .json: .json
        case .csv: .csv
        case nil: requested
        }
    }

    /// The records the chunk completes.
    public mutating func read(_ chunk: some Collection<UInt8>) -> [ImportRecord] {
        var out: [ImportRecord] = []
        if parser == nil {
            pending += chunk
            if pending.starts(with: [0xEF, 0xBB, 0xBF]) { pending.removeFirst(3) }
            guard pending.count >= 3 || ![0xEF, 0xBB, 0xBF].starts(with: pending) else { return out }
            guard let first = pending.first(where: { !$0.isJSONWhitespace }) else { return out }
            start(requested ?? ImportFormat.fromContent(firstByte: first))
            feed(pending[...], into: &out)
            pending = []
        } else {
            feed(ArraySlice(chunk), into: &out)
        }
        return out
    }

    /// The records the end of the input completes, and what it leaves unfinished.
    public mutating func finish() -> [ImportRecord] {
        var out: [ImportRecord] = []
        if parser == nil {
            start(requested ?? .ndjson)
            feed(pending[...], into: &out)
        }
        switch parser {
        case .ndjson(var p):
            p.finish(into: &out)
            parser = .ndjson(p)
        case .json(var p):
            p.finish(into: &out)
            parser = .json(p)
        case .csv(var p):
            p.finish(into: &out)
            parser = .csv(p)
        case nil: break
        }
        return out
    }

    /// Reads a whole text at once: for tests and small inputs.
    public static func records(_ text: String, format: ImportFormat? = nil) -> [ImportRecord] {
        var reader = RecordReader(format: format)
        return reader.read(Array(text.utf8)) + reader.finish()
    }

    private mutating func start(_ format: ImportFormat) {
        switch format {
        case .ndjson: parser = .ndjson(NDJSONParser())
        case .json: parser = .json(JSONArrayParser())
        case .csv: parser = .csv(CSVParser())
        }
    }

    private mutating func feed(_ bytes: ArraySlice<UInt8>, into out: inout [ImportRecord]) {
        switch parser {
        case .ndjson(var p):
            parser = nil
            p.feed(bytes, into: &out)
            parser = .ndjson(p)
        case .json(var p):
            parser = nil
            p.feed(bytes, into: &out)
            parser = .json(p)
        case .csv(var p):
            parser = nil
            p.feed(bytes, into: &out)
            parser = .csv(p)
        case nil: break
        }
    }
}

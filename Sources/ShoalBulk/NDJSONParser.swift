/// Reads NDJSON: one JSON object per line, the line numbers counted from 1.
///
/// Bytes arrive in chunks of any size; a line is parsed once its newline (or the
/// end of the input) has arrived. Blank lines are skipped, a trailing `\r` is
/// ignored, and a line longer than `maximumRecordBytes` is reported without being kept.
struct NDJSONParser {
    private var line = 1
    private var current: [UInt8] = []
    private var tooLong = false

    mutating func feed(_ bytes: ArraySlice<UInt8>, into out: inout [ImportRecord]) {
        var rest = bytes
        while let newline = rest.firstIndex(of: 0x0A) {
            append(rest[rest.startIndex..<newline])
            endLine(into: &out)
            rest = rest[rest.index(after: newline)...]
        }
        append(rest)
    }

    mutating func finish(into out: inout [ImportRecord]) {
        if !current.isEmpty || tooLong { endLine(into: &out) }
    }

    private mutating func append(_ bytes: ArraySlice<UInt8>) {
        guard !tooLong else { return }
        if current.count + bytes.count > maximumRecordBytes {
            tooLong = true
            current.removeAll()
        } else {
            current += bytes
        }
    }

    private mutating func endLine(into out: inout [ImportRecord]) {
        defer {
            current.removeAll(keepingCapacity: current.count < 1 << 20)
            tooLong = false
            line += 1
        }
        if tooLong {
            out.append(.bad(line: line, message: "the line is longer than \(maximumRecordBytes >> 20) MiB"))
            return
        }
        guard current.contains(where: { !$0.isJSONWhitespace }) else { return }
        out.append(documentRecord(current, line: line))
    }
}

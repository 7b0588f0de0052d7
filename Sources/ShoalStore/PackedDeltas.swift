/// The deltas one transaction wrote to one document, as a change-log row holds
/// them (column `deltas`): one row per document per transaction instead of one per
/// field, which is what a commit and a page read cost (ARCHITECTURE.md, "The change log").
///
/// ```
/// deltas := delta*
/// delta  := index      varint   position in the transaction
///           timestamp  varint   the HLC timestamp's raw value
///           name       varint length, then UTF-8 bytes
///           value      varint length, then UTF-8 bytes (JSON, or a removal register)
/// ```
struct PackedDeltas {
    private(set) var bytes: [UInt8] = []
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        count = 0
    }

    mutating func append(index: UInt32, timestamp: UInt64, name: String, value: String) {
        Self.writeVarint(UInt64(index), to: &bytes)
        Self.writeVarint(timestamp, to: &bytes)
        Self.writeString(name, to: &bytes)
        Self.writeString(value, to: &bytes)
        count += 1
    }

    private static func writeVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    private static func writeString(_ text: String, to bytes: inout [UInt8]) {
        var text = text
        text.withUTF8 { utf8 in
            writeVarint(UInt64(utf8.count), to: &bytes)
            bytes.append(contentsOf: utf8)
        }
    }

    /// A stored entry that does not decode: the row was not written by this code.
    struct Malformed: Error, CustomStringConvertible {
        var description: String { "a change-log row's deltas do not decode" }
    }

    /// Hands each delta of `bytes` to `body`, in stored order.
    static func forEach(
        _ bytes: UnsafeRawBufferPointer, _ body: (_ index: UInt32, _ timestamp: UInt64, _ name: String, _ value: String) throws -> Void
    ) throws {
        var reader = Reader(bytes: bytes)
        while reader.offset < bytes.count {
            let index = try reader.varint()
            let timestamp = try reader.varint()
            let name = try reader.string()
            let value = try reader.string()
            try body(UInt32(truncatingIfNeeded: index), timestamp, name, value)
        }
    }

    /// The indexes of `bytes`' deltas, without decoding their names and values.
    static func indexes(_ bytes: UnsafeRawBufferPointer) throws -> [UInt32] {
        var reader = Reader(bytes: bytes)
        var indexes: [UInt32] = []
        while reader.offset < bytes.count {
            indexes.append(UInt32(truncatingIfNeeded: try reader.varint()))
            _ = try reader.varint()
            try reader.skipString()
            try reader.skipString()
        }
        return indexes
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0

        mutating func varint() throws -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while offset < bytes.count, shift < 64 {
                let byte = bytes[offset]
                offset += 1
                value |= UInt64(byte & 0x7F) << shift
                if byte < 0x80 { return value }
                shift += 7
            }
            throw Malformed()
        }

        mutating func skipString() throws {
            let length = try varint()
            guard length <= UInt64(bytes.count - offset) else { throw Malformed() }
            offset += Int(length)
        }

        mutating func string() throws -> String {
            let length = try varint()
            guard length <= UInt64(bytes.count - offset) else { throw Malformed() }
            let start = offset
            offset += Int(length)
            return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
        }
    }
}

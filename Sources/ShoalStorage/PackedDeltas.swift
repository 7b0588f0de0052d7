package import ShoalCRDT

/// The deltas one transaction wrote to one document, as an entry of a change-log
/// row holds them (`LogEntries`).
///
/// ```
/// deltas := delta*
/// delta  := index      varint   position in the transaction
///           timestamp  varint   the HLC timestamp's raw value
///           name       varint length, then UTF-8 bytes
///           value      varint length, then UTF-8 bytes (JSON, or a removal register)
/// ```
package struct PackedDeltas {
    package private(set) var bytes: [UInt8] = []
    package private(set) var count = 0

    package var isEmpty: Bool { count == 0 }

    package init() {}

    package mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        count = 0
    }

    package mutating func append(index: UInt32, timestamp: UInt64, name: String, value: String) {
        Self.writeVarint(UInt64(index), to: &bytes)
        Self.writeVarint(timestamp, to: &bytes)
        Self.writeString(name, to: &bytes)
        Self.writeString(value, to: &bytes)
        count += 1
    }

    package static func writeVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    package static func writeString(_ text: String, to bytes: inout [UInt8]) {
        var text = text
        text.withUTF8 { utf8 in
            writeVarint(UInt64(utf8.count), to: &bytes)
            bytes.append(contentsOf: utf8)
        }
    }

    /// A stored row that does not decode: it was not written by this code.
    package struct Malformed: Error, CustomStringConvertible {
        package var description: String { "a change-log row's entries do not decode" }
    }

    /// Hands each delta of `bytes` to `body`, in stored order.
    package static func forEach(
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
    package static func indexes(_ bytes: UnsafeRawBufferPointer) throws -> [UInt32] {
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

    package struct Reader {
        package let bytes: UnsafeRawBufferPointer
        package var offset = 0

        package init(bytes: UnsafeRawBufferPointer) {
            self.bytes = bytes
        }

        package mutating func varint() throws -> UInt64 {
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

        package mutating func skipString() throws {
            let length = try varint()
            guard length <= UInt64(bytes.count - offset) else { throw Malformed() }
            offset += Int(length)
        }

        package mutating func string() throws -> String {
            String(decoding: try slice(), as: UTF8.self)
        }

        /// A length-prefixed run of bytes.
        package mutating func slice() throws -> UnsafeRawBufferPointer {
            let length = try varint()
            guard length <= UInt64(bytes.count - offset) else { throw Malformed() }
            let start = offset
            offset += Int(length)
            return UnsafeRawBufferPointer(rebasing: bytes[start..<offset])
        }
    }
}

/// The documents one change-log row holds (column `entries`): the row is a run of up
/// to `documentsPerRow` documents of one transaction, each with its
/// deltas packed (`PackedDeltas`), instead of a row per document, which is what a
/// commit and a page read cost (ARCHITECTURE.md, "The change log").
///
/// ```
/// entries := entry*
/// entry   := collection  varint length, then UTF-8 bytes
///            doc_id      varint length, then UTF-8 bytes (the key's canonical JSON)
///            doc_deltas  varint   how many deltas the transaction wrote to the document
///            deltas      varint length, then PackedDeltas bytes
/// ```
package enum LogEntries {
    /// The most documents one row holds.
    package static let documentsPerRow = 128
    /// The bytes past which a row is written without waiting for more documents.
    package static let bytesPerRow = 64 << 10

    /// Appends one document's entry to `bytes`.
    package static func append(_ document: DocumentRef, documentDeltas: Int, deltas: [UInt8], to bytes: inout [UInt8]) {
        PackedDeltas.writeString(document.collection, to: &bytes)
        PackedDeltas.writeString(document.id, to: &bytes)
        PackedDeltas.writeVarint(UInt64(documentDeltas), to: &bytes)
        PackedDeltas.writeVarint(UInt64(deltas.count), to: &bytes)
        bytes.append(contentsOf: deltas)
    }

    /// Hands each entry of `bytes` to `body`, in stored order: its document's
    /// collection and key, its delta count in the transaction, and its packed deltas.
    package static func forEach(
        _ bytes: UnsafeRawBufferPointer,
        _ body: (_ collection: String, _ id: String, _ documentDeltas: UInt32, _ deltas: UnsafeRawBufferPointer) throws -> Void
    ) throws {
        var reader = PackedDeltas.Reader(bytes: bytes)
        // The entries of a row are mostly of one collection: its name is decoded once per run.
        var collection = ""
        while reader.offset < bytes.count {
            let name = try reader.slice()
            if !collection.utf8.elementsEqual(name) { collection = String(decoding: name, as: UTF8.self) }
            let id = try reader.string()
            let documentDeltas = UInt32(truncatingIfNeeded: try reader.varint())
            try body(collection, id, documentDeltas, try reader.slice())
        }
    }
}

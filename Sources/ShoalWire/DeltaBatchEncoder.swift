import Foundation
import SwiftProtobuf

/// Encodes a `DeltaBatch` as SwiftProtobuf does, byte for byte, sizing each nested
/// message once.
///
/// A nested message is written after its length, and SwiftProtobuf works that length
/// out again at every level above it: a field delta, four levels down
/// (batch ▸ piece ▸ document ▸ field delta), is sized four times and written once. This
/// encoder sizes every message once, bottom-up, and keeps the sizes in the order it
/// writes the messages (a parent before its children):
///
/// ```
/// size pass:  piece ─ reserve slot 0 ─► document ─ reserve slot 1 ─► deltas: slots 2, 3
///             ◄─ fill slot 1 = Σ(deltas) ◄─ fill slot 0 = Σ(documents) + fields
/// write pass: slot 0, piece fields, slot 1, document fields, slot 2, delta, slot 3, delta
/// ```
///
/// Batches are most of what a node sends. Messages that are rare in them (verdicts,
/// context documents, filters, version-1 transactions) are encoded by SwiftProtobuf,
/// once, in the size pass.
struct DeltaBatchEncoder {
    private var sizes: [Int] = []
    private var blobs: [[UInt8]] = []
    private var out: [UInt8] = []
    private var nextSize = 0
    private var nextBlob = 0

    static func encode(_ batch: Shoal_V1_DeltaBatch) throws -> [UInt8] {
        var encoder = DeltaBatchEncoder()
        let total = try encoder.size(batch)
        encoder.out.reserveCapacity(total)
        encoder.write(batch)
        assert(encoder.out.count == total, "the size pass and the write pass disagree")
        return encoder.out
    }

    // MARK: Sizes

    private static func varintSize(_ value: UInt64) -> Int {
        value == 0 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7
    }

    /// A length-delimited field of `count` bytes, its one-byte tag included.
    private static func delimited(_ count: Int) -> Int { 1 + varintSize(UInt64(count)) + count }

    private static func zigZag(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }
    private static func zigZag(_ value: Int32) -> UInt64 { UInt64(UInt32(bitPattern: (value << 1) ^ (value >> 31))) }

    /// A message written whole by SwiftProtobuf, as a repeated field's element.
    private mutating func blob(_ message: some Message) throws -> Int {
        let bytes: [UInt8] = try message.serializedBytes()
        blobs.append(bytes)
        return Self.delimited(bytes.count)
    }

    /// Reserves `message`'s size slot, sizes its children after it, and fills the slot;
    /// returns the size of the field that holds it (tag and length included).
    private mutating func nested(_ content: (inout DeltaBatchEncoder) throws -> Int) rethrows -> Int {
        let slot = sizes.count
        sizes.append(0)
        let size = try content(&self)
        sizes[slot] = size
        return Self.delimited(size)
    }

    private mutating func size(_ batch: Shoal_V1_DeltaBatch) throws -> Int {
        var n = 0
        for t in batch.transactions { n += try blob(t) }
        if batch.throughSequence != 0 { n += 1 + Self.varintSize(batch.throughSequence) }
        if batch.subscribeGeneration != 0 { n += 1 + Self.varintSize(batch.subscribeGeneration) }
        for piece in batch.pieces { n += try nested { try $0.content(piece) } }
        for f in batch.filters { n += try blob(f) }
        return n + batch.unknownFields.data.count
    }

    private mutating func content(_ p: Shoal_V1_TransactionPiece) throws -> Int {
        var n = 0
        if p.originSite != 0 { n += 9 }
        if p.originSequence != 0 { n += 1 + Self.varintSize(p.originSequence) }
        if p.deltaCount != 0 { n += 1 + Self.varintSize(UInt64(p.deltaCount)) }
        if p.documentCount != 0 { n += 1 + Self.varintSize(UInt64(p.documentCount)) }
        for c in p.collections { n += nested { _ in Self.content(c) } }
        for d in p.documents { n += nested { $0.content(d) } }
        for v in p.verdicts { n += try blob(v) }
        if p.last { n += 2 }
        if p.baseTimestamp != 0 { n += 9 }
        for c in p.context { n += try blob(c) }
        return n + p.unknownFields.data.count
    }

    private static func content(_ c: Shoal_V1_CollectionCount) -> Int {
        var n = 0
        if !c.collection.isEmpty { n += delimited(c.collection.utf8.count) }
        if c.documents != 0 { n += 1 + varintSize(UInt64(c.documents)) }
        if c.deltas != 0 { n += 1 + varintSize(UInt64(c.deltas)) }
        return n + c.unknownFields.data.count
    }

    private mutating func content(_ d: Shoal_V1_DocumentDeltas) -> Int {
        var n = 0
        if !d.collection.isEmpty { n += Self.delimited(d.collection.utf8.count) }
        if !d.documentID.isEmpty { n += Self.delimited(d.documentID.utf8.count) }
        if d.deltaCount != 0 { n += 1 + Self.varintSize(UInt64(d.deltaCount)) }
        for f in d.deltas {
            let size = Self.content(f)
            sizes.append(size)
            n += Self.delimited(size)
        }
        return n + d.unknownFields.data.count
    }

    private static func content(_ f: Shoal_V1_FieldDelta) -> Int {
        var n = 0
        if !f.field.isEmpty { n += delimited(f.field.utf8.count) }
        if !f.valueJson.isEmpty { n += delimited(f.valueJson.count) }
        if f.timestampOffset != 0 { n += 1 + varintSize(zigZag(f.timestampOffset)) }
        if f.index != 0 { n += 1 + varintSize(UInt64(f.index)) }
        if f.indexStep != 0 { n += 1 + varintSize(zigZag(f.indexStep)) }
        if f.timestampStep != 0 { n += 1 + varintSize(zigZag(f.timestampStep)) }
        return n + f.unknownFields.data.count
    }

    // MARK: Writing

    private mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    /// A one-byte tag: every field number here is below 16.
    private mutating func tag(_ field: UInt8, _ wireType: UInt8) { out.append(field << 3 | wireType) }

    private mutating func varint(_ field: UInt8, _ value: UInt64) {
        tag(field, 0)
        varint(value)
    }

    private mutating func fixed64(_ field: UInt8, _ value: UInt64) {
        tag(field, 1)
        withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) }
    }

    private mutating func string(_ field: UInt8, _ value: String) {
        tag(field, 2)
        varint(UInt64(value.utf8.count))
        out.append(contentsOf: value.utf8)
    }

    private mutating func bytes(_ field: UInt8, _ value: Data) {
        tag(field, 2)
        varint(UInt64(value.count))
        out.append(contentsOf: value)
    }

    private mutating func openNested(_ field: UInt8) {
        tag(field, 2)
        varint(UInt64(sizes[nextSize]))
        nextSize += 1
    }

    private mutating func writeBlob(_ field: UInt8) {
        let bytes = blobs[nextBlob]
        nextBlob += 1
        tag(field, 2)
        varint(UInt64(bytes.count))
        out.append(contentsOf: bytes)
    }

    private mutating func write(_ batch: Shoal_V1_DeltaBatch) {
        for _ in batch.transactions { writeBlob(1) }
        if batch.throughSequence != 0 { varint(2, batch.throughSequence) }
        if batch.subscribeGeneration != 0 { varint(3, batch.subscribeGeneration) }
        for piece in batch.pieces {
            openNested(4)
            write(piece)
        }
        for _ in batch.filters { writeBlob(5) }
        out.append(contentsOf: batch.unknownFields.data)
    }

    private mutating func write(_ p: Shoal_V1_TransactionPiece) {
        if p.originSite != 0 { fixed64(1, p.originSite) }
        if p.originSequence != 0 { varint(2, p.originSequence) }
        if p.deltaCount != 0 { varint(3, UInt64(p.deltaCount)) }
        if p.documentCount != 0 { varint(4, UInt64(p.documentCount)) }
        for c in p.collections {
            openNested(5)
            if !c.collection.isEmpty { string(1, c.collection) }
            if c.documents != 0 { varint(2, UInt64(c.documents)) }
            if c.deltas != 0 { varint(3, UInt64(c.deltas)) }
            out.append(contentsOf: c.unknownFields.data)
        }
        for d in p.documents {
            openNested(6)
            write(d)
        }
        for _ in p.verdicts { writeBlob(7) }
        if p.last { varint(8, 1) }
        if p.baseTimestamp != 0 { fixed64(9, p.baseTimestamp) }
        for _ in p.context { writeBlob(10) }
        out.append(contentsOf: p.unknownFields.data)
    }

    private mutating func write(_ d: Shoal_V1_DocumentDeltas) {
        if !d.collection.isEmpty { string(1, d.collection) }
        if !d.documentID.isEmpty { string(2, d.documentID) }
        if d.deltaCount != 0 { varint(3, UInt64(d.deltaCount)) }
        for f in d.deltas {
            openNested(4)
            if !f.field.isEmpty { string(1, f.field) }
            if !f.valueJson.isEmpty { bytes(2, f.valueJson) }
            if f.timestampOffset != 0 { varint(3, Self.zigZag(f.timestampOffset)) }
            if f.index != 0 { varint(4, UInt64(f.index)) }
            if f.indexStep != 0 { varint(5, Self.zigZag(f.indexStep)) }
            if f.timestampStep != 0 { varint(6, Self.zigZag(f.timestampStep)) }
            out.append(contentsOf: f.unknownFields.data)
        }
        out.append(contentsOf: d.unknownFields.data)
    }
}

public import ShoalCRDT
package import ShoalWire
public import ShoalStorage
import SwiftProtobuf

/// A DeltaBatch a session sends: the pieces of a page read for its peer, the log
/// position they bring the peer to and the Subscribe they answer.
///
/// It keeps the pieces as the store read them and turns them into the frame's
/// payload in one pass (`payload()`), without building the protobuf messages in
/// between: they would copy every value twice more on its way out. `message` is the
/// same batch as those messages, for tests and logs.
public struct OutboundBatch: Sendable, Hashable {
    public var pieces: [TransactionPiece]
    /// The peer's subscriptions: what filter 0 of a `NOT_COVERED` verdict names.
    public var receiver: SubscriptionFilter
    public var encoding: PieceCodec.DeltaEncoding
    public var throughSequence: UInt64
    public var subscribeGeneration: UInt64
    /// Transactions offered instead of sent (version 4, PROTOCOL.md §8.11).
    public var offered: [RouteTable.Offer] = []

    public init(
        pieces: [TransactionPiece], receiver: SubscriptionFilter, encoding: PieceCodec.DeltaEncoding,
        throughSequence: UInt64, subscribeGeneration: UInt64
    ) {
        self.pieces = pieces
        self.receiver = receiver
        self.encoding = encoding
        self.throughSequence = throughSequence
        self.subscribeGeneration = subscribeGeneration
    }

    /// The batch as protobuf messages: what `payload()` decodes to.
    package var message: Shoal_V1_DeltaBatch {
        var batch = Shoal_V1_DeltaBatch()
        (batch.pieces, batch.filters) = PieceCodec.encode(pieces, receiver: receiver, encoding: encoding)
        batch.throughSequence = throughSequence
        batch.subscribeGeneration = subscribeGeneration
        batch.offered = offered.map(Self.wire)
        return batch
    }

    static func wire(_ offer: RouteTable.Offer) -> Shoal_V1_Offer {
        var wire = Shoal_V1_Offer()
        wire.originSite = offer.id.origin.rawValue
        wire.originSequence = offer.id.sequence
        wire.logSequence = offer.logSequence
        return wire
    }

    /// The frame's payload: the bytes SwiftProtobuf writes for `message`.
    public func payload() -> [UInt8] {
        var writer = DeltaBatchWriter()
        return writer.write(self)
    }

    /// The deltas it carries.
    public var deltaCount: UInt64 { pieces.reduce(0) { $0 + UInt64($1.deltas.count) } }
}

/// Writes a DeltaBatch's payload straight from transaction pieces, each nested
/// message sized once before it is written (protobuf puts a message's length before
/// it):
///
/// ```
/// DeltaBatch     through_sequence(2) subscribe_generation(3) piece(4)* filter(5)* offered(6)*
/// piece          origin_site(1) origin_sequence(2) delta_count(3) document_count(4)
///                collection(5)* document(6)* verdict(7)* last(8) base_timestamp(9) context(10)*
/// document(6)    collection(1) document_id(2) delta_count(3) delta(4)*
/// delta(4)       field(1) value_json(2) timestamp_offset(3) index(4) index_step(5) timestamp_step(6)
/// ```
///
/// Verdicts, context and filters, rare in a batch, go through SwiftProtobuf.
struct DeltaBatchWriter {
    private typealias W = ProtobufWriter
    private var out = ProtobufWriter()
    /// The size of each delta of the piece being written, in wire order.
    private var deltaSizes: [Int] = []
    /// The size of each document of the piece being written.
    private var documentSizes: [Int] = []

    mutating func write(_ batch: OutboundBatch) -> [UInt8] {
        var capacity = 16
        for piece in batch.pieces {
            capacity += 64
            for delta in piece.deltas { capacity += delta.field.utf8.count + delta.valueJSON.utf8.count + 8 }
        }
        out = ProtobufWriter(capacity: capacity)
        out.varintUnlessZero(2, batch.throughSequence)
        out.varintUnlessZero(3, batch.subscribeGeneration)
        var filters: [SubscriptionFilter] = []
        for piece in batch.pieces { write(piece, batch, filters: &filters) }
        for filter in PieceCodec.filterMessages(filters) { blob(5, filter) }
        for offer in batch.offered { blob(6, OutboundBatch.wire(offer)) }
        return out.bytes
    }

    /// A message written whole by SwiftProtobuf, as element `field` of a repeated field.
    private mutating func blob(_ field: UInt8, _ message: some Message) {
        out.data(field, Self.serialized(message))
    }

    private static func serialized(_ message: some Message) -> [UInt8] {
        do {
            return try message.serializedBytes()
        } catch {
            // Serialization fails only for messages missing required fields, which proto3 has none of.
            preconditionFailure("protobuf serialization failed: \(error)")
        }
    }

    private static func size(_ delta: Delta, _ numbers: PieceLayout.Numbers) -> Int {
        var n = 0
        let field = delta.field.utf8.count, value = delta.valueJSON.utf8.count
        if field > 0 { n += W.delimited(field) }
        if value > 0 { n += W.delimited(value) }
        n += W.varintField(W.zigZag(numbers.timestampOffset))
        n += W.varintField(UInt64(numbers.index))
        n += W.varintField(W.zigZag(numbers.indexStep))
        n += W.varintField(W.zigZag(numbers.timestampStep))
        return n
    }

    private static func size(_ count: CollectionCount) -> Int {
        (count.collection.isEmpty ? 0 : W.delimited(count.collection.utf8.count)) + W.varintField(UInt64(count.documents))
            + W.varintField(UInt64(count.deltas))
    }

    private mutating func write(_ piece: TransactionPiece, _ batch: OutboundBatch, filters: inout [SubscriptionFilter]) {
        let layout = PieceLayout(piece)
        let verdicts = PieceCodec.verdictMessages(piece, receiver: batch.receiver, filters: &filters).map(Self.serialized)
        let context = PieceCodec.contextMessages(piece).map(Self.serialized)

        // Sizes, from the deltas up.
        deltaSizes.removeAll(keepingCapacity: true)
        documentSizes.removeAll(keepingCapacity: true)
        var stepper = PieceLayout.Stepper(batch.encoding, base: layout.base)
        var size = 0
        if piece.id.origin.rawValue != 0 { size += 9 }
        size += W.varintField(piece.id.sequence)
        size += W.varintField(UInt64(piece.deltaCount))
        size += W.varintField(UInt64(piece.documentCount))
        for count in piece.collections { size += W.delimited(Self.size(count)) }
        for document in layout.documents {
            var n = 0
            if !document.ref.collection.isEmpty { n += W.delimited(document.ref.collection.utf8.count) }
            if !document.ref.id.isEmpty { n += W.delimited(document.ref.id.utf8.count) }
            n += W.varintField(UInt64(document.deltaCount))
            for place in document.range {
                let delta = piece.deltas[layout.position(place)]
                let deltaSize = Self.size(delta, stepper.next(delta))
                deltaSizes.append(deltaSize)
                n += W.delimited(deltaSize)
            }
            documentSizes.append(n)
            size += W.delimited(n)
        }
        for verdict in verdicts { size += W.delimited(verdict.count) }
        if piece.isLast { size += 2 }
        if layout.base != 0 { size += 9 }
        for document in context { size += W.delimited(document.count) }

        // The piece, in field order.
        out.lengthDelimited(4, count: size)
        if piece.id.origin.rawValue != 0 { out.fixed64(1, piece.id.origin.rawValue) }
        out.varintUnlessZero(2, piece.id.sequence)
        out.varintUnlessZero(3, UInt64(piece.deltaCount))
        out.varintUnlessZero(4, UInt64(piece.documentCount))
        for count in piece.collections {
            out.lengthDelimited(5, count: Self.size(count))
            if !count.collection.isEmpty { out.string(1, count.collection) }
            out.varintUnlessZero(2, UInt64(count.documents))
            out.varintUnlessZero(3, UInt64(count.deltas))
        }
        stepper = PieceLayout.Stepper(batch.encoding, base: layout.base)
        for (d, document) in layout.documents.enumerated() {
            out.lengthDelimited(6, count: documentSizes[d])
            if !document.ref.collection.isEmpty { out.string(1, document.ref.collection) }
            if !document.ref.id.isEmpty { out.string(2, document.ref.id) }
            out.varintUnlessZero(3, UInt64(document.deltaCount))
            for place in document.range {
                let delta = piece.deltas[layout.position(place)]
                let numbers = stepper.next(delta)
                out.lengthDelimited(4, count: deltaSizes[place])
                if !delta.field.isEmpty { out.string(1, delta.field) }
                if !delta.valueJSON.isEmpty { out.string(2, delta.valueJSON) }
                out.varintUnlessZero(3, W.zigZag(numbers.timestampOffset))
                out.varintUnlessZero(4, UInt64(numbers.index))
                out.varintUnlessZero(5, W.zigZag(numbers.indexStep))
                out.varintUnlessZero(6, W.zigZag(numbers.timestampStep))
            }
        }
        for verdict in verdicts { out.data(7, verdict) }
        if piece.isLast { out.varint(8, 1) }
        if layout.base != 0 { out.fixed64(9, layout.base) }
        for document in context { out.data(10, document) }
    }
}

import Foundation
import ShoalCRDT
import ShoalSync
import ShoalTesting
import ShoalWire
import SwiftProtobuf
import Testing

/// A batch's payload, written straight from its pieces, is byte for byte what
/// SwiftProtobuf writes for the same batch as messages, and decodes back to the pieces.
@Suite struct OutboundBatchTests {
    static let receiver = SubscriptionFilter([.init(query: "SELECT * FROM cars", argumentsJSON: "")])
    static let other = SubscriptionFilter([.init(query: "SELECT * FROM boats WHERE n > :n", argumentsJSON: "{\"n\":1}")])

    /// A random piece: documents of two collections whose deltas may come back after
    /// another document's, values of every kind (removals, observed removals, text
    /// beyond ASCII, long text), timestamps far apart or out of order, and sometimes
    /// verdicts and context.
    static func piece(_ random: inout SplitMix, sequence: UInt64) -> TransactionPiece {
        let id = TransactionID(origin: SiteID(random.next() | 1), sequence: sequence)
        let documents = Int.random(in: 0...12, using: &random)
        let collections = ["cars", "boats"]
        var refs: [DocumentRef] = (0..<documents).map { d in
            DocumentRef(collection: collections[Int.random(in: 0...1, using: &random)], id: "\"d\(d)\"")
        }
        refs = Array(Set(refs)).sorted()
        let values = ["1", "", "\"é ü 💧\"", "{\"a\":[1,2]}", "~00000000000000ff", "\"" + String(repeating: "x", count: 300) + "\"", "null"]
        let base = UInt64.random(in: 0...(1 << 60), using: &random)
        var deltas: [Delta] = []
        var counts: [DocumentRef: UInt32] = [:]
        let total = refs.isEmpty ? 0 : Int.random(in: refs.count...(refs.count * 4), using: &random)
        var order = Array(0..<total)
        if Bool.random(using: &random) { order.shuffle(using: &random) }
        for i in 0..<total {
            // Each document gets at least one delta; the rest fall anywhere.
            let ref = i < refs.count ? refs[i] : refs[Int.random(in: 0..<refs.count, using: &random)]
            counts[ref, default: 0] += 1
            let spread = Bool.random(using: &random) ? UInt64.random(in: 0...5, using: &random) : UInt64.random(in: 0...(1 << 40), using: &random)
            deltas.append(
                Delta(
                    collection: ref.collection, documentID: ref.id, field: ["_id", "color", "n", "wheels"][i % 4] + "\(i)",
                    valueJSON: values[Int.random(in: 0..<values.count, using: &random)],
                    timestamp: HybridTimestamp(rawValue: base + spread), transaction: id, index: UInt32(order[i]),
                    count: UInt32(total)))
        }
        if Bool.random(using: &random) { deltas.shuffle(using: &random) }
        // A piece with no delta (the last of a transaction sent in part) still carries the manifest.
        let manifest =
            deltas.isEmpty
            ? [CollectionCount(collection: "cars", documents: 1, deltas: 1)]
            : CollectionCount.manifest(of: deltas.map { ($0.collection, $0.documentID) })
        var piece = TransactionPiece(
            id: id, deltaCount: UInt32(max(total, 1)), documentCount: UInt32(max(refs.count, 1)), collections: manifest,
            deltas: deltas, documentDeltaCounts: counts, isLast: Bool.random(using: &random))
        if piece.isLast {
            piece.verdicts = [
                Verdict(collection: "cars", coverage: .notCovered(receiver)),
                Verdict(collection: "boats", coverage: .notCovered(other)),
                Verdict(collection: "cars", coverage: .superseded([TransactionID(origin: SiteID(7), sequence: 3)])),
                Verdict(collection: "boats", coverage: .unknown),
            ].filter { verdict in manifest.contains { $0.collection == verdict.collection } && Bool.random(using: &random) }
        }
        if let ref = refs.first, Bool.random(using: &random) {
            piece.context = [
                ContextField(
                    document: ref, field: "n", valueJSON: "2", timestamp: HybridTimestamp(rawValue: base),
                    transaction: TransactionID(origin: SiteID(5), sequence: 1))
            ]
        }
        return piece
    }

    @Test(arguments: [PieceCodec.DeltaEncoding.absolute, .stepped])
    func thePayloadIsWhatSwiftProtobufWritesAndDecodesToThePieces(_ encoding: PieceCodec.DeltaEncoding) throws {
        var random = SplitMix(state: encoding == .stepped ? 3 : 4)
        for round in 0..<300 {
            let pieces = (0..<Int.random(in: 0...4, using: &random)).map { Self.piece(&random, sequence: UInt64($0 + 1)) }
            let batch = OutboundBatch(
                pieces: pieces, receiver: Self.receiver, encoding: encoding,
                throughSequence: round.isMultiple(of: 5) ? 0 : UInt64.random(in: 1...(1 << 50), using: &random),
                subscribeGeneration: UInt64(round % 3))
            let payload = batch.payload()
            let expected: [UInt8] = try batch.message.serializedBytes()
            // Compared first, so that a failure names where rather than printing both.
            let difference =
                payload.indices.first { $0 >= expected.count || payload[$0] != expected[$0] }
                ?? (payload.count == expected.count ? nil : payload.count)
            try #require(difference == nil, "round \(round): \(pieces.count) pieces; the bytes differ from offset \(difference ?? 0) of \(expected.count)")
            let decoded = try Shoal_V1_DeltaBatch(serializedBytes: payload)
            let back = try PieceCodec.decode(
                decoded.pieces, filters: decoded.filters, receiver: Self.receiver, collections: ["cars", "boats"],
                encoding: encoding)
            #expect(back.count == pieces.count)
            for (sent, received) in zip(pieces, back) {
                #expect(Set(received.deltas) == Set(sent.deltas), "round \(round)")
                #expect(received.verdicts == sent.verdicts && received.context == sent.context && received.isLast == sent.isLast)
                #expect(received.documentDeltaCounts == sent.documentDeltaCounts && received.collections == sent.collections)
            }
            #expect(batch.deltaCount == UInt64(pieces.reduce(0) { $0 + $1.deltas.count }))
        }
    }

    /// A document that comes back after another goes on the wire with its other
    /// deltas, in the order they stand in the piece.
    @Test func aDocumentThatComesBackJoinsItsGroup() throws {
        let piece = PieceCodecTests.interleaved()
        let batch = OutboundBatch(pieces: [piece], receiver: Self.receiver, encoding: .absolute, throughSequence: 1, subscribeGeneration: 1)
        let decoded = try Shoal_V1_DeltaBatch(serializedBytes: batch.payload())
        let documents = decoded.pieces[0].documents
        #expect(documents.map(\.documentID) == ["\"a\"", "\"b\""])
        #expect(documents.map { $0.deltas.map(\.index) } == [[0, 2, 6], [1, 3, 5]])
        #expect(documents.map(\.deltaCount) == [3, 4])
    }
}

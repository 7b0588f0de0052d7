import Foundation
import ShoalCRDT
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// Batches cut to what the peer said it takes (`BatchFitter`): every batch fits its
/// frame limit, nothing is lost or reordered but what cannot fit at all, and what is
/// withheld is said on the transaction's last piece.
@Suite struct BatchFitterTests {
    static func measure(_ encoding: PieceCodec.DeltaEncoding) -> BatchFitter.Measure {
        { pieces in
            OutboundBatch(
                pieces: pieces, receiver: OutboundBatchTests.receiver, encoding: encoding, throughSequence: 1 << 40,
                subscribeGeneration: 7
            ).payload().count
        }
    }

    static func documents(_ deltas: [Delta]) -> Set<DocumentRef> {
        Set(deltas.map { DocumentRef(collection: $0.collection, id: $0.documentID) })
    }

    @Test(arguments: [PieceCodec.DeltaEncoding.absolute, .stepped])
    func everyBatchFitsAndOnlyWhatCannotFitIsWithheld(_ encoding: PieceCodec.DeltaEncoding) {
        var random = SplitMix(state: encoding == .stepped ? 11 : 12)
        let measure = Self.measure(encoding)
        for _ in 0..<300 {
            let limit = Int.random(in: 300...6000, using: &random)
            var fitter = BatchFitter(limits: PeerLimits(maximumFrameSize: limit, documentSizeHardLimit: 0))
            let pieces = (0..<Int.random(in: 1...5, using: &random)).map {
                OutboundBatchTests.piece(&random, sequence: UInt64($0 + 1))
            }
            let groups = fitter.fit(pieces, measure: measure)
            for group in groups { #expect(measure(group) <= limit, "a batch of \(measure(group)) bytes over \(limit)") }
            let out = groups.flatMap { $0 }
            for piece in pieces {
                let parts = out.filter { $0.id == piece.id }
                let sent = parts.flatMap(\.deltas)
                // What is sent comes in the order given; what is not is of withheld
                // documents, each named by an overLimit verdict on the last piece or
                // pending for a later one.
                let withheld = Set(
                    piece.deltas.filter { !sent.contains($0) }.map { DocumentRef(collection: $0.collection, id: $0.documentID) })
                #expect(sent == piece.deltas.filter { sent.contains($0) })
                for document in withheld {
                    // A document is withheld only when one of its deltas cannot fit alone.
                    let alone = piece.deltas.filter { $0.collection == document.collection && $0.documentID == document.id }
                    #expect(alone.contains { delta in
                        var single = piece
                        single.deltas = [delta]
                        single.isLast = false
                        single.verdicts = []
                        single.context = []
                        return measure([single]) > limit
                    } || piece.context.contains { $0.document == document })
                }
                let saidOver = Set(parts.flatMap(\.verdicts).filter { $0.coverage == .overLimit }.map(\.collection))
                if piece.isLast {
                    #expect(parts.last?.isLast == true && parts.dropLast().allSatisfy { !$0.isLast })
                    #expect(parts.dropLast().allSatisfy { $0.verdicts.isEmpty })
                    #expect(parts.last!.verdicts.filter { $0.coverage != .overLimit } == piece.verdicts)
                    #expect(saidOver == Set(withheld.map(\.collection)))
                } else {
                    #expect(parts.allSatisfy { !$0.isLast })
                    #expect(saidOver.isEmpty)
                    #expect((fitter.pending[piece.id] ?? []) == Set(withheld.map(\.collection)))
                }
            }
        }
    }

    /// One document with a value too large for the peer's frame: withheld, and the
    /// transaction's last piece, sent later, says so.
    @Test func aValueTooLargeForThePeersFrameIsWithheldAndTheLastPieceSaysSo() {
        let id = TransactionID(origin: SiteID(0xA), sequence: 1)
        func delta(_ doc: String, _ index: UInt32, bytes: Int) -> Delta {
            Delta(
                collection: "cars", documentID: "\"\(doc)\"", field: "v", valueJSON: "\"" + String(repeating: "x", count: bytes) + "\"",
                timestamp: HybridTimestamp(rawValue: 1 << 20), transaction: id, index: index, count: 3)
        }
        let manifest = [CollectionCount(collection: "cars", documents: 3, deltas: 3)]
        let first = TransactionPiece(
            id: id, deltaCount: 3, documentCount: 3, collections: manifest,
            deltas: [delta("a", 0, bytes: 100), delta("big", 1, bytes: 5000)],
            documentDeltaCounts: [DocumentRef(collection: "cars", id: "\"a\""): 1, DocumentRef(collection: "cars", id: "\"big\""): 1])
        let last = TransactionPiece(
            id: id, deltaCount: 3, documentCount: 3, collections: manifest, deltas: [delta("c", 2, bytes: 100)],
            documentDeltaCounts: [DocumentRef(collection: "cars", id: "\"c\""): 1], isLast: true)
        var fitter = BatchFitter(limits: PeerLimits(maximumFrameSize: 2048, documentSizeHardLimit: 0))
        let page1 = fitter.fit([first], measure: Self.measure(.stepped))
        #expect(page1.flatMap { $0.flatMap(\.deltas) }.map(\.documentID) == ["\"a\""])
        #expect(fitter.pending == [id: ["cars"]])
        let page2 = fitter.fit([last], measure: Self.measure(.stepped))
        #expect(page2.count == 1 && page2[0].count == 1)
        #expect(page2[0][0].verdicts == [Verdict(collection: "cars", coverage: .overLimit)])
        #expect(fitter.pending.isEmpty)
        // A peer that did not say its limits gets `unknown`, a verdict it knows.
        var old = BatchFitter(limits: PeerLimits(maximumFrameSize: 0, documentSizeHardLimit: 0))
        old.limit = 2048
        _ = old.fit([first], measure: Self.measure(.stepped))
        #expect(old.fit([last], measure: Self.measure(.stepped))[0][0].verdicts == [Verdict(collection: "cars", coverage: .unknown)])
    }

    /// A document whose deltas in a piece add up to more than the peer's document
    /// limit is withheld before anything is encoded.
    @Test func aDocumentOverThePeersDocumentLimitIsWithheld() {
        let id = TransactionID(origin: SiteID(0xA), sequence: 1)
        let deltas = ["small": 10, "large": 400].sorted { $0.key < $1.key }.enumerated().map { i, entry in
            Delta(
                collection: "cars", documentID: "\"\(entry.key)\"", field: "v",
                valueJSON: "\"" + String(repeating: "x", count: entry.value) + "\"", timestamp: HybridTimestamp(rawValue: 1 << 20),
                transaction: id, index: UInt32(i), count: 2)
        }
        let piece = TransactionPiece(
            id: id, deltaCount: 2, documentCount: 2, collections: [CollectionCount(collection: "cars", documents: 2, deltas: 2)],
            deltas: deltas, documentDeltaCounts: Dictionary(uniqueKeysWithValues: deltas.map { (DocumentRef(collection: "cars", id: $0.documentID), 1) }),
            isLast: true)
        var fitter = BatchFitter(limits: PeerLimits(maximumFrameSize: 1 << 20, documentSizeHardLimit: 300))
        let groups = fitter.fit([piece], measure: Self.measure(.stepped))
        #expect(groups.count == 1)
        #expect(groups[0][0].deltas.map(\.documentID) == ["\"small\""])
        #expect(groups[0][0].verdicts == [Verdict(collection: "cars", coverage: .overLimit)])
    }
}

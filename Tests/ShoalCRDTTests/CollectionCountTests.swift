import ShoalCRDT
import ShoalTesting
import Testing

/// A transaction's manifest: by collection in order of first appearance, each with its
/// distinct documents and its deltas, however the deltas of a document are spread.
@Suite struct CollectionCountTests {
    @Test func aManifestCountsDocumentsAndDeltasByCollectionInOrderOfAppearance() {
        let deltas: [(collection: String, document: String)] = [
            ("cars", "a"), ("cars", "a"), ("boats", "x"), ("cars", "b"), ("cars", "a"), ("boats", "x"), ("boats", "y"),
        ]
        #expect(
            CollectionCount.manifest(of: deltas) == [
                CollectionCount(collection: "cars", documents: 2, deltas: 4),
                CollectionCount(collection: "boats", documents: 2, deltas: 3),
            ])
        #expect(CollectionCount.manifest(of: [(collection: String, document: String)]()).isEmpty)
    }

    /// Random sequences, with runs and returns to earlier documents, against a count
    /// made the plain way; and the same from each document's count of deltas.
    @Test func randomSequencesCountAsThePlainWayDoes() {
        var rng = SplitMix(state: 0x5EED)
        for _ in 0..<500 {
            let deltas = (0..<Int(rng.next() % 40)).map { _ in
                (collection: ["c", "d", "e"][Int(rng.next() % 3)], document: "\(rng.next() % 5)")
            }
            var order: [String] = []
            for delta in deltas where !order.contains(delta.collection) { order.append(delta.collection) }
            let expected = order.map { collection in
                let mine = deltas.filter { $0.collection == collection }
                return CollectionCount(
                    collection: collection, documents: UInt32(Set(mine.map(\.document)).count), deltas: UInt32(mine.count))
            }
            #expect(CollectionCount.manifest(of: deltas) == expected, "\(deltas)")
            // Each document once, in order of its first delta, with its count of deltas.
            var documents: [(collection: String, document: String, deltas: Int)] = []
            for delta in deltas {
                if let i = documents.firstIndex(where: { $0.collection == delta.collection && $0.document == delta.document }) {
                    documents[i].deltas += 1
                } else {
                    documents.append((delta.collection, delta.document, 1))
                }
            }
            #expect(CollectionCount.manifest(documents: documents.map { ($0.collection, $0.deltas) }) == expected, "\(deltas)")
        }
    }
}

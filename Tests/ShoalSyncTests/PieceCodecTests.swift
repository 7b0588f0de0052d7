import Foundation
import ShoalCRDT
import ShoalStore
import ShoalSync
import ShoalWire
import Testing

/// A piece whose manifest contradicts its deltas is refused, whichever way it does.
@Suite struct PieceCodecTests {
    /// One transaction of origin 0xA: manifest cars 2 documents / 3 deltas, and car "a" with 2 of them.
    static func good() -> Shoal_V1_TransactionPiece {
        var p = Shoal_V1_TransactionPiece()
        p.originSite = 0xA
        p.originSequence = 1
        p.deltaCount = 3
        p.documentCount = 2
        var m = Shoal_V1_CollectionCount()
        m.collection = "cars"
        m.documents = 2
        m.deltas = 3
        p.collections = [m]
        var d = Shoal_V1_DocumentDeltas()
        d.collection = "cars"
        d.documentID = "\"a\""
        d.deltaCount = 2
        d.deltas = (0..<2).map { i in
            var f = Shoal_V1_FieldDelta()
            f.field = "f\(i)"
            f.valueJson = Data("1".utf8)
            f.index = UInt32(i)
            return f
        }
        p.documents = [d]
        p.last = true
        return p
    }

    static func decode(_ p: Shoal_V1_TransactionPiece) throws(SyncError) -> [TransactionPiece] {
        try PieceCodec.decode([p], filters: [], receiver: SubscriptionFilter([]), collections: ["cars", "boats"])
    }

    @Test func aConsistentPieceDecodes() throws {
        let pieces = try Self.decode(Self.good())
        #expect(pieces.first?.deltas.count == 2)
    }

    /// `good()` broken in one way, and what the refusal says.
    static func broken(_ what: String) -> (piece: Shoal_V1_TransactionPiece, message: String) {
        var p = good()
        switch what {
        case "the manifest's deltas do not add up":
            p.collections[0].deltas = 4
            return (p, "manifest lists 4 deltas by collection but 3 in all")
        case "a collection twice in the manifest":
            p.collections[0].documents = 1
            p.collections[0].deltas = 2
            var m = p.collections[0]
            m.deltas = 1
            p.collections.append(m)
            return (p, "manifest lists collection 'cars' twice")
        case "a document of a collection the manifest lacks":
            p.documents[0].collection = "boats"
            return (p, "document \"a\" in 'boats' with 2 deltas does not fit what the manifest gives 'boats'")
        case "more documents than the manifest's":
            var second = p.documents[0]
            second.documentID = "\"b\""
            second.deltaCount = 1
            second.deltas = []
            var third = second
            third.documentID = "\"c\""
            p.documents += [second, third]
            return (p, "document \"c\" in 'cars' with 1 deltas does not fit")
        case "more deltas in documents than the collection has":
            var second = p.documents[0]
            second.documentID = "\"b\""
            second.deltaCount = 2
            second.deltas = []
            p.documents.append(second)
            return (p, "document \"b\" in 'cars' with 2 deltas does not fit")
        case "a document listed twice":
            var again = p.documents[0]
            again.deltaCount = 1
            again.deltas = []
            p.documents.append(again)
            return (p, "lists document \"a\" in 'cars' twice in one piece")
        case "more deltas than the document's count":
            p.documents[0].deltaCount = 1
            return (p, "carries 2 deltas of document \"a\", which it says has 1")
        case "an index twice":
            p.documents[0].deltas[1].index = 0
            return (p, "carries delta index 0 twice")
        default:
            var v = Shoal_V1_Verdict()
            v.collection = "boats"
            v.coverage = .unknown
            p.verdicts = [v]
            return (p, "has a verdict on collection 'boats', which its manifest does not list")
        }
    }

    @Test(arguments: [
        "the manifest's deltas do not add up", "a collection twice in the manifest",
        "a document of a collection the manifest lacks", "more documents than the manifest's",
        "more deltas in documents than the collection has", "a document listed twice",
        "more deltas than the document's count", "an index twice", "a verdict on a collection the manifest lacks",
    ])
    func aPieceThatContradictsItsManifestIsRefused(_ what: String) {
        let (p, message) = Self.broken(what)
        do {
            _ = try Self.decode(p)
            Issue.record("\(what): accepted")
        } catch {
            #expect(error.code == .protocolViolation, "\(what)")
            #expect(error.message.contains(message), "\(what): \(error.message)")
            #expect(error.message.hasPrefix("DeltaBatch: transaction 000000000000000a:1"), "\(what): \(error.message)")
        }
    }
}

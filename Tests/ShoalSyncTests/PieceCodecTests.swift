import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import SwiftProtobuf
import NIOCore
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

    /// A value sent as any JSON text is kept as its canonical JSON, as a local write
    /// keeps it: the store writes a body from its registers' text. A scalar sent
    /// canonical is not parsed at all.
    @Test(arguments: [
        ("1", "1"), ("1.50", "1.5"), (" true ", "true"), ("{ \"b\": 1, \"a\": [ 2 ,3 ] }", "{\"a\":[2,3],\"b\":1}"),
        ("\"\\u0041\"", "\"A\""),
    ])
    func aReceivedValueIsKeptCanonical(sent: String, kept: String) throws {
        var p = Self.good()
        p.documents[0].deltas[1].valueJson = Data(sent.utf8)
        let delta = try #require(try Self.decode(p).first?.deltas.last)
        #expect(delta.valueJSON == kept)
        #expect(try (delta.parsed ?? JSON.parse(delta.valueJSON)).canonicalJSON == kept)
        // Left unparsed only when it came canonical already (a scalar the codec can tell).
        if delta.parsed == nil { #expect(sent == kept) }
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

    // MARK: Stepped positions and timestamps (version 3)

    /// A transaction of 7 deltas that visits car "a", then "b", then "a" again, with
    /// timestamps out of order and one delta (index 4) withheld: the piece lists "a"'s
    /// deltas 0, 2, 6 before "b"'s 1, 3, 5, so steps go back as well as forward.
    static func interleaved() -> TransactionPiece {
        let id = TransactionID(origin: SiteID(0xA), sequence: 9)
        let base: UInt64 = 0x018b_cfe5_6800_0000
        let plan: [(doc: String, index: UInt32, ts: UInt64)] = [
            ("a", 0, base + 5), ("b", 1, base + 6), ("a", 2, base), ("b", 3, base + 7), ("b", 5, base + 8), ("a", 6, base + 100_000),
        ]
        let deltas = plan.map { p in
            Delta(
                collection: "cars", documentID: "\"\(p.doc)\"", field: "f\(p.index)", valueJSON: "\(p.index)",
                timestamp: HybridTimestamp(rawValue: p.ts), transaction: id, index: p.index, count: 7)
        }
        return TransactionPiece(
            id: id, deltaCount: 7, documentCount: 2, collections: [CollectionCount(collection: "cars", documents: 2, deltas: 7)],
            deltas: deltas,
            documentDeltaCounts: [DocumentRef(collection: "cars", id: "\"a\""): 3, DocumentRef(collection: "cars", id: "\"b\""): 4],
            isLast: true)
    }

    static func summary(_ deltas: [Delta]) -> [String] {
        deltas.map { "\($0.documentID) \($0.field) #\($0.index) @\($0.timestamp.rawValue) = \($0.valueJSON)" }.sorted()
    }

    @Test(arguments: [PieceCodec.DeltaEncoding.absolute, .stepped])
    func piecesSurviveTheRoundTripInEitherEncoding(_ encoding: PieceCodec.DeltaEncoding) throws {
        let piece = Self.interleaved()
        let (wire, filters) = PieceCodec.encode([piece], receiver: SubscriptionFilter([]), encoding: encoding)
        let back = try PieceCodec.decode(
            wire, filters: filters, receiver: SubscriptionFilter([]), collections: ["cars"], encoding: encoding)
        #expect(Self.summary(back[0].deltas) == Self.summary(piece.deltas))
        let fields = wire[0].documents.flatMap(\.deltas)
        if encoding == .stepped {
            #expect(fields.allSatisfy { $0.index == 0 && $0.timestampOffset == 0 })
            // "a": 0, 2, 6 then "b": 1, 3, 5: steps from -1.
            #expect(fields.map(\.indexStep) == [0, 1, 3, -6, 1, 1])
        } else {
            #expect(fields.allSatisfy { $0.indexStep == 0 && $0.timestampStep == 0 })
            #expect(fields.map(\.index) == [0, 2, 6, 1, 3, 5])
        }
    }

    /// A transaction written in order (positions and clock ticks one after another)
    /// has every step 0, which protobuf does not send: that is the saving.
    @Test func anOrderlyTransactionSendsNoSteps() throws {
        let id = TransactionID(origin: SiteID(0xA), sequence: 1)
        let deltas = (0..<300).map { i in
            Delta(
                collection: "cars", documentID: "\"d\(i / 6)\"", field: "f\(i % 6)", valueJSON: "\(i)",
                timestamp: HybridTimestamp(rawValue: 1_000_000 + UInt64(i)), transaction: id, index: UInt32(i), count: 300)
        }
        var counts: [DocumentRef: UInt32] = [:]
        for d in deltas { counts[DocumentRef(collection: "cars", id: d.documentID), default: 0] += 1 }
        let piece = TransactionPiece(
            id: id, deltaCount: 300, documentCount: 50, collections: [CollectionCount(collection: "cars", documents: 50, deltas: 300)],
            deltas: deltas, documentDeltaCounts: counts, isLast: true)
        let stepped = PieceCodec.encode([piece], receiver: SubscriptionFilter([]), encoding: .stepped).pieces
        let absolute = PieceCodec.encode([piece], receiver: SubscriptionFilter([]), encoding: .absolute).pieces
        #expect(stepped[0].documents.flatMap(\.deltas).allSatisfy { $0.indexStep == 0 && $0.timestampStep == 0 })
        let steppedBytes = try stepped[0].serializedBytes() as [UInt8]
        let absoluteBytes = try absolute[0].serializedBytes() as [UInt8]
        // 300 deltas: index (2–3 bytes from 128 on) and offset (2–3 bytes) each, gone.
        #expect(absoluteBytes.count - steppedBytes.count >= 4 * 300 - 2 * 128)
        let back = try PieceCodec.decode(
            stepped, filters: [], receiver: SubscriptionFilter([]), collections: ["cars"], encoding: .stepped)
        #expect(Self.summary(back[0].deltas) == Self.summary(deltas))
    }

    @Test func aSteppedPieceIsCheckedLikeAnyOther() throws {
        var wire = PieceCodec.encode([Self.interleaved()], receiver: SubscriptionFilter([]), encoding: .stepped).pieces[0]
        func refusal(_ p: Shoal_V1_TransactionPiece) -> String? {
            do {
                _ = try PieceCodec.decode([p], filters: [], receiver: SubscriptionFilter([]), collections: ["cars"], encoding: .stepped)
                return nil
            } catch {
                return error.message
            }
        }
        var past = wire
        past.documents[1].deltas[2].indexStep = 3  // 5 becomes 7, past the 7 deltas
        #expect(refusal(past)?.contains("delta index 7 but only 7 deltas") == true)
        var twice = wire
        twice.documents[0].deltas[1].indexStep = -1  // 2 becomes 0 again
        #expect(refusal(twice)?.contains("carries delta index 0 twice") == true)
        var mixed = wire
        mixed.documents[0].deltas[0].index = 3  // a version 2 field in a version 3 session
        #expect(refusal(mixed)?.contains("version 2 index or timestamp_offset in a version 3 session") == true)
        wire.documents[0].deltas[0].indexStep = Int32.min  // wraps modulo 2^32, far past the end
        #expect(refusal(wire)?.contains("but only 7 deltas") == true)
    }

    /// `Protocol/vectors/v3/delta-batch.hex`, read as a version 3 session reads it:
    /// car "a"'s `_id` at index 0 and base_timestamp, its `color` at index 2 and + 5.
    @Test func theVersionThreeVectorDecodesAsPROTOCOLSays() throws {
        let text = try String(contentsOf: VectorManifest.url("v3/delta-batch.hex"), encoding: .utf8)
        var buffer = ByteBuffer(bytes: try VectorManifest.bytes(hex: text))
        let frame = try #require(try FrameDecoder().next(from: &buffer))
        guard case .deltaBatch(let batch) = try MessageCodec().decode(frame) else {
            Issue.record("not a DeltaBatch")
            return
        }
        let pieces = try PieceCodec.decode(
            batch.pieces, filters: batch.filters, receiver: SubscriptionFilter([]), collections: ["cars", "boats"],
            encoding: .stepped)
        let base = batch.pieces[0].baseTimestamp
        #expect(pieces[0].deltas.map(\.field) == ["_id", "color"])
        #expect(pieces[0].deltas.map(\.index) == [0, 2])
        #expect(pieces[0].deltas.map(\.timestamp.rawValue) == [base, base + 5])
    }
}

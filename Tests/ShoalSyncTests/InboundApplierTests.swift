import ShoalCRDT
import ShoalStorage
import ShoalSync
import Testing

/// What an apply of a received transaction writes, decided on values: no store.
struct InboundApplierTests {
    static let origin = SiteID(0xA)
    static let id = TransactionID(origin: origin, sequence: 1)

    static func delta(
        _ document: String, _ field: String, _ json: String, index: UInt32, ts: UInt64 = 10 << 16, collection: String = "cars"
    ) -> Delta {
        Delta(
            collection: collection, documentID: document, field: field, valueJSON: json, timestamp: HybridTimestamp(rawValue: ts),
            transaction: id, index: index, count: 4)
    }

    static func record(documents: UInt32 = 2) -> TransactionRecord {
        TransactionRecord(
            id: id, deltaCount: 4, documentCount: documents, collections: [CollectionCount(collection: "cars", documents: documents, deltas: 4)],
            state: .applied, firstSeen: 0)
    }

    static func ref(_ id: String) -> DocumentRef { DocumentRef(collection: "cars", id: id) }

    static func rows(_ plan: InboundApplier.Plan) throws -> AppliedRows {
        guard case .write(let rows, _) = plan else { throw PlanError.refused }
        return rows
    }

    enum PlanError: Error { case refused }

    static func plan(
        _ applier: InboundApplier, logged: [DocumentRef: Set<UInt32>] = [:], registers: [DocumentRegisters]? = nil,
        limits: DocumentLimits = DocumentLimits()
    ) throws -> InboundApplier.Plan {
        try applier.plan(
            logged: logged, registers: registers ?? applier.documents.map { _ in DocumentRegisters() }, limits: limits,
            state: .applied, rest: [], dropBuffer: false)
    }

    @Test func aNewTransactionIsLoggedWhollyAndEveryFieldWins() throws {
        let deltas = [
            Self.delta("\"a\"", "color", "\"red\"", index: 0), Self.delta("\"a\"", "doors", "4", index: 1),
            Self.delta("\"b\"", "color", "\"blue\"", index: 2),
        ]
        let applier = InboundApplier(
            Self.record(), deltas: deltas, documentDeltaCounts: [Self.ref("\"a\""): 2, Self.ref("\"b\""): 1], context: [])
        #expect(applier.documents == [Self.ref("\"a\""), Self.ref("\"b\"")])
        let rows = try Self.rows(try Self.plan(applier))
        #expect(rows.documents.map(\.logged) == [[0, 1], [2]])
        #expect(rows.documents.map(\.deltaCount) == [2, 1])
        #expect(rows.documents.map { $0.won.keys.sorted() } == [["color", "doors"], ["color"]])
        #expect(rows.documents[0].body == .live(#"{"_id":"a","color":"red","doors":4}"#))
        #expect(rows.documents[1].body == .live(#"{"_id":"b","color":"blue"}"#))
    }

    /// A record and a document that claim four billion documents and deltas (the peer's
    /// word) size nothing by the claim: the node aborted allocating hundreds of GB.
    @Test func anApplyIsSizedByWhatArrivedNotByWhatTheRecordClaims() throws {
        let record = TransactionRecord(
            id: Self.id, deltaCount: .max, documentCount: .max,
            collections: [CollectionCount(collection: "cars", documents: .max, deltas: .max)], state: .applied, firstSeen: 0)
        let applier = InboundApplier(
            record, deltas: [Self.delta("\"a\"", "color", "\"red\"", index: 0)], documentDeltaCounts: [Self.ref("\"a\""): .max],
            context: [])
        let rows = try Self.rows(try Self.plan(applier))
        #expect(rows.documents.map { $0.won.keys.sorted() } == [["color"]])
        #expect(rows.documents[0].won.capacity < 1024)
    }

    /// A piece the log holds already is not logged again, but is merged: EVICT keeps the
    /// log and drops the fields, and a refill must bring them back.
    @Test func whatTheLogHoldsIsNotLoggedAgainButStillMerged() throws {
        let deltas = [Self.delta("\"a\"", "color", "\"red\"", index: 0), Self.delta("\"a\"", "doors", "4", index: 1)]
        let applier = InboundApplier(Self.record(documents: 1), deltas: deltas, documentDeltaCounts: [Self.ref("\"a\""): 2], context: [])
        let rows = try Self.rows(try Self.plan(applier, logged: [Self.ref("\"a\""): [0]]))
        #expect(rows.documents[0].logged == [1])
        #expect(rows.documents[0].won.keys.sorted() == ["color", "doors"])
    }

    /// Deltas come sorted by index, and one given twice (buffered, and sent again) is
    /// logged once; the buffer's document delta counts prevail.
    @Test func bufferedDeltasJoinInIndexOrderAndAreLoggedOnce() throws {
        let given = [Self.delta("\"a\"", "doors", "4", index: 1), Self.delta("\"a\"", "color", "\"red\"", index: 0)]
        let buffered = BufferedPieces(
            deltas: [Self.delta("\"a\"", "color", "\"red\"", index: 0), Self.delta("\"b\"", "color", "\"blue\"", index: 2)],
            documentDeltaCounts: [Self.ref("\"a\""): 3, Self.ref("\"b\""): 1])
        let applier = InboundApplier(
            Self.record(), deltas: given, documentDeltaCounts: [Self.ref("\"a\""): 2], context: [], buffered: buffered)
        #expect(applier.deltas.map(\.index) == [0, 0, 1, 2])
        let rows = try Self.rows(try Self.plan(applier))
        #expect(rows.documents.map(\.logged) == [[0, 2], [3]])
        #expect(rows.documents.map(\.deltaCount) == [3, 1])
    }

    /// A register the node holds at a later version keeps its value: nothing won, no
    /// body to save, but the delta is still logged (the log is what relays).
    @Test func aDeltaThatLosesChangesNoRegisterAndNoBody() throws {
        let deltas = [Self.delta("\"a\"", "color", "\"red\"", index: 0, ts: 5 << 16)]
        let held = RegisterState(
            json: "\"green\"", version: RegisterVersion(timestamp: HybridTimestamp(rawValue: 9 << 16), site: SiteID(0xB)),
            transaction: TransactionID(origin: SiteID(0xB), sequence: 3))
        let applier = InboundApplier(Self.record(documents: 1), deltas: deltas, documentDeltaCounts: [:], context: [])
        let rows = try Self.rows(try Self.plan(applier, registers: [DocumentRegisters(["color": held])]))
        #expect(rows.documents[0].won.isEmpty)
        #expect(rows.documents[0].body == nil)
        #expect(rows.documents[0].logged == [0])
    }

    /// A context field merges as a write of index 0; a document only context touches
    /// is read and written like any other, and logs nothing.
    @Test func contextFieldsMergeAndLogNothing() throws {
        let deltas = [Self.delta("\"a\"", "color", "\"red\"", index: 0)]
        let context = [
            ContextField(
                document: Self.ref("\"c\""), field: "seats", valueJSON: "5", timestamp: HybridTimestamp(rawValue: 3 << 16),
                transaction: TransactionID(origin: SiteID(0xB), sequence: 9))
        ]
        let applier = InboundApplier(Self.record(), deltas: deltas, documentDeltaCounts: [:], context: context)
        #expect(applier.documents == [Self.ref("\"a\""), Self.ref("\"c\"")])
        let rows = try Self.rows(try Self.plan(applier))
        #expect(rows.documents[1].logged.isEmpty)
        #expect(rows.documents[1].won["seats"]?.index == 0)
        #expect(rows.documents[1].body == .live(#"{"_id":"c","seats":5}"#))
    }

    /// Two IDs that are canonically equivalent but not the same bytes are two documents
    /// (Swift's `String ==` would take them for one).
    @Test func canonicallyEquivalentIDsAreTwoDocuments() throws {
        let composed = "\"\u{E9}\"", decomposed = "\"e\u{301}\""
        let deltas = [Self.delta(composed, "v", "1", index: 0), Self.delta(decomposed, "v", "2", index: 1)]
        let applier = InboundApplier(Self.record(), deltas: deltas, documentDeltaCounts: [:], context: [])
        #expect(applier.documents.count == 2)
        let rows = try Self.rows(try Self.plan(applier))
        #expect(rows.documents.map(\.logged) == [[0], [1]])
    }

    /// A body over the hard limit refuses the whole transaction, even when another
    /// document of it fits; one over the soft limit is written and reported.
    @Test func aBodyOverTheLimitsIsRefusedOrReported() throws {
        let big = "\"" + String(repeating: "y", count: 200) + "\""
        let deltas = [Self.delta("\"fine\"", "v", "1", index: 0), Self.delta("\"big\"", "v", big, index: 1)]
        let applier = InboundApplier(Self.record(), deltas: deltas, documentDeltaCounts: [:], context: [])
        let refused = try Self.plan(applier, limits: DocumentLimits(softBytes: 50, hardBytes: 100))
        guard case .refuse(let refusal) = refused else {
            Issue.record("a body of 220 bytes over a hard limit of 100 was not refused")
            return
        }
        #expect(refusal == DocumentRefusal(document: Self.ref("\"big\""), reason: .tooLarge(bytes: 220, limit: 100)))
        guard case .write(_, let over) = try Self.plan(applier, limits: DocumentLimits(softBytes: 50, hardBytes: 1000)) else {
            Issue.record("a body under the hard limit was refused")
            return
        }
        #expect(over.map(\.document) == [Self.ref("\"big\"")])
        #expect(over.map(\.bytes) == [220])
    }

    /// A document whose collection, key and a field's name are longer together than a
    /// store's key bound (a hub's) refuses the whole transaction; a store with none
    /// (SQLite's) writes it. The bound counts the longest field the apply writes.
    @Test(arguments: [(8, 4, true), (8, 3, false), (9, 3, true)])
    func aKeyOverTheBoundIsRefused(idBytes: Int, fieldBytes: Int, refused: Bool) throws {
        let id = "\"" + String(repeating: "k", count: idBytes - 2) + "\""
        let deltas = [Self.delta("\"fine\"", "v", "1", index: 0), Self.delta(id, String(repeating: "f", count: fieldBytes), "1", index: 1)]
        let applier = InboundApplier(Self.record(), deltas: deltas, documentDeltaCounts: [:], context: [])
        // "cars" (4) + the key + the field: at most 15.
        let plan = try Self.plan(applier, limits: DocumentLimits(keyBytes: 15))
        if refused {
            guard case .refuse(let refusal) = plan else {
                Issue.record("a key of \(4 + idBytes + fieldBytes) bytes over a bound of 15 was written")
                return
            }
            #expect(refusal == DocumentRefusal(document: Self.ref(id), reason: .keyTooLong(bytes: 4 + idBytes + fieldBytes, limit: 15)))
            #expect(refusal.reason.description.contains("over the 15 this node can index"))
        } else {
            #expect(try Self.rows(plan).documents.count == 2)
        }
        #expect(try Self.rows(Self.plan(applier)).documents.count == 2, "no bound, no refusal")
    }
}

extension InboundApplierTests {
    /// A store whose collection names cannot hold U+0000 (a hub) refuses, whole, a
    /// transaction writing a collection so named; the refusal's text holds no U+0000,
    /// since it is recorded as text there. A store whose names can (SQLite) writes it.
    @Test func aCollectionNameHoldingNulIsRefusedWhereNamesCannotHoldIt() throws {
        let odd = "ca\u{0}rs"
        let deltas = [Self.delta("\"fine\"", "v", "1", index: 0), Self.delta("\"odd\"", "v", "1", index: 1, collection: odd)]
        let applier = InboundApplier(Self.record(), deltas: deltas, documentDeltaCounts: [:], context: [])
        guard case .refuse(let refusal) = try Self.plan(applier, limits: DocumentLimits(collectionNamesHoldNul: false)) else {
            Issue.record("a collection named with U+0000 was written where names cannot hold it")
            return
        }
        #expect(refusal == DocumentRefusal(document: DocumentRef(collection: odd, id: "\"odd\""), reason: .nulInCollectionName))
        #expect(!refusal.description.utf8.contains(0) && refusal.description.contains("ca\\u0000rs"), "\(refusal)")
        #expect(try Self.rows(Self.plan(applier)).documents.count == 2, "names that may hold it: written")
    }
}

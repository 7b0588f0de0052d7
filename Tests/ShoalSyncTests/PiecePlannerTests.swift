import ShoalCRDT
@testable import ShoalSync
import ShoalStorage
import Testing

/// The rules that make a peer's pieces out of log rows, with no database: the bodies
/// and records a store would read are handed over by hand.
@Suite struct PiecePlannerTests {
    static let origin = SiteID(0xA)
    static let peer = SiteID(0xB)

    static func subscriptions(_ queries: String...) throws -> SubscriptionSet {
        var set = SubscriptionSet()
        for query in queries { try set.add(query: query) }
        return set
    }

    /// Log rows of one transaction: (collection, document, field, value), numbered in order.
    static func rows(_ id: TransactionID, _ writes: [(String, String, String, String)], sequence: UInt64 = 1) -> [LogRow] {
        let perDocument = Dictionary(grouping: writes, by: { "\($0.0)/\($0.1)" }).mapValues { UInt32($0.count) }
        return writes.enumerated().map { index, write in
            LogRow(
                sequence: sequence,
                delta: Delta(
                    collection: write.0, documentID: write.1, field: write.2, valueJSON: write.3,
                    timestamp: HybridTimestamp(rawValue: 1_000 + UInt64(index)), transaction: id, index: UInt32(index),
                    count: UInt32(writes.count)),
                documentDeltas: perDocument["\(write.0)/\(write.1)"]!)
        }
    }

    static func record(_ id: TransactionID, rest: [Verdict] = []) -> StoredTransaction {
        StoredTransaction(
            id: id, deltaCount: 3, documentCount: 3,
            collections: [CollectionCount(collection: "boats", documents: 1, deltas: 1), CollectionCount(collection: "cars", documents: 2, deltas: 2)],
            state: .applied, rest: rest, reports: [:], firstSeen: 0)
    }

    /// Judges every body the planner asks for from `bodies` (a missing key: no body held).
    static func judge(_ planner: inout PiecePlanner, _ rows: ArraySlice<LogRow>, _ bodies: [String: String]) -> [DocumentRef] {
        let needed = planner.bodiesNeeded(rows)
        for document in needed { planner.judge(document, body: bodies[document.id]) }
        return needed
    }

    @Test func aWholeCollectionNeedsNoBodyAndAWhereNeedsEachDocumentsOnce() async throws {
        var planner = PiecePlanner(
            subscriptions: try Self.subscriptions("SELECT * FROM boats", "SELECT * FROM cars WHERE color = 'red'"), excluded: Self.peer)
        let id = TransactionID(origin: Self.origin, sequence: 1)
        let rows = Self.rows(
            id,
            [("boats", "\"b\"", "size", "3"), ("cars", "\"r\"", "color", "\"red\""), ("cars", "\"r\"", "doors", "4"),
             ("cars", "\"g\"", "color", "\"green\""), ("trucks", "\"t\"", "x", "1")])
        let needed = Self.judge(&planner, rows[...], ["\"r\"": #"{"_id":"r","color":"red"}"#, "\"g\"": #"{"_id":"g","color":"green"}"#])
        #expect(needed == [DocumentRef(collection: "cars", id: "\"r\""), DocumentRef(collection: "cars", id: "\"g\"")])
        #expect(planner.bodiesNeeded(rows[...]).isEmpty, "judged once for the page")
        let planned = try #require(
            await planner.plan(id, rows: rows[...], isLast: true, continuing: false, record: { nil }, superseding: { $0 }))
        #expect(planned.piece.deltas.map(\.documentID) == ["\"b\"", "\"r\"", "\"r\""])
        #expect(planned.piece.documentDeltaCounts == [DocumentRef(collection: "boats", id: "\"b\""): 1, DocumentRef(collection: "cars", id: "\"r\""): 2])
        // No record: the manifest is the rows' own, and the last piece says what it withholds.
        #expect(planned.piece.deltaCount == 5 && planned.piece.documentCount == 4)
        #expect(planned.piece.collections.map(\.collection) == ["boats", "cars", "trucks"])
        #expect(planned.piece.verdicts.allSatisfy { $0.coverage == .notCovered(planner.subscriptions.filter) })
        #expect(planned.piece.verdicts.count == 3)
    }

    /// A document this node holds no body of, or one it cannot read, is sent: a
    /// subscriber may get more than it asked for, never less.
    @Test func aDocumentWithNoReadableBodyIsSent() async throws {
        var planner = PiecePlanner(subscriptions: try Self.subscriptions("SELECT * FROM cars WHERE color = 'red'"), excluded: nil)
        let id = TransactionID(origin: Self.origin, sequence: 2)
        let rows = Self.rows(id, [("cars", "\"evicted\"", "color", "\"blue\""), ("cars", "\"broken\"", "color", "\"blue\"")])
        _ = Self.judge(&planner, rows[...], ["\"broken\"": "{not json"])
        let carried = await planner.carries(id, rows: rows[...], bodies: { _ in Issue.record("judged already"); return [:] })
        #expect(carried)
        let planned = try #require(await planner.plan(id, rows: rows[...], isLast: false, continuing: false, record: { nil }, superseding: { $0 }))
        #expect(planned.piece.deltas.count == 2)
        #expect(planned.piece.verdicts.isEmpty, "verdicts go on the last piece only")
    }

    @Test func thePeersOwnTransactionsAreNeitherReadNorPlanned() async throws {
        var planner = PiecePlanner(subscriptions: try Self.subscriptions("SELECT * FROM cars WHERE color = 'red'"), excluded: Self.peer)
        let id = TransactionID(origin: Self.peer, sequence: 3)
        let rows = Self.rows(id, [("cars", "\"r\"", "color", "\"red\"")])
        #expect(Self.judge(&planner, rows[...], [:]).isEmpty)
        let carried = await planner.carries(id, rows: rows[...], bodies: { _ in Issue.record("read for the peer's own"); return [:] })
        #expect(!carried)
        var asked = false
        #expect(await planner.plan(id, rows: rows[...], isLast: true, continuing: true, record: { asked = true; return nil }, superseding: { $0 }) == nil)
        #expect(!asked)
    }

    /// Deciding whether to offer a lazy origin's transaction stops at the first document
    /// the peer wants: the bodies after its chunk are never read, and those before it
    /// are read a chunk at a time.
    @Test func carriesReadsBodiesOnlyUpToTheFirstWantedDocument() async throws {
        let subscriptions = try Self.subscriptions("SELECT * FROM cars WHERE color = 'red'")
        let id = TransactionID(origin: Self.origin, sequence: 8)
        let rows = Self.rows(id, (0..<1_000).map { ("cars", "\"c\($0)\"", "color", "\"red\"") })
        func body(_ document: DocumentRef, wantedFrom first: Int) -> String {
            let n = Int(document.id.dropFirst(2).dropLast())!
            return n < first ? #"{"_id":"x","color":"blue"}"# : #"{"_id":"x","color":"red"}"#
        }
        // One at a time: the first two bodies, the second wanted.
        var planner = PiecePlanner(subscriptions: subscriptions, excluded: Self.peer)
        var read: [[String]] = []
        var carried = await planner.carries(id, rows: rows[...], chunk: 1) { documents in
            read.append(documents.map(\.id))
            return Dictionary(uniqueKeysWithValues: documents.map { ($0, body($0, wantedFrom: 1)) })
        }
        #expect(carried)
        #expect(read == [["\"c0\""], ["\"c1\""]])
        // Chunks of 64, the first wanted document the 100th: two reads, not a hundred.
        planner = PiecePlanner(subscriptions: subscriptions, excluded: Self.peer)
        read = []
        carried = await planner.carries(id, rows: rows[...], chunk: 64) { documents in
            read.append(documents.map(\.id))
            return Dictionary(uniqueKeysWithValues: documents.map { ($0, body($0, wantedFrom: 99)) })
        }
        #expect(carried)
        #expect(read.map(\.count) == [64, 64])
        #expect(read.first?.first == "\"c0\"" && read.last?.first == "\"c64\"")
        // None wanted: every body read once, 16 reads for 1,000 documents.
        planner = PiecePlanner(subscriptions: subscriptions, excluded: Self.peer)
        read = []
        carried = await planner.carries(id, rows: rows[...]) { documents in
            read.append(documents.map(\.id))
            return Dictionary(uniqueKeysWithValues: documents.map { ($0, body($0, wantedFrom: 1_000)) })
        }
        #expect(!carried)
        #expect(read.count == 16 && Set(read.joined()).count == 1_000)
        // A thousand documents, each listed once however their rows interleave.
        var fresh = PiecePlanner(subscriptions: planner.subscriptions, excluded: nil)
        let interleaved = Self.rows(
            id, (0..<1_000).flatMap { [("cars", "\"c\($0)\"", "color", "\"red\""), ("cars", "\"c\($0 / 2)\"", "doors", "4")] })
        #expect(fresh.bodiesNeeded(interleaved[...]).count == 1_000)
        fresh.judge(DocumentRef(collection: "cars", id: "\"c0\""), body: nil)
        #expect(fresh.bodiesNeeded(interleaved[...]).count == 999)
    }

    /// Nothing wanted: no piece, and no record read, unless it is the last piece of a
    /// transaction earlier pieces began, which then goes out empty with the manifest.
    @Test func aPieceWithNothingForThePeerGoesOutOnlyToEndWhatWasBegun() async throws {
        var planner = PiecePlanner(subscriptions: try Self.subscriptions("SELECT * FROM cars WHERE color = 'red'"), excluded: Self.peer)
        let id = TransactionID(origin: Self.origin, sequence: 4)
        let rows = Self.rows(id, [("cars", "\"g\"", "color", "\"green\""), ("boats", "\"b\"", "size", "3")], sequence: 9)
        _ = Self.judge(&planner, rows[...], ["\"g\"": #"{"_id":"g","color":"green"}"#])
        let carried = await planner.carries(id, rows: rows[...], bodies: { _ in [:] })
        #expect(!carried)
        var reads = 0
        let record = { () -> StoredTransaction? in
            reads += 1
            return Self.record(id, rest: [Verdict(collection: "cars", coverage: .unknown)])
        }
        #expect(await planner.plan(id, rows: rows[...], isLast: true, continuing: false, record: record, superseding: { $0 }) == nil)
        #expect(reads == 0)
        let ending = try #require(await planner.plan(id, rows: rows[...], isLast: true, continuing: true, record: record, superseding: { $0 }))
        #expect(reads == 1)
        #expect(ending.piece.deltas.isEmpty && ending.piece.isLast)
        #expect(ending.piece.deltaCount == 3 && ending.piece.collections.map(\.collection) == ["boats", "cars"], "the record's manifest")
        #expect(
            ending.piece.verdicts == [
                Verdict(collection: "boats", coverage: .notCovered(planner.subscriptions.filter)),
                Verdict(collection: "cars", coverage: .notCovered(planner.subscriptions.filter)),
                Verdict(collection: "cars", coverage: .unknown),
            ])
    }

    /// A delta on a field the WHERE reads brings the document's other current fields,
    /// but not those the piece carries, those of the transaction itself, or the peer's.
    @Test func contextLeavesOutWhatThePieceCarriesAndWhatThePeerWrote() async throws {
        var planner = PiecePlanner(subscriptions: try Self.subscriptions("SELECT * FROM cars WHERE color = 'red'"), excluded: Self.peer)
        let id = TransactionID(origin: Self.origin, sequence: 5)
        let rows = Self.rows(id, [("cars", "\"r\"", "color", "\"red\"")])
        _ = Self.judge(&planner, rows[...], ["\"r\"": #"{"_id":"r","color":"red","doors":4}"#])
        var planned = try #require(await planner.plan(id, rows: rows[...], isLast: true, continuing: false, record: { nil }, superseding: { $0 }))
        let document = DocumentRef(collection: "cars", id: "\"r\"")
        #expect(planned.contextDocuments == [document])
        func state(_ json: String, _ timestamp: UInt64, _ transaction: TransactionID) -> RegisterState {
            RegisterState(
                json: json, version: RegisterVersion(timestamp: HybridTimestamp(rawValue: timestamp), site: transaction.origin),
                transaction: transaction)
        }
        let older = TransactionID(origin: Self.origin, sequence: 1)
        planner.addContext(
            to: &planned, document: document,
            fields: [
                FieldRecord(name: "color", state: state("\"red\"", 1_000, id)),  // what the piece carries
                FieldRecord(name: "doors", state: state("4", 500, older)),
                FieldRecord(name: "seats", state: state("2", 600, id)),  // the transaction's own, sent in another piece
                FieldRecord(name: "wheels", state: state("4", 700, TransactionID(origin: Self.peer, sequence: 1))),  // the peer's
            ])
        #expect(planned.piece.context.map(\.field) == ["doors"])
        #expect(planned.piece.context.first?.transaction == older)
    }

    /// A transaction a SUPERSEDED names that the log no longer holds is replaced by
    /// what compaction recorded superseded it, transitively; too many say `unknown`.
    @Test func supersessionIsFollowedToWhatTheLogHolds() async throws {
        let a = TransactionID(origin: Self.origin, sequence: 1)
        let b = TransactionID(origin: Self.origin, sequence: 2)
        let c = TransactionID(origin: Self.origin, sequence: 3)
        let recorded: [TransactionID: [Verdict]] = [
            a: [Verdict(collection: "cars", coverage: .superseded([b])), Verdict(collection: "boats", coverage: .superseded([a]))],
            b: [Verdict(collection: "cars", coverage: .superseded([c]))],
        ]
        let verdicts = [Verdict(collection: "cars", coverage: .superseded([a])), Verdict(collection: "cars", coverage: .unknown)]
        var rounds: [[TransactionID]] = []
        let latest = await PiecePlanner.latestSuperseding(
            verdicts, limit: 10, inLog: { ids in rounds.append(ids); return Set(ids.filter { $0 == c }) },
            recorded: { ids in recorded.filter { ids.contains($0.key) } })
        #expect(rounds == [[a], [b], [c]], "one question a round")
        #expect(latest == [Verdict(collection: "cars", coverage: .superseded([c])), Verdict(collection: "cars", coverage: .unknown)])
        let many = (10..<20).map { TransactionID(origin: Self.origin, sequence: UInt64($0)) }
        // Counted while the chase runs outside the log: `a`, gone, was superseded by ten gone too.
        let capped = await PiecePlanner.latestSuperseding(
            [Verdict(collection: "cars", coverage: .superseded([a]))], limit: 5, inLog: { _ in [] },
            recorded: { ids in ids.contains(a) ? [a: [Verdict(collection: "cars", coverage: .superseded(many))]] : [:] })
        #expect(capped == [Verdict(collection: "cars", coverage: .unknown)])
        var asked = 0
        let untouched = await PiecePlanner.latestSuperseding(
            [Verdict(collection: "cars", coverage: .unknown)], limit: 5, inLog: { ids in asked += 1; return Set(ids) },
            recorded: { _ in [:] })
        #expect(untouched == [Verdict(collection: "cars", coverage: .unknown)] && asked == 0)
    }

    /// Asked for a transaction's collections of which this node holds no row: one last
    /// piece with the record's manifest, vouching only for what it recorded.
    @Test func aTransactionHeldWithNoRowsIsAnsweredFromItsRecord() async throws {
        let planner = PiecePlanner(subscriptions: try Self.subscriptions("SELECT * FROM cars"), excluded: nil, context: false)
        let id = TransactionID(origin: Self.origin, sequence: 6)
        let later = TransactionID(origin: Self.origin, sequence: 7)
        let record = Self.record(id, rest: [Verdict(collection: "cars", coverage: .superseded([later]))])
        let planned = try #require(
            await planner.plan(id, rows: ArraySlice<LogRow>(), isLast: true, continuing: true, record: { record }, superseding: { $0 }))
        #expect(planned.piece.deltas.isEmpty && planned.piece.deltaCount == 3)
        #expect(
            planned.piece.verdicts == [
                Verdict(collection: "boats", coverage: .unknown),
                Verdict(collection: "cars", coverage: .notCovered(planner.subscriptions.filter)),
                Verdict(collection: "cars", coverage: .superseded([later])),
            ])
    }
}

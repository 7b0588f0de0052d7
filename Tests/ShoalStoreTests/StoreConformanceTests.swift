import Foundation
import ShoalCRDT
import ShoalStorage
import ShoalSync
import ShoalStore
import ShoalPostgres
import ShoalTesting
import Logging
import Testing

/// What every store engine must do for sync, through `SyncStore` alone: each test runs
/// once per engine (`Engine`), and a new engine joins by adding a case. The rules of
/// what a peer gets and of what a received transaction does are ShoalSync's, tested
/// without a store (`PiecePlannerTests`, `CoverageAssemblerTests`); this suite checks
/// the rows under them: what a write leaves, what the reads give back, and the
/// isolation the contract states.
@Suite struct StoreConformanceTests {
    /// The engines under test: PostgreSQL (`PostgresStore`, a hub's) when a server was
    /// started (`SHOAL_POSTGRES_URL`; `scripts/test.sh` and `.ci/run` start one).
    enum Engine: String, CaseIterable, CustomStringConvertible {
        case sqlite
        case postgres

        static var allCases: [Engine] {
            if TemporaryPostgresDatabase.serverURL != nil { return [.sqlite, .postgres] }
            print("StoreConformanceTests: SQLite only; \(TemporaryPostgresDatabase.skipReason)")
            return [.sqlite]
        }

        var description: String { rawValue }

        /// Opens an empty store of this engine, runs `body`, and closes and removes it.
        /// `wallClock`: the milliseconds its clock reads (tests move it by hand).
        func withStore(
            wallClock: @escaping @Sendable () -> UInt64 = HybridLogicalClock.systemMilliseconds,
            logger: Logger? = nil, _ body: @Sendable (any NodeStore) async throws -> Void
        ) async throws {
            switch self {
            case .sqlite:
                let dir = TemporaryDirectory()
                defer { dir.remove() }
                let store = try DocumentStore(directory: dir.path, logger: logger ?? Logger(label: "shoal.store"), wallClock: wallClock)
                defer { store.close() }
                try await body(store)
            case .postgres:
                try await TemporaryPostgresDatabase.withDatabase { hubs in
                    let store = try await PostgresStore.open(
                        hubs[0], clock: HybridLogicalClock(wallClock: wallClock), logger: logger ?? Logger(label: "shoal.test.postgres"))
                    defer { store.close() }
                    try await body(store)
                }
            }
        }

        /// What `store` keeps of `document`: registers, a body row, change-log rows.
        static func retained(_ store: any NodeStore, _ document: DocumentRef) async throws -> (registers: Int, body: Bool, logRows: Int) {
            switch store {
            case let sqlite as DocumentStore: try await sqlite.retained(document)
            case let postgres as PostgresStore: try await postgres.retained(document)
            default: throw ShoalError(.database, "no check of what \(type(of: store)) keeps")
            }
        }
    }

    static let origin = SiteID(0xA11CE)
    static let peer = SiteID(0xB0B)

    /// A received transaction: `writes` are (collection, document, field, value JSON),
    /// in delta order, with its record and per-document counts.
    struct Received {
        var record: TransactionRecord
        var deltas: [Delta]
        var counts: [DocumentRef: UInt32]

        init(
            _ sequence: UInt64, _ writes: [(String, String, String, String)], at time: UInt64 = 1_000,
            state: TransactionRecord.State = .applied
        ) {
            let id = TransactionID(origin: StoreConformanceTests.origin, sequence: sequence)
            deltas = writes.enumerated().map { index, write in
                Delta(
                    collection: write.0, documentID: Value.string(write.1).canonicalJSON, field: write.2, valueJSON: write.3,
                    timestamp: HybridTimestamp(rawValue: (time + sequence) << 16 + UInt64(index)), transaction: id,
                    index: UInt32(index), count: UInt32(writes.count))
            }
            counts = [:]
            for delta in deltas { counts[DocumentRef(collection: delta.collection, id: delta.documentID), default: 0] += 1 }
            var manifest: [String: (documents: Set<String>, deltas: UInt32)] = [:]
            for delta in deltas {
                manifest[delta.collection, default: ([], 0)].documents.insert(delta.documentID)
                manifest[delta.collection, default: ([], 0)].deltas += 1
            }
            record = TransactionRecord(
                id: id, deltaCount: UInt32(deltas.count), documentCount: UInt32(counts.count),
                collections: manifest.keys.sorted().map {
                    CollectionCount(collection: $0, documents: UInt32(manifest[$0]!.documents.count), deltas: manifest[$0]!.deltas)
                },
                state: state, firstSeen: 0)
        }

        var id: TransactionID { record.id }
    }

    /// Applies `transactions` whole, in one write.
    static func apply(_ transactions: [Received], to store: any SyncStore) async throws {
        _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
            for t in transactions {
                let refusal = try await writer.apply(
                    t.record, deltas: t.deltas, documentDeltaCounts: t.counts, context: [], buffered: false, state: .applied,
                    rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
                #expect(refusal == nil)
            }
        }
    }

    static func subscriptions(_ queries: String...) throws -> SubscriptionSet {
        var set = SubscriptionSet()
        for query in queries { try set.add(query: query) }
        return set
    }

    static func ref(_ collection: String, _ id: String) -> DocumentRef {
        DocumentRef(collection: collection, id: Value.string(id).canonicalJSON)
    }

    // MARK: What a write leaves, read back

    @Test(arguments: Engine.allCases)
    func anAppliedTransactionIsReadBackRowByRow(engine: Engine) async throws {
        try await engine.withStore { store in
            let t = Received(1, [("cars", "a", "color", "\"red\""), ("cars", "a", "doors", "4"), ("boats", "b", "size", "3")])
            try await Self.apply([t], to: store)

            let logged = try await store.logPage(of: t.id)
            let rows = logged.rows
            #expect(rows.map(\.delta).sorted { $0.index < $1.index } == t.deltas)
            #expect(logged.records[t.id]?.state == .applied && logged.next == nil && logged.previous == nil)
            #expect(rows.allSatisfy { $0.documentDeltas == t.counts[DocumentRef(collection: $0.delta.collection, id: $0.delta.documentID)] })
            let page = try await store.logPage(after: 0, limit: 100, stretch: 400, byteLimit: 1 << 20, records: { _ in true })
            #expect(page.rows == rows && page.next == nil && page.previous == nil)
            #expect(page.records[t.id] == logged.records[t.id], "the page's records come with it")
            let absent = TransactionID(origin: Self.origin, sequence: 7)
            #expect(try await store.logHolds([t.id, absent]) == [t.id])
            let unasked = try await store.logPage(after: 0, limit: 100, stretch: 400, byteLimit: 1 << 20, records: { _ in false })
            #expect(unasked.rows == rows && unasked.records.isEmpty, "records only of the transactions asked for")

            let records = try await store.storedTransactions([t.id, TransactionID(origin: Self.origin, sequence: 9)])
            #expect(records.count == 1, "a transaction with no record is left out")
            let record = try #require(records[t.id])
            #expect(record.state == .applied && record.deltaCount == 3 && record.documentCount == 2)
            #expect(record.collections == t.record.collections)

            let bodies = try await store.bodies(of: [Self.ref("cars", "a"), Self.ref("boats", "b"), Self.ref("cars", "none")])
            #expect(bodies.count == 2, "a document with no body is left out")
            #expect(try JSON.parse(try #require(bodies[Self.ref("cars", "a")])) == ["_id": "a", "color": "red", "doors": 4])

            let fields = try await store.currentFields(of: [Self.ref("cars", "a")])
            let names = try #require(fields[Self.ref("cars", "a")]).map(\.name)
            #expect(names.contains("color") && names.contains("doors"))
            #expect(names == names.sorted(), "in name order")
            let color = try #require(fields[Self.ref("cars", "a")]?.first { $0.name == "color" })
            #expect(color.state.json == "\"red\"" && color.state.transaction == t.id)

            // A page after the transaction's last row names it as the one it follows.
            let second = Received(2, [("cars", "a", "color", "\"blue\"")])
            try await Self.apply([second], to: store)
            let last = try #require(rows.last)
            let following = try await store.logPage(after: last.sequence, limit: 100, stretch: 400, byteLimit: 1 << 20, records: { _ in true })
            #expect(following.rows.map(\.delta) == second.deltas)
            #expect(following.previous == t.id, "the transaction of the row the page follows")
            #expect(following.records.keys.sorted() == [second.id])
        }
    }

    /// Field names are kept byte for byte, U+0000 included (a JSON key may hold it, and
    /// PostgreSQL's TEXT cannot, nor a C string): each register read back as written, in
    /// the buffer too. (Names that are canonically equivalent, "é" composed and
    /// decomposed, are one register to ShoalCRDT's `DocumentRegisters`, whichever engine.)
    @Test(arguments: Engine.allCases)
    func fieldNamesAreKeptByteForByte(engine: Engine) async throws {
        try await engine.withStore { store in
            let names = ["a\u{0}b", "a", "\u{0}"]
            let t = Received(1, names.enumerated().map { ("cars", "a", $0.element, "\($0.offset)") })
            try await Self.apply([t], to: store)
            let fields = try #require(try await store.currentFields(of: [Self.ref("cars", "a")])[Self.ref("cars", "a")])
            let held = fields.filter { field in names.contains { Array($0.utf8) == Array(field.name.utf8) } }
            #expect(held.count == 3, "\(fields.map { Array($0.name.utf8) })")
            for (i, name) in names.enumerated() {
                let field = fields.first { Array($0.name.utf8) == Array(name.utf8) }
                #expect(field?.state.json == "\(i)", "\(Array(name.utf8))")
            }
            let waiting = Received(2, names.map { ("cars", "b", $0, "7") }, state: .waiting)
            let (buffered, _) = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.save(waiting.record)
                try await writer.buffer(waiting.deltas, documentDeltaCounts: waiting.counts, context: [], of: waiting.id)
                return try await writer.buffered(of: waiting.id, deltaCount: waiting.record.deltaCount)
            }
            #expect(buffered.deltas.map { Array($0.field.utf8) } == names.map { Array($0.utf8) })
        }
    }

    /// Values and collections that are canonically equivalent but not the same bytes
    /// ("é" composed and decomposed), written by one transaction: each register and the
    /// body read back byte for byte as written (a store that took them for one value
    /// would write one for both).
    @Test(arguments: Engine.allCases)
    func canonicallyEquivalentValuesAreKeptApart(engine: Engine) async throws {
        try await engine.withStore { store in
            let composed = "\"caf\u{E9}\"", decomposed = "\"cafe\u{301}\""
            #expect(composed == decomposed && Array(composed.utf8) != Array(decomposed.utf8), "equal to Swift, not the same bytes")
            let (left, right) = ("caf\u{E9}", "cafe\u{301}")
            let t = Received(1, [("cars", "b", "x", composed), ("cars", "b", "y", decomposed)])
            let collections = Received(2, [(left, "c", "x", "1"), (right, "c", "x", "1")])
            try await Self.apply([t, collections], to: store)
            for collection in [left, right] {
                let held = try await store.currentFields(of: [Self.ref(collection, "c")])
                #expect(held.keys.map { Array($0.collection.utf8) } == [Array(collection.utf8)], "\(held.keys)")
            }
            let fields = try #require(try await store.currentFields(of: [Self.ref("cars", "b")])[Self.ref("cars", "b")])
            #expect(fields.map { Array($0.state.json.utf8) } == [Array(composed.utf8), Array(decomposed.utf8)])
            let body = try #require(try await store.bodies(of: [Self.ref("cars", "b")]).values.first)
            #expect(Array(body.utf8) == Array("{\"_id\":\"b\",\"x\":\(composed),\"y\":\(decomposed)}".utf8), "\(body)")
        }
    }

    /// A page holds whole rows: about `limit` deltas, finishing the transaction the limit
    /// falls in while within `stretch`; past the stretch or the byte budget it ends
    /// inside a transaction, at least one row long, and names what comes next.
    @Test(arguments: Engine.allCases)
    func aPageEndsAtATransactionWithinItsStretchAndBudget(engine: Engine) async throws {
        try await engine.withStore { store in
            let transactions = (1...3).map { n in
                Received(UInt64(n), (0..<4).map { ("cars", "c\(n)-\($0)", "v", "\"\(String(repeating: "x", count: 10))\"") })
            }
            try await Self.apply(transactions, to: store)

            // The limit (5) falls in the second transaction: finished, the third waits.
            let stretched = try await store.logPage(after: 0, limit: 5, stretch: 20, byteLimit: 1 << 20, records: { _ in true })
            #expect(Set(stretched.rows.map(\.delta.transaction)) == [transactions[0].id, transactions[1].id])
            #expect(stretched.rows.count == 8 && stretched.next == transactions[2].id)

            // No room to finish it: the page ends inside a large transaction, within its
            // stretch, and names that transaction as what comes next.
            let large = Received(4, (0..<300).map { ("boats", "b\($0)", "v", "\($0)") })
            try await Self.apply([large], to: store)
            let end = try #require(stretched.rows.last?.sequence)
            let thirdEnd = try #require(try await store.logPage(of: transactions[2].id).rows.last?.sequence)
            #expect(thirdEnd > end)
            let cut = try await store.logPage(after: thirdEnd, limit: 10, stretch: 200, byteLimit: 1 << 20, records: { _ in true })
            #expect(!cut.rows.isEmpty && cut.rows.count <= 200)
            #expect(cut.rows.allSatisfy { $0.delta.transaction == large.id })
            #expect(cut.next == large.id)

            // A byte budget smaller than one row still reads that row.
            let tiny = try await store.logPage(after: 0, limit: 100, stretch: 400, byteLimit: 1, records: { _ in true })
            #expect(!tiny.rows.isEmpty && tiny.rows.allSatisfy { $0.sequence == tiny.rows[0].sequence })
            #expect(tiny.next != nil)

            // Read on to the end: every delta once, in log order, then nothing and nothing next.
            var all: [LogRow] = []
            var after: UInt64 = 0
            while true {
                let page = try await store.logPage(after: after, limit: 7, stretch: 28, byteLimit: 1 << 20, records: { _ in true })
                guard let last = page.rows.last else {
                    #expect(page.next == nil)
                    break
                }
                #expect(last.sequence > after)
                all += page.rows
                after = last.sequence
            }
            #expect(all.count == 3 * 4 + 300)
            #expect(Set(all.map(\.delta)).count == all.count)
            #expect(zip(all, all.dropFirst()).allSatisfy { $0.sequence <= $1.sequence })
        }
    }

    // MARK: Atomicity and isolation

    /// A write whose body fails leaves nothing of it: no log row, no body, no record,
    /// no cursor, and the log's end where it was.
    @Test(arguments: Engine.allCases)
    func aWriteThatFailsLeavesNothing(engine: Engine) async throws {
        try await engine.withStore { store in
            let t = Received(1, [("cars", "a", "color", "\"red\""), ("cars", "b", "color", "\"blue\"")])
            let before = try await store.lastSequence()
            let cars = try Self.subscriptions("SELECT * FROM cars")
            let epoch = try await store.resumePoint(peer: Self.peer, subscriptions: cars).epoch
            await #expect(throws: ShoalError.self) {
                _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                    _ = try await writer.apply(
                        t.record, deltas: t.deltas, documentDeltaCounts: t.counts, context: [], buffered: false, state: nil, rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
                    try await writer.recordCursor(peer: Self.peer, subscriptionKey: cars.key, through: 7, epoch: epoch)
                    throw ShoalError(.database, "the disk is full (injected)")
                }
            }
            #expect(try await store.lastSequence() == before)
            #expect(try await store.logPage(of: t.id).rows.isEmpty)
            #expect(try await store.bodies(of: [Self.ref("cars", "a"), Self.ref("cars", "b")]).isEmpty)
            #expect(try await store.storedTransactions([t.id]).isEmpty)
            #expect(try await store.resumePoint(peer: Self.peer, subscriptions: cars).through == 0)
            // The same cursor, recorded by a write that commits, is there: the check above could fail.
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.recordCursor(peer: Self.peer, subscriptionKey: cars.key, through: 7, epoch: epoch)
            }
            #expect(try await store.resumePoint(peer: Self.peer, subscriptions: cars).through == 7)
        }
    }

    /// A write whose task is cancelled in the middle leaves nothing, and leaves the store
    /// able to write: no transaction stays open behind it.
    @Test(arguments: Engine.allCases)
    func aCancelledWriteLeavesNothingAndTheNextOneCommits(engine: Engine) async throws {
        try await engine.withStore { store in
            let t = Received(1, [("cars", "a", "color", "\"red\"")])
            let later = Received(2, [("cars", "b", "color", "\"blue\"")])
            let applied = Latch()
            let task = Task {
                try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                    _ = try await writer.apply(
                        t.record, deltas: t.deltas, documentDeltaCounts: t.counts, context: [], buffered: false, state: .applied,
                        rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
                    applied.open()
                    while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(5)) }
                    // Cancelled: the next access may refuse to run, or the body gives up.
                    _ = try await writer.state(of: t.id)
                    throw ShoalError(.cancelled, "cancelled (test)")
                }
            }
            try await applied.wait()
            task.cancel()
            let outcome = await task.result
            #expect(throws: ShoalError.self) { try outcome.get() }
            #expect(try await store.logPage(of: t.id).rows.isEmpty)
            #expect(try await store.bodies(of: [Self.ref("cars", "a")]).isEmpty)
            try await Self.apply([later], to: store)
            #expect(try await store.bodies(of: [Self.ref("cars", "b")]).count == 1)
        }
    }

    /// A writer kept past its write refuses every call, and a write begun inside a
    /// write's body is refused at once rather than waiting for the one it is inside.
    @Test(arguments: Engine.allCases)
    func aWriterOutlivesNothingAndAWriteInsideAWriteIsRefused(engine: Engine) async throws {
        try await engine.withStore { store in
            let t = Received(1, [("cars", "a", "color", "\"red\"")])
            let (kept, _) = try await store.writeInbound(short: false) { writer async throws(ShoalError) in writer }
            await #expect(throws: ShoalError.self) {
                _ = try await kept.apply(
                    t.record, deltas: t.deltas, documentDeltaCounts: t.counts, context: [], buffered: false, state: .applied,
                    rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
            }
            #expect(try await store.bodies(of: [Self.ref("cars", "a")]).isEmpty, "nothing written outside a write")

            let inner = try await withHangGuard {
                try await store.writeInbound(short: false) { _ async throws(ShoalError) -> ShoalError.Code? in
                    do {
                        _ = try await store.writeInbound(short: false) { _ async throws(ShoalError) in () }
                        return nil
                    } catch {
                        return (error as? ShoalError)?.code
                    }
                }.0
            }
            #expect(inner == .nestedTransaction)
            try await Self.apply([t], to: store)
            #expect(try await store.bodies(of: [Self.ref("cars", "a")]).count == 1, "the store still writes")
        }
    }

    /// Readers see a write all at once when it commits, never its middle: a read made
    /// while the write is open sees none of it.
    @Test(arguments: Engine.allCases)
    func aReadDuringAWriteSeesNoneOfIt(engine: Engine) async throws {
        try await engine.withStore { store in
            let t = Received(1, [("cars", "a", "color", "\"red\""), ("cars", "b", "color", "\"blue\"")])
            let applied = Latch()
            let readDone = Latch()
            // Timeline: the write applies, then waits; the read runs and finishes; the write commits.
            async let write: Void = {
                _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                    _ = try await writer.apply(
                        t.record, deltas: t.deltas, documentDeltaCounts: t.counts, context: [], buffered: false, state: nil, rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
                    applied.open()
                    #expect(readDone.waitBlocking(), "the read waited for the write")
                }
            }()
            try await applied.wait()
            let during = try await store.bodies(of: [Self.ref("cars", "a"), Self.ref("cars", "b")])
            let loggedDuring = try await !store.logHolds([t.id]).isEmpty
            readDone.open()
            try await write
            #expect(during.isEmpty && !loggedDuring)
            #expect(try await store.bodies(of: [Self.ref("cars", "a"), Self.ref("cars", "b")]).count == 2)
            #expect(try await store.logHolds([t.id]) == [t.id])
        }
    }

    // MARK: Records, the buffer, cursors

    /// A waiting transaction's pieces wait in the durable buffer under its record; it
    /// shows among the records the pipeline starts from, and once applied from the
    /// buffer it is whole and no longer waits.
    @Test(arguments: Engine.allCases)
    func aBufferedTransactionWaitsThenAppliesWhole(engine: Engine) async throws {
        try await engine.withStore { store in
            let t = Received(1, [("cars", "a", "color", "\"red\""), ("cars", "b", "color", "\"blue\"")], state: .waiting)
            let first = Array(t.deltas.prefix(1))
            let firstCounts = [Self.ref("cars", "a"): UInt32(1)]
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.save(t.record)
                try await writer.buffer(first, documentDeltaCounts: firstCounts, context: [], of: t.id)
            }
            let waiting = try await store.transactionRecords()
            #expect(waiting.map(\.id) == [t.id] && waiting.first?.state == .waiting)
            #expect(try await store.logPage(of: t.id).rows.isEmpty, "buffered, not logged")
            #expect(try await store.bodies(of: [Self.ref("cars", "a")]).isEmpty, "nothing of it shows")

            let rest = Array(t.deltas.dropFirst())
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                #expect(try await writer.state(of: t.id) == .waiting)
                guard var record = try await writer.loadRecord(t.id) else { throw ShoalError(.database, "no record of \(t.id)") }
                record.state = .applied
                _ = try await writer.apply(
                    record, deltas: rest, documentDeltaCounts: [Self.ref("cars", "b"): 1], context: [], buffered: true,
                    state: .applied, rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
            }
            #expect(try await store.transactionRecords().isEmpty)
            #expect(try await store.storedTransactions([t.id])[t.id]?.state == .applied)
            #expect(Set(try await store.logPage(of: t.id).rows.map(\.delta)) == Set(t.deltas))
            #expect(try await store.bodies(of: [Self.ref("cars", "a"), Self.ref("cars", "b")]).count == 2)
        }
    }

    /// A record saved as waiting, or an apply calling it partial, never moves back a
    /// transaction already applied (or refused): states only move forward. Hubs share the table, and one that still
    /// holds a transaction as waiting in memory saves it while another hub applied it.
    @Test(arguments: Engine.allCases)
    func aSavedRecordNeverMovesAnAppliedTransactionBack(engine: Engine) async throws {
        try await engine.withStore { store in
            let t = Received(1, [("cars", "a", "color", "\"red\"")])
            try await Self.apply([t], to: store)
            var record = t.record
            record.state = .waiting
            let stale = record
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.save(stale)
            }
            #expect(try await store.storedTransactions([t.id])[t.id]?.state == .applied)
            #expect(try await store.transactionRecords().isEmpty, "not listed as waiting")
            // Nor does an apply that calls it partial (a hub's waiting one that timed out).
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                _ = try await writer.apply(
                    stale, deltas: t.deltas, documentDeltaCounts: t.counts, context: [], buffered: false, state: .partial,
                    rest: [Verdict(collection: "cars", coverage: .unknown)], limits: store.systemParameters.documentLimits,
                    logger: Logger(label: "shoal.test"))
            }
            #expect(try await store.storedTransactions([t.id])[t.id]?.state == .applied)
            #expect(try await store.transactionRecords().isEmpty, "not listed as partial")
            // A waiting one still moves on: to partial, then applied.
            let u = Received(2, [("cars", "b", "color", "\"blue\"")], state: .waiting)
            var moved = u.record
            moved.state = .partial
            let partial = moved
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.save(u.record)
                try await writer.save(partial)
            }
            #expect(try await store.storedTransactions([u.id])[u.id]?.state == .partial)
            // And never back to waiting: a hub whose record lags saves its waiting one.
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.save(u.record)
            }
            #expect(try await store.storedTransactions([u.id])[u.id]?.state == .partial, "a waiting save moved a partial record back")
        }
    }

    /// What applied transactions left out is read with their states, as recorded, for
    /// those whose rest is not empty, and only when asked; a rest recorded again
    /// replaces it (a late last piece brought a collection whole) and leaves the state
    /// as it is. Waiting and unknown transactions have none, and a rest recorded for a
    /// transaction not applied is not kept.
    @Test(arguments: Engine.allCases)
    func whatAppliedTransactionsLeftOutIsReadBack(engine: Engine) async throws {
        try await engine.withStore { store in
            let whole = Received(1, [("cars", "a", "color", "\"red\"")])
            let short = Received(2, [("cars", "b", "color", "\"blue\"")])
            let waiting = Received(3, [("cars", "c", "color", "\"green\"")], state: .waiting)
            try await Self.apply([whole, short], to: store)
            let left = [Verdict(collection: "boats", coverage: .notCovered(SubscriptionFilter([.init(query: "SELECT * FROM cars", argumentsJSON: "")])))]
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.markApplied(short.id, rest: left)
                try await writer.save(waiting.record)
                try await writer.recordRest(waiting.id, rest: left)
            }
            let unknown = TransactionID(origin: SiteID(0x99), sequence: 1)
            let ids = [whole.id, short.id, waiting.id, unknown]
            let (read, _) = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.states(of: ids, rests: true)
            }
            #expect(read.states == [whole.id: .applied, short.id: .applied, waiting.id: .waiting])
            #expect(read.rests == [short.id: left])
            let (plain, _) = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.states(of: ids, rests: false)
            }
            #expect(plain == TransactionStates(states: read.states), "rests read only when asked")
            let (settled, _) = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.recordRest(short.id, rest: [])
                return try await writer.states(of: [short.id], rests: true)
            }
            #expect(settled == TransactionStates(states: [short.id: .applied]))
            let kept = try await store.storedTransactions([waiting.id])[waiting.id]
            #expect(kept?.state == .waiting)
            #expect(kept?.rest == [], "a rest recorded for a transaction not applied is not kept")
        }
    }

    /// What compaction records of a transaction it takes out of the log is kept apart
    /// from what its apply left out: read with it where the transaction is relayed or
    /// answered for, never as what the apply left out (an `UNKNOWN` there counts as
    /// leaving documents out, PROTOCOL.md 8.11), and kept when that is recorded again:
    /// by a settle, or by the apply that completes a partial transaction.
    @Test(arguments: Engine.allCases)
    func whatCompactionRecordsIsKeptApartFromWhatTheApplyLeftOut(engine: Engine) async throws {
        try await engine.withStore { store in
            let first = Received(1, [("cars", "a", "color", "\"red\"")], at: 1_000)
            let second = Received(2, [("cars", "a", "color", "\"blue\"")], at: 2_000)
            let partial = Received(3, [("cars", "b", "color", "\"red\"")], at: 1_000, state: .partial)
            let later = Received(4, [("cars", "b", "color", "\"blue\"")], at: 2_000)
            try await Self.apply([first, second], to: store)
            let left = [Verdict(collection: "boats", coverage: .unknown)]
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.recordRest(first.id, rest: left)
                let refusal = try await writer.apply(
                    partial.record, deltas: partial.deltas, documentDeltaCounts: partial.counts, context: [], buffered: false,
                    state: .partial, rest: left, limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
                #expect(refusal == nil)
            }
            try await Self.apply([later], to: store)
            let report = try await store.compactChangeLog(after: 0, through: try await store.lastSequence(), progress: { _, _ in })
            #expect(report.transactionsRemoved == 2)
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.markApplied(partial.id, rest: [])
            }
            #expect(
                try await store.storedTransactions([partial.id])[partial.id]?.rest
                    == [Verdict(collection: "cars", coverage: .superseded([later.id]))],
                "completing a partial transaction kept what compaction recorded")
            let superseded = Verdict(collection: "cars", coverage: .superseded([second.id]))
            #expect(try await store.storedTransactions([first.id])[first.id]?.rest == left + [superseded])
            func leftOut() async throws -> [TransactionID: [Verdict]] {
                try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                    try await writer.states(of: [first.id], rests: true)
                }.0.rests
            }
            #expect(try await leftOut() == [first.id: left], "compaction's verdicts are not what the apply left out")
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.recordRest(first.id, rest: [])
            }
            #expect(try await leftOut() == [:])
            #expect(try await store.storedTransactions([first.id])[first.id]?.rest == [superseded], "recording the rest kept compaction's")
        }
    }

    /// Registers read ahead serve an apply only until the write writes their document:
    /// a second transaction on the same document in the same write merges with what the
    /// first wrote, so the older value loses though it is applied last.
    @Test(arguments: Engine.allCases)
    func registersReadAheadAreReadAgainOnceTheirDocumentIsWritten(engine: Engine) async throws {
        try await engine.withStore { store in
            try await Self.apply([Received(1, [("cars", "a", "color", "\"red\"")], at: 1_000)], to: store)
            let newer = Received(3, [("cars", "a", "color", "\"blue\"")], at: 3_000)
            let older = Received(2, [("cars", "a", "color", "\"green\"")], at: 2_000)
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.readAhead(registersOf: [Self.ref("cars", "a")])
                for t in [newer, older] {
                    let refusal = try await writer.apply(
                        t.record, deltas: t.deltas, documentDeltaCounts: t.counts, context: [], buffered: false, isNew: true,
                        state: .applied, rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
                    #expect(refusal == nil)
                }
            }
            let body = try await store.bodies(of: [Self.ref("cars", "a")]).values.first
            #expect(body?.contains("blue") == true, "the newer value wins: \(body ?? "no body")")
        }
    }

    /// The reads an apply is decided on give back what the writes stored: the buffer's
    /// deltas, counts and context; which deltas the log holds; the registers. And the
    /// rows an apply decided are written as they are, the buffer dropped when they say.
    @Test(arguments: Engine.allCases)
    func theRowsAnApplyReadsAreTheRowsWritten(engine: Engine) async throws {
        try await engine.withStore { store in
            let t = Received(1, [("cars", "a", "color", "\"red\""), ("cars", "b", "color", "\"blue\"")], state: .waiting)
            let a = Self.ref("cars", "a"), b = Self.ref("cars", "b")
            let context = ContextField(
                document: b, field: "seats", valueJSON: "5", timestamp: HybridTimestamp(rawValue: 7 << 16),
                transaction: TransactionID(origin: Self.peer, sequence: 4))
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.save(t.record)
                try await writer.buffer(Array(t.deltas.prefix(1)), documentDeltaCounts: [a: 1], context: [context], of: t.id)
            }
            let (reads, _) = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                (
                    try await writer.buffered(of: t.id, deltaCount: t.record.deltaCount), try await writer.loggedIndexes(of: t.id),
                    try await writer.registers(of: [a, b])
                )
            }
            #expect(reads.0.deltas == Array(t.deltas.prefix(1)))
            #expect(reads.0.documentDeltaCounts == [a: 1])
            #expect(reads.0.context == [context])
            #expect(reads.1.isEmpty, "nothing logged of a buffered transaction")
            #expect(reads.2.map(\.registers.isEmpty) == [true, true])

            // Rows as an applier would decide them: document a logs delta 0 and its color
            // wins; the record says applied; the buffer goes.
            let red = RegisterState(delta: t.deltas[0])
            var record = t.record
            record.state = .applied
            let rows = AppliedRows(
                record: record, deltas: t.deltas,
                documents: [
                    AppliedRows.Document(
                        document: a, deltaCount: 1, logged: [0], won: ["color": (red, 0)], body: .live(#"{"_id":"a","color":"red"}"#))
                ],
                dropBuffer: true, state: .applied, rest: [])
            let (after, outcome) = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.write(rows)
                return (
                    try await writer.buffered(of: t.id, deltaCount: t.record.deltaCount), try await writer.loggedIndexes(of: t.id),
                    try await writer.registers(of: [a])
                )
            }
            #expect(after.0.deltas.isEmpty && after.0.context.isEmpty, "the buffer dropped")
            #expect(after.1 == [a: [0]])
            #expect(after.2.first?.registers == ["color": red])
            #expect(outcome.logged == 1 && outcome.won == 1 && outcome.changedDocuments == 1)
            #expect(try await store.bodies(of: [a, b]) == [a: #"{"_id":"a","color":"red"}"#])
            #expect(try await store.storedTransactions([t.id])[t.id]?.state == .applied)
            #expect(try await store.transactionRecords().isEmpty)
            #expect(try await store.logPage(of: t.id).rows.map(\.documentDeltas) == [1], "the entry's delta count as given")

            // A late piece (no state): the record stays as it is, and a buffer not dropped stays.
            let other = Received(2, [("cars", "c", "color", "\"green\"")], state: .waiting)
            let c = Self.ref("cars", "c")
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.save(other.record)
                try await writer.buffer(other.deltas, documentDeltaCounts: [c: 1], context: [], of: other.id)
                try await writer.write(
                    AppliedRows(
                        record: other.record, deltas: other.deltas,
                        documents: [AppliedRows.Document(document: c, deltaCount: 3, logged: [0])], dropBuffer: false, state: nil,
                        rest: nil))
            }
            #expect(try await store.storedTransactions([other.id])[other.id]?.state == .waiting)
            #expect(try await store.logPage(of: other.id).rows.map(\.documentDeltas) == [3])
            #expect(try await store.bodies(of: [c]).isEmpty, "no register won, no body")
            let (kept, _) = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.buffered(of: other.id, deltaCount: 1)
            }
            #expect(kept.deltas == other.deltas)
        }
    }

    /// A transaction of more deltas than an apply plans on the calling thread
    /// (`InboundWriting.planHere`, planned on a Dispatch thread) writes every document
    /// and logs every delta, as a small one does.
    @Test(arguments: Engine.allCases)
    func aLargeTransactionAppliesWhole(engine: Engine) async throws {
        try await engine.withStore { store in
            let writes = (0..<1_500).map { i in ("cars", "c\(i % 300)", "f\(i / 300)", "\(i)") }
            let t = Received(1, writes)
            #expect(t.deltas.count > 1_024)
            try await Self.apply([t], to: store)
            let documents = (0..<300).map { Self.ref("cars", "c\($0)") }
            let bodies = try await store.bodies(of: documents)
            #expect(bodies.count == 300)
            #expect(bodies[Self.ref("cars", "c7")] == #"{"_id":"c7","f0":7,"f1":307,"f2":607,"f3":907,"f4":1207}"#)
            #expect(try await store.logPage(of: t.id).rows.count == 1_500)
            #expect(try await store.currentFields(of: [Self.ref("cars", "c299")])[Self.ref("cars", "c299")]?.count == 5)
        }
    }

    /// A refused transaction is recorded as refused, writes nothing and does not wait;
    /// the refused ones of an origin read back newest first, with their reasons, to be
    /// told to that origin again (`refusedTransactions`).
    @Test(arguments: Engine.allCases)
    func aRefusedTransactionIsRecordedAndWritesNothing(engine: Engine) async throws {
        try await engine.withStore { store in
            let t = Received(1, [("cars", "a", "color", "\"red\"")], state: .waiting)
            let later = Received(2, [("cars", "b", "color", "\"blue\"")])
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.save(t.record)
                try await writer.buffer(t.deltas, documentDeltaCounts: t.counts, context: [], of: t.id)
                try await writer.refuse(t.record, reason: "document \"a\" in cars: too large (test)")
                try await writer.refuse(later.record, reason: "document \"b\" in cars: too large (test)")
            }
            let (state, _) = try await store.writeInbound(short: false) { writer async throws(ShoalError) in try await writer.state(of: t.id) }
            #expect(state == .refused)
            #expect(try await store.transactionRecords().isEmpty)
            #expect(try await store.logPage(of: t.id).rows.isEmpty)
            #expect(try await store.bodies(of: [Self.ref("cars", "a")]).isEmpty)
            let refused = try await store.refusedTransactions(of: t.id.origin, limit: 64)
            #expect(refused.map(\.id) == [later.id, t.id])
            #expect(refused.map(\.reason) == ["document \"b\" in cars: too large (test)", "document \"a\" in cars: too large (test)"])
            #expect(try await store.refusedTransactions(of: t.id.origin, limit: 1).map(\.id) == [later.id])
            #expect(try await store.refusedTransactions(of: SiteID(0xC0C0), limit: 64).isEmpty)
        }
    }

    /// A cursor only goes up, and a stream resumes from its set's cursor or from a wider
    /// set's; a cursor recorded under an epoch that is not the store's is not recorded.
    @Test(arguments: Engine.allCases)
    func cursorsOnlyGoUpAndANarrowerSetResumesWhereAWiderOneWas(engine: Engine) async throws {
        try await engine.withStore { store in
            let wide = try Self.subscriptions("SELECT * FROM cars", "SELECT * FROM boats")
            let narrow = try Self.subscriptions("SELECT * FROM cars")
            let epoch = try await store.resumePoint(peer: Self.peer, subscriptions: wide).epoch
            _ = try await store.resumePoint(peer: Self.peer, subscriptions: narrow)
            _ = try await store.writeInbound(short: false) { writer async throws(ShoalError) in
                try await writer.recordCursor(peer: Self.peer, subscriptionKey: wide.key, through: 40, epoch: epoch)
                try await writer.recordCursor(peer: Self.peer, subscriptionKey: wide.key, through: 30, epoch: epoch)
                try await writer.recordCursor(peer: Self.peer, subscriptionKey: narrow.key, through: 10, epoch: epoch)
                try await writer.recordCursor(peer: Self.peer, subscriptionKey: narrow.key, through: 90, epoch: epoch &+ 1)
            }
            #expect(try await store.resumePoint(peer: Self.peer, subscriptions: wide).through == 40, "never down")
            #expect(try await store.resumePoint(peer: Self.peer, subscriptions: narrow).through == 40, "the wider set's")
            #expect(try await store.resumePoint(peer: SiteID(0xC0C0), subscriptions: narrow).through == 0, "per peer")
        }
    }

    /// `shutdown()` called inside a read-write transaction of the store closes it
    /// without waiting for that transaction (which holds the writer: it would wait for
    /// ever), and the transaction keeps nothing.
    @Test(arguments: Engine.allCases)
    func shutdownInsideATransactionDoesNotWaitForItself(engine: Engine) async throws {
        try await engine.withStore { store in
            let error = try await withHangGuard {
                await #expect(throws: ShoalError.self) {
                    try await store.transaction(hint: "closes its own store") { tx in
                        _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'lost'})")
                        await store.shutdown()
                        return .commit
                    }
                }
            }
            #expect(error != nil, "the commit fails on the closed store")
            // SQLite refuses to read once closed; a hub's pool is its caller's, and reads on.
            let after = try? await store.execute("SELECT * FROM c")
            #expect(after == nil || after?.items.isEmpty == true, "nothing kept: \(after?.items ?? [])")
            let write = await #expect(throws: ShoalError.self) { try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'late'})") }
            #expect(write?.code == .closed)
        }
    }
}

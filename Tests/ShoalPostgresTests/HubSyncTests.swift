import Foundation
import Logging
import ShoalCRDT
import ShoalPostgres
import ShoalStorage
import ShoalStore
import ShoalSync
import ShoalTesting
import Testing

/// Hubs on one PostgreSQL database syncing with devices, in process: each hub a
/// `SyncEngine` over its own `PostgresStore`, each device a SQLite node, linked over
/// the in-memory transport (`InProcessMesh`).
@Suite(.enabled(if: TemporaryPostgresDatabase.serverURL != nil, Comment(rawValue: TemporaryPostgresDatabase.skipReason)))
struct HubSyncTests {
    static let logger = Logger(label: "shoal.test.hub")

    /// Runs `body` with `count` hubs on one new database, each following the others'
    /// commits (`followOtherHubs`, its slow timer set to `poll`), all subscribed to notes.
    static func withHubs(
        _ count: Int, poll: Duration = .seconds(3600), _ body: @Sendable ([PostgresStore], [SyncEngine]) async throws -> Void
    ) async throws {
        try await TemporaryPostgresDatabase.withDatabase(hubs: count) { databases in
            var stores: [PostgresStore] = []
            for database in databases { stores.append(try await PostgresStore.open(database, logger: logger)) }
            let engines = stores.enumerated().map { i, store in
                SyncEngine(store: store, configuration: SyncConfiguration(nodeName: "hub\(i + 1)", batchSize: 64))
            }
            for engine in engines { try engine.subscribe("SELECT * FROM notes") }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for store in stores { group.addTask { await store.followOtherHubs(every: poll) } }
                defer {
                    group.cancelAll()
                    for store in stores { store.close() }
                }
                try await body(stores, engines)
            }
        }
    }

    /// A commit through one hub wakes the others at once: with their slow timer at an
    /// hour, only the announcement (`NOTIFY`, delivered at the commit) can.
    @Test func aCommitThroughOneHubIsAnnouncedToTheOther() async throws {
        try await Self.withHubs(2) { stores, _ in
            #expect(stores[0].siteID == stores[1].siteID, "one node of the mesh")
            let heard = Locked<[UInt64]>([])
            let listening = stores[1].listenToChangeLog({ end in heard.withLock { $0.append(end.sequence) } }, closed: {})
            defer { listening.cancel() }
            // Give the follower time to listen: what was announced before is not delivered.
            try await Task.sleep(for: .milliseconds(300))
            let document = DocumentRef(collection: "notes", id: Value.string("n1").canonicalJSON)
            let id = TransactionID(origin: SiteID(0xD1), sequence: 1)
            let delta = Delta(
                collection: "notes", documentID: document.id, field: "text", valueJSON: "\"hello\"",
                timestamp: HybridTimestamp(rawValue: 1 << 20), transaction: id, index: 0, count: 1)
            let record = TransactionRecord(
                id: id, deltaCount: 1, documentCount: 1, collections: [CollectionCount(collection: "notes", documents: 1, deltas: 1)],
                state: .applied, firstSeen: 0)
            _ = try await stores[0].writeInbound(short: true) { writer async throws(ShoalError) in
                _ = try await writer.apply(
                    record, deltas: [delta], documentDeltaCounts: [document: 1], context: [], buffered: false, state: .applied,
                    rest: [], limits: stores[0].systemParameters.documentLimits, logger: Self.logger)
            }
            let last = try await stores[0].lastSequence()
            #expect(last > 0)
            #expect(await InProcessMesh.eventually(timeout: .seconds(10)) { heard.withLock { $0.contains(last) } })
            #expect(stores[1].lastCommittedSequence == last)
            #expect(try await stores[1].bodies(of: [document])[document] == #"{"_id":"n1","text":"hello"}"#)
        }
    }

    /// A statement that fails aborts PostgreSQL's transaction, whose COMMIT would then
    /// roll back without a word: a write whose body caught the error and went on fails,
    /// and keeps nothing, rather than report a commit that did not happen.
    @Test func aWriteWhoseStatementFailedDoesNotReportACommit() async throws {
        try await Self.withHubs(1) { stores, _ in
            let store = stores[0]
            let record = TransactionRecord(
                id: TransactionID(origin: SiteID(0xD1), sequence: 1), deltaCount: 1, documentCount: 1,
                collections: [CollectionCount(collection: "notes", documents: 1, deltas: 1)], state: .waiting, firstSeen: 0)
            let caught = Locked(false)
            await #expect(throws: ShoalError.self) {
                _ = try await store.writeInbound(short: true) { writer async throws(ShoalError) in
                    try await writer.save(record)
                    // TEXT cannot hold U+0000: the server refuses the statement.
                    do {
                        try await writer.recordCursor(peer: SiteID(0xB0B), subscriptionKey: "bad\u{0}key", through: 1, epoch: nil)
                    } catch {
                        caught.withLock { $0 = true }
                    }
                }
            }
            #expect(caught.withLock { $0 }, "the statement failed")
            #expect(try await store.storedTransactions([record.id]).isEmpty, "nothing of the write kept")
            // The store still writes.
            _ = try await store.writeInbound(short: true) { writer async throws(ShoalError) in try await writer.save(record) }
            #expect(try await store.storedTransactions([record.id]).count == 1)
        }
    }

    /// Devices on two hubs of one database sync through it both ways, and the same
    /// field written on both devices at once ends the same everywhere.
    @Test func devicesOnTwoHubsSyncThroughTheDatabase() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM notes"])
        defer {
            a.remove()
            b.remove()
        }
        try await Self.withHubs(2) { stores, hubs in
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                try await InProcessMesh.withLink(b.sync, hubs[1]) { () async throws in
                    _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-a', 'n': 1})")
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        try await b.store.execute("SELECT * FROM notes WHERE _id = 'from-a'").items.count == 1
                    }, "a's write reaches b through hub 1, the database and hub 2")
                    _ = try await b.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-b', 'n': 2})")
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        try await a.store.execute("SELECT * FROM notes WHERE _id = 'from-b'").items.count == 1
                    }, "and back")

                    // The same field on both devices at once: one winner everywhere.
                    for round in 0..<20 {
                        async let left = a.store.execute(
                            "UPDATE notes SET n = :n WHERE _id = 'from-a'", arguments: ["n": .int(Int64(1_000 + round))])
                        async let right = b.store.execute(
                            "UPDATE notes SET n = :n WHERE _id = 'from-a'", arguments: ["n": .int(Int64(2_000 + round))])
                        _ = try await (left, right)
                    }
                    let converged = try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        let onA = try await a.store.execute("SELECT * FROM notes WHERE _id = 'from-a'").items
                        let onB = try await b.store.execute("SELECT * FROM notes WHERE _id = 'from-a'").items
                        let onHubs = try await stores[0].bodies(of: [DocumentRef(collection: "notes", id: Value.string("from-a").canonicalJSON)])
                        guard onA == onB, let n = onA.first?["n"], case .int(let value) = n else { return false }
                        return value >= 1_019 && onHubs.values.first.map { $0.contains("\(value)") } == true
                    }
                    #expect(converged, "a, b and the hubs hold one winner")
                }
            }
        }
    }

    /// A device whose hub goes away resumes at the other hub from its cursor, which the
    /// hubs share: it gets what was written meanwhile, nothing twice, nothing lost.
    @Test func aDeviceMovesToTheOtherHubAndResumesFromItsCursor() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM notes"])
        defer {
            a.remove()
            b.remove()
        }
        try await Self.withHubs(2) { stores, hubs in
            try await InProcessMesh.withLink(b.sync, hubs[1]) { () async throws in
                try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                    for i in 0..<30 {
                        _ = try await b.store.execute("INSERT INTO notes DOCUMENTS ({'_id': :id, 'n': :n})", arguments: ["id": .string("b\(i)"), "n": .int(Int64(i))])
                    }
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        try await a.store.collectionCounts().first?.documents == 30
                    })
                }
                // Hub 1 is gone for a: b writes on.
                for i in 30..<60 {
                    _ = try await b.store.execute("INSERT INTO notes DOCUMENTS ({'_id': :id, 'n': :n})", arguments: ["id": .string("b\(i)"), "n": .int(Int64(i))])
                }
                let before = try await a.store.changeLogRowCount()
                try await InProcessMesh.withLink(a.sync, hubs[1]) { () async throws in
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        try await a.store.collectionCounts().first?.documents == 60
                    }, "what b wrote while a was away, from hub 2")
                }
                // Each of b's 30 later transactions logged once at a, none lost; and none
                // of the 60 came twice (hub 2 resumed at a's cursor, not from the start).
                #expect(try await a.store.changeLogRowCount() - before == 30)
                let traffic = try #require(a.sync.traffic()[stores[1].siteID])
                #expect(traffic.deltasDuplicate == 0 && traffic.deltasIn > 0, "\(traffic)")
            }
            #expect(stores[0].siteID == stores[1].siteID)
        }
    }
}

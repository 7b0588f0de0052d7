import Foundation
import Logging
import NIOCore
import PostgresNIO
import ShoalCRDT
import ShoalPostgres
import ShoalStorage
import ShoalStore
import ShoalSync
import ShoalTesting
import ShoalWire
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
        _ count: Int, poll: Duration = .seconds(3600), through: (@Sendable (Int) throws -> Int)? = nil,
        unreachableAfter: Duration = .seconds(10), inbound: InboundPipeline.Configuration = .init(),
        parameters: SystemParameters = SystemParameters(), _ body: @Sendable ([PostgresStore], [SyncEngine]) async throws -> Void
    ) async throws {
        try await TemporaryPostgresDatabase.withDatabase(hubs: count, through: through, unreachableAfter: unreachableAfter) { databases in
            var stores: [PostgresStore] = []
            for database in databases {
                stores.append(try await PostgresStore.open(database, systemParameters: parameters, logger: logger))
            }
            let engines = stores.enumerated().map { i, store in
                SyncEngine(store: store, configuration: SyncConfiguration(nodeName: "hub\(i + 1)", batchSize: 64, inbound: inbound))
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

    /// Runs `body` with one hub (its store and its engine) that reaches PostgreSQL
    /// through a `LoopbackProxy` of the test's.
    static func withHubThroughProxy(
        unreachableAfter: Duration, _ body: @Sendable (PostgresStore, SyncEngine, LoopbackProxy) async throws -> Void
    ) async throws {
        let server = Locked<LoopbackProxy?>(nil)
        let through: @Sendable (Int) throws -> Int = { port in
            let proxy = try LoopbackProxy(to: port)
            server.withLock { $0 = proxy }
            return proxy.port
        }
        try await withHubs(1, through: through, unreachableAfter: unreachableAfter) { stores, hubs in
            let proxy = try #require(server.withLock { $0 })
            defer { proxy.stop() }
            try await body(stores[0], hubs[0], proxy)
        }
    }

    /// A failover to another machine behind the database's address leaves a hub's
    /// listening connection open and silent: it sends nothing, so nothing tells it that
    /// the server it listened to is gone. Hub 1 asks it for an answer every few seconds,
    /// closes it when none comes, and listens on another, so it hears hub 2's commits
    /// again (with its slow timer at an hour, only an announcement can tell it). Before,
    /// it heard none until it was restarted. `silently`: its question is lost too, and
    /// the answer that never comes is what tells it.
    @Test(arguments: [false, true]) func aHubWhoseListeningConnectionDiedWithoutAWordListensAgain(silently: Bool) async throws {
        let made = Locked<LoopbackProxy?>(nil)
        // Hub 1 through a proxy, hub 2 straight to the server.
        let through: @Sendable (Int) throws -> Int = { port in
            try made.withLock { proxy in
                guard proxy == nil else { return port }
                let new = try LoopbackProxy(to: port)
                proxy = new
                return new.port
            }
        }
        try await Self.withHubs(2, through: through, unreachableAfter: .seconds(2)) { stores, _ in
            let proxy = try #require(made.withLock { $0 })
            defer { proxy.stop() }
            let heard = Locked<Set<UInt64>>([])
            let listening = stores[0].listenToChangeLog({ end in heard.withLock { _ = $0.insert(end.sequence) } }, closed: {})
            defer { listening.cancel() }
            @Sendable func commitIsHeard() async throws -> Bool {
                _ = try await stores[1].execute("INSERT INTO notes DOCUMENTS ({'_id': '\(UUID().uuidString)'})")
                let last = try await stores[1].lastSequence()
                return await InProcessMesh.eventually(timeout: .seconds(1)) { heard.withLock { $0.contains(last) } }
            }
            #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) { try await commitIsHeard() }, "heard before")
            proxy.failOver(silently: silently)
            #expect(try await InProcessMesh.eventually(timeout: .seconds(60)) { try await commitIsHeard() }, "heard again")
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

    /// One received transaction of device `0xD2` writing `text` to `document` in notes:
    /// its claim, and its apply through `writer`.
    struct Received: Sendable {
        let id: TransactionID
        let document: DocumentRef
        let delta: Delta

        init(_ sequence: UInt64, _ document: String, _ text: String, at time: UInt64 = 1) {
            id = TransactionID(origin: SiteID(0xD2), sequence: sequence)
            self.document = DocumentRef(collection: "notes", id: Value.string(document).canonicalJSON)
            delta = Delta(
                collection: "notes", documentID: self.document.id, field: "text", valueJSON: Value.string(text).canonicalJSON,
                timestamp: HybridTimestamp(rawValue: time << 20), transaction: id, index: 0, count: 1)
        }

        var claim: InboundClaim {
            var claim = InboundClaim()
            claim.documents = [document]
            claim.transactions = [id]
            return claim
        }

        func apply(_ writer: any InboundWriting, _ store: PostgresStore) async throws(ShoalError) {
            let record = TransactionRecord(
                id: id, deltaCount: 1, documentCount: 1, collections: [CollectionCount(collection: "notes", documents: 1, deltas: 1)],
                state: .applied, firstSeen: 0)
            _ = try await writer.apply(
                record, deltas: [delta], documentDeltaCounts: [document: 1], context: [], buffered: false, isNew: true, state: .applied,
                rest: [], limits: store.systemParameters.documentLimits, logger: HubSyncTests.logger)
        }
    }

    /// The sequences of the change log's rows of each of `ids`.
    static func logged(_ store: PostgresStore, _ ids: [TransactionID]) async throws -> [[UInt64]] {
        var sequences: [[UInt64]] = []
        for id in ids { sequences.append(try await store.logPage(of: id).rows.map(\.sequence)) }
        return sequences
    }

    /// Received batches that name what they write commit side by side across hubs: one
    /// held open on hub 1 does not keep hub 2's from committing when they name different
    /// documents, and does when they name the same one; sequences stay in commit order
    /// (the one that committed first has the lower), and the log reads whole.
    @Test func receivedBatchesCommitSideBySideUnlessTheyNameTheSameDocument() async throws {
        try await Self.withHubs(2) { stores, _ in
            let first = Received(1, "a", "first"), beside = Received(2, "b", "beside"), same = Received(3, "a", "same", at: 3)
            let (started, start) = AsyncStream.makeStream(of: Void.self)
            let release = Locked<CheckedContinuation<Void, Never>?>(nil)
            async let held: Void = {
                _ = try await stores[0].writeInbound(short: false, claim: first.claim) { writer async throws(ShoalError) in
                    try await first.apply(writer, stores[0])
                    start.yield()
                    await withCheckedContinuation { continuation in release.withLock { $0 = continuation } }
                }
            }()
            for await _ in started { break }
            // Hub 2, another document: commits while hub 1's batch is open (one that waited
            // for it would wait until the end of the test).
            let besideDone = Locked(false)
            async let besideWrite: Void = {
                _ = try await stores[1].writeInbound(short: false, claim: beside.claim) { writer async throws(ShoalError) in
                    try await beside.apply(writer, stores[1])
                }
                besideDone.withLock { $0 = true }
            }()
            // Bounded for a loaded machine only: hub 1's batch stays open until the end.
            let besideInTime = await InProcessMesh.eventually(timeout: .seconds(30)) { besideDone.withLock { $0 } }
            #expect(besideInTime, "it waited for the other hub's batch")
            let besideAt = try await stores[1].lastSequence()
            // Hub 2, the same document: waits for hub 1's batch.
            let sameDone = Locked(false)
            async let waiting: Void = {
                _ = try await stores[1].writeInbound(short: false, claim: same.claim) { writer async throws(ShoalError) in
                    try await same.apply(writer, stores[1])
                }
                sameDone.withLock { $0 = true }
            }()
            try await Task.sleep(for: .milliseconds(500))
            #expect(!sameDone.withLock { $0 }, "a batch naming the same document committed while the other was open")
            while release.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(10)) }
            release.withLock { $0?.resume() }
            try await held
            try await besideWrite
            try await waiting
            #expect(sameDone.withLock { $0 })
            let log = try await Self.logged(stores[0], [beside.id, first.id, same.id])
            #expect(log == [[1], [2], [3]], "one row each, numbered in commit order: \(log)")
            #expect(besideAt == 1)
            let bodies = try await stores[0].bodies(of: [first.document, beside.document])
            #expect(bodies[first.document]?.contains("same") == true, "the later write wins: \(bodies)")
        }
    }

    /// A received batch that writes what it did not name is rolled back and run again as
    /// the one writer: its body runs twice, and what it wrote is committed once.
    @Test func aBatchWritingWhatItDidNotNameRunsAgainAsTheOneWriter() async throws {
        try await Self.withHubs(1) { stores, _ in
            let named = Received(1, "c", "named"), unnamed = Received(2, "d", "unnamed")
            let runs = Locked(0)
            let (_, outcome) = try await stores[0].writeInbound(short: false, claim: named.claim) { writer async throws(ShoalError) in
                runs.withLock { $0 += 1 }
                try await named.apply(writer, stores[0])
                try await unnamed.apply(writer, stores[0])
            }
            #expect(runs.withLock { $0 } == 2)
            #expect(outcome.logged == 2)
            let log = try await Self.logged(stores[0], [named.id, unnamed.id])
            #expect(log == [[1], [2]], "each logged once: \(log)")
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

    /// A hub cut off from its database ends a session whose commit failed, and one that
    /// began while it was cut, rather than hold them until the database answers (its
    /// waits for a pooled connection are bounded: `PostgresHubDatabase.unreachableAfter`);
    /// once the link heals, every increment the device acknowledged arrives once. The link
    /// refuses and resets, or drops every packet (`droppingPackets`). A statement sent on
    /// a connection that has just closed fails rather than wait for ever (`HubConnection`).
    @Test(arguments: [false, true])
    func aHubCutOffFromItsDatabaseEndsItsSessionsAndCatchesUp(droppingPackets: Bool) async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        defer { a.remove() }
        let increment = "INSERT INTO notes DOCUMENTS ({'_id': 'k'}) ON ID CONFLICT DO NOTHING; UPDATE notes APPLY n INCREMENT BY 1 WHERE _id = 'k'"
        try await Self.withHubThroughProxy(unreachableAfter: .seconds(3)) { store, hub, proxy in
            @Sendable func counter() async throws -> String? {
                try await store.bodies(of: [DocumentRef(collection: "notes", id: Value.string("k").canonicalJSON)]).values.first
            }
            @Sendable func noSessions() -> Bool { a.sync.peers().isEmpty && hub.peers().isEmpty }

            try await InProcessMesh.withLink(a.sync, hub) { () async throws in
                for _ in 0..<5 { _ = try await a.store.execute(increment) }
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) { try await counter()?.contains("5") == true })
                if droppingPackets {
                    proxy.set(.init(forward: .blackhole, backward: .blackhole))
                } else {
                    proxy.cut()
                }
                for _ in 0..<5 { _ = try await a.store.execute(increment) }
                // The hub's commit of them fails: the session ends on both sides.
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) { noSessions() },
                        "the session ends when the hub cannot commit: \(hub.peers().map(\.state))")
            }
            try await InProcessMesh.withLink(a.sync, hub) { () async throws in
                // A session begun while the database is away: the hub's handshake and its
                // first reads give up within their bound, and the session ends, rather than
                // wait on the pool after the device has gone.
                #expect(try await InProcessMesh.eventually(timeout: .seconds(5)) { !noSessions() })
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) { noSessions() },
                        "the hub's side ends too: \(hub.peers().map(\.state))")
            }
            proxy.restore()
            try await InProcessMesh.withLink(a.sync, hub, redial: true) { () async throws in
                #expect(try await InProcessMesh.eventually(timeout: .seconds(60)) { (try? await counter())?.contains("10") == true },
                        "every increment the device acknowledged reaches the hub once the link heals")
            }
            let body = try await counter()
            #expect(body?.contains("10") == true, "and none twice: \(body ?? "none")")
        }
    }

    /// How a write's COMMIT answer is lost.
    enum LostAnswer: CaseIterable {
        /// The COMMIT reached the server, its answer did not come back.
        case delivered
        /// The connection broke as the COMMIT was sent: it never arrived.
        case notDelivered
        /// As `notDelivered`, but only on the hub's side: the server keeps the connection
        /// open, its transaction idle, as across a network that lost the hub.
        case notDeliveredServerWaiting
        /// As `delivered`, and the server is out of reach until the test restores the link.
        case deliveredThenUnreachable
    }

    /// A local write whose COMMIT answer is lost, the connection to PostgreSQL broken
    /// after the COMMIT was sent, is reported as it ended: done when the database holds
    /// its log row, failed with nothing kept when the COMMIT never arrived, and
    /// `.timedOut` (unknown) when the database cannot be asked. Reported failed after it
    /// committed, a write an app retries would count an increment twice. The hub then
    /// writes on over a new connection. A server still holding the write's transaction
    /// open has that backend ended, rather than the hub wait for its idle timeout (60 s).
    @Test(arguments: LostAnswer.allCases)
    func aWriteWhoseCommitAnswerWasLostIsReportedAsItEnded(lost: LostAnswer) async throws {
        try await Self.withHubThroughProxy(unreachableAfter: .seconds(3)) { hub, _, proxy in
            let increment = "INSERT INTO notes DOCUMENTS ({'_id': 'k'}) ON ID CONFLICT DO NOTHING; UPDATE notes APPLY n INCREMENT BY 1 WHERE _id = 'k'"
            @Sendable func count() async throws -> Int? {
                let document = DocumentRef(collection: "notes", id: Value.string("k").canonicalJSON)
                guard let body = try await hub.bodies(of: [document])[document],
                    let object = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
                else { return nil }
                return (object["n"] as? NSNumber)?.intValue
            }
            _ = try await hub.execute(increment)
            let before = try await hub.lastSequence()
            // The writer's last statement before its COMMIT sets log_end.
            proxy.loseAnswer(
                to: Array("COMMIT\0".utf8), after: Array("WHERE key = 'log_end' RETURNING".utf8),
                delivering: lost == .delivered || lost == .deliveredThenUnreachable, cutting: lost == .deliveredThenUnreachable,
                keepingTarget: lost == .notDeliveredServerWaiting)
            var failure: ShoalError?
            let sent = ContinuousClock.now
            do {
                _ = try await hub.execute(increment)
            } catch let error as ShoalError {
                failure = error
            }
            let answered = ContinuousClock.now - sent
            #expect(proxy.answersLost == 1, "the COMMIT's connection broke")
            switch lost {
            case .delivered:
                #expect(failure == nil, "it committed, and says so: \(failure.map(String.init(describing:)) ?? "")")
            case .notDelivered, .notDeliveredServerWaiting:
                #expect(failure?.code == .database && failure?.message.contains("nothing of it was kept") == true, "\(String(describing: failure))")
                // Not a speed goal: the server's idle timeout (60 s) is what it would take otherwise.
                #expect(answered < .seconds(30), "the waiting backend was ended: \(answered)")
            case .deliveredThenUnreachable:
                #expect(failure?.code == .timedOut && failure?.message.contains("whether the write committed is unknown") == true, "\(String(describing: failure))")
                proxy.restore()
                // The pool connects again; once it gave up, each lease waits a second at most
                // until one is had, and on a loaded machine a new connection can take longer.
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) { (try? await count()) != nil }, "the hub reaches the server again")
            }
            let committed = lost == .delivered || lost == .deliveredThenUnreachable
            #expect(try await count() == (committed ? 2 : 1))
            #expect((try await hub.lastSequence() > before) == committed)
            _ = try await hub.execute(increment)
            #expect(try await count() == (committed ? 3 : 2), "the hub writes on")
        }
    }

    /// A hub's own writes (DQL through one hub) reach a device behind the other hub, and
    /// an observer on the other hub fires for them with their transaction.
    @Test func aWriteThroughOneHubReachesTheOthersDevicesAndObservers() async throws {
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM notes"])
        defer { b.remove() }
        try await Self.withHubs(2) { stores, hubs in
            var updates = try stores[1].observe("SELECT * FROM notes", arguments: [:]).makeAsyncIterator()
            #expect(try await updates.next()?.items == [])
            let written = try await stores[0].execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-hub', 'n': 1})")
            let id = try #require(written.transactionID)
            #expect(id.origin == stores[0].siteID)
            let seen = try #require(try await updates.next())
            #expect(seen.items == [["_id": "from-hub", "n": 1]])
            #expect(seen.transactions == [id], "hub 2's observer names the transaction committed through hub 1")
            try await InProcessMesh.withLink(b.sync, hubs[1]) { () async throws in
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await b.store.execute("SELECT * FROM notes").items == [["_id": "from-hub", "n": 1]]
                }, "b, behind hub 2, gets hub 1's own write")
                // And what b writes is read back through hub 1.
                _ = try await b.store.execute("UPDATE notes SET n = 2 WHERE _id = 'from-hub'")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await stores[0].execute("SELECT n FROM notes").items == [["n": 2]]
                })
            }
        }
    }

    /// An apply's statement is sent without waiting for its answer
    /// (`PostgresInboundWriter.send`): one the server refuses still fails the commit with
    /// the server's reason, whether the next statement finds it out or the commit does,
    /// and nothing of the commit is kept. Were the last one's failure not waited for, the
    /// COMMIT of the aborted transaction would roll back without an error, and the
    /// transactions be reported applied.
    @Test func anApplyTheServerRefusesFailsItsCommitWithTheServersReason() async throws {
        try await Self.withHubs(1) { stores, _ in
            let store = stores[0]
            try await store.database.execute(
                """
                CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN IF NEW.doc_id = '"bad"' THEN RAISE EXCEPTION 'no bad documents here'; END IF; RETURN NEW; END $$
                """)
            try await store.database.execute("CREATE TRIGGER refuse_bad BEFORE INSERT OR UPDATE ON field FOR EACH ROW EXECUTE FUNCTION refuse_bad()")
            let bad = Self.fromDevice(1, ["bad"]), good = Self.fromDevice(2, ["good"])
            let ids = [bad[0].id, good[0].id]
            for (order, pieces) in [("the refused one last", good + bad), ("the refused one first", bad + good)] {
                do {
                    try await store.applyRemote(pieces, from: Self.device)
                    Issue.record("\(order): the commit succeeded")
                } catch let error as ShoalError {
                    #expect(error.message.contains("writing an applied transaction"), "\(order): \(error)")
                    #expect(error.message.contains("no bad documents here"), "\(order): \(error)")
                }
                #expect(try await store.storedTransactions(ids).isEmpty, "\(order): nothing of the commit kept")
                #expect(try await store.execute("SELECT * FROM notes").items.isEmpty, "\(order)")
            }
            // The store still writes.
            try await store.applyRemote(good, from: Self.device)
            #expect(try await store.storedTransactions(ids).keys.sorted() == [good[0].id])
        }
    }

    static let device = SiteID(0xDE71CE)

    /// Transaction `sequence` of `device` as it sends it, a piece per document: one delta
    /// each, in notes, the last piece last.
    static func fromDevice(_ sequence: UInt64, _ documents: [String]) -> [TransactionPiece] {
        let id = TransactionID(origin: device, sequence: sequence)
        let count = UInt32(documents.count)
        return documents.enumerated().map { index, document in
            let delta = Delta(
                collection: "notes", documentID: Value.string(document).canonicalJSON, field: "n", valueJSON: "\(index)",
                timestamp: HybridTimestamp(rawValue: (1_000 + id.sequence) << 16 + UInt64(index)), transaction: id,
                index: UInt32(index), count: count)
            return TransactionPiece(
                id: id, deltaCount: count, documentCount: count,
                collections: [CollectionCount(collection: "notes", documents: count, deltas: count)], deltas: [delta],
                documentDeltaCounts: [DocumentRef(collection: "notes", id: delta.documentID): 1], isLast: index == documents.count - 1)
        }
    }

    /// A transaction hub 1 holds as waiting, that hub 2 applies whole meanwhile, is let go
    /// by hub 1 at its next commit: its wait running out applies nothing (in part or
    /// whole), and its record stays applied.
    @Test func aTransactionOneHubHoldsAndTheOtherAppliesIsLetGo() async throws {
        let inbound = InboundPipeline.Configuration(coverage: .init(maximumWait: .milliseconds(300)))
        try await Self.withHubs(2, inbound: inbound) { stores, hubs in
            let t = Self.fromDevice(1, ["x", "y"]), other = Self.fromDevice(2, ["z"])
            let id = t[0].id
            try await withThrowingTaskGroup(of: Void.self) { group in
                for hub in hubs { group.addTask { await hub.run() } }
                defer { group.cancelAll() }
                hubs[0].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: [t[0]]))
                #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) {
                    try await stores[0].storedTransactions([id])[id]?.state == .waiting
                }, "hub 1 holds t as waiting")
                hubs[1].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: t))
                #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) {
                    try await stores[1].storedTransactions([id])[id]?.state == .applied
                }, "hub 2 applies t whole")
                // Hub 1's wait for t runs out; its next commit decides.
                try await Task.sleep(for: .milliseconds(600))
                hubs[0].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: other))
                #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) {
                    try await stores[0].storedTransactions([other[0].id])[other[0].id]?.state == .applied
                })
                #expect(try await stores[0].storedTransactions([id])[id]?.state == .applied, "t stays applied, never partial")
                let status = hubs[0].pipeline.status
                #expect(status.waiting.isEmpty && status.partial.isEmpty, "hub 1 let t go: \(status.waiting) \(status.partial)")
                #expect(status.appliedRemote == 1, "hub 1 applied only the other transaction")
            }
        }
    }

    /// A transaction whose pieces reach two hubs, each holding part of it in memory: hub 1
    /// holds x, hub 2 buffers y, and hub 1 takes the last piece, z. Hub 1 reads the record
    /// hub 2 wrote (its mark changed) and applies the transaction whole at once, long
    /// before its coverage wait (60 s) runs out; hub 2 lets it go on its next commit.
    @Test func aTransactionWhosePiecesReachTwoHubsIsAppliedWholeByEither() async throws {
        let inbound = InboundPipeline.Configuration(coverage: .init(maximumWait: .seconds(60)))
        try await Self.withHubs(2, inbound: inbound) { stores, hubs in
            let t = Self.fromDevice(1, ["x", "y", "z"]), other = Self.fromDevice(2, ["w"])
            let id = t[0].id
            func buffered() async throws -> Int {
                try await stores[0].transactionRecords().first { $0.id == id }?.documents.values.filter(\.isComplete).count ?? 0
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for hub in hubs { group.addTask { await hub.run() } }
                defer { group.cancelAll() }
                hubs[0].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: [t[0]]))
                #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) { try await buffered() == 1 }, "hub 1 buffers x")
                hubs[1].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: [t[1]]))
                #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) { try await buffered() == 2 }, "hub 2 buffers y")
                #expect(hubs[0].pipeline.status.waiting.count == 1 && hubs[1].pipeline.status.waiting.count == 1, "both hold t")
                hubs[0].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: [t[2]]))
                #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) {
                    try await stores[0].storedTransactions([id])[id]?.state == .applied
                }, "hub 1 applies t whole on its last piece, not on its wait running out")
                let bodies = try await stores[0].bodies(of: ["x", "y", "z"].map { DocumentRef(collection: "notes", id: Value.string($0).canonicalJSON) })
                #expect(bodies.count == 3, "all of t applied: \(bodies.keys.map(\.id))")
                // Its status follows the commit.
                #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) {
                    hubs[0].pipeline.status.waiting.isEmpty && hubs[0].pipeline.status.partial.isEmpty
                })
                // Hub 2's next commit lets go of t.
                hubs[1].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: other))
                #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) {
                    try await stores[1].storedTransactions([other[0].id])[other[0].id]?.state == .applied
                })
                let status = hubs[1].pipeline.status
                #expect(status.waiting.isEmpty && status.partial.isEmpty, "hub 2 let t go: \(status.waiting) \(status.partial)")
                #expect(try await stores[0].storedTransactions([id])[id]?.state == .applied, "t stays applied")
            }
        }
    }

    /// Many transactions of several pieces each, the pieces shuffled and dealt to two
    /// hubs at random, in random batches, some pieces sent to both: every transaction is
    /// applied whole by whichever hub completes it, long before the coverage wait (60 s),
    /// and neither hub holds anything at the end. `SHOAL_HUB_PIECES_SEED` replays a seed.
    @Test func piecesDealtAtRandomToTwoHubsAreAllAppliedWhole() async throws {
        let seed = ProcessInfo.processInfo.environment["SHOAL_HUB_PIECES_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 0...UInt64.max)
        var random = SplitMix(state: seed)
        var pieces: [TransactionPiece] = []
        for sequence in 1...24 as ClosedRange<UInt64> {
            let documents = (0..<Int.random(in: 2...4, using: &random)).map { "t\(sequence)-\($0)" }
            pieces += Self.fromDevice(sequence, documents)
        }
        pieces.shuffle(using: &random)
        // Some pieces twice, to the other hub too: a duplicate must change nothing.
        var dealt: [[TransactionPiece]] = [[], []]
        for piece in pieces {
            let hub = Int.random(in: 0...1, using: &random)
            dealt[hub].append(piece)
            if Int.random(in: 0..<5, using: &random) == 0 { dealt[1 - hub].append(piece) }
        }
        // Batches of 1 to 3 pieces, to either hub, some after a short pause.
        var batches: [(hub: Int, pieces: [TransactionPiece], pause: Int)] = []
        var next = [0, 0]
        while next[0] < dealt[0].count || next[1] < dealt[1].count {
            let hub = next[0] == dealt[0].count ? 1 : next[1] == dealt[1].count ? 0 : Int.random(in: 0...1, using: &random)
            let count = min(Int.random(in: 1...3, using: &random), dealt[hub].count - next[hub])
            let pause = Int.random(in: 0..<3, using: &random) == 0 ? Int.random(in: 1...20, using: &random) : 0
            batches.append((hub, Array(dealt[hub][next[hub]..<next[hub] + count]), pause))
            next[hub] += count
        }
        let ids = Set(pieces.map(\.id))
        let inbound = InboundPipeline.Configuration(coverage: .init(maximumWait: .seconds(60)))
        try await Self.withHubs(2, inbound: inbound) { [batches, pieces] stores, hubs in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for hub in hubs { group.addTask { await hub.run() } }
                defer { group.cancelAll() }
                for batch in batches {
                    hubs[batch.hub].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: batch.pieces))
                    if batch.pause > 0 { try await Task.sleep(for: .milliseconds(batch.pause)) }
                }
                // Within the coverage wait (60 s), not near it: a loaded machine once took
                // longer than 30 s.
                let whole = try await InProcessMesh.eventually(timeout: .seconds(50)) {
                    try await stores[0].storedTransactions(Array(ids)).values.filter { $0.state == .applied }.count == ids.count
                }
                let states = try await stores[0].storedTransactions(Array(ids)).values.map(\.state)
                #expect(whole, "seed \(seed): \(states.filter { $0 != .applied }.count) of \(ids.count) not applied whole: \(states)")
                let documents = try await stores[0].execute("SELECT COUNT(*) FROM notes").items
                #expect(documents == [["$1": .int(Int64(pieces.count))]], "seed \(seed): \(documents)")
                // Each hub's next commit lets go of what the other applied.
                hubs[0].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: Self.fromDevice(100, ["after-0"])))
                hubs[1].pipeline.enqueue(InboundPipeline.Item(source: Self.device, pieces: Self.fromDevice(101, ["after-1"])))
                let released = try await InProcessMesh.eventually(timeout: .seconds(10)) {
                    hubs.allSatisfy { $0.pipeline.status.waiting.isEmpty && $0.pipeline.status.partial.isEmpty }
                }
                #expect(released, "seed \(seed): \(hubs.map { ($0.pipeline.status.waiting.count, $0.pipeline.status.partial.count) })")
            }
        }
    }

    /// A device that takes smaller frames than a hub's documents: the hub fits its frames
    /// to what the device said, and the transaction with a value no frame of the device's
    /// can carry is refused whole there and reported, while the rest arrives.
    @Test func aDeviceWithSmallerFramesGetsFromAHubWhatItCanHold() async throws {
        let frameLimit = 4096
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM notes"]) {
            $0.limits = WireLimits(maximumFrameSize: frameLimit, maximumInflatedSize: frameLimit)
        }
        defer { b.remove() }
        try await Self.withHubs(1) { stores, hubs in
            let hub = stores[0]
            let docs = (0..<100).map { i in Value.object(["_id": .string("n-\(i)"), "v": .string(String(repeating: "v", count: 1000))]) }
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS (:d)", arguments: ["d": .array(docs)])
            let tooLarge = try await hub.execute(
                "INSERT INTO notes DOCUMENTS ({'_id': 'huge', 'v': :v}), ({'_id': 'beside', 'v': 1})",
                arguments: ["v": .string(String(repeating: "v", count: 10_000))])
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'after', 'v': 2})")
            let largest = Locked(0)
            let connection = InMemoryConnection(observeFromA: { frame in
                largest.withLock { $0 = max($0, frame.payload.readableBytes) }
            })
            try await InProcessMesh.withLink(hubs[0], b.sync, connection: connection) {
                let arrived = try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await b.store.execute("SELECT COUNT(*) FROM notes").items == [["$1": 101]] && b.sync.pipeline.status.refused == 1
                }
                #expect(arrived, "refused \(b.sync.pipeline.status.refused)")
            }
            #expect(largest.withLock { $0 } <= frameLimit, "a frame of \(largest.withLock { $0 }) bytes to a device that takes \(frameLimit)")
            let ids = Set(try await b.store.execute("SELECT _id FROM notes").items.compactMap { $0["_id"]?.stringValue })
            #expect(!ids.contains("huge") && !ids.contains("beside") && ids.contains("after") && ids.contains("n-99"))
            #expect(b.sync.pipeline.status.recentRefusals.first?.id == tooLarge.transactionID)
        }
    }

    /// A hub whose document limit is below a device's (a hub takes its limits at start):
    /// said in its Hello, the device withholds the transaction over it and says why, the
    /// hub records it refused whole, the link goes on, and what follows arrives.
    @Test func aHubWithASmallerDocumentLimitRefusesWholeAndTheLinkGoesOn() async throws {
        let a = try TestNode(name: "a")
        defer { a.remove() }
        let parameters = SystemParameters(documentSizeSoftLimitBytes: 50, documentSizeHardLimitBytes: 300)
        try await Self.withHubs(1, parameters: parameters) { stores, hubs in
            let hub = stores[0]
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                let over = try await a.store.execute(
                    "INSERT INTO notes DOCUMENTS ({'_id': 'big', 'v': :v}), ({'_id': 'small', 'v': 1})",
                    arguments: ["v": .string(String(repeating: "v", count: 500))])
                _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'last', 'v': 3})")
                let settled = try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await hub.execute("SELECT _id FROM notes").items == [["_id": "last"]] && hubs[0].pipeline.status.refused == 1
                }
                let held = try await hub.execute("SELECT _id FROM notes").items
                #expect(settled, "only the last arrives: \(held), refused \(hubs[0].pipeline.status.refused)")
                let id = try #require(over.transactionID)
                #expect(hubs[0].pipeline.status.recentRefusals.first?.id == id)
                #expect(try await hub.storedTransactions([id])[id]?.state == .refused, "the hub records the refusal")
            }
        }
    }

    /// A document whose key PostgreSQL cannot index (its collection's name, `_id` and a
    /// field's name longer together than a btree entry holds: a SQLite node has no such
    /// bound): a hub refuses its transaction whole and says why, the link goes on, and
    /// what follows arrives; a local write of one on the hub fails saying so.
    @Test func aDocumentWhoseKeyAHubCannotIndexIsRefusedWholeAndTheLinkGoesOn() async throws {
        let a = try TestNode(name: "a")
        defer { a.remove() }
        // Random, so that PostgreSQL cannot compress it below its limit.
        let long = (0..<1_600).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        try await Self.withHubs(1) { stores, hubs in
            let hub = stores[0]
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                let byID = try await a.store.execute(
                    "INSERT INTO notes DOCUMENTS ({'_id': :id, 'v': 1}), ({'_id': 'beside', 'v': 2})", arguments: ["id": .string(long)])
                let byField = try await a.store.execute(
                    "INSERT INTO notes DOCUMENTS (:doc)", arguments: ["doc": ["_id": "field", .init(stringLiteral: long): 1]])
                _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'last', 'v': 3})")
                let settled = try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await hub.execute("SELECT _id FROM notes").items == [["_id": "last"]] && hubs[0].pipeline.status.refused == 2
                }
                let held = try await hub.execute("SELECT _id FROM notes").items
                #expect(settled, "only the last arrives: \(held), refused \(hubs[0].pipeline.status.refused)")
                let refusals = Set(hubs[0].pipeline.status.recentRefusals.map(\.id))
                #expect(refusals == Set([byID.transactionID, byField.transactionID].compactMap { $0 }))
                #expect(hubs[0].pipeline.status.recentRefusals.allSatisfy { $0.reason.contains("index") }, "\(hubs[0].pipeline.status.recentRefusals)")
            }
            let error = await #expect(throws: ShoalError.self) {
                try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': :id})", arguments: ["id": .string(long)])
            }
            #expect(error?.message.contains("bytes") == true, "\(error?.message ?? "")")
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'after'})")
        }
    }

    /// A collection's name a SQLite node takes and a hub cannot store.
    static let nulCollection = "no\u{0}tes"

    /// A device and one hub subscribed to `collection` too, each the test's.
    static func withDeviceAndHub(
        subscribedTo collection: String, _ body: @Sendable (TestNode, PostgresStore, [SyncEngine]) async throws -> Void
    ) async throws {
        let a = try TestNode(name: "a")
        defer { a.remove() }
        try await withHubs(1) { stores, hubs in
            try hubs[0].subscribe("SELECT * FROM `\(collection)`")
            try await body(a, stores[0], hubs)
        }
    }

    /// PostgreSQL's `TEXT` cannot hold U+0000, and a collection's name is stored as
    /// text: a transaction writing a collection so named is refused whole, as one
    /// naming a key too long is, and what follows it arrives.
    @Test func aCollectionWhoseNameAHubCannotStoreIsRefusedWholeAndTheLinkGoesOn() async throws {
        let odd = Self.nulCollection
        try await Self.withDeviceAndHub(subscribedTo: odd) { a, hub, hubs in
            try a.sync.subscribe("SELECT * FROM notes WHERE v = 9")
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                let written = try await a.store.transaction { tx -> TransactionCompletion in
                    _ = try await tx.execute("INSERT INTO `\(odd)` DOCUMENTS ({'_id': 'x', 'v': 1})")
                    _ = try await tx.execute("INSERT INTO notes DOCUMENTS ({'_id': 'beside', 'v': 2})")
                    return .commit
                }
                _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'last', 'v': 3})")
                let settled = try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await hub.execute("SELECT _id FROM notes").items == [["_id": "last"]] && hubs[0].pipeline.status.refused == 1
                }
                let held = try await hub.execute("SELECT _id FROM notes").items
                #expect(settled, "only the last arrives: \(held), refused \(hubs[0].pipeline.status.refused)")
                #expect(hubs[0].pipeline.status.recentRefusals.map(\.id) == [written.transactionID].compactMap { $0 })
                #expect(hubs[0].pipeline.status.recentRefusals.allSatisfy { $0.reason.contains("U+0000") }, "\(hubs[0].pipeline.status.recentRefusals)")
                // The device widens its interest to it (the hub backfills what the new
                // query covers), beside what the hub can send.
                try a.sync.subscribe("SELECT * FROM `\(odd)`")
                try await Task.sleep(for: .milliseconds(300))
                _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from the hub', 'v': 9})")
                let back = try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await a.store.execute("SELECT _id FROM notes WHERE v = 9").items == [["_id": "from the hub"]]
                }
                #expect(back, "the hub's write reaches the device that asked for the odd collection too")
            }
            let error = await #expect(throws: ShoalError.self) {
                try await hub.execute("INSERT INTO `\(odd)` DOCUMENTS ({'_id': 'y'})")
            }
            #expect(error?.message.contains("U+0000") == true, "\(error?.message ?? "")")
            // An observer of it is refused the same way, before any read.
            let observing = #expect(throws: ShoalError.self) { try hub.observe("SELECT * FROM `\(odd)`") }
            #expect(observing?.code == .invalidQuery, "\(observing.map { "\($0)" } ?? "")")
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'after'})")
        }
    }

    /// A transaction the device cannot send the hub whole (a document over the hub's
    /// limit, `OVER_LIMIT`) in a collection named with U+0000 is refused, and the
    /// refusal, whose reason names the collection, is recorded: the link goes on.
    @Test func aRefusalNamingACollectionAHubCannotStoreIsRecordedAndTheLinkGoesOn() async throws {
        let odd = Self.nulCollection
        try await Self.withDeviceAndHub(subscribedTo: odd) { a, hub, hubs in
            _ = try await hub.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = 1024")
            _ = try await hub.execute("ALTER SYSTEM SET document_size_hard_limit_bytes = 4096")
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                let written = try await a.store.execute(
                    "INSERT INTO `\(odd)` DOCUMENTS ({'_id': 'x', 'v': :v})", arguments: ["v": .string(String(repeating: "x", count: 8_000))])
                _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'last', 'v': 3})")
                let settled = try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await hub.execute("SELECT _id FROM notes").items == [["_id": "last"]] && hubs[0].pipeline.status.refused == 1
                }
                #expect(settled, "refused \(hubs[0].pipeline.status.refused)")
                #expect(hubs[0].pipeline.status.recentRefusals.map(\.id) == [written.transactionID].compactMap { $0 })
            }
        }
    }

    /// Read-modify-write transactions on two hubs at once are serial: each reads what
    /// the one before it committed, through whichever hub, so no increment is lost, and
    /// no transaction number is given twice across the hubs.
    @Test func readModifyWriteTransactionsOnTwoHubsLoseNothing() async throws {
        try await Self.withHubs(2) { stores, _ in
            _ = try await stores[0].execute("INSERT INTO notes DOCUMENTS ({'_id': 'c', 'n': 0})")
            let rounds = 15
            let ids = try await withThrowingTaskGroup(of: [TransactionID].self) { group in
                for store in stores {
                    group.addTask {
                        var ids: [TransactionID] = []
                        for _ in 0..<rounds {
                            let result = try await store.transaction { tx -> TransactionCompletion in
                                let n = Int64(try await tx.execute("SELECT n FROM notes WHERE _id = 'c'").items.first?["n"]?.intValue ?? -1)
                                _ = try await tx.execute("UPDATE notes SET n = :n WHERE _id = 'c'", arguments: ["n": .int(n + 1)])
                                return .commit
                            }
                            ids.append(try #require(result.transactionID))
                        }
                        return ids
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(try await stores[1].execute("SELECT n FROM notes").items == [["n": .int(Int64(2 * rounds))]])
            #expect(Set(ids).count == 2 * rounds, "every transaction has a number of its own")
            #expect(ids.allSatisfy { $0.origin == stores[0].siteID })
        }
    }

    /// Hubs write as one site, so their clocks must never repeat: two hubs writing the
    /// same field at once take timestamps that rise in commit order, and a hub opened
    /// afterwards (a restart, with a new clock) writes above them all.
    @Test func hubsWritingAtOnceNeverRepeatATimestamp() async throws {
        try await Self.withHubs(3) { stores, _ in
            _ = try await stores[0].execute("INSERT INTO notes DOCUMENTS ({'_id': 'c', 'n': 0})")
            try await withThrowingTaskGroup(of: Void.self) { group in
                for store in stores.prefix(2) {
                    group.addTask {
                        for i in 0..<20 {
                            _ = try await store.execute("UPDATE notes SET n = :n WHERE _id = 'c'", arguments: ["n": .int(Int64(i))])
                        }
                    }
                }
                try await group.waitForAll()
            }
            // The third hub's store has written nothing yet: its clock starts from the row.
            _ = try await stores[2].execute("UPDATE notes SET n = 100 WHERE _id = 'c'")
            let page = try await stores[1].logPage(after: 0, limit: 1_000, stretch: 1_000, byteLimit: 1 << 24, records: { _ in false })
            let stamps = page.rows.map(\.delta.timestamp.rawValue)
            #expect(page.rows.count == 2 + 40 + 1, "the insert's two deltas, then one per update")
            #expect(zip(stamps, stamps.dropFirst()).allSatisfy { $0 < $1 }, "timestamps rise in commit order, none twice")
            #expect(try await stores[0].execute("SELECT n FROM notes").items == [["n": 100]], "the last write wins")
        }
    }

    /// An observer on one hub hears another hub's commit even when its own hub commits
    /// right after it, before the announcement of the other's arrives.
    @Test func anObserverHearsTheOtherHubsCommitBeforeItsOwn() async throws {
        try await Self.withHubs(2) { stores, _ in
            let seen = Locked<[Int]>([])
            let observer = try stores[0].registerObserver("SELECT * FROM notes", arguments: [:]) { update in
                seen.withLock { $0.append(update.items.count) }
            }
            defer { observer.cancel() }
            #expect(await InProcessMesh.eventually(timeout: .seconds(30)) { seen.withLock { $0 == [0] } })
            for round in 0..<5 {
                _ = try await stores[1].execute("INSERT INTO notes DOCUMENTS ({'_id': :id})", arguments: ["id": .int(Int64(round))])
                _ = try await stores[0].execute("INSERT INTO tasks DOCUMENTS ({'_id': :id})", arguments: ["id": .int(Int64(round))])
                #expect(
                    await InProcessMesh.eventually(timeout: .seconds(10)) { seen.withLock { $0.last == round + 1 } },
                    "round \(round): \(seen.withLock { $0 })")
            }
        }
    }

    /// The `_id`s of a query's documents.
    static func ids(_ rows: QueryResult) -> Set<String> { Set(rows.items.compactMap { $0["_id"]?.stringValue }) }

    /// Puts a hub's database back to before anything was written, as a backup taken then
    /// and restored would: its rows gone, its counters and the log's end back at 0 (the
    /// site stays, as in any restore).
    /// Writes a note of each id, a transaction each, through `hub`, until `device` holds them.
    static func write(_ ids: [String], through hub: PostgresStore, reaching device: TestNode) async throws {
        for id in ids { _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': '\(id)'})") }
        #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
            try await Self.ids(device.store.execute("SELECT _id FROM notes")) == Set(ids)
        })
    }

    /// The one number `sql` reads from the hubs' database; -1 when it reads no row.
    static func value(_ database: PostgresHubDatabase, _ sql: String) async throws -> Int64 {
        var value: Int64 = -1
        for v in try await database.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(Int64.self) { value = v }
        return value
    }

    static func restoreEmpty(_ database: PostgresHubDatabase) async throws {
        for table in ["document", "field", "change_log", "txn", "txn_piece", "txn_context", "peer_cursor"] {
            try await database.execute("DELETE FROM \(table)")
        }
        try await database.execute("UPDATE shoal_meta SET value = 0 WHERE key IN ('transaction_counter', 'log_end', 'history_confirmed')")
    }

    /// A hub's database restored, while the hubs run, to before 'one', which device a
    /// holds as the hub's transaction 1. The hub that writes next finds its log ends
    /// below what it knew committed and repairs the database first (DATA_MODEL.md §4.5):
    /// 'two' takes a number far above every one given, every cursor is forgotten, and the
    /// devices send the hub's own transactions back. Every device and the hub end with
    /// all of them; the other hub hears of the repair, so b, behind it, is asked for
    /// 'one' too and gets 'two'. (A hub started on a restored database tells from what it
    /// kept in its data directory, or, started on a new one, from the device's Subscribe:
    /// `aHubStartedOnADatabaseThatWentBackWhileItWasStoppedRepairsAsItOpens`,
    /// `ProcessHubTests.aHubDatabaseRestoredFromABackupIsRepaired(remembering:)`.)
    @Test func aHubDatabaseThatWentBackIsRepairedAndNothingIsLost() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM notes"])
        defer {
            a.remove()
            b.remove()
        }
        try await Self.withHubs(2, poll: .seconds(1)) { stores, hubs in
            let hub = stores[0]
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                try await InProcessMesh.withLink(b.sync, hubs[1]) { () async throws in
                    _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'one'})")
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        let (inA, inB) = (try await Self.ids(a.store.execute("SELECT _id FROM notes")), try await Self.ids(b.store.execute("SELECT _id FROM notes")))
                        return inA == ["one"] && inB == ["one"]
                    })
                }
            }
            try await Self.restoreEmpty(hub.database)
            let two = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'two'})")
            #expect((two.transactionID?.sequence ?? 0) > OriginHistory.reissueGap, "not the number 'one' took: the hub knew")
            // More after it, through both hubs: all of them are committed again.
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'deux'}), ({'_id': 'dos'})")
            _ = try await stores[1].execute("INSERT INTO notes DOCUMENTS ({'_id': 'zwei'})")
            #expect(try await a.store.history(of: hub.siteID).through == 1)
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                try await InProcessMesh.withLink(b.sync, hubs[1]) { () async throws in
                    func everywhere() async throws -> [Set<String>] {
                        [
                            try await Self.ids(a.store.execute("SELECT _id FROM notes")), try await Self.ids(b.store.execute("SELECT _id FROM notes")),
                            try await Self.ids(hub.execute("SELECT _id FROM notes")),
                        ]
                    }
                    let all: Set<String> = ["one", "two", "deux", "dos", "zwei"]
                    let healed = try await InProcessMesh.eventually(timeout: .seconds(30)) { try await everywhere() == Array(repeating: all, count: 3) }
                    let seen = try await everywhere()
                    #expect(healed, "a \(seen[0]), b \(seen[1]), the hubs \(seen[2])")
                    // A write after the repair takes a number above every one given, and arrives.
                    let three = try await stores[1].execute("INSERT INTO notes DOCUMENTS ({'_id': 'three'})")
                    #expect((three.transactionID?.sequence ?? 0) > OriginHistory.reissueGap)
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        try await Self.ids(a.store.execute("SELECT _id FROM notes")) == all.union(["three"])
                    })
                }
            }
            #expect(hub.mayLackOwnTransactions && stores[1].mayLackOwnTransactions, "both hubs know the database may lack its own")
        }
    }

    /// Every table of the hubs' schema: what a backup holds (`backUp`, `restoreBackup`).
    static func tables(_ database: PostgresHubDatabase) async throws -> [String] {
        try await database.query(
            """
            SELECT table_name::text FROM information_schema.tables
            WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name NOT LIKE 'backup\\_%'
            ORDER BY table_name
            """, logger: logger
        ).decode(String.self).map { $0 }
    }

    /// Copies every table of the hubs' database aside, as a backup taken now.
    static func backUp(_ database: PostgresHubDatabase) async throws {
        for table in try await tables(database) { try await database.execute("CREATE TABLE backup_\(table) AS TABLE \(table)") }
    }

    /// Puts every table back as `backUp` copied it, as a backup restored in place.
    static func restoreBackup(_ database: PostgresHubDatabase) async throws {
        for table in try await tables(database) {
            try await database.execute("DELETE FROM \(table)")
            try await database.execute("INSERT INTO \(table) TABLE backup_\(table)")
        }
    }

    /// A counter incremented on a hub whose database was restored under it from a backup
    /// taken between two increments, which device a holds both of. The hub's next
    /// increment used to write its contribution on from the backup's total, under a
    /// newer version than the one a holds, so the increment after the backup was lost on
    /// every node (found by `shoal-check`, seed 3034030499: a counter 17 short after a
    /// restore under a running hub; here 6 instead of 8). The repair now names the hub's
    /// contributions anew: the increments before and after the restore are summed
    /// everywhere.
    @Test func aCounterIncrementedAfterTheDatabaseWentBackKeepsEveryIncrement() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        defer { a.remove() }
        try await Self.withHubs(1) { stores, hubs in
            let hub = stores[0]
            @Sendable func counts() async throws -> [Int?] {
                [
                    try await a.store.execute("SELECT n FROM notes WHERE _id = 'c'").items.first?["n"]?.intValue,
                    try await hub.execute("SELECT n FROM notes WHERE _id = 'c'").items.first?["n"]?.intValue,
                ]
            }
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'c'})")
                _ = try await hub.execute("UPDATE notes APPLY n INCREMENT BY 1 WHERE _id = 'c'")
                try await Self.backUp(hub.database)
                _ = try await hub.execute("UPDATE notes APPLY n INCREMENT BY 2 WHERE _id = 'c'")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) { try await counts() == [3, 3] })
            }
            try await Self.restoreBackup(hub.database)
            _ = try await hub.execute("UPDATE notes APPLY n INCREMENT BY 5 WHERE _id = 'c'")
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                let summed = try await InProcessMesh.eventually(timeout: .seconds(30)) { try await counts() == [8, 8] }
                let seen = try await counts()
                #expect(summed, "1 + 2 + 5 on a and on the hub: \(seen)")
            }
        }
    }

    /// Another hub's repair, which this hub has not heard of yet (its announcement is on
    /// the way; here it never comes, and the hub looks again only hourly): the repair
    /// raised the cursor epoch, and this hub's one writer reads it as it begins, so the
    /// increment it writes next is under a new name, not the one the database holds at
    /// the backup's total (DATA_MODEL.md §7). Its sessions are told every cursor was
    /// forgotten, once. Before, the hub named its contributions anew only once it heard.
    @Test func anIncrementAfterAnotherHubsRepairIsNamedAnewBeforeItHearsOfIt() async throws {
        try await Self.withHubs(1) { stores, _ in
            let hub = stores[0]
            let heard = Locked<[UInt64]>([])
            let resets = hub.cursorResets()
            let listening = Task { for await epoch in resets { heard.withLock { $0.append(epoch) } } }
            defer { listening.cancel() }
            @Sendable func names() async throws -> Int64 {
                try await Self.value(hub.database, "SELECT count(*) FROM field WHERE collection = 'notes' AND position('\\x1f'::bytea IN name) > 0")
            }
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'c'})")
            _ = try await hub.execute("UPDATE notes APPLY n INCREMENT BY 1 WHERE _id = 'c'")
            _ = try await hub.execute("UPDATE notes APPLY n INCREMENT BY 1 WHERE _id = 'c'")
            #expect(try await names() == 1)
            let named = hub.counterSite
            // What another hub's repair commits, with its announcement not delivered.
            let epoch = try await Self.value(hub.database, "SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'")
            try await hub.database.execute("UPDATE shoal_meta SET value = 1 WHERE key = 'may_lack_own_transactions'")
            try await hub.database.execute("UPDATE shoal_meta SET value = \(epoch + 1) WHERE key = 'cursor_epoch'")
            _ = try await hub.execute("UPDATE notes APPLY n INCREMENT BY 1 WHERE _id = 'c'")
            #expect(hub.counterSite != named)
            #expect(try await names() == 2, "the increment after the repair wrote a contribution of its own")
            #expect(try await hub.execute("SELECT n FROM notes WHERE _id = 'c'").items.first?["n"]?.intValue == 3)
            #expect(await InProcessMesh.eventually(timeout: .seconds(10)) { heard.withLock { $0 } == [UInt64(epoch + 1)] })
            _ = try await hub.execute("UPDATE notes APPLY n INCREMENT BY 1 WHERE _id = 'c'")
            #expect(try await names() == 2, "named anew once, not at every write")
            // An epoch below the one the hub knows: the database went back (to a backup
            // taken before, or a server whose clock stands behind gave it).
            try await hub.database.execute("UPDATE shoal_meta SET value = \(epoch) WHERE key = 'cursor_epoch'")
            _ = try await hub.execute("UPDATE notes APPLY n INCREMENT BY 1 WHERE _id = 'c'")
            #expect(try await names() == 3, "named anew for an older epoch too")
            #expect(try await hub.execute("SELECT n FROM notes WHERE _id = 'c'").items.first?["n"]?.intValue == 5)
        }
    }

    /// A repair, a backup restored from before it, and a second repair: the second's
    /// cursor epoch is above the first's. Counted on by one, it was the first's again,
    /// which a hub that had heard the first took for nothing new: its increments kept
    /// the name the restored database holds at the backup's total.
    @Test func aRepairAfterARestoreNeverGivesAnEpochAgain() async throws {
        try await Self.withHubs(1) { stores, _ in
            let hub = stores[0]
            @Sendable func epoch() async throws -> Int64 {
                try await Self.value(hub.database, "SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'")
            }
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'one'})")
            try await Self.backUp(hub.database)
            let before = try await epoch()
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'two'})")
            try await Self.restoreBackup(hub.database)
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'three'})")
            let first = try await epoch()
            #expect(first > before, "the first repair raised the epoch")
            let named = hub.counterSite
            try await Self.restoreBackup(hub.database)
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'four'})")
            let second = try await epoch()
            #expect(second > first, "the second repair's epoch, \(second), is above the first's, \(first)")
            #expect(hub.counterSite != named)
        }
    }

    /// A database that goes back under running hubs (a failover that lost commits) while
    /// device a stays linked to hub 1 through it: no Subscribe tells, so the hubs must
    /// find it themselves. Before the repair, hub 2's next write took sequence 1 of the
    /// log, which a's stream had passed, and the number of the hub's transaction 'one',
    /// which a holds: a never got it. Now the write repairs the database first: a gets
    /// it on the link it kept, hub 1's observer fires for it, and what the database lost
    /// comes back from a: the hub's own 'one' and a's 'mine', which hub 1 had applied.
    @Test func aDatabaseThatGoesBackUnderRunningHubsIsRepairedWithoutASubscribe() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        defer { a.remove() }
        try await Self.withHubs(2) { stores, hubs in
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                _ = try await stores[0].execute("INSERT INTO notes DOCUMENTS ({'_id': 'one'})")
                _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'mine'})")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    let held = (try await Self.ids(a.store.execute("SELECT _id FROM notes")), try await Self.ids(stores[0].execute("SELECT _id FROM notes")))
                    return held == (["one", "mine"], ["one", "mine"])
                })
                let end = try await stores[0].lastSequence()
                #expect(await InProcessMesh.eventually(timeout: .seconds(10)) { stores[1].lastCommittedSequence == end }, "hub 2 heard hub 1's commits")
                let updates = try stores[0].observe("SELECT * FROM notes WHERE _id = 'two'", arguments: [:])
                let observed = Locked<[Int]>([])
                let watching = Task { for try await update in updates { observed.withLock { $0.append(update.items.count) } } }
                defer { watching.cancel() }
                #expect(await InProcessMesh.eventually(timeout: .seconds(10)) { observed.withLock { $0 == [0] } })
                try await Self.restoreEmpty(stores[0].database)
                let two = try await stores[1].execute("INSERT INTO notes DOCUMENTS ({'_id': 'two'})")
                #expect((two.transactionID?.sequence ?? 0) > OriginHistory.reissueGap, "not the number 'one' took")
                #expect(await InProcessMesh.eventually(timeout: .seconds(30)) { observed.withLock { $0 == [0, 1] } }, "hub 1's observer")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(a.store.execute("SELECT _id FROM notes")) == ["one", "mine", "two"]
                }, "a gets hub 2's write on the link it kept")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(stores[1].execute("SELECT _id FROM notes")) == ["one", "mine", "two"]
                }, "what the database lost comes back from a")
            }
        }
    }

    /// Devices resuming past the end of a log that went back, at a hub that knows nothing
    /// of it (started on the database since, with nothing remembered): the first moves
    /// the log above its cursor and the repair's margin and forgets every cursor, so that
    /// the other hubs hear of it; the second, whose cursor is further on, finds nothing
    /// to move. Before the margin, each moved it again, and (now that a move forgets
    /// every cursor) would have restarted every stream again.
    @Test func devicesResumingPastTheEndOfALogThatWentBackMoveItOnce() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM notes"])
        defer {
            a.remove()
            b.remove()
        }
        try await Self.withHubs(1) { stores, hubs in
            let database = stores[0].database
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                try await Self.write(["one"], through: stores[0], reaching: a)
            }
            try await InProcessMesh.withLink(b.sync, hubs[0]) { () async throws in
                for id in ["two", "three"] { _ = try await stores[0].execute("INSERT INTO notes DOCUMENTS ({'_id': '\(id)'})") }
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(b.store.execute("SELECT _id FROM notes")) == ["one", "two", "three"]
                })
            }
            // The hub that knew stops (else it could find the loss itself, and repair
            // first), and the log's rows are lost, the hubs' transactions kept: a's
            // cursor is 1, b's 3.
            stores[0].close()
            try await database.execute("DELETE FROM change_log")
            try await database.execute("UPDATE shoal_meta SET value = 0 WHERE key = 'log_end'")
            let records = LogRecords()
            let late = try await PostgresStore.open(database, logger: Logger(label: "shoal.test.late") { _ in CapturingLogHandler(records: records) })
            defer { late.close() }
            @Sendable func said() -> String { records.all.filter { $0.level >= .warning }.map(\.message).joined(separator: "\n") }
            let engine = SyncEngine(store: late, configuration: SyncConfiguration(nodeName: "late", batchSize: 64))
            try engine.subscribe("SELECT * FROM notes")
            try await InProcessMesh.withLink(a.sync, engine) { () async throws in
                #expect(await InProcessMesh.eventually(timeout: .seconds(30)) { late.repairs == 1 }, "a's cursor moved the log")
                let end = try await Self.value(database, "SELECT value FROM shoal_meta WHERE key = 'log_end'")
                #expect(end > Int64(OriginHistory.reissueGap), "the log ends at \(end)")
                try await InProcessMesh.withLink(b.sync, engine) { () async throws in
                    _ = try await late.execute("INSERT INTO notes DOCUMENTS ({'_id': 'four'})")
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        try await Self.ids(b.store.execute("SELECT _id FROM notes")) == ["one", "two", "three", "four"]
                    }, "b resumes and gets what the hub writes next")
                }
            }
            #expect(late.repairs == 1, "moved, and every cursor forgotten, once: \(said())")
        }
    }

    /// A database that lost the tail of its log under running hubs, found by a device
    /// resuming past the log's end: the repair and the move above the device's cursor
    /// run in one write, and the move must follow the repair. It once read where the log
    /// ended before the repair, so it found nothing to move yet set the log's end back
    /// to 4, far below the moved rows: hub 2, which had read none of them, would number
    /// its next rows there, below where devices stood, and hub 1 repaired a second time.
    @Test func aDeviceResumingPastALogThatLostItsTailLeavesItRepairedOnce() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        defer { a.remove() }
        try await Self.withHubs(2) { stores, hubs in
            let database = stores[0].database
            @Sendable func meta(_ key: String) async throws -> Int64 { try await Self.value(database, "SELECT value FROM shoal_meta WHERE key = '\(key)'") }
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                try await Self.write(["one", "two", "three"], through: stores[0], reaching: a)
            }
            // The last two transactions lost, as a failover that lost them leaves it.
            let site = Int64(bitPattern: stores[0].siteID.rawValue)
            try await database.execute("DELETE FROM change_log WHERE seq > 1")
            try await database.execute("DELETE FROM txn WHERE origin = \(site) AND seq > 1")
            try await database.execute("UPDATE shoal_meta SET value = 1 WHERE key IN ('log_end', 'transaction_counter')")
            let epoch = try await meta("cursor_epoch")
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await meta("cursor_epoch") > epoch
                }, "repaired")
                let repaired = try await meta("cursor_epoch")
                let end = try await meta("log_end")
                let last = Int64(bitPattern: try await stores[0].lastSequence())
                #expect(end >= last && end > Int64(OriginHistory.reissueGap), "the log ends at \(end), its last row is \(last)")
                _ = try await stores[1].execute("INSERT INTO notes DOCUMENTS ({'_id': 'four'})")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(a.store.execute("SELECT _id FROM notes")) == ["one", "two", "three", "four"]
                }, "hub 2's write after the repair reaches a")
                for store in stores { await store.repairIfWentBack() }
                #expect(try await meta("cursor_epoch") == repaired, "repaired once")
                #expect(stores.map(\.repairs) == [1, 0], "by hub 1 alone")
            }
        }
    }

    /// The same with nothing written after the database went back: hub 1 finds it at its
    /// next slow tick, and a's write 'mine', which the database lost after hub 1 applied
    /// it, comes back on the link a kept.
    @Test func aDatabaseThatGoesBackUnderAnIdleHubIsRepairedAtItsNextTick() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        defer { a.remove() }
        try await Self.withHubs(1, poll: .milliseconds(500)) { stores, hubs in
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'mine'})")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(stores[0].execute("SELECT _id FROM notes")) == ["mine"]
                })
                try await Self.restoreEmpty(stores[0].database)
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(stores[0].execute("SELECT _id FROM notes")) == ["mine"]
                }, "a sends 'mine' again")
                #expect(stores[0].lastCommittedSequence > OriginHistory.reissueGap, "the log's end moved above what the hub knew")
            }
        }
    }

    /// A hub hears that another forgot every cursor (`cursors <epoch>` on the log's
    /// channel), but an announcement can be lost: dropped while the hub did not listen,
    /// or on a listening connection whose link died without a word. The hub reads the
    /// epoch again at each tick (`lookAgain`), and its sessions start their streams again.
    @Test func cursorsAnotherHubForgotReachAHubThatDidNotHearItAtItsNextTick() async throws {
        try await Self.withHubs(1, poll: .milliseconds(300)) { stores, _ in
            let database = stores[0].database
            let heard = Locked<[UInt64]>([])
            let resets = stores[0].cursorResets()
            let listening = Task { for await epoch in resets { heard.withLock { $0.append(epoch) } } }
            defer { listening.cancel() }
            // Once the hub listens (what it reads as it starts listening is not what this tests).
            try await Task.sleep(for: .seconds(1))
            let epoch = try await Self.value(database, "SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'")
            // What a repair on another hub writes, with no announcement.
            try await database.execute("UPDATE shoal_meta SET value = 1 WHERE key = 'may_lack_own_transactions'")
            try await database.execute("UPDATE shoal_meta SET value = \(epoch + 1) WHERE key = 'cursor_epoch'")
            #expect(await InProcessMesh.eventually(timeout: .seconds(10)) { heard.withLock { $0 } == [UInt64(epoch + 1)] })
            try await Task.sleep(for: .milliseconds(700))
            #expect(heard.withLock { $0 } == [UInt64(epoch + 1)], "told once")
        }
    }

    /// A database that lost the tail of its log under a running hub, and a hub that knew
    /// less (started on it since) logging past where the first hub stood before the first
    /// hub looked: the log no longer ends below what hub 1 knew, but its row 3 holds the
    /// late hub's 'five' under the number 'three' had. Before hub 1 also compared that
    /// row (`KnownLog.witness`), device a, whose cursor had passed sequences 2 and 3, never
    /// got 'four' and 'five', and the hubs never got back 'two' and 'three'. Now hub 1's
    /// next page read finds the row changed and repairs the database, once.
    @Test func aLogThatWentBackAndWasWrittenPastWhereAHubStoodIsRepaired() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        defer { a.remove() }
        try await Self.withHubs(2) { stores, hubs in
            let database = stores[0].database
            @Sendable func meta(_ key: String) async throws -> Int64 { try await Self.value(database, "SELECT value FROM shoal_meta WHERE key = '\(key)'") }
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                try await Self.write(["one", "two", "three"], through: stores[0], reaching: a)
                #expect(try await stores[0].lastSequence() == 3)
                // 'two' and 'three' lost, as a failover that lost them leaves it.
                let site = Int64(bitPattern: stores[0].siteID.rawValue)
                try await database.execute("DELETE FROM change_log WHERE seq > 1")
                try await database.execute("DELETE FROM txn WHERE origin = \(site) AND seq > 1")
                try await database.execute("DELETE FROM field WHERE doc_id IN ('\"two\"', '\"three\"')")
                try await database.execute("DELETE FROM document WHERE doc_id IN ('\"two\"', '\"three\"')")
                try await database.execute("UPDATE shoal_meta SET value = 1 WHERE key IN ('log_end', 'transaction_counter')")
                let epoch = try await meta("cursor_epoch")
                // A hub started on the database since knows nothing of what it lost.
                let late = try await PostgresStore.open(stores[1].database, logger: Self.logger)
                defer { late.close() }
                for id in ["four", "five", "six"] { _ = try await late.execute("INSERT INTO notes DOCUMENTS ({'_id': '\(id)'})") }
                let all: Set<String> = ["one", "two", "three", "four", "five", "six"]
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(a.store.execute("SELECT _id FROM notes")) == all
                }, "a gets the late hub's writes below its cursor")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(stores[0].execute("SELECT _id FROM notes")) == all
                }, "what the database lost comes back from a")
                let repaired = try await meta("cursor_epoch")
                #expect(repaired > epoch, "repaired")
                #expect(stores.map(\.repairs) == [1, 0] && late.repairs == 0, "once, by hub 1")
                for store in stores { await store.repairIfWentBack() }
                #expect(try await meta("cursor_epoch") == repaired, "and not again")
                #expect(stores.map(\.repairs) == [1, 0] && late.repairs == 0, "and not again")
            }
        }
    }

    /// The same found by a hub with no session reading the log: it knows the newest row
    /// from its own write, and finds the late hub's row there as it writes again, or at
    /// its next tick. Every transaction of the hubs is committed again above the gap, the
    /// late hub's too, whose numbers devices may hold for what the database lost.
    @Test(arguments: [true, false]) func aHubThatOnlyWroteFindsItsLogWrittenPastAfterItWentBack(writing: Bool) async throws {
        try await Self.withHubs(1) { stores, _ in
            let hub = stores[0]
            let database = hub.database
            @Sendable func value(_ sql: String) async throws -> Int64 { try await Self.value(database, sql) }
            for id in ["one", "two", "three"] { _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': '\(id)'})") }
            let site = Int64(bitPattern: hub.siteID.rawValue)
            try await database.execute("DELETE FROM change_log WHERE seq > 1")
            try await database.execute("DELETE FROM txn WHERE origin = \(site) AND seq > 1")
            try await database.execute("UPDATE shoal_meta SET value = 1 WHERE key IN ('log_end', 'transaction_counter')")
            let epoch = try await value("SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'")
            let late = try await PostgresStore.open(database, logger: Self.logger)
            defer { late.close() }
            for id in ["four", "five", "six"] { _ = try await late.execute("INSERT INTO notes DOCUMENTS ({'_id': '\(id)'})") }
            #expect(try await value("SELECT value FROM shoal_meta WHERE key = 'log_end'") == 4, "written past where the hub stood")
            if writing {
                let seven = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'seven'})")
                #expect((seven.transactionID?.sequence ?? 0) > OriginHistory.reissueGap)
            } else {
                await hub.repairIfWentBack()
            }
            let repaired = try await value("SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'")
            #expect(repaired > epoch, "repaired")
            #expect(try await value("SELECT count(*) FROM txn WHERE seq <= \(OriginHistory.reissueGap)") == 0, "every number given again")
            #expect(try await value("SELECT min(seq) FROM change_log") > Int64(OriginHistory.reissueGap), "every row moved")
            await hub.repairIfWentBack()
            #expect(try await value("SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'") == repaired, "once")
            #expect(hub.repairs == 1 && late.repairs == 0, "once")
        }
    }

    /// A hub started on a database that went back while it was stopped finds it as it
    /// opens, from what it knew when it last ran, kept in its data directory
    /// (`RememberedLog`), and repairs before it writes: whether the log now ends below
    /// where it stood, or a hub that knew less has written past it since
    /// (`writtenPast`). Without it, the hub's next numbers would be those devices hold
    /// for what the database lost, and only a device's Subscribe could tell.
    @Test(arguments: [false, true]) func aHubStartedOnADatabaseThatWentBackWhileItWasStoppedRepairsAsItOpens(writtenPast: Bool) async throws {
        let dir = TemporaryDirectory(prefix: "shoal-hub-remembers")
        defer { dir.remove() }
        try await TemporaryPostgresDatabase.withDatabase(hubs: 1) { databases in
            let database = databases[0]
            @Sendable func value(_ sql: String) async throws -> Int64 { try await Self.value(database, sql) }
            let hub = try await PostgresStore.open(database, rememberingIn: dir.path, logger: Self.logger)
            for id in ["one", "two", "three"] { _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': '\(id)'})") }
            hub.close()
            let file = dir.path + "/" + PostgresStore.rememberedFileName(hub.siteID)
            let kept = try #require(try RememberedLogFile.read(file))
            #expect(kept["end"] as? Int == 3, "\(kept)")

            let site = Int64(bitPattern: hub.siteID.rawValue)
            try await database.execute("DELETE FROM change_log WHERE seq > 1")
            try await database.execute("DELETE FROM txn WHERE origin = \(site) AND seq > 1")
            try await database.execute("UPDATE shoal_meta SET value = 1 WHERE key IN ('log_end', 'transaction_counter')")
            let epoch = try await value("SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'")
            if writtenPast {
                // A hub with nothing remembered sees nothing wrong, and logs on past sequence 3.
                let late = try await PostgresStore.open(database, logger: Self.logger)
                for id in ["four", "five", "six"] { _ = try await late.execute("INSERT INTO notes DOCUMENTS ({'_id': '\(id)'})") }
                late.close()
                #expect(try await value("SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'") == epoch, "not repaired by it")
                #expect(try await value("SELECT value FROM shoal_meta WHERE key = 'log_end'") == 4)
            }
            let again = try await PostgresStore.open(database, rememberingIn: dir.path, logger: Self.logger)
            let repaired = try await value("SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'")
            #expect(repaired > epoch && again.repairs == 1, "repaired as it opened")
            #expect(try await value("SELECT min(seq) FROM change_log") > Int64(OriginHistory.reissueGap), "every row moved")
            #expect(try await value("SELECT count(*) FROM txn WHERE seq <= \(OriginHistory.reissueGap)") == 0, "every number given again")
            let seven = try await again.execute("INSERT INTO notes DOCUMENTS ({'_id': 'seven'})")
            #expect((seven.transactionID?.sequence ?? 0) > OriginHistory.reissueGap)
            again.close()
            let third = try await PostgresStore.open(database, rememberingIn: dir.path, logger: Self.logger)
            third.close()
            #expect(try await value("SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'") == repaired, "once")
            #expect(again.repairs == 1 && third.repairs == 0, "once")
            // A file no hub wrote is ignored, with no repair, and written again.
            try Data("not json".utf8).write(to: URL(fileURLWithPath: file))
            let fourth = try await PostgresStore.open(database, rememberingIn: dir.path, logger: Self.logger)
            fourth.close()
            #expect(try await value("SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'") == repaired && fourth.repairs == 0)
            #expect(try RememberedLogFile.read(file)?["version"] as? Int == 1, "written again")
        }
    }

    /// What a hub knows of the log is in its data directory soon after each write, not
    /// only at its 5 s tick or when it closes: a hub killed -9 between ticks, on a
    /// database then restored, finds the restore as it opens. Its tick here is an hour
    /// away and it is closed only once the file is read, as a killed process is never
    /// closed; before, the file said
    /// nothing of the writes until the tick (the checker met a hub killed 4 s after it
    /// started, with the restore found only by a device's Subscribe).
    @Test func aHubKeepsWhatItKnowsOfTheLogSoonAfterEachWriteNotOnlyAtItsTick() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-hub-keeps")
        defer { dir.remove() }
        try await TemporaryPostgresDatabase.withDatabase(hubs: 1) { databases in
            let database = databases[0]
            let hub = try await PostgresStore.open(database, rememberingIn: dir.path, logger: Self.logger)
            let following = Task { await hub.followOtherHubs(every: .seconds(3600)) }
            let file = dir.path + "/" + PostgresStore.rememberedFileName(hub.siteID)
            #expect(try RememberedLogFile.read(file)?["end"] as? Int == 0, "kept at open")
            for id in ["one", "two", "three"] { _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': '\(id)'})") }
            let end = try await hub.lastSequence()
            #expect(end == 3)
            let kept = await InProcessMesh.eventually(timeout: .seconds(10)) {
                (try? RememberedLogFile.read(file))?["end"] as? Int == Int(end)
            }
            #expect(kept, "\(String(describing: try? RememberedLogFile.read(file)))")
            let witness = try RememberedLogFile.read(file)?["witness"] as? [String: Any]
            #expect(witness?["sequence"] as? Int == Int(end), "\(String(describing: witness))")
            following.cancel()
            await following.value
            hub.close()
        }
    }

    /// A device resuming after the end of a hub's log (a database restored to before it
    /// was written, with nothing written since): the hub moves its log above the device's
    /// cursor rather than refuse, so what it logs next is sent; and the device sends back
    /// the hub's own transaction the database lost.
    @Test func aDeviceResumingPastTheEndOfAHubsLogGetsWhatItLogsNext() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        defer { a.remove() }
        try await Self.withHubs(1) { stores, hubs in
            let hub = stores[0]
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'one'}), ({'_id': 'uno'})")
                _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'two'})")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(a.store.execute("SELECT _id FROM notes")) == ["one", "uno", "two"]
                })
            }
            try await Self.restoreEmpty(hub.database)
            #expect(try await hub.lastSequence() == 0)
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(hub.execute("SELECT _id FROM notes")) == ["one", "uno", "two"]
                }, "the device sends the hub's lost transactions back")
                _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'three'})")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await Self.ids(a.store.execute("SELECT _id FROM notes")) == ["one", "uno", "two", "three"]
                }, "what the hub logs after the repair reaches the device")
            }
        }
    }

    /// The largest cursor a hub believes (`OriginHistory.believable`): its log moves above
    /// it and its margin and stays below what a Subscribe may carry, so a device that
    /// synced after it is served when it resumes (HistorySyncTests has the same on SQLite,
    /// and what is not believed).
    @Test func aLogMovedAboveTheLargestCursorBelievedServesTheDevicesAfterIt() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        defer { a.remove() }
        try await Self.withHubs(1) { stores, hubs in
            let hub = stores[0]
            _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': 'one'})")
            let raised = try #require(try await hub.raiseLog(above: OriginHistory.believable, peer: SiteID(99)))
            #expect(raised > OriginHistory.believable + OriginHistory.reissueGap && raised < OriginHistory.maximumSequence)
            for id in ["two", "three"] {
                _ = try await hub.execute("INSERT INTO notes DOCUMENTS ({'_id': :id})", arguments: ["id": .string(id)])
                try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        try await Self.ids(a.store.execute("SELECT _id FROM notes")).contains(id)
                    }, "the device resumes past the move and is served")
                }
            }
        }
    }

    /// A write with a budget waits for another hub's writer until its deadline at most,
    /// then fails as out of budget, nothing written; the other hub's transaction is not
    /// disturbed.
    @Test func aWriteWaitsForTheOtherHubsWriterOnlyUntilItsDeadline() async throws {
        try await Self.withHubs(2) { stores, _ in
            let (holding, held) = AsyncStream.makeStream(of: Void.self)
            let (release, released) = AsyncStream.makeStream(of: Void.self)
            let finished = Locked(false)
            async let long = stores[0].transaction { tx -> TransactionCompletion in
                _ = try await tx.execute("INSERT INTO notes DOCUMENTS ({'_id': 'long'})")
                held.yield()
                // Held until the other write has failed; 30 s at most, should it wait for this one.
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { for await _ in release { break } }
                    group.addTask { try? await Task.sleep(for: .seconds(30)) }
                    await group.next()
                    group.cancelAll()
                }
                finished.withLock { $0 = true }
                return .commit
            }
            for await _ in holding { break }
            let error = await #expect(throws: ShoalError.self) {
                try await stores[1].execute("INSERT INTO notes DOCUMENTS ({'_id': 'short'})", deadline: Deadline(budget: .milliseconds(300)))
            }
            #expect(error?.code == .deadlineExceeded, "\(String(describing: error))")
            // Told by order, not by the clock, which a loaded machine stretches.
            #expect(!finished.withLock { $0 }, "it failed while the other hub's writer held on, not after it finished")
            released.yield()
            let committed = try await long
            #expect(committed.transactionID != nil)
            #expect(try await stores[1].execute("SELECT _id FROM notes").items == [["_id": "long"]])
        }
    }

    /// A budget longer than PostgreSQL's `lock_timeout` takes (about 24.8 days) still
    /// writes.
    @Test func aLongBudgetStillWrites() async throws {
        try await Self.withHubs(1) { stores, _ in
            let written = try await stores[0].execute(
                "INSERT INTO notes DOCUMENTS ({'_id': 'a'})", deadline: Deadline(budget: .seconds(40 * 86_400)))
            #expect(written.transactionID != nil)
        }
    }

    /// Hub 1 compacts the shared log: hub 2 sees the log shorter and the point moved, and
    /// a new device that syncs from hub 2 from the start gets the same documents.
    @Test func aLogCompactedThroughOneHubServesANewDeviceThroughTheOther() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        let c = try TestNode(name: "c", subscriptions: ["SELECT * FROM notes"])
        defer {
            a.remove()
            c.remove()
        }
        try await Self.withHubs(2) { stores, hubs in
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                for i in 0..<40 {
                    _ = try await a.store.execute(
                        "INSERT INTO notes DOCUMENTS ({'_id': :id, 'n': :n}) ON ID CONFLICT DO UPDATE",
                        arguments: ["id": .string("d\(i % 4)"), "n": .int(Int64(i))])
                }
                _ = try await a.store.execute("DELETE FROM notes WHERE _id = 'd3'")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    let d0 = try await stores[1].execute("SELECT n FROM notes WHERE _id = 'd0'").items
                    let live = try await stores[1].execute("SELECT * FROM notes").items
                    return d0 == [["n": 36]] && live.count == 3
                })
            }
            let expected = try await stores[1].execute("SELECT * FROM notes ORDER BY _id").items
            let last = try await stores[0].lastSequence()
            let before = try await stores[1].changeLogRowCount()
            let report = try await stores[0].compactChangeLog(after: 0, through: last, progress: { _, _ in })
            // d0 to d2 keep their creating write (it holds _id) and their last; every other
            // write goes, d3's ten with them (its DELETE hides them; the DELETE stays).
            #expect(report.transactionsRemoved == 34, "\(report)")
            #expect(try await stores[1].changeLogRowCount() == before - report.rowsRemoved)
            let status = try await stores[1].storageStatus()
            #expect(status.compactedThrough == last && status.compactedAt != nil)
            #expect(try await stores[1].compactChangeLog(after: 0, through: last, progress: { _, _ in }).rowsRemoved == 0)
            try await InProcessMesh.withLink(c.sync, hubs[1]) { () async throws in
                #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                    try await c.store.execute("SELECT * FROM notes ORDER BY _id").items == expected
                }, "the compacted log gives a new device every current value")
            }
        }
    }

    /// A device behind hub 2 fetches an attachment only a device behind hub 1 holds:
    /// hub 2 has no peer that holds it, so it asks hub 1 through the database, hub 1
    /// fetches it from its device into the shared staging entry, and every hub holds it.
    @Test func anAttachmentBehindOneHubIsFetchedThroughTheOther() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM notes"])
        defer {
            a.remove()
            b.remove()
        }
        let bytes = (0..<2_500_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) }  // three chunks
        let hash = AttachmentToken.hash(of: bytes)
        try await Self.withHubs(2) { stores, hubs in
            try await InProcessMesh.withLink(a.sync, hubs[0]) { () async throws in
                try await InProcessMesh.withLink(b.sync, hubs[1]) { () async throws in
                    let token = try await a.store.putAttachment(bytes, metadata: ["name": "scan.bin"])
                    _ = try await a.store.execute(
                        "INSERT INTO COLLECTION notes (file ATTACHMENT) DOCUMENTS ({'_id': 'p', 'file': :t})",
                        arguments: ["t": token.value])
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                        try await b.store.execute("SELECT * FROM notes WHERE _id = 'p'").items.count == 1
                    })
                    #expect(try await stores[1].attachmentLength(hash: hash) == nil, "hubs fetch bytes only when asked")
                    // Hub 2 answers "not found" when hub 1's fetch has shown nothing within
                    // its relay wait (8 s), as a loaded machine can make it (twice in the
                    // whole suite); hub 1's fetch goes on, and b asks again, as an app does.
                    var fetched: Int?
                    for attempt in 1...3 where fetched == nil {
                        do {
                            fetched = try await b.sync.fetchAttachment(hash: hash)
                        } catch where attempt < 3 {
                            continue
                        }
                    }
                    #expect(fetched == bytes.count)
                    #expect(try await b.store.attachmentChunk(hash: hash, offset: 0, maximum: .max)?.bytes == bytes)
                    #expect(try await stores[0].attachmentLength(hash: hash) == bytes.count, "held by every hub: one database")
                    #expect(try await stores[0].attachmentChunk(hash: hash, offset: 2_000_000, maximum: 10)?.bytes == Array(bytes[2_000_000..<2_000_010]))
                }
            }
            // With no other hub running to take the request, a hub's fetch of bytes no
            // peer holds fails (after the hubs' first-sign wait), and stores nothing.
            let unknown = AttachmentToken.hash(of: [1, 2, 3])
            await #expect(throws: ShoalError.self) { _ = try await hubs[1].fetchAttachment(hash: unknown) }
            #expect(try await stores[0].attachmentLength(hash: unknown) == nil)
        }
    }

    /// Two hubs fetching the same bytes share one staging entry: the slower one's part is
    /// refused, it goes on from where the other got, and when both finish, the bytes
    /// stay (the second to finish must not drop the chunks the first made an attachment).
    @Test func twoHubsFinishingOneFetchKeepTheBytes() async throws {
        let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
        let hash = AttachmentToken.hash(of: bytes)
        try await Self.withHubs(2) { stores, _ in
            var first = try await stores[0].attachmentWriter(fetching: hash)
            let second = try await stores[1].attachmentWriter(fetching: hash)
            #expect(first.blob == second.blob, "one staging entry per hash, on every hub")
            try await first.append(Array(bytes[..<200_000]))
            var late = second
            await #expect(throws: ShoalError.self) { try await late.append(Array(bytes[..<100_000])) }
            var resumed = try await stores[1].attachmentWriter(fetching: hash)
            #expect(resumed.received == 200_000)
            try await resumed.append(Array(bytes[200_000...]))
            let caughtUp = try await stores[0].attachmentWriter(fetching: hash)
            #expect(caughtUp.received == bytes.count)
            _ = try await resumed.finish()
            _ = try await caughtUp.finish()
            #expect(try await stores[0].attachmentChunk(hash: hash, offset: 0, maximum: .max)?.bytes == bytes)
            #expect(try await stores[1].attachmentChunk(hash: hash, offset: 299_990, maximum: 100)?.bytes == Array(bytes[299_990...]))
            try await first.discard()
            #expect(try await stores[1].attachmentLength(hash: hash) == bytes.count, "a stale writer's discard keeps the attachment's bytes")
            #expect(try await stores[1].attachmentChunk(hash: hash, offset: 0, maximum: .max)?.bytes == bytes)
        }
    }
}

/// A hub's `RememberedLog` file as JSON, for tests to look into.
enum RememberedLogFile {
    static func read(_ path: String) throws -> [String: Any]? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return try JSONSerialization.jsonObject(with: data) as? [String: Any]
    }
}

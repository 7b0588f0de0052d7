import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// Transactions across the mesh, in one process over in-memory connections:
/// applied whole wherever coverage allows, waiting or partial where it does not.
@Suite struct CoverageSyncTests {
    static let accounts = (0..<10).map { i in (id: "acct-\(i)", region: i < 5 ? "eu" : "us") }
    static let eu = "SELECT * FROM accounts WHERE region = 'eu'"
    static let all = "SELECT * FROM accounts"

    static func open(_ node: TestNode) async throws {
        let docs: [Value] = accounts.map { ["_id": .string($0.id), "region": .string($0.region), "balance": 100] }
        _ = try await node.store.execute("INSERT INTO accounts DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
    }

    /// Moves `amount` between two accounts in one transaction.
    @discardableResult
    static func transfer(_ node: TestNode, from: String, to: String, amount: Int64) async throws -> TransactionID {
        try await node.store.execute(
            """
            UPDATE accounts SET balance = balance - :x WHERE _id = :from;
            UPDATE accounts SET balance = balance + :x WHERE _id = :to
            """, arguments: ["x": .int(amount), "from": .string(from), "to": .string(to)]
        ).transactionID!
    }

    static func balances(_ node: TestNode, _ query: String = "SELECT * FROM accounts") async throws -> [String: Int64] {
        var out: [String: Int64] = [:]
        for item in try await node.store.execute(query).items {
            if case .string(let id)? = item["_id"], case .int(let b)? = item["balance"] { out[id] = b }
        }
        return out
    }

    /// A line of three nodes that all want only the eu accounts: cross-region
    /// transfers apply at once on both hops, nothing waits, nothing is partial.
    @Test func aLineWithTheSameSubscriptionsNeverWaits() async throws {
        let a = try TestNode(name: "a")
        let b = try TestNode(name: "b", subscriptions: [Self.eu])
        let c = try TestNode(name: "c", subscriptions: [Self.eu])
        defer { a.remove(); b.remove(); c.remove() }
        try await Self.open(a)
        var ids: [TransactionID] = []
        for i in 0..<30 {
            ids.append(try await Self.transfer(a, from: "acct-\(i % 10)", to: "acct-\((i * 3 + 1) % 10)", amount: Int64(i + 1)))
        }
        try await InProcessMesh.withLink(b.sync, a.sync) { () async throws in
            try await InProcessMesh.withLink(c.sync, b.sync) { () async throws in
                let expected = try await Self.balances(a, Self.eu)
                #expect(try await InProcessMesh.eventually { try await Self.balances(c, Self.eu) == expected })
                #expect(try await Self.balances(b, Self.eu) == expected)
                for node in [b, c] {
                    let status = node.sync.pipeline.status
                    #expect(status.waiting.isEmpty && status.partial.isEmpty, "\(node.sync.configuration.nodeName): \(status)")
                    #expect(status.appliedRemote > 0)
                }
                #expect(try await c.store.execute("SELECT * FROM accounts WHERE region = 'us'").items.isEmpty)
            }
        }
    }

    /// B wants only eu accounts, C (behind B) wants all of them: a cross-region
    /// transfer reaches C in part. C holds it back, asks, applies what it has after
    /// the maximum wait and says so; once C reaches A as well, it completes them.
    @Test func aNarrowRelayLeavesTransactionsWaitingThenPartialUntilTheRestComes() async throws {
        let a = try TestNode(name: "a")
        // A relay that carries nothing for its neighbours, as a small device may be.
        let b = try TestNode(name: "b", subscriptions: [Self.eu]) { $0.relayForNeighbours = false }
        let c = try TestNode(name: "c", subscriptions: [Self.all]) { configuration in
            configuration.inbound.coverage.maximumWait = .seconds(1)
        }
        defer { a.remove(); b.remove(); c.remove() }
        try await Self.open(a)
        let crossing = try await Self.transfer(a, from: "acct-0", to: "acct-7", amount: 30)  // eu -> us
        let local = try await Self.transfer(a, from: "acct-1", to: "acct-2", amount: 5)  // eu -> eu
        try await InProcessMesh.withLink(b.sync, a.sync) { () async throws in
            try await InProcessMesh.withLink(c.sync, b.sync) { () async throws in
                // The eu-only transfer is whole for C; the crossing one is not.
                #expect(try await InProcessMesh.eventually { try await Self.balances(c)["acct-2"] == 105 })
                #expect(await InProcessMesh.eventually { c.sync.pipeline.status.partial.contains { $0.id == crossing } })
                let status = c.sync.pipeline.status
                let partial = try #require(status.partial.first { $0.id == crossing })
                #expect(partial.haveDocuments < partial.needDocuments && partial.missingCollections == ["accounts"])
                #expect(partial.askedPeers.isEmpty, "b, its only peer, already said what it holds")
                #expect(!status.partial.contains { $0.id == local } && !status.waiting.contains { $0.id == local })
                // Then C reaches A directly: it asks A, and the transaction becomes whole.
                let asked = Locked<[TransactionID]>([])
                let codec = MessageCodec()
                let toA = InMemoryConnection(observeFromA: { frame in
                    if case .transactionRequest(let r)? = try? codec.decode(frame) {
                        asked.withLock { $0.append(TransactionID(origin: SiteID(r.originSite), sequence: r.originSequence)) }
                    }
                })
                try await InProcessMesh.withLink(c.sync, a.sync, connection: toA) { () async throws in
                    #expect(await InProcessMesh.eventually { c.sync.pipeline.status.partial.isEmpty })
                    #expect(try await InProcessMesh.eventually { try await Self.balances(c) == Self.balances(a) })
                    #expect(c.sync.pipeline.status.completedLater >= 1)
                    #expect(c.sync.pipeline.status.waiting.isEmpty)
                    #expect(asked.withLock { Set($0) }.contains(crossing), "the new peer was asked for the partial one")
                }
            }
        }
        #expect(try await Self.balances(c).values.reduce(0, +) == 1000)
    }

    /// A – B – C, B narrower than C and relaying nothing for it: A's transfer from an eu
    /// account to a us one reaches C only in part (`crossing`), and C holds it partial.
    static func withCrossingHeldInPart(_ body: (_ a: TestNode, _ c: TestNode, _ crossing: TransactionID) async throws -> Void) async throws {
        let a = try TestNode(name: "a")
        let b = try TestNode(name: "b", subscriptions: [Self.eu]) { $0.relayForNeighbours = false }
        let c = try TestNode(name: "c", subscriptions: [Self.all]) { configuration in
            configuration.inbound.coverage.maximumWait = .seconds(1)
        }
        defer { a.remove(); b.remove(); c.remove() }
        try await Self.open(a)
        let crossing = try await Self.transfer(a, from: "acct-0", to: "acct-7", amount: 30)
        try await InProcessMesh.withLink(b.sync, a.sync) { () async throws in
            try await InProcessMesh.withLink(c.sync, b.sync) { () async throws in
                #expect(await InProcessMesh.eventually { c.sync.pipeline.status.partial.contains { $0.id == crossing } })
            }
        }
        try await body(a, c, crossing)
    }

    /// As above, but the origin compacted the transaction away before C reached it: A
    /// answers C's question with the transaction that overwrote what C lacks, C gets
    /// that one in A's log, and the partial one completes, never shown half.
    @Test func aTransactionCompactedAtItsOriginCompletesFromWhatSupersededIt() async throws {
        try await Self.withCrossingHeldInPart { a, c, crossing in
            // Both registers `crossing` wrote are overwritten, and compaction takes it out of A's log.
            let later = try await Self.transfer(a, from: "acct-0", to: "acct-7", amount: 1)
            _ = try await a.store.execute("INSERT INTO other DOCUMENTS ({'_id': 'last'})")
            let report = try await a.store.compactChangeLog(through: try await a.store.lastSequence())
            #expect(report.transactionsRemoved >= 1)
            #expect(try await a.store.transactionPieces(crossing, subscriptions: c.sync.subscriptions).allSatisfy(\.deltas.isEmpty))
            try await InProcessMesh.withLink(c.sync, a.sync) { () async throws in
                #expect(await InProcessMesh.eventually { c.sync.pipeline.status.partial.isEmpty })
                #expect(try await InProcessMesh.eventually { try await Self.balances(c) == Self.balances(a) })
                #expect(c.sync.pipeline.status.completedLater >= 1, "\(crossing) completed once \(later) was applied")
            }
            #expect(try await Self.balances(c).values.reduce(0, +) == 1000)
        }
    }

    /// The same, with what superseded the transaction compacted in turn before the
    /// receiver asks: the answer names what superseded that (still in the log), which
    /// the receiver streams and applies. Named as recorded, the receiver would wait for
    /// a transaction no log holds any more, partial for ever.
    @Test func aTransactionCompactedTwiceOverCompletesFromWhatTheLogStillHolds() async throws {
        try await Self.withCrossingHeldInPart { a, c, crossing in
            let later = try await Self.transfer(a, from: "acct-0", to: "acct-7", amount: 1)
            _ = try await a.store.execute("INSERT INTO other DOCUMENTS ({'_id': 'one'})")
            #expect(try await a.store.compactChangeLog(through: try await a.store.lastSequence()).transactionsRemoved >= 1)
            // What superseded `crossing` is superseded and compacted too.
            let latest = try await Self.transfer(a, from: "acct-0", to: "acct-7", amount: 2)
            _ = try await a.store.execute("INSERT INTO other DOCUMENTS ({'_id': 'two'})")
            #expect(try await a.store.compactChangeLog(through: try await a.store.lastSequence()).transactionsRemoved >= 1)
            let answer = try await a.store.transactionPieces(crossing, subscriptions: c.sync.subscriptions)
            let named = answer.flatMap(\.verdicts).flatMap { verdict -> [TransactionID] in
                if case .superseded(let ids) = verdict.coverage { return ids } else { return [] }
            }
            #expect(named.contains(latest) && !named.contains(later), "\(named)")
            try await InProcessMesh.withLink(c.sync, a.sync) { () async throws in
                #expect(await InProcessMesh.eventually { c.sync.pipeline.status.partial.isEmpty })
                #expect(try await InProcessMesh.eventually { try await Self.balances(c) == Self.balances(a) })
            }
            #expect(try await Self.balances(c).values.reduce(0, +) == 1000)
        }
    }

    /// Widening a subscription fetches at once what the wider query covers,
    /// including the parts of transactions applied before that the narrower one
    /// left out.
    @Test func wideningASubscriptionCompletesEarlierTransactions() async throws {
        let a = try TestNode(name: "a")
        let b = try TestNode(name: "b", subscriptions: [Self.eu])
        defer { a.remove(); b.remove() }
        try await Self.open(a)
        let crossing = try await Self.transfer(a, from: "acct-0", to: "acct-9", amount: 40)
        try await InProcessMesh.withLink(b.sync, a.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.balances(b)["acct-0"] == 60 })
            #expect(try await Self.balances(b)["acct-9"] == nil, "us accounts are not b's")
            #expect(b.sync.pipeline.status.partial.isEmpty, "whole for what b wants")
            try b.sync.subscribe(Self.all)
            #expect(try await InProcessMesh.eventually { try await Self.balances(b) == Self.balances(a) })
            #expect(try await Self.balances(b)["acct-9"] == 140, "the us half of \(crossing) came too")
            #expect(b.sync.pipeline.status.waiting.isEmpty && b.sync.pipeline.status.partial.isEmpty)
        }
    }

    /// A transaction of many frames is applied at once: a reader never sees part of
    /// it, and an observer fires once, with its ID.
    @Test func aTransactionOfManyFramesAppliesAtOnce() async throws {
        let a = try TestNode(name: "a") { $0.batchBytes = 96 << 10 }
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM blobs"])
        defer { a.remove(); b.remove() }
        let docs: [Value] = (0..<40).map { i in ["_id": .string("blob-\(i)"), "data": .string(Self.noise(30_000, seed: i))] }
        let write = try await a.store.execute("INSERT INTO blobs DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
        let frames = Locked(0)
        let codec = MessageCodec()
        let connection = InMemoryConnection(observeFromA: { frame in
            if case .deltaBatch(let batch)? = try? codec.decode(frame), !batch.pieces.isEmpty { frames.withLock { $0 += 1 } }
        })
        let seen = Locked<[QueryUpdate]>([])
        let observer = try b.store.registerObserver("SELECT COUNT(*) AS n FROM blobs") { o in seen.withLock { $0.append(o) } }
        defer { observer.cancel() }
        let counts = Locked<Set<Int64>>([])
        try await InProcessMesh.withLink(a.sync, b.sync, connection: connection) { () async throws in
            #expect(try await InProcessMesh.eventually {
                let n = try await b.store.execute("SELECT COUNT(*) AS n FROM blobs").items.first?["n"]
                if case .int(let count)? = n { counts.withLock { _ = $0.insert(count) } }
                return n == 40
            })
        }
        #expect(frames.withLock { $0 } > 5, "it did span many frames")
        #expect(counts.withLock { $0 }.isSubset(of: [0, 40]), "never part of it")
        #expect(await InProcessMesh.eventually { seen.withLock { $0.count } == 2 })
        #expect(seen.withLock { $0.flatMap(\.transactions) } == [write.transactionID!], "one observation, with its ID")
    }

    /// The pieces of a transaction that arrived before the connection broke are
    /// durable: after a restart the rest completes it, and it was never partly there.
    @Test func aBufferedTransactionSurvivesARestart() async throws {
        let a = try TestNode(name: "a") { $0.batchBytes = 64 << 10 }
        let directory = TemporaryDirectory(prefix: "shoal-b")
        defer { a.remove(); directory.remove() }
        let docs: [Value] = (0..<40).map { i in ["_id": .string("blob-\(i)"), "data": .string(Self.noise(30_000, seed: i))] }
        let write = try await a.store.execute("INSERT INTO blobs DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
        let first = try TestNode(name: "b", subscriptions: ["SELECT * FROM blobs"], directory: directory)
        let frames = Locked(0)
        let codec = MessageCodec()
        let connection = InMemoryConnection(observeFromA: { frame in
            if case .deltaBatch(let batch)? = try? codec.decode(frame), !batch.pieces.isEmpty { frames.withLock { $0 += 1 } }
        })
        try await InProcessMesh.withLink(a.sync, first.sync, connection: connection) { () async throws in
            // Cut the link once part of the transaction is durable on b.
            #expect(await InProcessMesh.eventually { first.sync.pipeline.status.waiting.first?.haveDocuments ?? 0 >= 5 })
        }
        #expect(try await first.store.execute("SELECT * FROM blobs").items.isEmpty, "nothing of it is visible")
        first.stop()
        let second = try TestNode(name: "b", subscriptions: ["SELECT * FROM blobs"], directory: directory)
        defer { second.stop() }
        try await InProcessMesh.withLink(a.sync, second.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await second.store.collectionCounts().first?.documents == 40 })
        }
        #expect(second.sync.pipeline.status.waiting.isEmpty)
        let items = try await second.store.execute("SELECT * FROM blobs WHERE _id = 'blob-7'").items
        #expect(items.first?["data"] == .string(Self.noise(30_000, seed: 7)))
        #expect(write.transactionID != nil)
    }

    /// Text that zlib cannot shrink much: `count` characters from a seeded generator.
    static func noise(_ count: Int, seed: Int) -> String {
        var state = UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 | 1
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        return String((0..<count).map { _ in
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return alphabet[Int(state % UInt64(alphabet.count))]
        })
    }
}

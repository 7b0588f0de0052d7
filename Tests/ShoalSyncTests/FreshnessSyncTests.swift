import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// Forgetting deleted documents between in-process nodes (DATA_MODEL.md §18,
/// PROTOCOL.md §8.10): a node forgets a deleted document once every counted peer has
/// its DELETE and the tombstone is past the horizon; a peer that was away since
/// before the DELETE, and one that only ever met that peer, are refused as stale
/// and keep what they hold; a peer that stayed caught up and a new node (what a
/// stale one becomes, started again from an empty data directory) sync, and none
/// gets the forgotten document back.
@Suite struct FreshnessSyncTests {
    static let cars = "SELECT * FROM cars"

    static func contents(_ node: TestNode) async throws -> [String] {
        try await node.store.execute("SELECT * FROM cars ORDER BY _id").items.map(\.canonicalJSON)
    }

    static func node(_ name: String) throws -> TestNode {
        try TestNode(name: name, subscriptions: [cars]) { $0.keepaliveInterval = .milliseconds(100) }
    }

    /// Runs one connection's handshake and session until `body` returns, then closes
    /// it (without a body, until a side ends it); returns how each side's `serve`
    /// ended (nil: normally).
    static func connect(
        _ a: SyncEngine, _ b: SyncEngine, _ body: (@Sendable () async throws -> Void)? = nil
    ) async throws -> (a: SyncError?, b: SyncError?) {
        let connection = InMemoryConnection()
        return try await withThrowingTaskGroup(of: (Bool, SyncError?).self) { group in
            group.addTask {
                do {
                    try await a.serve(inbound: connection.a.inbound, transport: connection.a.transport, direction: .outbound, remoteAddress: "memory:b")
                    return (true, nil)
                } catch {
                    return (true, error as? SyncError)
                }
            }
            group.addTask {
                do {
                    try await b.serve(inbound: connection.b.inbound, transport: connection.b.transport, direction: .inbound, remoteAddress: "memory:a")
                    return (false, nil)
                } catch {
                    return (false, error as? SyncError)
                }
            }
            if let body {
                try await body()
                await connection.a.transport.close()
            }
            var ends: (a: SyncError?, b: SyncError?) = (nil, nil)
            for try await (isA, error) in group {
                if isA { ends.a = error } else { ends.b = error }
            }
            return ends
        }
    }

    /// A peer that refuses a node writes its Error frame and closes at once, so the
    /// node's next write can fail before it has read why: it still ends with the
    /// peer's refusal, not with the failed write.
    @Test func aRefusedNodeHearsWhyWhenItsOwnWriteFailsFirst() async throws {
        let node = try Self.node("node")
        defer { node.remove() }
        let connection = InMemoryConnection()
        var refuser = HandshakeStateMachine(
            configuration: .init(siteID: SiteID(77), nodeName: "refuser", meshName: "default", meshKey: nil))
        for case .send(let hello) in refuser.start() { try await connection.a.transport.write(MessageCodec().encode(hello)) }
        let refusal = SyncError(.staleReplica, "stale replica: site \(node.sync.siteID) was away too long")
        try await connection.a.transport.write(MessageCodec().encode(refusal.frame))
        await connection.a.transport.close()
        // The node's first write, its Hello, fails: the refuser is gone.
        let end = await Result {
            try await node.sync.serve(
                inbound: connection.b.inbound, transport: connection.b.transport, direction: .outbound, remoteAddress: "memory:refuser")
        }
        guard case .failure(let error as SyncError) = end else {
            Issue.record("expected the refuser's STALE_REPLICA, got \(end)")
            return
        }
        #expect(error.code == .staleReplica && error.fromPeer && error.message == refusal.message, "\(error)")
    }

    @Test func aStalePeerIsRefusedAndTheForgottenDocumentStaysForgotten() async throws {
        let a = try Self.node("a"), stale = try Self.node("stale"), q = try Self.node("q"), island = try Self.node("island")
        defer { a.remove(); stale.remove(); q.remove(); island.remove() }
        let pipelines = Task { [a, stale, q, island] in
            await withTaskGroup(of: Void.self) { group in
                for engine in [a.sync, stale.sync, q.sync, island.sync] { group.addTask { await engine.run() } }
            }
        }
        defer { pipelines.cancel() }
        _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'gone', 'x': 1})")
        _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'kept', 'x': 1})")
        let both = try await Self.contents(a)
        _ = try await Self.connect(stale.sync, a.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.contents(stale) == both })
        }
        try await Task.sleep(for: .milliseconds(20))

        // `stale` is away from a, linked only to `island`, which gets both documents from
        // it and has never met a; they keep vouching for each other meanwhile. The DELETE
        // reaches q, which stays caught up with a.
        try await InProcessMesh.withLink(island.sync, stale.sync) { () async throws in
        #expect(try await InProcessMesh.eventually { try await Self.contents(island) == both })
        try await InProcessMesh.withLink(q.sync, a.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.contents(q) == both })
            _ = try await a.store.execute("DELETE FROM cars WHERE _id = 'gone'")
            _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'later', 'x': 1})")
            let left = try await Self.contents(a)
            #expect(try await InProcessMesh.eventually { try await Self.contents(q) == left })
            let deletedAt = Freshness.now()
            #expect(
                try await InProcessMesh.eventually { q.sync.freshness.entries[a.sync.siteID] ?? 0 > deletedAt },
                "a's Pings tell q it caught up, and q's entry for a passes the DELETE")
            // a compacts as if a week had passed: `stale` no longer counts, q does.
            #expect(try await InProcessMesh.eventually {
                let (report, _, expired) = try await a.sync.positions.compact(
                    a.store, horizon: .seconds(1), now: .now.addingTimeInterval(3600))
                let last = try await a.store.lastSequence()
                guard expired.contains(stale.sync.siteID) || report.through == last else { return false }
                let forgot = try await a.store.forgetDeletedDocuments(deletedBefore: Freshness.now() + 1, through: report.through)
                a.sync.freshness.forgot(through: forgot.forgottenThroughMillis)
                return forgot.documents == 1
            })
        }
        #expect(try await InProcessMesh.eventually { island.sync.freshness.entries[stale.sync.siteID] ?? 0 > Freshness.now() - 100 })
        }
        let forgotten = a.sync.freshness.forgottenThrough
        #expect(forgotten > 0 && stale.sync.freshness.entries[a.sync.siteID] ?? 0 < forgotten)
        #expect(island.sync.freshness.entries[a.sync.siteID] ?? 0 < forgotten, "only what stale knew of a")
        #expect(try await a.store.retained(DocumentRef(collection: "cars", id: "\"gone\"")) == (0, false, 0))
        let current = try await Self.contents(a)
        #expect(current == ["{\"_id\":\"kept\",\"x\":1}", "{\"_id\":\"later\",\"x\":1}"])

        // `stale` returns: refused on a's side, told why on its own, and nothing moves either way.
        let (staleEnd, aEnd) = try await Self.connect(stale.sync, a.sync)
        #expect(aEnd?.code == .staleReplica && aEnd?.fromPeer == false, "\(String(describing: aEnd))")
        #expect(staleEnd?.code == .staleReplica && staleEnd?.fromPeer == true, "\(String(describing: staleEnd))")
        #expect(staleEnd?.message.contains("Start site \(stale.sync.siteID) again from an empty data directory") == true)
        #expect(try await Self.contents(stale) == both, "the stale node keeps what it holds")
        let (islandEnd, aEnd2) = try await Self.connect(island.sync, a.sync)
        #expect(aEnd2?.code == .staleReplica && islandEnd?.code == .staleReplica, "\(String(describing: aEnd2))")
        #expect(islandEnd?.message.hasPrefix("stale replica: site \(island.sync.siteID) ") == true, "\(String(describing: islandEnd))")
        #expect(try await a.store.retained(DocumentRef(collection: "cars", id: "\"gone\"")) == (0, false, 0))

        // q, caught up through the DELETE, comes back and is served; so is a new node,
        // which is what the stale one becomes started again from an empty data directory.
        let fresh = try Self.node("fresh")
        defer { fresh.remove() }
        let more = Task { [fresh] in await fresh.sync.run() }
        defer { more.cancel() }
        for peer in [q, fresh] {
            let ends = try await Self.connect(peer.sync, a.sync) { () async throws in
                #expect(try await InProcessMesh.eventually { try await Self.contents(peer) == current })
            }
            #expect(ends.a?.code != .staleReplica && ends.b?.code != .staleReplica, "\(ends)")
        }
        #expect(try await Self.contents(a) == current, "nobody brought the forgotten document back")
        more.cancel()
        pipelines.cancel()
        await more.value
        await pipelines.value
    }
}

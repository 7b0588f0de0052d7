import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// EVICT loses no acknowledged write anywhere and leaves no mesh apart
/// (DATA_MODEL.md §11): a node keeps what only it holds, its log still sends what it
/// evicted, and a relay that evicts still carries its neighbours' history.
@Suite struct EvictSyncTests {
    static let all = "SELECT * FROM t"

    static func contents(_ node: TestNode, _ query: String = "SELECT * FROM t ORDER BY _id") async throws -> [Value] {
        try await node.store.execute(query).items
    }

    static func ids(_ node: TestNode) async throws -> [String] {
        try await contents(node, "SELECT _id FROM t ORDER BY _id").compactMap { $0["_id"]?.stringValue }
    }

    /// A, cut off from B, inserts `z`, updates `before` and evicts the collection. Its
    /// own writes no peer has acknowledged stay; what B holds too goes. Healed, both
    /// nodes hold everything, equal.
    @Test func aNodeCutOffKeepsItsOwnUnacknowledgedWritesThroughAnEvict() async throws {
        let a = try TestNode(name: "a", subscriptions: [Self.all])
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'before', 'v': 1})")
        _ = try await b.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'from-b', 'v': 1})")
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            #expect(try await InProcessMesh.eventually {
                let (inA, inB) = (try await Self.ids(a), try await Self.ids(b))
                return inA == ["before", "from-b"] && inB == ["before", "from-b"]
            })
            #expect(await InProcessMesh.eventually { a.sync.peers().first { $0.siteID == b.store.siteID }?.lagDeltas == 0 })
        }
        // Cut off: written here only, then evicted.
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'z', 'v': 1})")
        _ = try await a.store.execute("UPDATE t SET v = 2 WHERE _id = 'before'")
        let evicted = try await a.store.execute("EVICT FROM t")
        #expect(evicted.mutatedDocumentIDs == ["from-b"], "only what a peer holds went")
        #expect(try await Self.ids(a) == ["before", "z"])
        // Redialed if the session ends meanwhile (an idle timeout on a starved machine),
        // as a node's dialer would: what is checked is what the refill brings back.
        try await InProcessMesh.withLink(a.sync, b.sync, redial: true) { () async throws in
            #expect(try await InProcessMesh.eventually {
                let (inA, inB) = (try await Self.contents(a), try await Self.contents(b))
                return inA == inB && inB.count == 3
            })
        }
        #expect(try await Self.contents(b, "SELECT v FROM t WHERE _id = 'before'") == [["v": 2]])
    }

    /// A peer that refused a transaction of this node whole (its document limit is
    /// smaller) acknowledges the log past it all the same. An EVICT that counted on it
    /// dropped the only copy of that write: the peer sent the earlier value back, and
    /// compaction could then have taken the later one out of the log (found by
    /// `shoal-check --hubs 1`, seed 15311098292476461055: a device's acknowledged write
    /// went back to the one before). What a peer refused is kept across a restart, since
    /// its acknowledgement comes back with its cursor.
    @Test(arguments: [false, true])
    func aDocumentWhoseLastWriteAPeerRefusedIsKeptThroughAnEvict(restarted: Bool) async throws {
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        let first = try TestNode(name: "a", subscriptions: [Self.all])
        let directory = first.directory
        defer {
            b.remove()
            directory.remove()
        }
        _ = try await b.store.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = 50")
        _ = try await b.store.execute("ALTER SYSTEM SET document_size_hard_limit_bytes = 300")
        _ = try await first.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'd', 'v': 'small'}), ({'_id': 'other', 'v': 1})")
        let big = Value.string(String(repeating: "v", count: 1_000))
        // What EVICT asks: b acknowledged a's whole log, as a noted it.
        @Sendable func acknowledged(_ a: TestNode) async -> Bool {
            await InProcessMesh.eventually { a.store.peerHoldings.all[b.store.siteID]?.through == a.store.lastCommittedSequence }
        }
        try await InProcessMesh.withLink(first.sync, b.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["d", "other"] })
            let write = try await first.store.execute("UPDATE t SET v = :v WHERE _id = 'd'", arguments: ["v": big])
            #expect(await InProcessMesh.eventually { b.sync.pipeline.status.refused == 1 })
            #expect(await InProcessMesh.eventually {
                first.sync.peers().first { $0.siteID == b.store.siteID }?.lastError?.contains("refused transaction \(write.transactionID!)") == true
            }, "a is told")
            #expect(await acknowledged(first), "b acknowledged a's log past the write it refused")
        }
        var a = first
        if restarted {
            first.stop()
            a = try TestNode(name: "a", subscriptions: [Self.all], directory: directory)
        }
        defer { a.stop() }
        let node = a
        try await InProcessMesh.withLink(node.sync, b.sync) { () async throws in
            #expect(await acknowledged(node))
            let evicted = try await node.store.execute("EVICT FROM t")
            #expect(evicted.mutatedDocumentIDs == ["other"], "d's last write is held whole nowhere else")
            #expect(try await InProcessMesh.eventually { try await Self.ids(node) == ["d", "other"] }, "other comes back")
        }
        #expect(try await Self.contents(node, "SELECT v FROM t WHERE _id = 'd'") == [["v": big]])
    }

    /// As above, but the Ack that told A of the refusal is lost with its session: B
    /// tells A again at the start of the next one (a held_only Ack, PROTOCOL.md §8.8),
    /// before A evicts. Without it A took B's cursor, past the write, for a copy, and
    /// EVICT dropped the document whose only other holder had refused its last write.
    @Test func aRefusalWhoseAckWasLostWithItsSessionIsToldAgainAtTheNext() async throws {
        let a = try TestNode(name: "a", subscriptions: [Self.all])
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        _ = try await b.store.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = 50")
        _ = try await b.store.execute("ALTER SYSTEM SET document_size_hard_limit_bytes = 300")
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'd', 'v': 'small'}), ({'_id': 'other', 'v': 1})")
        let big = Value.string(String(repeating: "v", count: 1_000))
        // B's Ack that carries a refusal never reaches A: the link breaks there.
        let lost = Locked(0)
        let codec = MessageCodec(limits: .default)
        let cutting = InMemoryConnection(cutBeforeFromB: { frame in
            guard frame.type == MessageType.ack.rawValue, case .ack(let ack)? = try? codec.decode(frame), !ack.refused.isEmpty else {
                return false
            }
            lost.withLock { $0 += 1 }
            return true
        })
        let write = try await InProcessMesh.withLink(a.sync, b.sync, connection: cutting) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["d", "other"] })
            let write = try await a.store.execute("UPDATE t SET v = :v WHERE _id = 'd'", arguments: ["v": big])
            #expect(await InProcessMesh.eventually { b.sync.pipeline.status.refused == 1 && lost.withLock { $0 } == 1 })
            return try #require(write.transactionID)
        }
        #expect(a.sync.peers().first { $0.siteID == b.store.siteID }?.lastError?.contains("refused") != true, "A was not told")
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            #expect(await InProcessMesh.eventually {
                a.sync.peers().first { $0.siteID == b.store.siteID }?.lastError?.contains("refused transaction \(write)") == true
            }, "A is told again")
            #expect(await InProcessMesh.eventually { a.store.peerHoldings.all[b.store.siteID]?.through == a.store.lastCommittedSequence })
            let evicted = try await a.store.execute("EVICT FROM t")
            #expect(evicted.mutatedDocumentIDs == ["other"], "d's last write is held whole nowhere else")
            #expect(try await InProcessMesh.eventually { try await Self.ids(a) == ["d", "other"] }, "other comes back")
        }
        #expect(try await Self.contents(a, "SELECT v FROM t WHERE _id = 'd'") == [["v": big]])
    }

    /// Connected, A commits documents and evicts at once, before its peer has all of
    /// them: what the peer acknowledged goes, the rest stays, and both end with all.
    @Test func anEvictRightAfterWritesLosesNothing() async throws {
        let a = try TestNode(name: "a", subscriptions: [Self.all])
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            for i in 0..<50 {
                let docs = (0..<10).map { j in Value.object(["_id": .string("d\(i * 10 + j)"), "v": .int(Int64(i))]) }
                _ = try await a.store.execute("INSERT INTO t DOCUMENTS (:d)", arguments: ["d": .array(docs)])
            }
            _ = try await a.store.execute("EVICT FROM t")
            #expect(try await InProcessMesh.eventually {
                let (inA, inB) = (try await Self.contents(a), try await Self.contents(b))
                return inA == inB && inB.count == 500
            })
        }
    }

    /// A node that evicted asks its peer for its own writes back from the start. When
    /// that stream stops part way (the link drops, the node restarts), the next session
    /// resumes it asking for them still, so none is left out. Before, it resumed from
    /// the same cursor without asking, and its own writes later in the peer's log never
    /// came back (found by shoal-check: a node restored from a backup, restarted during
    /// its refill, ended with its counters short and a document apart for good).
    @Test func aRefillThatStopsPartWayResumesWithTheNodesOwnWrites() async throws {
        let a = try TestNode(name: "a", subscriptions: [Self.all])
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        let count = 2_000
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            for i in 0..<count {
                _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': :id, 'v': :v})", arguments: ["id": .string("d\(i)"), "v": .int(Int64(i))])
            }
            #expect(try await InProcessMesh.eventually { try await Self.ids(b).count == count })
            #expect(await InProcessMesh.eventually { a.sync.peers().first { $0.siteID == b.store.siteID }?.lagDeltas == 0 })
        }
        // Evict, and drop the link as soon as some of the writes are back: again, should
        // the whole refill have come back before the link closed.
        var partial = count
        for _ in 0..<5 where partial == count {
            _ = try await a.store.execute("EVICT FROM t")
            #expect(try await Self.ids(a).isEmpty, "B acknowledged every one")
            try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
                #expect(try await InProcessMesh.eventually { try await !Self.ids(a).isEmpty })
            }
            partial = try await Self.ids(a).count
        }
        #expect(partial < count, "the refill stopped part way")
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) { try await Self.ids(a).count == count })
        }
        #expect(try await Self.contents(a) == Self.contents(b))
    }

    /// A – B – C: C is away while A writes; B evicts the collection; C comes back to B
    /// before B has refilled (A is gone by then). B's log still carries A's writes to C.
    @Test func aRelayThatEvictsStillCarriesItsNeighboursHistory() async throws {
        let a = try TestNode(name: "a", subscriptions: [Self.all])
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        let c = try TestNode(name: "c", subscriptions: ["SELECT * FROM t WHERE v >= 0"])
        defer { a.remove(); b.remove(); c.remove() }
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'first', 'v': 0})")
        try await InProcessMesh.withLink(c.sync, b.sync) { () async throws in
            try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
                #expect(try await InProcessMesh.eventually { try await Self.ids(c) == ["first"] })
            }
        }
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            for i in 0..<200 {
                _ = try await a.store.execute("INSERT INTO t DOCUMENTS (:d)", arguments: ["d": ["_id": .string("a\(i)"), "v": .int(Int64(i))]])
            }
            #expect(try await InProcessMesh.eventually { try await Self.ids(b).count == 201 })
        }
        #expect(try await b.store.execute("EVICT FROM t").mutatedDocumentIDs.count == 201)
        try await InProcessMesh.withLink(c.sync, b.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(c).count == 201 })
        }
        // And B, meeting A again, gets back what it evicted.
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            #expect(try await InProcessMesh.eventually {
                let (inA, inB) = (try await Self.contents(a), try await Self.contents(b))
                return inA == inB
            })
        }
        let (inA, inC) = (try await Self.contents(a), try await Self.contents(c))
        #expect(inA == inC)
    }
}

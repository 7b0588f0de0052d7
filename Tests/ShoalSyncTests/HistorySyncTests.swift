import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalWire
import ShoalTesting
import Testing

/// A node whose store went back never reuses a transaction number, and gets its own
/// writes back from its peers (DATA_MODEL.md §4.5).
@Suite struct HistorySyncTests {
    static let all = "SELECT * FROM t"

    static func ids(_ node: TestNode) async throws -> [String] {
        try await node.store.execute("SELECT _id FROM t ORDER BY _id").items.compactMap { $0["_id"]?.stringValue }
    }

    /// The database's files, to put back later into the same files (a restore in
    /// place, as a rolled-back virtual machine or a backup copied over the files does).
    static func backup(_ directory: TemporaryDirectory) throws -> [String: Data] {
        var files: [String: Data] = [:]
        for suffix in ["", "-wal"] {
            let path = directory.path + "/shoal.sqlite" + suffix
            if FileManager.default.fileExists(atPath: path) { files[suffix] = try Data(contentsOf: URL(fileURLWithPath: path)) }
        }
        return files
    }

    static func restoreInPlace(_ files: [String: Data], into directory: TemporaryDirectory) throws {
        for suffix in ["-wal", "-shm"] where files[suffix] == nil {
            try? FileManager.default.removeItem(atPath: directory.path + "/shoal.sqlite" + suffix)
        }
        for (suffix, bytes) in files {
            let path = directory.path + "/shoal.sqlite" + suffix
            if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
            let handle = try #require(FileHandle(forWritingAtPath: path))
            try handle.truncate(atOffset: 0)
            try handle.write(contentsOf: bytes)
            try handle.close()
        }
    }

    /// A restored store meets first a peer that holds less of its lost history than
    /// another: B holds A's transactions through 2, C through 3. Renumbering just above
    /// B's 2 would give 3 again, which names `three` on C: B, taking `three` from C for
    /// a transaction it holds, would not log it, and D, behind B, would never have it
    /// (found by shoal-check: peers at 172 and 176, a transaction in part for ever and
    /// digests apart). Renumbered far above, all four end with everything.
    @Test func aRestoredStoreRenumbersAboveWhatAnyPeerMayHold() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-a")
        var a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        let c = try TestNode(name: "c", subscriptions: [Self.all])
        let d = try TestNode(name: "d", subscriptions: [Self.all])
        defer { a.remove(); b.remove(); c.remove(); d.remove() }
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
        a.stop()
        let saved = try Self.backup(dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'two'})")
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["one", "two"] })
        }
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'three'})")
        try await InProcessMesh.withLink(a.sync, c.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(c) == ["one", "three", "two"] })
        }
        a.stop()
        try Self.restoreInPlace(saved, into: dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        // B first: it holds A's transactions through 2 only.
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(a) == ["one", "two"] })
        }
        try await InProcessMesh.withLink(a.sync, c.sync) { [a] () async throws in
            try await InProcessMesh.withLink(b.sync, c.sync) { () async throws in
                #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["one", "three", "two"] })
            }
        }
        try await InProcessMesh.withLink(b.sync, d.sync) { [a] () async throws in
            let all = try await InProcessMesh.eventually(timeout: .seconds(20)) {
                let (inA, inB, inC, inD) = (try await Self.ids(a), try await Self.ids(b), try await Self.ids(c), try await Self.ids(d))
                return inA == ["one", "three", "two"] && inB == inA && inC == inA && inD == inA
            }
            let (inA, inB, inC, inD) = (try await Self.ids(a), try await Self.ids(b), try await Self.ids(c), try await Self.ids(d))
            #expect(all, "a: \(inA), b: \(inB), c: \(inC), d: \(inD)")
        }
    }

    /// The issue's case: A writes `one`, is backed up, writes `two` and `three`, which
    /// reach B; A is restored in place and writes `four` and `five`, under the numbers
    /// `two` and `three` had. Meeting B, A finds out, commits them again under new
    /// numbers and gets `two` and `three` back: both end with all five.
    @Test func aStoreRestoredInPlaceRenumbersAndGetsItsWritesBack() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-a")
        var a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        let site = a.store.siteID
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
        a.stop()
        let saved = try Self.backup(dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'two'})")
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'three'})")
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["one", "three", "two"] })
        }
        a.stop()
        try Self.restoreInPlace(saved, into: dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        #expect(a.store.siteID == site, "the same file: the same site, so only a peer can tell")
        let four = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'four'})")
        #expect(four.transactionID == TransactionID(origin: site, sequence: 2), "the number `two` had")
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'five'})")
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            let both = try await InProcessMesh.eventually {
                let (inA, inB) = (try await Self.ids(a), try await Self.ids(b))
                return inA == ["five", "four", "one", "three", "two"] && inB == inA
            }
            let (inA, inB) = (try await Self.ids(a), try await Self.ids(b))
            #expect(both, "a: \(inA), b: \(inB)")
        }
        // A had no number confirmed: `one`, `four` and `five` went out again 2^32 above
        // anything B held (what it lost may have gone further than B knows), and above
        // the clock's milliseconds shifted left by 20 bits; the next write takes the
        // number after them.
        let next = try #require(try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'six'})").transactionID)
        #expect(next.origin == site && next.sequence > (UInt64(1) << 32) + 3)
        #expect(next.sequence > (HybridLogicalClock.systemMilliseconds() - 60_000) << 20)
        #expect(try await b.store.history(of: site).through == next.sequence - 1)
    }

    /// A store restored twice from one copy: its first repair renumbered `four` for B;
    /// restored again, it meets C first, which holds less, and its second repair must not
    /// give `five` a number the first gave `four`, which it can no longer see (found by
    /// shoal-check, seed 16629699536530087451: two repairs gave 4294967946 to two
    /// transactions, and every session between the node and the hub ended on it).
    @Test func aStoreRestoredTwiceFromOneCopyNeverRenumbersIntoItsEarlierRepair() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-a")
        var a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        let c = try TestNode(name: "c", subscriptions: [Self.all])
        defer { a.remove(); b.remove(); c.remove() }
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
        a.stop()
        let saved = try Self.backup(dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'two'})")
        for peer in [b, c] {
            try await InProcessMesh.withLink(a.sync, peer.sync) { [a] () async throws in
                #expect(try await InProcessMesh.eventually { try await Self.ids(peer) == ["one", "two"] })
            }
        }
        // Restored, `four` takes `two`'s number; B finds out, and A renumbers it.
        a.stop()
        try Self.restoreInPlace(saved, into: dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        let four = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'four'})")
        #expect(four.transactionID?.sequence == 2)
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["four", "one", "two"] })
        }
        // Restored again: `five` takes the number, and C, which holds only `two`, finds out.
        a.stop()
        try Self.restoreInPlace(saved, into: dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'five'})")
        try await InProcessMesh.withLink(a.sync, c.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(c) == ["five", "one", "two"] })
        }
        // The second repair's numbers are above every number the first gave.
        let first = try await b.store.history(of: a.store.siteID).through
        let second = try await c.store.history(of: a.store.siteID).through
        #expect(first > UInt64(1) << 32 && second > first + 1, "first repair through \(first), second through \(second)")
        // All three together end with everything.
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            try await InProcessMesh.withLink(a.sync, c.sync) { () async throws in
                try await InProcessMesh.withLink(b.sync, c.sync) { () async throws in
                    let everything = ["five", "four", "one", "two"]
                    let all = try await InProcessMesh.eventually(timeout: .seconds(20)) {
                        let (inA, inB, inC) = (try await Self.ids(a), try await Self.ids(b), try await Self.ids(c))
                        return inA == everything && inB == everything && inC == everything
                    }
                    let (inA, inB, inC) = (try await Self.ids(a), try await Self.ids(b), try await Self.ids(c))
                    #expect(all, "a: \(inA), b: \(inB), c: \(inC)")
                }
            }
        }
    }

    /// The number a peer holds names, on the restored store, a transaction of fewer
    /// deltas than the peer's: the delta the peer names (its newest, index 2) is not
    /// there to compare. The store must still find that it went back, since its own
    /// transaction of that number never had such a delta (found by shoal-check, seeds
    /// 3166827266 and 788912689: a node restored in place wrote past the number its peer
    /// held before they met, kept its numbers, and two transactions shared one ID).
    @Test func aReusedNumberWhoseTransactionIsSmallerIsFoundOut() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-a")
        var a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        let site = a.store.siteID
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
        a.stop()
        let saved = try Self.backup(dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'two', 'x': 1, 'y': 2})")
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["one", "two"] })
        }
        let held = try await b.store.history(of: site)
        #expect(held.through == 2 && held.index > 0, "B names a delta past the first: \(held)")
        a.stop()
        try Self.restoreInPlace(saved, into: dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        let three = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'three'})")
        #expect(three.transactionID == TransactionID(origin: site, sequence: 2), "the number `two` had, with one delta")
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            let both = try await InProcessMesh.eventually {
                let (inA, inB) = (try await Self.ids(a), try await Self.ids(b))
                return inA == ["one", "three", "two"] && inB == inA
            }
            let (inA, inB) = (try await Self.ids(a), try await Self.ids(b))
            #expect(both, "a: \(inA), b: \(inB)")
        }
        #expect(try await b.store.history(of: site).through > UInt64(1) << 32, "renumbered above what B held")
    }

    /// A peer that names numbers past any this node gives, a cursor of 2^62 (the most a
    /// Subscribe may carry) and this node's transactions through 2^64 - 1 (which a third
    /// node may have forged), is not believed: the node moves neither its log nor its
    /// transactions, keeps serving that peer, and every other peer after it. Found by
    /// reading: the log moved above 2^62, and every peer that synced after resumed
    /// above 2^62 and was refused for good.
    @Test func numbersPastAnyThisNodeGivesAreNotBelieved() async throws {
        let a = try TestNode(name: "a", subscriptions: [Self.all])
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
        let connection = InMemoryConnection()
        async let served = Result {
            try await a.sync.serve(
                inbound: connection.b.inbound, transport: connection.b.transport, direction: .inbound, remoteAddress: "memory:liar")
        }
        var liar = HandshakeStateMachine(configuration: .init(siteID: SiteID(99), nodeName: "liar", meshName: "default", meshKey: nil))
        var frames = connection.a.inbound.makeAsyncIterator()
        #expect(try await SessionLimitTests.handshake(&liar, over: connection.a, reading: &frames))
        var subscribe = Shoal_V1_Subscribe()
        var all = Shoal_V1_Subscription()
        all.query = Self.all
        subscribe.subscriptions = [all]
        subscribe.resumeAfter = OriginHistory.maximumSequence
        subscribe.generation = 1
        subscribe.originThrough = .max
        subscribe.originThroughTimestamp = 1
        var ping = Shoal_V1_Ping()
        ping.nonce = 7
        try await connection.a.transport.write(MessageCodec().encode(.subscribe(subscribe)))
        try await connection.a.transport.write(MessageCodec().encode(.ping(ping)))
        // The node handles a session's frames in order: its Pong says the Subscribe was handled.
        var answered = false
        while let frame = await frames.next() {
            let message = try MessageCodec().decode(frame)
            if case .error(let error) = message { Issue.record("the node ended the session: \(error.message)") }
            if case .pong(let pong) = message, pong.nonce == 7 {
                answered = true
                break
            }
        }
        #expect(answered, "the node serves the peer on")
        await connection.a.transport.close()
        _ = await served
        #expect(try await a.store.lastSequence() < OriginHistory.believable, "the log was not moved")
        #expect(try await a.store.history(of: a.sync.siteID).through < OriginHistory.believable, "nothing renumbered")
        // The largest number believed, after a move already: the log moves above it, and
        // stays below what a Subscribe may carry (each row once moved by the cursor, the
        // second move took the end to 2^61 + 2^62 - 2^40).
        let once = try #require(try await a.store.raiseLog(above: 1 << 61, peer: SiteID(99)))
        #expect(once > 1 << 61 && once < (1 << 61) + 16)
        let raised = try #require(try await a.store.raiseLog(above: OriginHistory.believable, peer: SiteID(99)))
        #expect(raised > OriginHistory.believable && raised < OriginHistory.maximumSequence)
        for id in ["two", "three"] {
            _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': :id})", arguments: ["id": .string(id)])
            try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
                #expect(try await InProcessMesh.eventually { try await Self.ids(b).contains(id) }, "B resumes past the raise and is served")
            }
        }
    }

    /// A restored log ends below where a peer's cursor into it stands: what the node
    /// logs next (here a write relayed from C) would take sequences that cursor passed.
    /// The node moves its log above the cursor when the peer resumes, so nothing is
    /// passed over (shoal-check, a star of six with restores).
    @Test func aLogThatWentBackMovesAbovePeersCursors() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-a")
        var a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        let c = try TestNode(name: "c", subscriptions: [Self.all])
        let d = try TestNode(name: "d", subscriptions: [Self.all])
        defer { a.remove(); b.remove(); c.remove(); d.remove() }
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
        a.stop()
        let saved = try Self.backup(dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'two'})")
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'three'})")
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["one", "three", "two"] })
        }
        let passed = try await a.store.lastSequence()
        a.stop()
        try Self.restoreInPlace(saved, into: dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        #expect(try await a.store.lastSequence() < passed, "the log went back below B's cursor")
        _ = try await c.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'from-c'})")
        try await InProcessMesh.withLink(c.sync, a.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(a).contains("from-c") })
        }
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            let equal = try await InProcessMesh.eventually {
                let (inA, inB) = (try await Self.ids(a), try await Self.ids(b))
                return inB == ["from-c", "one", "three", "two"] && inA == inB
            }
            let (inA, inB) = (try await Self.ids(a), try await Self.ids(b))
            #expect(equal, "a: \(inA), b: \(inB)")
        }
        #expect(try await a.store.lastSequence() > passed)
    }

    /// A store restored in place cannot tell at open that it went back; if it increments
    /// a counter before it meets a peer, its contribution must not be written from the
    /// copy's total over the one the peer holds: each opening names its contributions
    /// anew (DATA_MODEL.md §7), so every acknowledged increment counts (shoal-check,
    /// seed 41, counters short on every node).
    @Test func aCounterIncrementedAfterARestoreKeepsEveryIncrement() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-a")
        var a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        let increment = "UPDATE t APPLY n INCREMENT BY :x WHERE _id = 'c'"
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'c'})")
        _ = try await a.store.execute(increment, arguments: ["x": 1])
        a.stop()
        let saved = try Self.backup(dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        _ = try await a.store.execute(increment, arguments: ["x": 10])
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.count(b) == 11 })
        }
        a.stop()
        try Self.restoreInPlace(saved, into: dir)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        #expect(try await Self.count(a) == 1, "the copy's total")
        _ = try await a.store.execute(increment, arguments: ["x": 100])
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            let both = try await InProcessMesh.eventually {
                let (inA, inB) = (try await Self.count(a), try await Self.count(b))
                return inA == 111 && inB == 111
            }
            let (inA, inB) = (try await Self.count(a), try await Self.count(b))
            #expect(both, "a: \(inA), b: \(inB)")
        }
    }

    static func count(_ node: TestNode) async throws -> Int64? {
        if case .int(let n)? = try await node.store.execute("SELECT n FROM t WHERE _id = 'c'").items.first?["n"] { return n }
        return nil
    }

    /// A subscriber with narrower subscriptions holds only part of a transaction: the
    /// delta it names is one of those it holds, so a store that did not go back is
    /// never taken for one that did (its numbers stay as they are).
    @Test func aPeerHoldingPartOfATransactionConfirmsTheHistory() async throws {
        let a = try TestNode(name: "a", subscriptions: [Self.all, "SELECT * FROM u"])
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        let site = a.store.siteID
        try await a.store.transaction { tx -> Void in
            _ = try await tx.execute("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
            _ = try await tx.execute("INSERT INTO u DOCUMENTS ({'_id': 'later', 'v': 1})")
        }
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await b.store.history(of: site).through == 1 })
        }
        let held = try await b.store.history(of: site)
        #expect(held.through == 1 && held.index == 0 && held.timestamp != 0, "B holds the `t` delta only: \(held)")
        // The second link's Subscribe names that delta; A checks it before it sends
        // anything, so by the time `two` reaches B the check is done.
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            let two = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'two'})")
            #expect(two.transactionID == TransactionID(origin: site, sequence: 2))
            #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["one", "two"] })
        }
        #expect(try await a.store.history(of: site).through == 2, "nothing committed again under new numbers")
        #expect(try await b.store.history(of: site).through == 2)
    }

    /// A data directory copied to a new file takes a new site at open: it reuses no
    /// number, and peers send it what its former site wrote that it lacks.
    @Test func aCopiedDataDirectoryTakesANewSiteAndGetsTheRestOfItsFormerWrites() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-a")
        var a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        let b = try TestNode(name: "b", subscriptions: [Self.all])
        defer { a.remove(); b.remove() }
        let former = a.store.siteID
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
        a.stop()
        let copy = TemporaryDirectory(prefix: "shoal-copy")
        try FileManager.default.removeItem(atPath: copy.path)
        try FileManager.default.copyItem(atPath: dir.path, toPath: copy.path)
        a = try TestNode(name: "a", subscriptions: [Self.all], directory: dir)
        _ = try await a.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'two'})")
        try await InProcessMesh.withLink(a.sync, b.sync) { [a] () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.ids(b) == ["one", "two"] })
        }
        #expect(a.store.siteID == former, "the original keeps its site")
        let restored = try TestNode(name: "restored", subscriptions: [Self.all], directory: copy)
        defer { restored.remove() }
        #expect(restored.store.siteID != former)
        let three = try await restored.store.execute("INSERT INTO t DOCUMENTS ({'_id': 'three'})")
        #expect(three.transactionID?.origin == restored.store.siteID)
        try await InProcessMesh.withLink(restored.sync, b.sync) { () async throws in
            let equal = try await InProcessMesh.eventually {
                let (inR, inB) = (try await Self.ids(restored), try await Self.ids(b))
                return inR == ["one", "three", "two"] && inB == inR
            }
            #expect(equal)
        }
    }
}

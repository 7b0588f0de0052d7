import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// Five nodes in a line, in one process: random writes, the middle link cut and
/// restored, every node ending with the same documents and each link carrying each
/// delta about once (the process test `ProcessMeshLineTests` adds a crash).
@Suite struct MeshLineTests {
    static let query = "SELECT * FROM items"

    /// Runs `body` with every pair linked (the first of each pair dials).
    static func withLinks(_ pairs: ArraySlice<(TestNode, TestNode)>, _ body: @Sendable () async throws -> Void) async throws {
        guard let (a, b) = pairs.first else { return try await body() }
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            try await withLinks(pairs.dropFirst(), body)
        }
    }

    static func contents(_ node: TestNode) async throws -> [String] {
        try await node.store.execute(Self.query).items.map(\.canonicalJSON).sorted()
    }

    static func converged(_ nodes: [TestNode]) async throws -> Bool {
        let first = try await contents(nodes[0])
        for node in nodes.dropFirst() where try await contents(node) != first { return false }
        return !first.isEmpty
    }

    /// Converged, and every link acknowledged all its sender holds: nothing is still
    /// on its way, so the counts are final and a link taken down now sends nothing
    /// again when it comes back.
    static func settled(_ nodes: [TestNode]) async throws -> Bool {
        let quiet = nodes.allSatisfy { node in node.sync.peers().allSatisfy { $0.state != "connected" || $0.lagDeltas == 0 } }
        guard quiet else { return false }
        return try await converged(nodes)
    }

    /// `count` upserts of random keys on random nodes among `candidates`.
    static func write(_ nodes: [TestNode], _ count: Int, on candidates: [Int]) async throws {
        for round in 0..<count {
            let i = candidates.randomElement()!
            let doc: Value = ["_id": .string("k\(Int.random(in: 0..<25))"), "v": .int(Int64(round)), "by": .string("n\(i + 1)")]
            _ = try await nodes[i].store.execute("INSERT INTO items DOCUMENTS (:d) ON ID CONFLICT DO UPDATE", arguments: ["d": doc])
        }
    }

    @Test func fiveNodesInALineConvergeAcrossACutAndSendEachDeltaOncePerLink() async throws {
        let nodes = try (1...5).map { try TestNode(name: "n\($0)", subscriptions: [Self.query]) }
        defer { nodes.forEach { $0.remove() } }
        let links = (0..<4).map { (nodes[$0 + 1], nodes[$0]) }
        try await Self.withLinks(links[...]) {
            try await Self.write(nodes, 30, on: [0, 1, 2, 3, 4])
            #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) { try await Self.settled(nodes) })
        }
        // The middle link is down: each half writes and converges on its own.
        try await Self.withLinks([links[0], links[1], links[3]][...]) {
            try await Self.write(nodes, 20, on: [0, 1, 2, 3, 4])
            #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) {
                let left = try await Self.settled(Array(nodes[0...2]))
                let right = try await Self.settled(Array(nodes[3...4]))
                return left && right
            })
        }
        try await Self.withLinks(links[...]) {
            try await Self.write(nodes, 10, on: [0, 4])
            #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) { try await Self.settled(nodes) })
            // Every node wants everything, so every delta must cross every link once:
            // the minimum per link is the number of deltas, which each log holds once.
            var everything = SubscriptionSet()
            try everything.add(query: Self.query)
            let minimum = UInt64(try await nodes[0].store.changes(after: 0, limit: 1_000_000, subscriptions: everything).deltas.count)
            for (dialer, accepter) in links {
                let peer = try #require(accepter.sync.peers().first { $0.siteID == dialer.sync.siteID })
                let total = peer.deltasIn + peer.deltasOut
                print("in-process line: link \(accepter.sync.configuration.nodeName) - \(dialer.sync.configuration.nodeName): \(total) deltas, minimum \(minimum)")
                #expect(total >= minimum && total * 2 <= minimum * 3, "\(total) deltas against a minimum of \(minimum)")
            }
        }
    }

    /// In a triangle with one writer, each receiver gets every delta from the writer.
    /// Without routes (version 3's all-eager links) the other receiver relays it too,
    /// unless it had it from this one first, which the echo rule then keeps from coming
    /// back. With routes, a receiver's second link turns lazy for the writer once one
    /// duplicate came by it (prune), so the duplicates stop after a few transactions.
    /// Either way the pipeline counts, per peer, what came that this node held already:
    /// the new deltas (received - duplicates) are exactly what was written.
    @Test(arguments: [true, false])
    func duplicatesAreCountedPerPeerAndNewDeltasOnce(routes: Bool) async throws {
        let nodes = try ["a", "b", "c"].map { try TestNode(name: $0, subscriptions: [Self.query]) { $0.routes = routes } }
        defer { nodes.forEach { $0.remove() } }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        try await Self.withLinks([(b, a), (c, a), (c, b)][...]) {
            for k in 0..<40 {
                _ = try await a.store.execute(
                    "INSERT INTO items DOCUMENTS ({'_id': :k, 'v': :v, 'w': 'x'})", arguments: ["k": .string("k\(k)"), "v": .int(Int64(k))])
            }
            let written = UInt64(40 * 3)
            @Sendable func counts(_ node: TestNode) -> (received: UInt64, duplicate: UInt64) {
                var bySite: [SiteID: (UInt64, UInt64)] = [:]
                for p in node.sync.peers() where p.state == "connected" {
                    if let site = p.siteID { bySite[site] = (p.deltasIn, p.deltasDuplicate) }
                }
                return (bySite.values.reduce(0) { $0 + $1.0 }, bySite.values.reduce(0) { $0 + $1.1 })
            }
            // Counted once every link has acknowledged all its sender holds: a node counts
            // a batch's deltas as received when they arrive, and those it held already once
            // their commit returns, before it acknowledges them. Read between the two, a
            // second copy still queued looks new.
            #expect(try await InProcessMesh.eventually {
                let (bc, cc) = (counts(b), counts(c))
                return try await Self.settled(nodes) && bc.received - bc.duplicate == written && cc.received - cc.duplicate == written
                    && (routes || bc.duplicate + cc.duplicate >= written)
            })
            var duplicates: UInt64 = 0
            for node in [b, c] {
                let (received, duplicate) = counts(node)
                print("triangle, one writer, routes \(routes ? "on" : "off"): \(node.sync.configuration.nodeName) received \(received) deltas, \(duplicate) held already")
                #expect(received - duplicate == written, "each delta new once: \(received) received, \(duplicate) duplicates")
                duplicates += duplicate
            }
            if routes {
                #expect(duplicates < written / 2, "\(duplicates) duplicates for \(written) deltas written: the routes did not prune")
            } else {
                #expect(duplicates >= written && duplicates <= 2 * written, "\(duplicates) duplicates for \(written) deltas written")
            }
            let fromA = try #require(b.sync.peers().first { $0.siteID == a.sync.siteID })
            #expect(fromA.deltasDuplicate <= fromA.deltasIn)
        }
    }
}

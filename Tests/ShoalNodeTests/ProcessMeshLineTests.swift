import Foundation
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

extension ProcessSuites {
/// Five `shoal` processes in a line on loopback, each subscribed to everything that
/// is written: random writes on random nodes, one node killed and restarted, one link
/// cut and restored (a proxy in this test); all five must end with equal digests, and
/// the deltas that crossed each link are printed against the minimum.
@Suite(.serialized) struct ProcessMeshLineTests {
    /// A seeded generator, so a failing run can be replayed (SHOAL_LINE_SEED).
    static let query = "SELECT * FROM items"

    @Test func fiveNodesInALineConvergeThroughACrashAndACut() async throws {
        let dirs = TemporaryDirectory(prefix: "shoal-line")
        defer { dirs.remove() }
        let seed = ProcessInfo.processInfo.environment["SHOAL_LINE_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...UInt64.max)
        print("five-node line: seed \(seed) (SHOAL_LINE_SEED replays it)")
        var random = SplitMix(state: seed)
        func start(_ i: Int, peer: String?, port: Int = 0) throws -> NodeProcess {
            try NodeProcess(
                name: "n\(i)", dataDirectory: dirs.path + "/n\(i)", listenPort: port,
                extra: ["--subscribe", Self.query] + (peer.map { ["--peer", $0] } ?? []))
        }
        // n1 <- n2 <- n3 <- proxy <- n4 <- n5 (each dials the one before it).
        let n1 = try start(1, peer: nil)
        var n2 = try start(2, peer: n1.address)
        let n3 = try start(3, peer: n2.address)
        let proxy = try LoopbackProxy(to: n3.port)
        defer { proxy.stop() }
        let n4 = try start(4, peer: proxy.address)
        let n5 = try start(5, peer: n4.address)
        func nodes() -> [NodeProcess] { [n1, n2, n3, n4, n5] }
        func client(_ node: NodeProcess) throws -> AdminClient {
            AdminClient(node: try HostAndPort(parsing: node.address), timeout: .seconds(60))
        }
        var written = 0
        func write(_ count: Int, on candidates: [Int]) async throws {
            for _ in 0..<count {
                let i = candidates[Int.random(in: 0..<candidates.count, using: &random)]
                let key = "k\(Int.random(in: 0..<40, using: &random))"
                let doc: Value = ["_id": .string(key), "v": .int(Int64(written)), "by": .string("n\(i + 1)")]
                _ = try await client(nodes()[i]).exec(
                    "INSERT INTO items DOCUMENTS (:d) ON ID CONFLICT DO UPDATE",
                    argumentsJSON: Value.object(["d": doc]).canonicalJSON)
                written += 1
            }
        }

        try await write(40, on: [0, 1, 2, 3, 4])
        // Kill n2 outright, write around it, start it again on the same port.
        let port2 = n2.port
        n2.crash()
        try await write(30, on: [0, 2, 3, 4])
        n2 = try start(2, peer: n1.address, port: port2)
        // Cut n3 – n4: both halves write, then the link comes back.
        proxy.cut()
        try await write(30, on: [0, 1, 2, 3, 4])
        proxy.restore()
        try await write(20, on: [0, 1, 2, 3, 4])

        var statuses: [NodeStatus] = []
        let converged = try await InProcessMesh.eventually(timeout: .seconds(90)) {
            statuses = []
            for node in nodes() { statuses.append(try await client(node).status(digests: true)) }
            let digests = Set(statuses.map { $0.collections.first { $0.name == "items" }?.digest ?? "none" })
            let logs = Set(statuses.map(\.changeLogSequence))
            // And every link acknowledged all its sender holds: the counts below are final
            // (a node that has everything may still be sending it on to the next).
            let quiet = statuses.allSatisfy { $0.peers.allSatisfy { $0.state != "connected" || $0.lagDeltas == 0 } }
            return digests.count == 1 && !digests.contains("none") && logs.count == 1 && quiet
        }
        #expect(converged, "digests: \(statuses.map { $0.collections.first?.digest ?? "-" })")
        let documents = statuses.first?.collections.first { $0.name == "items" }?.documents ?? 0
        #expect(documents > 0 && documents <= 40)

        // Each delta must cross every link once (everyone wants everything): the minimum
        // per link is the number of deltas, which every node's log now holds once. A new
        // node that syncs from n1 receives each of them once: that count is the minimum.
        let n6 = try start(6, peer: n1.address)
        var minimum: UInt64 = 0
        #expect(try await InProcessMesh.eventually(timeout: .seconds(60)) {
            // n1 says n6 acknowledged its whole log; then n6 has received all of it.
            let n6Site = try await client(n6).status().siteID
            let seen = try await client(n1).status().peers.first { $0.siteID == n6Site && $0.state == "connected" }
            guard seen?.lagDeltas == 0 else { return false }
            minimum = try await client(n6).status().peers.first { $0.siteID == statuses[0].siteID }?.deltasIn ?? 0
            return minimum > 0
        })
        func link(_ reporter: Int, _ other: Int) -> (out: UInt64, in: UInt64)? {
            let site = statuses[other].siteID
            guard let peer = statuses[reporter].peers.first(where: { $0.siteID == site && $0.state == "connected" }) else { return nil }
            return (peer.deltasOut, peer.deltasIn)
        }
        // Counted by the end that never restarted (n2's counts began again with it).
        let links = [(0, 1, "n1 - n2"), (2, 1, "n2 - n3"), (2, 3, "n3 - n4 (cut and restored)"), (3, 4, "n4 - n5")]
        print("five-node line: \(written) transactions, \(minimum) deltas, \(documents) documents, digest \(statuses[0].collections.first?.digest ?? "-")")
        for (reporter, other, name) in links {
            let counts = try #require(link(reporter, other), "\(name) is connected")
            let total = counts.out + counts.in
            print("five-node line: link \(name): \(total) deltas crossed (\(counts.out) one way, \(counts.in) the other), minimum \(minimum), ratio \(String(format: "%.2f", Double(total) / Double(max(minimum, 1))))")
            #expect(total >= minimum, "every delta crossed \(name)")
            #expect(total * 2 <= minimum * 3, "no storm on \(name): at most 1.5 times the minimum (an echo would double it)")
        }
    }
}
}

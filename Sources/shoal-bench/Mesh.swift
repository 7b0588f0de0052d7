import Foundation
import ShoalNode
import ShoalSync
import ShoalTesting

/// What a mesh's shape costs: `shoal` processes on 127.0.0.1 joined in a topology,
/// every node subscribed to the documents, writes on one node or on several. Per run:
/// the deltas and bytes the nodes received against the minimum (each delta reaching
/// each other node once), the time until every node holds every write, and the CPU
/// the nodes used.
enum Mesh {
    /// Which node dials which: `edges` pairs (dialer, accepter) by index, the accepter first started.
    struct Topology: Sendable {
        var name: String
        var nodes: Int
        var edges: [(Int, Int)]

        static func complete(_ n: Int) -> Topology {
            Topology(name: "complete \(n)", nodes: n, edges: (0..<n).flatMap { i in (0..<i).map { (i, $0) } })
        }

        static func line(_ n: Int) -> Topology {
            Topology(name: "line \(n)", nodes: n, edges: (1..<n).map { ($0, $0 - 1) })
        }

        /// A connected graph with cycles, the same for a seed: a random tree, then each
        /// node after the third dials one more node it does not yet know.
        static func random(_ n: Int, seed: UInt64) -> Topology {
            var generator = SplitMix(seed: seed)
            var edges: [(Int, Int)] = []
            for i in 1..<n {
                let first = Int(generator.next() % UInt64(i))
                edges.append((i, first))
                if i >= 3 {
                    let others = (0..<i).filter { $0 != first }
                    edges.append((i, others[Int(generator.next() % UInt64(others.count))]))
                }
            }
            return Topology(name: "random \(n) (\(edges.count) links)", nodes: n, edges: edges)
        }
    }

    struct Figure: Sendable {
        var topology: String
        var nodes: Int
        var links: Int
        var writers: Int
        var documents: Int
        /// Whether the nodes asked for routes (version 4), or sent every origin on every link.
        var routes: Bool
        /// Deltas received over every node, those it held already, and the minimum
        /// (each delta written, once at each other node).
        var received: UInt64
        var duplicate: UInt64
        var minimum: UInt64
        var bytesReceived: UInt64
        var convergeSeconds: Double
        var cpuSecondsPerNode: Double

        var amplification: Double { minimum > 0 ? Double(received) / Double(minimum) : 0 }
    }

    static let collection = "docs"

    /// Starts the topology, writes `documents` (in transactions of 10) spread over the
    /// first `writers` nodes, and waits until every node holds them all.
    static func run(_ topology: Topology, writers: Int, documents: Int, routes: Bool, progress: Progress) async throws -> Figure {
        let directory = TemporaryDirectory(prefix: "shoal-bench-mesh")
        defer { directory.remove() }
        var nodes: [NodeProcess] = []
        defer { nodes.forEach { $0.stop() } }
        for i in 0..<topology.nodes {
            let peers = topology.edges.filter { $0.0 == i }.flatMap { ["--peer", nodes[$0.1].address] }
            nodes.append(
                try NodeProcess(
                    name: "n\(i)", dataDirectory: directory.path + "/n\(i)",
                    extra: peers + ["--subscribe", "SELECT * FROM \(collection)"] + (routes ? [] : ["--no-routes"])))
        }
        let clients = try nodes.map { AdminClient(node: try HostAndPort(parsing: $0.address), timeout: .seconds(600)) }
        // Every link up: each node sees as many connected peers as it has links.
        for (i, client) in clients.enumerated() {
            let expected = topology.edges.count { $0.0 == i || $0.1 == i }
            try await Replication.waitUntil {
                Set(try await client.status().peers.filter { $0.state == "connected" }.compactMap(\.siteID)).count >= expected
            }
        }
        let cpuBefore = nodes.map { $0.cpuSeconds ?? 0 }
        progress.say("  \(topology.name): \(documents) documents on \(writers) writer(s), routes \(routes ? "on" : "off")")
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for w in 0..<writers {
                let share = (w * documents / writers)..<((w + 1) * documents / writers)
                group.addTask {
                    let batches = stride(from: share.lowerBound, to: share.upperBound, by: 10).map { $0..<min($0 + 10, share.upperBound) }
                    try await clients[w].withSession { session in
                        try await session.execPipelined(count: batches.count, inFlight: 2) { k in
                            ("INSERT INTO \(collection) DOCUMENTS (:docs)", "{\"docs\":\(Workload.json(batches[k]))}")
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        // Converged once every node holds every document.
        let deadline = ContinuousClock.now + .seconds(300)
        var done = Set<Int>()
        while done.count < clients.count {
            guard ContinuousClock.now < deadline else { throw BenchError("\(topology.name): not converged within 300 s") }
            for (i, client) in clients.enumerated() where !done.contains(i) {
                let held = try await client.status().collections.first { $0.name == collection }?.documents ?? 0
                if held >= documents { done.insert(i) }
            }
            if done.count < clients.count { try await Task.sleep(for: .milliseconds(20)) }
        }
        let converged = seconds(ContinuousClock.now - start)
        // Streams that carry copies may still be running: a little longer, so that what
        // is counted is what the mesh sends, not what it sent by the time the last arrived.
        try await Task.sleep(for: .seconds(1))
        let cpu = zip(nodes, cpuBefore).map { ($0.cpuSeconds ?? 0) - $1 }
        var received: UInt64 = 0, duplicate: UInt64 = 0, bytes: UInt64 = 0
        for client in clients {
            let status = try await client.status()
            received += status.deltasReceived.total
            duplicate += status.deltasReceived.duplicate
            bytes += status.peers.filter { $0.state == "connected" }.reduce(0) { $0 + $1.bytesIn }
        }
        let deltasPerDocument = UInt64(Workload.deltasPerDocument)
        return Figure(
            topology: topology.name, nodes: topology.nodes, links: topology.edges.count, writers: writers,
            documents: documents, routes: routes, received: received, duplicate: duplicate,
            minimum: UInt64(documents) * deltasPerDocument * UInt64(topology.nodes - 1), bytesReceived: bytes,
            convergeSeconds: converged, cpuSecondsPerNode: cpu.reduce(0, +) / Double(cpu.count))
    }

    static func suite(documents: Int, progress: Progress) async throws -> [Figure] {
        let topologies: [Topology] = [.complete(6), .complete(12), .line(6), .random(8, seed: 7)]
        var figures: [Figure] = []
        for topology in topologies {
            for writers in [1, 3] {
                // With routes and without, one after the other on the same machine.
                for routes in [true, false] {
                    figures.append(
                        try await run(topology, writers: writers, documents: documents, routes: routes, progress: progress))
                }
            }
        }
        return figures
    }

    static func table(_ figures: [Figure]) -> String {
        var out = "shoal-bench --mesh: every node subscribed to all; writes in transactions of 10 documents of \(Workload.deltasPerDocument) deltas\n"
        out += "  received = deltas taken in over every node; minimum = each delta once at each other node\n\n"
        let header = ["TOPOLOGY", "WRITERS", "ROUTES", "DOCS", "RECEIVED", "HELD ALREADY", "MINIMUM", "AMPLIFICATION", "BYTES IN", "CONVERGED s", "CPU s/NODE"]
        let rows = figures.map { f in
            [f.topology, "\(f.writers)", f.routes ? "on" : "off", "\(f.documents)", "\(f.received)", "\(f.duplicate)", "\(f.minimum)",
             String(format: "%.2f×", f.amplification), "\(f.bytesReceived)", String(format: "%.2f", f.convergeSeconds),
             String(format: "%.2f", f.cpuSecondsPerNode)]
        }
        out += renderTable(header, rows)
        return out
    }

    static func json(_ figures: [Figure]) -> String {
        let rows = figures.map { f in
            """
            {"topology":"\(f.topology)","nodes":\(f.nodes),"links":\(f.links),"writers":\(f.writers),"routes":\(f.routes),"documents":\(f.documents),\
            "received":\(f.received),"duplicate":\(f.duplicate),"minimum":\(f.minimum),\
            "amplification":\(String(format: "%.3f", f.amplification)),"bytesReceived":\(f.bytesReceived),\
            "convergeSeconds":\(String(format: "%.3f", f.convergeSeconds)),"cpuSecondsPerNode":\(String(format: "%.3f", f.cpuSecondsPerNode))}
            """
        }
        return "{\"mesh\":[" + rows.joined(separator: ",") + "]}"
    }
}

/// A small seeded generator, so that a random topology is the same on every run.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

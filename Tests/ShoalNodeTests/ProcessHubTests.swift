import Foundation
import Logging
import ShoalPostgres
import ShoalTesting
import Testing

extension ProcessSuites {
/// Hubs as real `shoal run --store postgresql://…` processes on one database, with
/// devices on loopback (ARCHITECTURE.md, "Hubs on PostgreSQL").
@Suite(.serialized, .enabled(if: TemporaryPostgresDatabase.serverURL != nil, Comment(rawValue: TemporaryPostgresDatabase.skipReason)))
struct ProcessHubTests {
    static func digest(_ node: NodeProcess) -> String? {
        ((try? node.status()["collections"] as? [String: Any])?["t"] as? [String: Any])?["digest"] as? String
    }

    static func hub(_ name: String, _ dirs: TemporaryDirectory, store: String, port: Int = 0) throws -> NodeProcess {
        try NodeProcess(
            name: name, dataDirectory: dirs.path + "/" + name, listenPort: port,
            extra: ["--store", store, "--subscribe", "SELECT * FROM t"])
    }

    /// Two hubs on one database and three devices spread over them, each device given
    /// both hubs: everyone writes, the same documents included, in transactions of two
    /// documents and increments of one counter; hub 1 is killed (SIGKILL) half-way and
    /// its devices go on through hub 2. At the end every device and both hubs (hub 1
    /// started again) hold the same documents: every acknowledged increment counted
    /// once, every acknowledged pair whole.
    /// What `killOneHub` saw, checked by the test (an expectation is recorded only in
    /// the test's task, not on the thread the processes are driven from).
    struct Outcome: Sendable {
        var sites: [String?] = []
        var counterSeeded = false
        var seen = false
        var crashed = false
        var increments = 0
        var pairs: [Int] = []
        var converged = false
        var digests: [String] = []
        /// Per node: its name, the counter, the pairs it holds and how many pair documents.
        var nodes: [(name: String, hits: Int?, pairs: Set<Int>, halves: Int)] = []
    }

    @Test func devicesKeepSyncingThroughTheOtherHubWhenOneIsKilled() async throws {
        let outcome = try await TemporaryPostgresDatabase.withDatabase { databases in
            let store = databases[0].location.description
            return try await onOwnThread { try Self.killOneHub(store: store) }
        }
        #expect(outcome.sites.count == 2 && outcome.sites[0] != nil && outcome.sites[0] == outcome.sites[1], "two processes, one node")
        #expect(outcome.counterSeeded && outcome.seen && outcome.crashed)
        // 3 rounds of 5 writers, 3 of 4, 2 of 5: each write is acknowledged.
        #expect(outcome.increments == 37 && outcome.pairs.count == 37, "increments \(outcome.increments), pairs \(outcome.pairs.count)")
        #expect(outcome.converged, "digests: \(outcome.digests)")
        #expect(outcome.nodes.count == 5)
        for node in outcome.nodes {
            #expect(node.hits == outcome.increments, "\(node.name): every acknowledged increment once")
            #expect(Set(outcome.pairs).isSubset(of: node.pairs), "\(node.name): every acknowledged pair")
            #expect(node.halves == 2 * node.pairs.count, "\(node.name): no pair held in part")
        }
    }

    static func killOneHub(store: String) throws -> Outcome {
        var outcome = Outcome()
        let dirs = TemporaryDirectory(prefix: "shoal-hubs")
        defer { dirs.remove() }
        var hub1 = try Self.hub("hub1", dirs, store: store)
        let hub1Port = hub1.port
        let hub2 = try Self.hub("hub2", dirs, store: store)
        defer {
            hub1.stop()
            hub2.stop()
        }
        outcome.sites = try [hub1.status(), hub2.status()].map { $0["siteID"] as? String }
        var devices: [NodeProcess] = []
        defer { for device in devices { device.stop() } }
        for (i, first) in [hub1, hub2, hub1].enumerated() {
            let second = first === hub1 ? hub2 : hub1
            devices.append(
                try NodeProcess(
                    name: "d\(i + 1)", dataDirectory: dirs.path + "/d\(i + 1)",
                    extra: ["--peer", first.address, "--peer", second.address, "--subscribe", "SELECT * FROM t"]))
        }
        func write(_ round: Int, on nodes: [NodeProcess]) throws {
            for (n, node) in nodes.enumerated() {
                let id = round * 10 + n
                // The same documents everywhere: the last writer wins, everywhere alike.
                let same = "INSERT INTO t DOCUMENTS ({'_id': 'shared\(round % 3)', 'by': '\(node.name)', 'round': \(round)}) ON ID CONFLICT DO UPDATE"
                let pair = "INSERT INTO t DOCUMENTS ({'_id': 'a\(id)', 'pair': \(id)}), ({'_id': 'b\(id)', 'pair': \(id)})"
                let increment = "UPDATE COLLECTION t (hits COUNTER) APPLY hits INCREMENT BY 1 WHERE _id = 'counter'"
                if try node.exec("\(same); \(pair)").status == 0 { outcome.pairs.append(id) }
                if try node.exec(increment).status == 0 { outcome.increments += 1 }
            }
        }
        outcome.counterSeeded =
            try hub2.exec("INSERT INTO COLLECTION t (hits COUNTER) DOCUMENTS ({'_id': 'counter', 'hits': 0})").status == 0
        outcome.seen = eventually(30) { devices.allSatisfy { (try? ProcessMeshTests.documents($0, "SELECT * FROM t").count) == 1 } }
        for round in 0..<3 { try write(round, on: devices + [hub1, hub2]) }
        hub1.crash()
        outcome.crashed = eventually(10) { !hub1.isRunning }
        for round in 3..<6 { try write(round, on: devices + [hub2]) }
        hub1 = try Self.hub("hub1", dirs, store: store, port: hub1Port)
        for round in 6..<8 { try write(round, on: devices + [hub1, hub2]) }

        let everyone = devices + [hub1, hub2]
        outcome.converged = eventually(60) {
            let digests = everyone.map(Self.digest)
            return digests[0] != nil && Set(digests).count == 1
        }
        outcome.digests = everyone.map { "\($0.name): \(Self.digest($0) ?? "none")" }
        for node in everyone {
            let documents = try ProcessMeshTests.documents(node, "SELECT * FROM t")
            outcome.nodes.append(
                (
                    node.name, documents.first { $0["_id"] as? String == "counter" }?["hits"] as? Int,
                    Set(documents.compactMap { $0["pair"] as? Int }), documents.filter { $0["pair"] != nil }.count
                ))
        }
        return outcome
    }
}
}

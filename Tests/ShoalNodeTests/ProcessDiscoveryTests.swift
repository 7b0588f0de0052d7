import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
/// LAN discovery between real processes, on the loopback interface only
/// (`--discovery-interface lo`: multicast TTL 0, nothing leaves the machine).
@Suite(.serialized) struct ProcessDiscoveryTests {
    static func status(_ node: NodeProcess, key: String?) throws -> [String: Any] {
        let output = try ShoalBinary.run(["status", "--node", node.address, "--json"] + (key.map { ["--mesh-key-file", $0] } ?? []))
        guard output.status == 0, let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any] else {
            throw NodeProcessError(message: "status failed: \(output.stderr)")
        }
        return object
    }

    static func connected(_ node: NodeProcess, key: String?) throws -> [[String: Any]] {
        (try status(node, key: key)["peers"] as? [[String: Any]] ?? []).filter { $0["state"] as? String == "connected" }
    }

    static func start(_ name: String, _ dirs: TemporaryDirectory, mesh: String, key: String?, extra: [String] = []) throws -> NodeProcess {
        try NodeProcess(
            name: name, dataDirectory: dirs.path + "/" + name,
            arguments: ["--data", dirs.path + "/" + name, "--listen", "127.0.0.1:0", "--name", name, "--mesh", mesh,
                        "--discovery-interface", "lo", "--subscribe", "SELECT * FROM cars"]
                + (key.map { ["--mesh-key-file", $0] } ?? []) + extra)
    }

    @Test func nodesOnLoopbackFindEachOtherAndIgnoreOtherMeshesAndKeys() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-discovery")
        defer { dirs.remove() }
        let mesh = "discovery-\(UInt32.random(in: 0...UInt32.max))"
        let key = dirs.path + "/mesh.key", otherKey = dirs.path + "/other.key"
        try writePrivateFile(key, "correct horse battery staple")
        try writePrivateFile(otherKey, "a different key, also 16+ bytes")

        let started = Date()
        let a = try Self.start("a", dirs, mesh: mesh, key: key)
        let b = try Self.start("b", dirs, mesh: mesh, key: key)
        let wrongKey = try Self.start("wrong-key", dirs, mesh: mesh, key: otherKey)
        let otherMesh = try Self.start("other-mesh", dirs, mesh: mesh + "-other", key: key)
        let aSite = try #require(try Self.status(a, key: key)["siteID"] as? String)
        let bSite = try #require(try Self.status(b, key: key)["siteID"] as? String)

        // No --peer anywhere: a and b find each other within seconds.
        #expect(try eventually(10) { try Self.connected(a, key: key).contains { $0["siteID"] as? String == bSite } })
        #expect(try eventually(10) { try Self.connected(b, key: key).contains { $0["siteID"] as? String == aSite } })
        print("discovery: a and b connected \(String(format: "%.1f", Date().timeIntervalSince(started))) s after the first started")
        let insert = try ShoalBinary.run(
            ["exec", "--node", a.address, "--mesh-key-file", key, "INSERT INTO cars DOCUMENTS ({'_id': 'found'})"])
        #expect(insert.status == 0, "\(insert.stderr)")
        #expect(try eventually(10) {
            try ShoalBinary.run(["exec", "--node", b.address, "--mesh-key-file", key, "--json", "SELECT * FROM cars"])
                .stdout.contains("found")
        })

        // Long enough for every node to have heard every other several times.
        Thread.sleep(forTimeInterval: 4)
        let aPeers = try Self.connected(a, key: key), bPeers = try Self.connected(b, key: key)
        #expect(aPeers.count == 1 && bPeers.count == 1, "exactly one connection, none to the other two: \(aPeers) \(bPeers)")
        #expect((aPeers.first?["discovered"] as? Bool) == true)
        #expect(try Self.connected(wrongKey, key: otherKey).isEmpty)
        #expect(try Self.connected(otherMesh, key: key).isEmpty)
        #expect(a.log().contains("refusing a peer heard on the LAN: announcement of mesh '\(mesh)-other'"), "\(a.log())")
        #expect(a.log().contains("signed with another mesh key"), "\(a.log())")
        // B leaves: A's dialer for it ends once B is no longer heard (5 s), and B leaves A's status.
        #expect(b.interrupt() == 0)
        #expect(eventually(15) { a.log().contains("no longer dialing a peer that left the LAN") }, "\(a.log())")
        let left = try Self.status(a, key: key)["peers"] as? [[String: Any]] ?? []
        #expect(left.isEmpty, "A still shows \(left)")
        for node in [a, wrongKey, otherMesh] { #expect(node.interrupt() == 0) }
    }

    @Test func twoNodesDialingEachOtherEndWithOneConnection() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-dial")
        defer { dirs.remove() }
        // Reserve two ports, then start both nodes dialing each other at once.
        let a = try NodeProcess(name: "a", dataDirectory: dirs.path + "/a")
        let portA = a.port
        a.stop()
        let b = try NodeProcess(name: "b", dataDirectory: dirs.path + "/b", extra: ["--peer", "127.0.0.1:\(portA)"])
        let a2 = try NodeProcess(name: "a", dataDirectory: dirs.path + "/a", listenPort: portA, extra: ["--peer", b.address])
        #expect(try eventually(10) {
            try ProcessMeshTests.peers(a2).filter { $0["state"] as? String == "connected" }.count == 1
                && ProcessMeshTests.peers(b).filter { $0["state"] as? String == "connected" }.count == 1
        })
        Thread.sleep(forTimeInterval: 3)
        let aConnected = try ProcessMeshTests.peers(a2).filter { $0["state"] as? String == "connected" }
        let bConnected = try ProcessMeshTests.peers(b).filter { $0["state"] as? String == "connected" }
        #expect(aConnected.count == 1 && bConnected.count == 1, "\(aConnected) \(bConnected)")
        #expect(aConnected.first?["direction"] as? String != bConnected.first?["direction"] as? String, "the two ends of one connection")
    }
}
}

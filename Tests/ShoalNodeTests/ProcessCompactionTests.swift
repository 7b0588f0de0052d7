import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
/// Change-log compaction through real processes: it follows what a connected peer
/// acknowledged, stops at an offline peer's position, passes it once the peer is
/// past the horizon, and that peer, and a new one, resync to equal contents.
@Suite(.serialized) struct ProcessCompactionTests {
    static func digest(_ node: NodeProcess) -> String? {
        ((try? node.status()["collections"] as? [String: Any])?["cars"] as? [String: Any])?["digest"] as? String
    }

    static func storage(_ node: NodeProcess) throws -> [String: Any] {
        try #require(try node.status()["storage"] as? [String: Any])
    }

    /// `shoal import --batch 1`: one transaction per line, `count` lines over `ids` documents.
    static func updates(_ node: NodeProcess, in dir: String, count: Int, ids: Int, round: Int) throws {
        let lines = (0..<count).map { i in
            "{\"_id\": \"car-\(i % ids)\", \"n\": \(round * 100_000 + i), \"color\": \"c\(i % 7)\"}"
        }
        let file = dir + "/updates-\(round).ndjson"
        try (lines.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let out = try ShoalBinary.run(["import", "--node", node.address, "--collection", "cars", "--batch", "1", "--json", file])
        #expect(out.status == 0, "\(out.stderr)")
    }

    static func compact(_ node: NodeProcess, vacuum: Bool = false) throws -> [String: Any] {
        let out = try ShoalBinary.run(["compact", "--node", node.address, "--json"] + (vacuum ? ["--vacuum"] : []))
        #expect(out.status == 0, "\(out.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(out.stdout.utf8)) as? [String: Any])
    }

    @Test func compactionFollowsPeersAndAPeerPastTheHorizonResyncs() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let horizon = 8.0
        let a = try NodeProcess(
            name: "a", dataDirectory: dirs.path + "/a",
            extra: ["--compaction-interval", "0", "--compaction-horizon", "\(Int(horizon))"])
        defer { a.stop() }
        var b = try NodeProcess(
            name: "b", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address, "--subscribe", "SELECT * FROM cars"])
        defer { b.stop() }
        let bSite = try #require(try b.status()["siteID"] as? String)

        // 600 transactions over 20 documents: all but the first and the last of each document's go.
        try Self.updates(a, in: dirs.path, count: 600, ids: 20, round: 1)
        #expect(eventually(30) { Self.digest(b) != nil && Self.digest(b) == Self.digest(a) }, "b caught up")
        let rowsBefore = try #require(try Self.storage(a)["changeLogRows"] as? Int)
        let first = try Self.compact(a, vacuum: true)
        let removed = try #require(first["rowsRemoved"] as? Int)
        print("compaction with b connected: \(first)")
        #expect(
            first["transactionsRemoved"] as? Int == 560,
            "every transaction but each document's first (it holds the _id) and last went: \(first)")
        #expect(removed > 0 && first["vacuumed"] as? Bool == true)
        #expect(
            (first["storeBytesAfter"] as? Int ?? .max) < (first["storeBytesBefore"] as? Int ?? 0),
            "VACUUM gave space back: \(first)")
        let storage = try Self.storage(a)
        #expect(storage["changeLogRows"] as? Int == rowsBefore - removed)
        #expect((storage["compactedThrough"] as? Int ?? 0) > 0 && storage["compactedAtMillis"] as? Int != nil)
        #expect((storage["storeBytes"] as? Int ?? 0) > 0)
        let bPositions = (storage["peerPositions"] as? [[String: Any]] ?? []).compactMap { $0["siteID"] as? String }
        #expect(bPositions == [bSite], "b's position is saved: \(storage)")

        // b goes offline; a writes on. Compaction stops at b's position.
        b.stop()
        let stopped = Date()
        try Self.updates(a, in: dirs.path, count: 300, ids: 20, round: 2)
        let held = try Self.compact(a)
        print("compaction with b offline: \(held)")
        #expect(held["heldBy"] as? String == bSite, "b holds the point: \(held)")
        #expect(held["through"] as? Int == first["through"] as? Int, "\(held)")
        #expect(
            held["transactionsRemoved"] as? Int == 20,
            "only each document's last transaction of the first round, overwritten now and at b's position, went: \(held)")

        // Past the horizon, b no longer counts: the log compacts beyond it.
        let wait = horizon + 1 - Date().timeIntervalSince(stopped)
        if wait > 0 { usleep(UInt32(wait * 1_000_000)) }
        let passed = try Self.compact(a)
        print("compaction past the horizon: \(passed)")
        #expect((passed["expiredPeers"] as? [String]) == [bSite], "\(passed)")
        #expect(passed["transactionsRemoved"] as? Int == 280, "\(passed)")
        #expect(passed["heldBy"] is NSNull)

        // b returns below the point and resyncs; a new node starts from nothing: both end equal.
        b = try NodeProcess(
            name: "b", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address, "--subscribe", "SELECT * FROM cars"])
        let c = try NodeProcess(
            name: "c", dataDirectory: dirs.path + "/c", extra: ["--peer", a.address, "--subscribe", "SELECT * FROM cars"])
        defer { c.stop() }
        #expect(eventually(30) { Self.digest(b) == Self.digest(a) && Self.digest(c) == Self.digest(a) }, "b and c resynced to a")
        #expect(a.log().contains("below this node's compaction point"), "a says b resyncs")
        let rows = try a.exec("SELECT * FROM cars WHERE _id = 'car-3'").stdout
        #expect(rows.contains("\"n\":200283"), "the latest write of car-3 (round 2, line 283): \(rows)")
    }
}
}

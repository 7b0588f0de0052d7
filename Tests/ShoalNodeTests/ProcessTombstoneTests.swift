import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
/// Forgetting deleted documents through real processes (DATA_MODEL.md §18): with a
/// one-second tombstone horizon, `shoal compact` forgets a document deleted while a
/// peer was away; the peer, back with the document, is refused as a stale replica
/// and says so in its status; a new node and the stale one started again from an
/// empty data directory sync, and the document stays forgotten everywhere.
@Suite(.serialized) struct ProcessTombstoneTests {
    static let cars = "SELECT * FROM cars"

    static func digest(_ node: NodeProcess) -> String? {
        ((try? node.status()["collections"] as? [String: Any])?["cars"] as? [String: Any])?["digest"] as? String
    }

    static func ids(_ node: NodeProcess) throws -> String {
        try node.exec("SELECT _id FROM cars ORDER BY _id").stdout
    }

    @Test func aForgottenDeletionTurnsAwayAStalePeer() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(
            name: "a", dataDirectory: dirs.path + "/a",
            extra: ["--compaction-interval", "0", "--compaction-horizon", "1", "--tombstone-horizon", "1", "--subscribe", Self.cars])
        defer { a.stop() }
        var p = try NodeProcess(name: "p", dataDirectory: dirs.path + "/p", extra: ["--peer", a.address, "--subscribe", Self.cars])
        defer { p.stop() }
        for id in ["gone", "kept"] {
            #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': '\(id)', 'x': 1})").status == 0)
        }
        #expect(eventually(30) { Self.digest(p) != nil && Self.digest(p) == Self.digest(a) }, "p has both")
        let pSite = try #require(try p.status()["siteID"] as? String)

        // p is away while a deletes `gone` (and writes on, so the DELETE is not the log's last).
        p.stop()
        usleep(100_000)
        #expect(try a.exec("DELETE FROM cars WHERE _id = 'gone'").status == 0)
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'later', 'x': 1})").status == 0)
        usleep(2_500_000)
        let out = try ShoalBinary.run(["compact", "--node", a.address, "--json"])
        #expect(out.status == 0, "\(out.stderr)")
        let compaction = try #require(try JSONSerialization.jsonObject(with: Data(out.stdout.utf8)) as? [String: Any])
        print("compaction: \(compaction)")
        #expect(compaction["documentsForgotten"] as? Int == 1, "\(compaction)")
        #expect((compaction["expiredPeers"] as? [String]) == [pSite], "\(compaction)")
        let storage = try #require(try a.status()["storage"] as? [String: Any])
        #expect(storage["documentsForgotten"] as? Int == 1 && storage["forgottenThroughMillis"] is Int, "\(storage)")
        #expect(storage["freshness"] is [Any], "\(storage)")
        let text = try ShoalBinary.run(["status", "--node", a.address]).stdout
        #expect(text.contains("1 deleted documents forgotten"), "\(text)")
        #expect(try Self.ids(a).contains("gone") == false)

        // p returns with `gone`: refused, told why, and neither side changes.
        p = try NodeProcess(name: "p", dataDirectory: dirs.path + "/p", extra: ["--peer", a.address, "--subscribe", Self.cars])
        var refusal: String?
        #expect(eventually(30) {
            let peers = (try? p.status()["peers"] as? [[String: Any]]) ?? []
            refusal = peers.compactMap { $0["lastError"] as? String }.first { $0.contains("STALE_REPLICA") }
            return refusal != nil
        }, "p's status names the refusal")
        print("p's status: \(refusal ?? "-")")
        #expect(refusal?.contains("Start site \(pSite) again from an empty data directory") == true)
        #expect(p.log().contains("refuses this node as a stale replica"))
        #expect(a.log().contains("refusing a peer: stale replica"))
        #expect(try Self.ids(p).contains("gone"), "the stale node keeps what it holds")
        #expect(try Self.ids(a).contains("gone") == false, "and a does not get it back")
        let statusText = try ShoalBinary.run(["status", "--node", p.address]).stdout
        #expect(statusText.contains("STALE_REPLICA"), "\(statusText)")

        // A new node syncs; so does p, started again from an empty data directory.
        let c = try NodeProcess(name: "c", dataDirectory: dirs.path + "/c", extra: ["--peer", a.address, "--subscribe", Self.cars])
        defer { c.stop() }
        p.stop()
        try FileManager.default.removeItem(atPath: dirs.path + "/p")
        p = try NodeProcess(name: "p", dataDirectory: dirs.path + "/p", extra: ["--peer", a.address, "--subscribe", Self.cars])
        #expect(eventually(30) { Self.digest(c) == Self.digest(a) && Self.digest(p) == Self.digest(a) }, "c and the new p synced")
        for node in [a, c, p] {
            let ids = try Self.ids(node)
            #expect(ids.contains("kept") && ids.contains("later") && !ids.contains("gone"), "\(ids)")
        }
    }
}
}

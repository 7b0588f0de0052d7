import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
/// Relaying for neighbours between real processes.
@Suite(.serialized) struct ProcessRelayTests {
    /// A – B – C on loopback, A and C subscribed to cars and B to boats only.
    @Test func aCarWrittenOnAReachesCThroughABoatsOnlyB() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-relay")
        defer { dirs.remove() }
        let cars = "SELECT * FROM cars"
        let b = try NodeProcess(name: "b", dataDirectory: dirs.path + "/b", extra: ["--subscribe", "SELECT * FROM boats"])
        let a = try NodeProcess(name: "a", dataDirectory: dirs.path + "/a", extra: ["--peer", b.address, "--subscribe", cars])
        let c = try NodeProcess(name: "c", dataDirectory: dirs.path + "/c", extra: ["--peer", b.address, "--subscribe", cars])
        let insert = try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'across', 'color': 'blue'})")
        #expect(insert.status == 0, "\(insert.stderr)")
        #expect(try eventually { try ProcessMeshTests.documents(c).contains { $0["_id"] as? String == "across" } })
        let back = try c.exec("INSERT INTO cars DOCUMENTS ({'_id': 'back'})")
        #expect(back.status == 0, "\(back.stderr)")
        #expect(try eventually { try ProcessMeshTests.documents(a).contains { $0["_id"] as? String == "back" } })
        #expect(try ProcessMeshTests.documents(c, "SELECT * FROM boats").isEmpty)

        // Status: A and C hold the same cars (equal digests); each peer entry says how
        // far behind it is, when it was last heard from, and the deltas each way.
        func carsDigest(_ node: NodeProcess) throws -> String? {
            ((try node.status()["collections"] as? [String: Any])?["cars"] as? [String: Any])?["digest"] as? String
        }
        #expect(try eventually { try carsDigest(a) != nil && carsDigest(a) == carsDigest(c) })
        #expect(try carsDigest(a)?.count == 64)
        let seenByA = try #require(try ProcessMeshTests.peers(a).first { $0["state"] as? String == "connected" })
        #expect(seenByA["discovered"] as? Bool == false)
        #expect(seenByA["lagDeltas"] is Int && seenByA["lastSeenMillisAgo"] is Int)
        #expect((seenByA["deltasOut"] as? Int ?? 0) >= 2 && (seenByA["deltasIn"] as? Int ?? 0) >= 1, "\(seenByA)")
        // A line: nothing reaches A twice, and status says so.
        #expect(seenByA["deltasDuplicate"] as? Int == 0, "\(seenByA)")
        let received = try #require(try a.status()["received"] as? [String: Any])
        #expect(received["deltas"] as? Int == seenByA["deltasIn"] as? Int && received["duplicate"] as? Int == 0, "\(received)")
        #expect(received["amplification"] as? Double == 1.0, "\(received)")
        #expect(try ShoalBinary.run(["status", "--node", a.address]).stdout.contains("of them held already: amplification 1.00×"))
        #expect(try eventually { try ProcessMeshTests.peers(a).first?["lagDeltas"] as? Int == 0 }, "B has acknowledged everything")

        // shoal mesh from A reaches C through B, which A does not dial itself.
        let mesh = try ShoalBinary.run(["mesh", "--node", a.address, "--json"])
        #expect(mesh.status == 0, "\(mesh.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(mesh.stdout.utf8)) as? [String: Any])
        let names = Set((report["nodes"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String })
        #expect(names == ["a", "b", "c"], "\(mesh.stdout)")
        #expect((report["unreachable"] as? [String: Any])?.isEmpty == true)
        let table = try ShoalBinary.run(["mesh", "--node", c.address])
        #expect(table.stdout.contains("3 node(s), 2 link(s)"), "\(table.stdout)")
        #expect(b.log().contains("resuming sync after the peer's sequence") || b.log().contains("syncing from the start of the peer's log"))
    }

    /// A ring of four processes, all subscribed to boats: D subscribes to cars with
    /// `shoal subscribe`, and every node's peers then serve cars for it; once D
    /// unsubscribes, no node is served cars by any peer any more, round the ring both
    /// ways, and a car written then stays where it was written.
    @Test func aQueryDroppedInARingIsForgottenAllRoundIt() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-ring")
        defer { dirs.remove() }
        let boats = ["--subscribe", "SELECT * FROM boats"]
        let a = try NodeProcess(name: "a", dataDirectory: dirs.path + "/a", extra: boats)
        let b = try NodeProcess(name: "b", dataDirectory: dirs.path + "/b", extra: boats + ["--peer", a.address])
        let c = try NodeProcess(name: "c", dataDirectory: dirs.path + "/c", extra: boats + ["--peer", b.address])
        let d = try NodeProcess(name: "d", dataDirectory: dirs.path + "/d", extra: boats + ["--peer", c.address, "--peer", a.address])
        let nodes = [a, b, c, d]
        // The queries each node's peers send it, and the interest it keeps of nodes away.
        func served(_ node: NodeProcess) throws -> Set<String> {
            let list = try node.status()["subscriptions"] as? [[String: Any]] ?? []
            return Set(list.filter { $0["origin"] as? String != "local" }.compactMap { $0["query"] as? String })
        }
        #expect(try eventually(30) { try nodes.allSatisfy { try ProcessMeshTests.peers($0).filter { $0["state"] as? String == "connected" }.count == 2 } })
        let subscribe = try ShoalBinary.run(["subscribe", "--node", d.address, "SELECT * FROM cars"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        // B, two hops from D either way, is asked for cars by both its neighbours.
        #expect(try eventually(30) { try served(b).contains("SELECT * FROM cars") })
        let unsubscribe = try ShoalBinary.run(["unsubscribe", "--node", d.address, "SELECT * FROM cars"])
        #expect(unsubscribe.status == 0, "\(unsubscribe.stderr)")
        #expect(try eventually(30) { try nodes.allSatisfy { try served($0) == ["SELECT * FROM boats"] } }, "no node is asked for cars")
        Thread.sleep(forTimeInterval: 1)
        #expect(try nodes.allSatisfy { try served($0) == ["SELECT * FROM boats"] }, "and nothing brings it back round")
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'late'}); INSERT INTO boats DOCUMENTS ({'_id': 'marker'})").status == 0)
        #expect(try eventually { try ProcessMeshTests.documents(c, "SELECT * FROM boats").count == 1 })
        Thread.sleep(forTimeInterval: 0.5)
        for node in [b, c, d] {
            #expect(try ProcessMeshTests.documents(node, "SELECT * FROM cars").isEmpty, "the car stayed on A")
        }
    }

    /// B – A – D – C as processes, A and D subscribed to boats and cars, B and C to boats
    /// only. D drops cars with `shoal unsubscribe` while A writes cars and a transaction
    /// of a car and a boat: D gets the boat and no car. D takes cars back with `shoal
    /// subscribe`: it receives the cars it missed, and the history it held does not come again.
    @Test func aNodeThatDropsItsOwnCollectionCatchesUpOnlyOnWhatItMissed() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-narrow")
        defer { dirs.remove() }
        let cars = "SELECT * FROM cars", boats = "SELECT * FROM boats"
        let a = try NodeProcess(name: "a", dataDirectory: dirs.path + "/a", extra: ["--subscribe", boats, "--subscribe", cars])
        let b = try NodeProcess(name: "b", dataDirectory: dirs.path + "/b", extra: ["--subscribe", boats, "--peer", a.address])
        let d = try NodeProcess(
            name: "d", dataDirectory: dirs.path + "/d", extra: ["--subscribe", boats, "--subscribe", cars, "--peer", a.address])
        let c = try NodeProcess(name: "c", dataDirectory: dirs.path + "/c", extra: ["--subscribe", boats, "--peer", d.address])
        let nodes = [a, b, c, d]
        func received(_ node: NodeProcess) throws -> (all: Int, duplicate: Int) {
            let r = try #require(try node.status()["received"] as? [String: Any])
            return (r["deltas"] as? Int ?? -1, r["duplicate"] as? Int ?? -1)
        }
        // What A's peers ask it for (only D ever asks for cars).
        func servedByA() throws -> Set<String> {
            let list = try a.status()["subscriptions"] as? [[String: Any]] ?? []
            return Set(list.filter { $0["origin"] as? String != "local" }.compactMap { $0["query"] as? String })
        }
        #expect(try eventually(30) { try servedByA() == [boats, cars] })
        let history = (0..<20).map { "INSERT INTO cars DOCUMENTS ({'_id': 'old-\($0)', 'n': \($0)})" }.joined(separator: "; ")
        #expect(try a.exec(history).status == 0)
        #expect(try eventually { try ProcessMeshTests.documents(d).count == 20 })

        let unsubscribe = try ShoalBinary.run(["unsubscribe", "--node", d.address, cars])
        #expect(unsubscribe.status == 0, "\(unsubscribe.stderr)")
        #expect(try eventually(30) { try servedByA() == [boats] })
        let before = try received(d)
        let missed = (0..<5).map { "INSERT INTO cars DOCUMENTS ({'_id': 'missed-\($0)', 'n': \($0)})" }.joined(separator: "; ")
        #expect(try a.exec(missed).status == 0)
        // Statements given together run as one transaction.
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'pair', 'n': 1}); INSERT INTO boats DOCUMENTS ({'_id': 'pair'})").status == 0)
        #expect(try eventually { try ProcessMeshTests.documents(d, boats).count == 1 })
        Thread.sleep(forTimeInterval: 0.5)
        #expect(try ProcessMeshTests.documents(d).count == 20, "no car reached D while it did not ask for cars")

        let subscribe = try ShoalBinary.run(["subscribe", "--node", d.address, cars])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        #expect(try eventually(30) { try ProcessMeshTests.documents(d).count == 26 })
        // Counted once every link has acknowledged what its sender holds.
        #expect(
            try eventually(30) {
                try nodes.allSatisfy { node in
                    try ProcessMeshTests.peers(node).filter { $0["state"] as? String == "connected" }.allSatisfy { ($0["lagDeltas"] as? Int ?? 0) == 0 }
                }
            })
        let after = try received(d)
        let duplicates = after.duplicate - before.duplicate
        // What D lacked: 6 cars of two deltas, and the pair's boat; the history (40 deltas) again would show as duplicates.
        #expect(after.all - before.all - duplicates == 13, "useful deltas: \(after.all - before.all - duplicates)")
        #expect(duplicates <= 12, "duplicates: \(duplicates)")
    }

    /// A – B – C, B subscribed to boats, C to cars. C leaves: B relays cars for it
    /// still, and `status` lists its interest as away; once C has been away longer
    /// than B's compaction horizon, B forgets it and asks A for boats alone, from where
    /// the wider set was: no boat reaches B twice, and later cars stay on A.
    @Test func aNeighbourAwayLongerThanTheHorizonIsForgotten() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-relay")
        defer { dirs.remove() }
        let cars = "SELECT * FROM cars", boats = "SELECT * FROM boats"
        let b = try NodeProcess(
            name: "b", dataDirectory: dirs.path + "/b",
            extra: ["--subscribe", boats, "--compaction-interval", "1", "--compaction-horizon", "2"])
        let a = try NodeProcess(name: "a", dataDirectory: dirs.path + "/a", extra: ["--peer", b.address, "--subscribe", cars])
        let c = try NodeProcess(name: "c", dataDirectory: dirs.path + "/c", extra: ["--peer", b.address, "--subscribe", cars])
        // What status lists of neighbours away: their queries.
        func away(_ node: NodeProcess) throws -> [String] {
            (try node.status()["subscriptions"] as? [[String: Any]] ?? []).compactMap { entry in
                (entry["origin"] as? String)?.hasSuffix("(away)") == true ? entry["query"] as? String : nil
            }
        }
        func duplicates() throws -> Int { (try b.status()["received"] as? [String: Any])?["duplicate"] as? Int ?? -1 }
        // B asks A for cars for C before the history is written: a widening after it
        // would bring its boats again (by design: the wider set's history comes whole).
        #expect(try eventually(30) { try ProcessMeshTests.peers(b).filter { $0["state"] as? String == "connected" }.count == 2 })
        func servedByA() throws -> Set<String> {
            let list = try a.status()["subscriptions"] as? [[String: Any]] ?? []
            return Set(list.filter { $0["origin"] as? String != "local" }.compactMap { $0["query"] as? String })
        }
        #expect(try eventually(30) { try servedByA() == [boats, cars] })
        let history = (0..<10).map { "INSERT INTO boats DOCUMENTS ({'_id': 'h\($0)'})" }.joined(separator: "; ")
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'first'}); " + history).status == 0)
        #expect(try eventually { try ProcessMeshTests.documents(c).contains { $0["_id"] as? String == "first" } })
        let before = try duplicates()
        c.stop()
        #expect(try eventually { try away(b) == [cars] })
        // Boats keep B's log growing, so it compacts, and C expires.
        var i = 0
        #expect(
            try eventually(30) {
                guard try a.exec("INSERT INTO boats DOCUMENTS ({'_id': 'b\(i)'})").status == 0 else { return false }
                i += 1
                return try away(b).isEmpty
            })
        #expect(b.log().contains("no longer relaying for nodes not heard of"))
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'late'}); INSERT INTO boats DOCUMENTS ({'_id': 'marker'})").status == 0)
        #expect(try eventually { try ProcessMeshTests.documents(b, "SELECT * FROM boats").contains { $0["_id"] as? String == "marker" } })
        #expect(try ProcessMeshTests.documents(b).map { $0["_id"] as? String } == ["first"], "the late car stayed on A")
        // The narrower set went on from the wider one's cursor: at most a boat or two in
        // flight when B resubscribed comes again (from 0, the ten boats of the history would too).
        let after = try duplicates()
        #expect(after - before <= 2, "duplicates: \(before) before C left, \(after) at the end")
    }
}
}

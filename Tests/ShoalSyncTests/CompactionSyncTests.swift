import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// Compaction between in-process nodes: the point follows what a connected peer
/// acknowledged, stops at an offline peer's position until the horizon passes, and
/// a peer that returns below it, and a new one, end with the same documents.
@Suite struct CompactionSyncTests {
    static let cars = "SELECT * FROM cars"

    static func contents(_ node: TestNode) async throws -> [String] {
        try await node.store.execute("SELECT * FROM cars ORDER BY _id").items.map(\.canonicalJSON)
    }

    /// `count` one-document transactions over `ids` documents.
    static func update(_ node: TestNode, count: Int, ids: Int, round: Int) async throws {
        for i in 0..<count {
            _ = try await node.store.execute(
                "INSERT INTO cars DOCUMENTS (:d) ON ID CONFLICT DO UPDATE",
                arguments: ["d": ["_id": .string("car-\(i % ids)"), "n": .int(Int64(round * 10_000 + i))]])
        }
    }

    @Test func compactionFollowsPeersAndAPeerPastTheHorizonResyncs() async throws {
        let a = try TestNode(name: "a", subscriptions: [Self.cars])
        let b = try TestNode(name: "b", subscriptions: [Self.cars])
        let c = try TestNode(name: "c", subscriptions: [Self.cars])
        defer { a.remove(); b.remove(); c.remove() }
        let week = Duration.seconds(7 * 86_400)
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            try await Self.update(a, count: 200, ids: 10, round: 1)
            let expected = try await Self.contents(a)
            #expect(try await InProcessMesh.eventually { try await Self.contents(b) == expected })
            // B acknowledged everything it asked for: the point is the log's end.
            #expect(try await InProcessMesh.eventually {
                a.sync.positions.note(SiteID(0), through: nil)  // a peer asking nothing holds nothing
                let (report, heldBy, _) = try await a.sync.positions.compact(a.store, horizon: week)
                return report.through == (try await a.store.lastSequence()) && heldBy == nil
            })
            let rows = try await a.store.storageStatus().changeLogRows
            #expect(rows == 20, "each car's first transaction (its _id and n) and last (its n) are left, a row each: \(rows)")
        }
        // B is away; A writes on. Compaction stops at B's position.
        let bPosition = try #require(try await a.store.peerAcknowledgements().first { $0.peer == b.sync.siteID }?.through)
        try await Self.update(a, count: 100, ids: 10, round: 2)
        let held = try await a.sync.positions.compact(a.store, horizon: week)
        #expect(held.report.through == bPosition && held.heldBy == b.sync.siteID)
        #expect(held.report.transactionsRemoved == 10, "round 1's last transactions, overwritten now and at B's position")
        // Past the horizon B no longer counts.
        let passed = try await a.sync.positions.compact(a.store, horizon: .seconds(1), now: .now.addingTimeInterval(3600))
        #expect(passed.expired == [b.sync.siteID] && passed.heldBy == nil)
        #expect(passed.report.transactionsRemoved == 90)
        #expect(a.sync.positions.compactedThrough == (try await a.store.lastSequence()))
        let expected = try await Self.contents(a)
        // B comes back below the point, C from nothing: both end with A's documents.
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            try await InProcessMesh.withLink(a.sync, c.sync) { () async throws in
                #expect(try await InProcessMesh.eventually { try await Self.contents(b) == expected })
                #expect(try await InProcessMesh.eventually { try await Self.contents(c) == expected })
            }
        }
    }
}

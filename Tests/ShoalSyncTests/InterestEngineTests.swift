@testable import ShoalSync
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// What `SyncEngine` does with statements beyond `InterestTable`'s rules: the dates it
/// takes, what compaction forgets, and its own generation across restarts.
@Suite struct InterestEngineTests {
    static let cars = "SELECT * FROM cars", boats = "SELECT * FROM boats"
    static let far = SiteID(0xF0), near = SiteID(0xE0)

    static func stated(_ origin: SiteID, _ generation: UInt64, _ query: String) -> InterestTable.Stated {
        var set = SubscriptionSet()
        _ = try? set.add(query: query)
        return InterestTable.Stated(origin: origin, generation: generation, subscriptions: set)
    }

    static func now(plus millis: UInt64 = 0) -> UInt64 {
        HybridTimestamp(milliseconds: HybridLogicalClock.systemMilliseconds() + millis, counter: 0).rawValue
    }

    @Test func aStatementDatedBeyondTheClockDriftIsNotTaken() throws {
        let node = try TestNode(name: "b", subscriptions: [Self.boats])
        defer { node.remove() }
        _ = node.sync.noteInterest(
            of: Self.near, subscriptions: SubscriptionSet(),
            interests: [Self.stated(Self.near, Self.now(), Self.boats), Self.stated(Self.far, Self.now(plus: 3_600_000), Self.cars)])
        #expect(node.sync.relayedInterest[Self.far] == nil, "an hour ahead: it would outrank every later statement")
        #expect(node.sync.relayedInterest[Self.near] != nil)
    }

    /// A peer whose position expired is forgotten as a neighbour; a statement of its own
    /// that other nodes bring is kept while fresh, and one two hours old with nothing
    /// heard of its origin since is forgotten.
    @Test func compactionForgetsAnAwayPeersStatementOnlyWhenItIsStale() async throws {
        let node = try TestNode(name: "b", subscriptions: [Self.boats])
        defer { node.remove() }
        let ancient = SiteID(0xD0)
        let twoHoursAgo = HybridTimestamp(milliseconds: HybridLogicalClock.systemMilliseconds() - 7_200_000, counter: 0).rawValue
        _ = node.sync.noteInterest(
            of: Self.near, subscriptions: SubscriptionSet(),
            interests: [
                Self.stated(Self.near, Self.now(), Self.boats), Self.stated(Self.far, Self.now(), Self.cars),
                Self.stated(ancient, twoHoursAgo, Self.cars),
            ])
        #expect(node.sync.relayedInterest.count == 3)
        #expect(try await node.sync.forgetInterest(of: [Self.far], horizon: .seconds(3600)) == [ancient])
        #expect(node.sync.relayedInterest[Self.far] != nil, "its position expired, but its statement is fresh")
        // Once forgotten as too old, a neighbour passing it on again is not heard.
        _ = node.sync.noteInterest(
            of: Self.near, subscriptions: SubscriptionSet(), interests: [Self.stated(ancient, twoHoursAgo, Self.cars)])
        #expect(node.sync.relayedInterest[ancient] == nil)
        #expect(try await node.sync.forgetInterest(of: [Self.near]) == [Self.near], "asked outright")
    }

    /// A node states its set above any generation it stated before, whatever its clock.
    @Test func aRestartedNodeStatesAboveItsSavedGeneration() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-generation")
        var node = try TestNode(name: "b", subscriptions: [Self.boats], directory: dir)
        defer { node.remove() }
        let ahead = Self.now(plus: 86_400_000)
        try await node.store.saveInterest(
            [node.store.siteID: SavedInterest(filter: node.sync.subscriptions.filter, generation: ahead, heardFrom: [])], forgetting: [])
        node.stop()
        node = try TestNode(name: "b", subscriptions: [Self.boats], directory: dir)
        let own = try #require(node.sync.upstream(for: Self.near).interests.first)
        #expect(own.origin == node.store.siteID && own.generation > ahead)
    }
}

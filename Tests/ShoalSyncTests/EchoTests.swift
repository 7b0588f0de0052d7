import ShoalCRDT
import ShoalStorage
import ShoalStore
@testable import ShoalSync
import ShoalTesting
import Testing

/// What a relay leaves out as an echo of what a peer sent it (PROTOCOL.md §8.3, rule 3).
@Suite struct EchoTests {
    /// A session hears of a commit's rows while the commit publishes them, and asks
    /// then whether they are echoes, to pass over a commit of nothing else: the ledger
    /// must know the commit's transactions by then. Told after, every relayed commit
    /// cost a page read on the session of the peer that sent it, and a page read at the
    /// wrong moment streamed it back.
    @Test func aRelayKnowsARelayedTransactionForAnEchoWhenItsSessionsHearOfIt() async throws {
        let o = try TestNode(name: "o"), a = try TestNode(name: "a", subscriptions: ["SELECT * FROM cars"])
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM cars"])
        defer { o.remove(); a.remove(); b.remove() }
        _ = try await o.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1'})")
        try await InProcessMesh.withLink(a.sync, o.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await a.store.execute("SELECT * FROM cars").items.count == 1 })
        }
        let seen = Locked<[Bool]>([])
        let aSite = a.store.siteID
        let listening = b.store.listenToChangeLog({ end in
            guard let appended = end.appended else { return }
            for id in appended.transactions where id.origin == o.store.siteID {
                let echo = b.sync.isEcho(id, to: aSite)
                seen.withLock { $0.append(echo) }
            }
        }, closed: {})
        defer { listening.cancel() }
        try await InProcessMesh.withLink(b.sync, a.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await b.store.execute("SELECT * FROM cars").items.count == 1 })
        }
        #expect(seen.withLock { $0 } == [true], "o's transaction came to b from a alone")
    }
}

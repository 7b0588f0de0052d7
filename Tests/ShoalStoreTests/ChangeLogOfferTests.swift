import ShoalCRDT
@testable import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// A page read for a peer whose routes make an origin lazy (PROTOCOL.md §8.11): the
/// transactions of that origin are offered, by ID and where their rows begin, instead
/// of sent, once per stream; one begun eagerly stays eager.
@Suite struct ChangeLogOfferTests {
    static func cars() throws -> SubscriptionSet {
        var set = SubscriptionSet()
        try set.add(query: "SELECT * FROM cars")
        return set
    }

    @Test func aLazyOriginsTransactionsAreOfferedNotSent() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'red'})")
        _ = try await store.execute("INSERT INTO boats DOCUMENTS ({'_id': 'b'})")
        _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c', 'color': 'blue'})")
        let site = store.siteID
        let eager = try await store.changes(after: 0, limit: 100, subscriptions: Self.cars())
        #expect(eager.pieces.count == 2 && eager.offered.isEmpty)
        let lazy = try await store.changes(after: 0, limit: 100, subscriptions: Self.cars(), isLazy: { $0 == site })
        #expect(lazy.pieces.isEmpty, "nothing of a lazy origin is sent")
        #expect(lazy.through == eager.through, "the rows count as examined all the same")
        #expect(lazy.offered == eager.pieces.map { ChangeLogPage.Offer($0.id, at: $0.id.sequence == 1 ? 1 : 3) })
        #expect(lazy.offersOpen.isEmpty, "both runs end in the page")
        // The boats transaction carries nothing for a cars subscriber: not offered either.
        #expect(!lazy.offered.contains { $0.id.sequence == 2 })
        let other = try await store.changes(after: 0, limit: 100, subscriptions: Self.cars(), isLazy: { $0 != site })
        #expect(other.pieces.count == 2 && other.offered.isEmpty, "another origin's routes change nothing here")
    }

    @Test func aTransactionBegunEagerlyStaysEagerAndALazyOneIsOfferedOnce() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        // One transaction over two log rows, so a page of one row ends inside it.
        let count = LogAppender.documentsPerRow + 1
        let docs: [Value] = (0..<count).map { ["_id": .string("d\($0)"), "color": "red"] }
        _ = try await store.execute("INSERT INTO cars DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
        let site = store.siteID
        let lazy: @Sendable (SiteID) -> Bool = { $0 == site }

        // Begun eagerly: its second page is sent even though its origin turned lazy.
        let first = try await store.changes(after: 0, limit: 1, subscriptions: Self.cars())
        let begun = try #require(first.pieces.first)
        #expect(first.through == 1 && !begun.isLast)
        let rest = try await store.changes(
            after: first.through, limit: 1, subscriptions: Self.cars(), continuing: [begun.id], isLazy: lazy)
        #expect(rest.pieces.map(\.id) == [begun.id] && rest.pieces.first?.isLast == true && rest.offered.isEmpty)

        // Begun lazily: offered at its first row, then passed over to its end.
        let offered = try await store.changes(after: 0, limit: 1, subscriptions: Self.cars(), isLazy: lazy)
        #expect(offered.pieces.isEmpty && offered.offered == [ChangeLogPage.Offer(begun.id, at: 1)])
        #expect(offered.offersOpen == [begun.id], "its rows go on past the page")
        // Lazy still, even with routes that now make the origin eager: offered once, not sent.
        let after = try await store.changes(
            after: offered.through, limit: 1, subscriptions: Self.cars(), isLazy: { _ in false },
            offersOpen: offered.offersOpen)
        #expect(after.pieces.isEmpty && after.offered.isEmpty && after.offersOpen.isEmpty)
    }
}

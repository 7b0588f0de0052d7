import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// PN counters: per-site contributions summed; RESTART and SET are last-writer-wins.
@Suite struct CounterTests {
    /// Sends everything `from` holds for `collection` to `to`.
    static func sync(_ from: DocumentStore, _ to: DocumentStore, collection: String = "c") async throws {
        var all = SubscriptionSet()
        try all.add(query: "SELECT * FROM \(collection)")
        let page = try await from.changes(after: 0, limit: 10_000, subscriptions: all)
        _ = try await to.applyRemote(page.pieces, from: from.siteID, subscriptionKey: nil, through: page.through)
    }

    static func value(_ store: DocumentStore) async throws -> Value? {
        try await store.execute("SELECT n FROM c WHERE _id = 'k'").items.first?["n"]
    }

    @Test func concurrentIncrementsSumOnEveryReplica() async throws {
        let dirs = (0..<3).map { _ in TemporaryDirectory() }
        defer { dirs.forEach { $0.remove() } }
        let stores = try dirs.map { try DocumentStore(directory: $0.path) }
        defer { stores.forEach { $0.close() } }
        for store in stores {
            _ = try await store.execute("INSERT INTO c INITIAL DOCUMENTS ({'_id': 'k'})")
        }
        var expected: Int64 = 0
        for (i, store) in stores.enumerated() {
            for step in 1...4 {
                let by = Int64(step * (i + 1)) * (step % 2 == 0 ? -1 : 1)
                _ = try await store.execute("UPDATE c APPLY n INCREMENT BY :by WHERE _id = 'k'", arguments: ["by": .int(by)])
                expected += by
            }
        }
        #expect(try await Self.value(stores[0]) == -2, "1 - 2 + 3 - 4 locally")
        // Every replica hears from every other, twice over, in different orders.
        for _ in 0..<2 {
            for a in stores.shuffled() {
                for b in stores where b !== a { try await Self.sync(a, b) }
            }
        }
        for store in stores { #expect(try await Self.value(store) == .int(expected)) }
    }

    @Test func restartWinsOverConcurrentIncrementsAndCountsAfterwards() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let one = try DocumentStore(directory: a.path), two = try DocumentStore(directory: b.path)
        defer { one.close(); two.close() }
        _ = try await one.execute("INSERT INTO c DOCUMENTS ({'_id': 'k'}); UPDATE c APPLY n INCREMENT BY 5 WHERE _id = 'k'")
        try await Self.sync(one, two)
        _ = try await two.execute("UPDATE c APPLY n INCREMENT BY 1 WHERE _id = 'k'")  // concurrent with the restart
        _ = try await one.execute("UPDATE c APPLY n RESTART WITH 100 WHERE _id = 'k'")
        try await Self.sync(two, one)
        try await Self.sync(one, two)
        #expect(try await Self.value(one) == 100)
        #expect(try await Self.value(two) == 100)
        _ = try await two.execute("UPDATE c APPLY n PN_INCREMENT BY -3 WHERE _id = 'k'")
        try await Self.sync(two, one)
        #expect(try await Self.value(one) == 97)
        #expect(try await Self.value(two) == 97)
        await #expect {
            try await one.execute("UPDATE c APPLY n INCREMENT BY 'x' WHERE _id = 'k'")
        } throws: { ($0 as? ShoalError)?.message.contains("needs a number") == true }
    }

    /// A store that never incremented a counter evicts its document, gets a later write
    /// of another field back first, and decrements the counter: the decrement counts
    /// once the base comes back too, on both stores (found by shoal-check, where it was
    /// lost: EVICT had kept no base for a counter this opening had not incremented).
    @Test func aDecrementAfterEvictOnADocumentSentBackInPartIsKept() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let one = try DocumentStore(directory: a.path), two = try DocumentStore(directory: b.path)
        defer { one.close(); two.close() }
        _ = try await one.execute("INSERT INTO c DOCUMENTS ({'_id': 'k', 'n': 10}); UPDATE c APPLY n INCREMENT BY 5 WHERE _id = 'k'")
        try await Self.sync(one, two)
        #expect(try await Self.value(two) == 15)
        _ = try await two.execute("EVICT FROM c")
        #expect(try await two.execute("SELECT * FROM c").items.isEmpty)
        // Only the later write of another field comes back first.
        let before = try await one.lastSequence()
        _ = try await one.execute("UPDATE c SET w = 1 WHERE _id = 'k'")
        var all = SubscriptionSet()
        try all.add(query: "SELECT * FROM c")
        let later = try await one.changes(after: before, limit: 10_000, subscriptions: all)
        _ = try await two.applyRemote(later.pieces, from: one.siteID)
        let decremented = try await two.execute("UPDATE c APPLY n INCREMENT BY -2 WHERE _id = 'k'")
        #expect(decremented.mutatedDocumentIDs == ["k"])
        try await Self.sync(one, two)
        try await Self.sync(two, one)
        #expect(try await Self.value(two) == 13)
        #expect(try await Self.value(one) == 13)
    }

    @Test func aDeletedCounterStartsAgainFromZero() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'k'}); UPDATE c APPLY n INCREMENT BY 5 WHERE _id = 'k'")
        _ = try await store.execute("UPDATE c APPLY n RESTART WITH 50 WHERE _id = 'k'")
        _ = try await store.execute("DELETE FROM c WHERE _id = 'k'")
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'k'}); UPDATE c APPLY n INCREMENT BY 1 WHERE _id = 'k'")
        #expect(try await Self.value(store) == 1)
        _ = try await store.execute("UPDATE c UNSET n WHERE _id = 'k'")
        #expect(try await store.execute("SELECT * FROM c WHERE _id = 'k'").items == [["_id": "k"]], "an unset counter is missing, not 0")
        _ = try await store.execute("UPDATE c APPLY n INCREMENT BY 2 WHERE _id = 'k'")
        #expect(try await Self.value(store) == 2)
    }
}

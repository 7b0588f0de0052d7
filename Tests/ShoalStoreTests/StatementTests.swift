import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// DELETE, EVICT, UNSET, INITIAL DOCUMENTS, COUNT(*) and UPDATE's ORDER BY/LIMIT.
@Suite struct StatementTests {
    static func withStore(_ body: (DocumentStore) async throws -> Void) async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        try await body(store)
    }

    @Test func deleteHidesAndALaterWriteRevives() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': 1}), ({'_id': 'b', 'v': 2})")
            let deleted = try await store.execute("DELETE FROM c WHERE v = 1")
            #expect(deleted.mutatedDocumentIDs == ["a"] && deleted.transactionID != nil)
            #expect(try await store.execute("SELECT * FROM c").items == [["_id": "b", "v": 2]])
            #expect(try await store.collectionCounts().first?.documents == 1)
            #expect(try await store.execute("UPDATE c SET v = 9 WHERE _id = 'a'").mutatedDocumentIDs.isEmpty)
            // Inserting the same _id again starts a fresh document: old fields stay buried.
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'w': 3})")
            #expect(try await store.execute("SELECT * FROM c WHERE _id = 'a'").items == [["_id": "a", "w": 3]])
        }
    }

    /// A field written by a peer whose clock runs hours ahead (which this node's clock
    /// declines to adopt) is hidden by a DELETE all the same, on both replicas; a
    /// later INSERT of the same _id shows again.
    @Test func deleteHidesAFieldFromAClockFarAhead() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let ahead = try DocumentStore(directory: a.path, wallClock: EvictTests.anHourAhead)
        let store = try DocumentStore(directory: b.path)
        defer { ahead.close(); store.close() }
        _ = try await ahead.execute("INSERT INTO c DOCUMENTS ({'_id': 'k', 'f': 1})")
        try await MapTests.exchange(ahead, store)
        _ = try await store.execute("DELETE FROM c WHERE _id = 'k'")
        try await MapTests.exchange(ahead, store)
        for replica in [ahead, store] { #expect(try await replica.execute("SELECT * FROM c").items.isEmpty) }
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'k', 'g': 2})")
        try await MapTests.exchange(ahead, store)
        for replica in [ahead, store] { #expect(try await replica.execute("SELECT * FROM c").items == [["_id": "k", "g": 2]]) }
    }

    /// What `shoal export` reads: pages in key order, each after the last key of the
    /// one before, so every document comes once whatever its `_id`: among them pairs
    /// DQL finds equal (1 and 1.0, "é" in two forms) and kinds it cannot order.
    @Test(arguments: [1, 2, 3, 7, 100])
    func pagesByKeyReturnEachMatchingDocumentOnce(limit: Int) async throws {
        try await Self.withStore { store in
            let kinds: [Value] = [1, 1.0, 0, 0.0, -0.0, "\u{e9}", "e\u{301}", true, false, [1], [1.0], ["k": 1], ["k": 1.0], 2.5, -7]
            let ids = kinds + (0..<25).map { $0 % 2 == 0 ? .int(Int64(100 + $0 * 10)) : .string("k\($0)") }
            var arguments: [String: Value] = [:]
            for (i, id) in ids.enumerated() { arguments["d\(i)"] = .object(["_id": id, "even": .bool(i % 2 == 0)]) }
            let list = ids.indices.map { "(:d\($0))" }.joined(separator: ", ")
            _ = try await store.execute("INSERT INTO c DOCUMENTS " + list, arguments: arguments)
            func byKey(_ ids: [Value]) -> [String] {
                ids.map(\.canonicalJSON).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            }
            let even = ids.enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
            // Unfiltered, and with a WHERE the store narrows in SQL first.
            for (query, expected) in [("SELECT * FROM c", byKey(ids)), ("SELECT _id FROM c WHERE even = true", byKey(even))] {
                var seen: [String] = []
                var after = ""
                while true {
                    let page = try await store.page(query, after: after, limit: limit)
                    #expect(page.items.count <= limit)
                    let keys = page.items.map { ($0["_id"] ?? .null).canonicalJSON }
                    #expect(page.lastKey == keys.last)
                    seen += keys
                    guard page.items.count == limit, let last = page.lastKey else { break }
                    after = last
                }
                #expect(seen.map { Array($0.utf8) } == expected.map { Array($0.utf8) }, "\(query)")
            }
        }
    }

    @Test(arguments: [
        ("SELECT * FROM c ORDER BY _id", "remove ORDER BY, LIMIT and OFFSET"),
        ("SELECT * FROM c LIMIT 2", "remove ORDER BY, LIMIT and OFFSET"),
        ("SELECT COUNT(*) FROM c", "not COUNT(*)"),
        ("INSERT INTO c DOCUMENTS ({'_id': 1})", "one SELECT statement"),
        ("SELECT * FROM c; SELECT * FROM d", "one SELECT statement"),
    ])
    func aPageIsReadOfOneSelectInKeyOrder(query: String, message: String) async throws {
        try await Self.withStore { store in
            let error = await #expect(throws: ShoalError.self) { try await store.page(query, after: "", limit: 1) }
            #expect(error?.code == .invalidQuery && error?.message.contains(message) == true, "\(String(describing: error))")
            let count = try await store.execute("SELECT COUNT(*) FROM c").items
            #expect(count == [["$1": 0]])
            await #expect(throws: ShoalError.self) { try await store.page("SELECT * FROM c", after: "", limit: 0) }
        }
    }

    @Test func tombstonesReplicateAndMergeByTime() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let writer = try DocumentStore(directory: a.path), replica = try DocumentStore(directory: b.path)
        defer { writer.close(); replica.close() }
        var all = SubscriptionSet()
        try all.add(query: "SELECT * FROM c")
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'v': 1})")
        _ = try await writer.execute("DELETE FROM c WHERE _id = 'x'")
        let page = try await writer.changes(after: 0, limit: 100, subscriptions: all)
        #expect(page.deltas.map(\.field).contains("_deleted"), "the tombstone is routed by the last body")
        let transactions = page.pieces
        // Delivered newest first: the insert arrives after its own deletion and stays buried.
        _ = try await replica.applyRemote(transactions.reversed(), from: writer.siteID, subscriptionKey: "k", through: page.through)
        #expect(try await replica.execute("SELECT * FROM c").items.isEmpty)
    }

    @Test func evictForgetsLocallyWithoutWritingAnything() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a'}), ({'_id': 'b'})")
            let before = try await store.lastSequence()
            // A peer holds them: EVICT keeps a node's own writes no peer has (DATA_MODEL.md §11).
            store.peerHoldings.note(SiteID(0xB), through: before, subscriptions: try TransactionTests.everything("c"))
            let evicted = try await store.execute("EVICT FROM c WHERE _id = 'a'")
            #expect(evicted.mutatedDocumentIDs == ["a"] && evicted.transactionID == nil)
            #expect(try await store.lastSequence() == before, "nothing is logged, nothing replicates")
            #expect(try await store.execute("SELECT * FROM c").items == [["_id": "b"]])
        }
    }

    @Test func unsetRemovesFieldsAndNestedMembers() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'x': 1, 'o': {'p': 1, 'q': 2}})")
            _ = try await store.execute("UPDATE c SET y = 2 UNSET x, o.p WHERE _id = 'a'")
            #expect(try await store.execute("SELECT * FROM c").items == [["_id": "a", "y": 2, "o": ["q": 2]]])
            #expect(try await store.execute("SELECT * FROM c WHERE x IS MISSING").items.count == 1)
        }
    }

    @Test func initialDocumentsNeverOverrideWrites() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO settings INITIAL DOCUMENTS ({'_id': 'app', 'theme': 'light', 'size': 1})")
            _ = try await store.execute("UPDATE settings SET theme = 'dark' WHERE _id = 'app'")
            // Inserting the defaults again (every peer does at start-up) changes nothing.
            let again = try await store.execute("INSERT INTO settings INITIAL DOCUMENTS ({'_id': 'app', 'theme': 'light', 'size': 1})")
            #expect(again.transactionID == nil)
            #expect(try await store.execute("SELECT * FROM settings").items == [["_id": "app", "theme": "dark", "size": 1]])
        }
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let one = try DocumentStore(directory: a.path), two = try DocumentStore(directory: b.path)
        defer { one.close(); two.close() }
        var all = SubscriptionSet()
        try all.add(query: "SELECT * FROM settings")
        _ = try await one.execute("INSERT INTO settings INITIAL DOCUMENTS ({'_id': 'app', 'theme': 'light'})")
        _ = try await two.execute("INSERT INTO settings INITIAL DOCUMENTS ({'_id': 'app', 'theme': 'light'})")
        _ = try await two.execute("UPDATE settings SET theme = 'blue' WHERE _id = 'app'")
        for (from, to) in [(one, two), (two, one)] {
            let page = try await from.changes(after: 0, limit: 100, subscriptions: all)
            _ = try await to.applyRemote(page.pieces, from: from.siteID, subscriptionKey: "k", through: page.through)
        }
        let x = try await one.execute("SELECT * FROM settings").items, y = try await two.execute("SELECT * FROM settings").items
        #expect(x == y && x == [["_id": "app", "theme": "blue"]], "both peers' defaults merged as one; the real write won")
    }

    @Test func countAndOrderedLimitedUpdates() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO q DOCUMENTS (:docs)", arguments: [
                "docs": [["_id": "a", "n": 3], ["_id": "b", "n": 1], ["_id": "c", "n": 2]]
            ])
            #expect(try await store.execute("SELECT COUNT(*) AS n FROM q WHERE n > 1").items == [["n": 2]])
            let updated = try await store.execute("UPDATE q SET top = true ORDER BY n DESC LIMIT 2")
            #expect(updated.mutatedDocumentIDs == ["a", "c"])
            #expect(try await store.execute("SELECT _id FROM q WHERE top = true ORDER BY _id").items == [["_id": "a"], ["_id": "c"]])
            #expect(try await store.execute("SELECT * FROM q WHERE _id IN ('a', 'b') AND _id LIKE 'a%'").items.count == 1)
        }
    }

    @Test func reservedAndUnsupportedFieldsAreRefusedClearly() async throws {
        try await Self.withStore { store in
            await #expect {
                try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', '_secret': 1})")
            } throws: { ($0 as? ShoalError)?.message.contains("reserved") == true }
            // The separators of nested paths and counter sites, anywhere in a name, even
            // after a character that combines with what follows it.
            for name in ["a\u{1E}b", "\u{1F}", "é\u{1F}", "x\u{301}\u{1E}"] {
                await #expect {
                    try await store.execute("INSERT INTO c DOCUMENTS (:d)", arguments: ["d": ["_id": "z", .init(name): 1]])
                } throws: { ($0 as? ShoalError)?.message.contains("may not contain the characters U+001E or U+001F") == true }
            }
            #expect(await (try? store.execute("SELECT * FROM c WHERE _id = 'z'"))?.items.isEmpty == true)
            await #expect {
                try await store.execute("INSERT INTO COLLECTION c (photo ATTACHMENT) DOCUMENTS ({'_id': 'p', 'photo': 'not a token'})")
            } throws: { ($0 as? ShoalError)?.message.contains("is an ATTACHMENT") == true }
            await #expect {
                try await store.execute("UPDATE COLLECTION c (n COUNTER) APPLY a.b INCREMENT BY 1")
            } throws: { ($0 as? ShoalError)?.message.contains("nested") == true }
        }
    }

    @Test func observersSeeEveryChangeOnceWithItsTransaction() async throws {
        try await Self.withStore { store in
            let observations = try store.observe("SELECT * FROM c WHERE v > 1 ORDER BY _id")
            var iterator = observations.makeAsyncIterator()
            #expect(try await iterator.next()?.items == [])
            _ = try await store.execute("INSERT INTO other DOCUMENTS ({'_id': 'z'})")  // another collection: no wake-up
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': 1})")  // result unchanged
            let commit = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'b', 'v': 2}); UPDATE c SET v = 5 WHERE _id = 'a'")
            let next = try #require(try await iterator.next())
            #expect(next.items == [["_id": "a", "v": 5], ["_id": "b", "v": 2]])
            // The state is read after the fact, so it credits every commit to `c` it reflects, once.
            #expect(next.transactions.last == commit.transactionID, "one notification for the whole transaction")
            #expect(next.transactions.count <= 2 && Set(next.transactions).count == next.transactions.count)
        }
    }
}

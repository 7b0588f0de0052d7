import ShoalCRDT
import ShoalQuery
@testable import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// A feed's handler listeners: called by the publisher with every event, the last
/// one first when the feed replays it, until cancelled; told once when it finishes.
@Suite struct ChangeFeedTests {
    final class Heard: Sendable {
        let events = Locked<[Int]>([])
        let finishes = Locked(0)
    }

    func listen(_ feed: ChangeFeed<Int>, into heard: Heard) -> ChangeFeedListening {
        feed.listen({ value in heard.events.withLock { $0.append(value) } }, finished: { heard.finishes.withLock { $0 += 1 } })
    }

    @Test func aHandlerHearsTheLatestThenEveryEventUntilCancelled() {
        let feed = ChangeFeed<Int>(bufferingPolicy: .bufferingNewest(1), replayLatest: true)
        feed.publish(1)
        let heard = Heard()
        let listening = listen(feed, into: heard)
        feed.publish(2)
        feed.publish(3)
        #expect(heard.events.withLock { $0 } == [1, 2, 3], "the replayed latest, then each event in order")
        listening.cancel()
        listening.cancel()
        feed.publish(4)
        #expect(heard.events.withLock { $0 } == [1, 2, 3], "nothing after cancel")
        feed.finishAll()
        #expect(heard.finishes.withLock { $0 } == 0, "a cancelled listener is not told of the end")
    }

    @Test func aFeedWithoutReplayStartsAtTheNextEventAndEndsEveryListenerOnce() {
        let feed = ChangeFeed<Int>(bufferingPolicy: .unbounded, replayLatest: false)
        feed.publish(1)
        let heard = Heard()
        let listening = listen(feed, into: heard)
        feed.publish(2)
        feed.finishAll()
        feed.publish(3)
        #expect(heard.events.withLock { $0 } == [2])
        #expect(heard.finishes.withLock { $0 } == 1)
        listening.cancel()

        let late = Heard()
        _ = listen(feed, into: late)
        #expect(late.events.withLock { $0 }.isEmpty && late.finishes.withLock { $0 } == 1, "a finished feed ends a new listener at once")
    }

    @Test func aStoreHandsEachCommitsLogEndToItsListener() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        let heard = Heard()
        let listening = store.listenToChangeLog(
            { end in heard.events.withLock { $0.append(Int(end.sequence)) } }, closed: { heard.finishes.withLock { $0 += 1 } })
        #expect(heard.events.withLock { $0 } == [0], "the log's end at opening")
        _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'red', 'year': 2020})")
        let inserted = Int(store.lastCommittedSequence)
        _ = try await store.execute("UPDATE cars SET color = 'blue' WHERE _id = 'a'")
        let updated = Int(store.lastCommittedSequence)
        #expect(inserted == 1 && updated == 2, "a log row per transaction of one document")
        #expect(heard.events.withLock { $0 } == [0, inserted, updated], "each commit's log end, before execute returns")
        store.close()
        #expect(heard.finishes.withLock { $0 } == 1, "closing the store ends the listener")
        listening.cancel()
    }

    /// Each commit says what it appended: the rows after the previous end, their
    /// collections and transactions; the end at opening says nothing.
    @Test func aLogEndSaysWhatItsCommitAppended() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        let ends = Locked<[LogEnd]>([])
        let listening = store.listenToChangeLog({ end in ends.withLock { $0.append(end) } }, closed: {})
        defer { listening.cancel() }
        _ = try await store.execute("INSERT INTO cars DOCUMENTS ([{'_id': 'a'}, {'_id': 'b'}])")
        let first = try await store.execute("INSERT INTO boats DOCUMENTS ({'_id': 'x'}); UPDATE cars SET n = 1 WHERE _id = 'a'")
        let heard = ends.withLock { $0 }
        #expect(heard.count == 3 && heard[0] == LogEnd(sequence: 0))
        // One row for each transaction, with an entry for each document.
        #expect(heard[1].sequence == 1 && heard[1].appended?.after == 0 && heard[1].appended?.collections == ["cars"])
        #expect(heard[1].appended?.transactions.count == 1 && heard[1].appended?.documents == 2)
        #expect(heard[2].sequence == 2 && heard[2].appended?.after == 1 && heard[2].appended?.collections == ["boats", "cars"])
        #expect(heard[2].appended?.transactions == first.transactionID.map { [$0] } && heard[2].appended?.documents == 2)
        store.close()
    }
}

/// The store's cache of parsed DQL: bounded in entries and in text length.
@Suite struct ParseCacheTests {
    @Test func itKeepsShortTextsUpToItsCapacityThenStartsAgain() throws {
        var cache = ParseCache()
        let statements = try ShoalQuery.Parser.parse("SELECT * FROM cars")
        cache.remember(statements, of: "SELECT * FROM cars")
        #expect(cache.statements(of: "SELECT * FROM cars") == statements)
        #expect(cache.statements(of: "SELECT * FROM boats") == nil)
        let long = "SELECT * FROM cars WHERE " + Array(repeating: "a = 1", count: 1000).joined(separator: " OR ")
        cache.remember(statements, of: long)
        #expect(cache.statements(of: long) == nil, "a long text is not kept")
        for i in 0..<ParseCache.capacity { cache.remember(statements, of: "SELECT * FROM c\(i)") }
        #expect(cache.statements(of: "SELECT * FROM cars") == nil, "filling it past capacity emptied it")
        #expect(cache.statements(of: "SELECT * FROM c\(ParseCache.capacity - 1)") == statements)
    }

    @Test func theSameTextWithNewArgumentsAndAFailingTextBothBehaveAsIfParsedAnew() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        for i in 0..<3 {
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': :id, 'n': :n})", arguments: ["id": .string("c\(i)"), "n": .int(Int64(i))])
        }
        let text = "SELECT n FROM cars WHERE _id = :id"
        for i in 0..<3 {
            let result = try await store.execute(text, arguments: ["id": .string("c\(i)")])
            #expect(result.items == [.object(["n": .int(Int64(i))])])
        }
        for _ in 0..<2 {
            let error = await #expect(throws: ShoalError.self) { try await store.execute("SELEC n FROM cars") }
            #expect(error?.code == .invalidQuery)
        }
    }
}

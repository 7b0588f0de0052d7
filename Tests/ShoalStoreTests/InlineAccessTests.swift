import Dispatch
import Foundation
import GRDB
import ShoalCRDT
@testable import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// Short reads and writes run on the calling thread (`InlineReader`,
/// `DocumentStore.write(inline:)`, `quickExecutes`): the same results as through
/// the pool, and a held inline reader never makes anyone wait.
@Suite(.timeLimit(.minutes(1))) struct InlineAccessTests {
    static func withStore(_ body: (DocumentStore) async throws -> Void) async throws {
        let directory = TemporaryDirectory()
        let store = try DocumentStore(directory: directory.path)
        defer {
            store.close()
            directory.remove()
        }
        try await body(store)
    }

    @Test func theInlineReaderTurnsASecondReadAwayAtOnce() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'a', 'n': 1})")
            let reader = try #require(store.inlineReader)
            let result = try reader.read { db -> (Int, Int?) in
                let count = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM document") ?? -1
                // Held by this read: a second one is turned away, not made to wait.
                return (count, try reader.read { _ in 1 })
            }
            #expect(result?.0 == 1)
            #expect(result?.1 == nil)
            // Free again afterwards.
            #expect(try reader.read { _ in 2 } == 2)
        }
    }

    @Test func anInlineReadWhileTheReaderIsHeldGoesThroughThePool() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'a', 'n': 1})")
            let reader = try #require(store.inlineReader)
            let held = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
            let holder = Thread {
                _ = try? reader.read { _ in
                    held.signal()
                    release.wait()
                }
            }
            holder.start()
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    held.wait()
                    continuation.resume()
                }
            }
            defer { release.signal() }
            let count = try await store.read(inline: true) { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM document") }
            #expect(count == 1)
            // And a short page of the change log, read by a session keeping up, too.
            var notes = SubscriptionSet()
            try notes.add(query: "SELECT * FROM notes")
            let page = try await store.changes(after: 0, limit: 10, subscriptions: notes)
            #expect(page.deltas.map(\.field).sorted() == ["_id", "n"])
        }
    }

    /// After a quick write, `execute` writes on the calling thread: it commits, logs,
    /// and tells observers and the change feed as a write through the pool does.
    @Test func anInlineExecuteCommitsAndPublishes() async throws {
        try await Self.withStore { store in
            let observations = try store.observe("SELECT n FROM notes WHERE _id = 'a'")
            var iterator = observations.makeAsyncIterator()
            #expect(try await iterator.next()?.items == [])
            let before = store.lastCommittedSequence
            store.quickExecutes.withLock { $0 = true }
            let result = try await store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'a', 'n': 7})")
            #expect(result.transactionID != nil)
            #expect(store.lastCommittedSequence > before)
            let next = try #require(try await iterator.next())
            #expect(next.items == [["n": 7]])
            #expect(next.transactions == [result.transactionID!])
            // A failing one rolls back and the next goes through the pool.
            store.quickExecutes.withLock { $0 = true }
            await #expect(throws: ShoalError.self) {
                try await store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'a', 'n': 8})")
            }
            #expect(!store.quickExecutes.withLock { $0 })
            #expect(try await store.execute("SELECT n FROM notes").items == [["n": 7]])
            _ = try await store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'b', 'n': 9})")
            #expect(try await store.execute("SELECT COUNT(*) AS c FROM notes").items == [["c": 2]])
        }
    }
}

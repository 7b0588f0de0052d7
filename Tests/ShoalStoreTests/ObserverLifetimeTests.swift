import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// Observers live until cancelled or until the store closes, held by the store; an
/// execute's mutated IDs cover every statement of it.
@Suite struct ObserverLifetimeTests {
    /// The handle is dropped at once (`_ =`): the observer runs on, listed by the store,
    /// until cancelled.
    @Test func anObserverWhoseHandleIsDroppedRunsUntilCancelled() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        let seen = Locked<[Int]>([])
        _ = try store.registerObserver("SELECT * FROM cars") { o in seen.withLock { $0.append(o.items.count) } }
        #expect(store.observers.map(\.query) == ["SELECT * FROM cars"])
        #expect(await InProcessMesh.eventually { seen.withLock { $0 } == [0] }, "the result now, first")
        _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
        #expect(await InProcessMesh.eventually { seen.withLock { $0 } == [0, 1] })
        let observer = try #require(store.observers.first)
        #expect(!observer.isCancelled)
        observer.cancel()
        observer.cancel()
        #expect(observer.isCancelled)
        #expect(await InProcessMesh.eventually { store.observers.isEmpty })
        _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'b'})")
        try await Task.sleep(for: .milliseconds(200))
        #expect(seen.withLock { $0 } == [0, 1], "no call after cancel")
    }

    @Test func closingTheStoreStopsEveryObserver() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        let first = try store.registerObserver("SELECT * FROM cars") { _ in }
        let second = try store.registerObserver("SELECT * FROM boats WHERE n > :n", arguments: ["n": 1]) { _ in }
        #expect(store.observers.count == 2 && store.observers[1].arguments == ["n": 1])
        store.close()
        #expect(await InProcessMesh.eventually { store.observers.isEmpty && first.isCancelled && second.isCancelled })
    }

    /// Documents of every statement, each once (by collection: `a` of cars and `a` of
    /// boats are two), in the order first written; the items are the last statement's.
    @Test func mutatedDocumentIDsCoverEveryStatement() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        let result = try await store.execute(
            """
            INSERT INTO cars DOCUMENTS ({'_id': 'a'}); UPDATE cars SET doors = 4 WHERE _id = 'a';
            INSERT INTO boats DOCUMENTS ({'_id': 'a'}), ({'_id': 'b'}); SELECT * FROM cars
            """)
        #expect(result.mutatedDocumentIDs == ["a", "a", "b"])
        #expect(result.items.count == 1 && result.transactionID != nil)
    }
}

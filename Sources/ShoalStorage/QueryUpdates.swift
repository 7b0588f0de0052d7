public import ShoalCRDT
package import ShoalQuery
import Synchronization

/// A commit that changed documents: what observers wake up for.
package struct Commit: Sendable, Equatable {
    /// The transactions the commit applied (one local, or several received in one batch).
    package var transactions: [TransactionID]
    package var collections: Set<String>
    /// The change-log sequence after the commit (0 for EVICT, which logs nothing).
    package var sequence: UInt64

    package init(transactions: [TransactionID], collections: Set<String>, sequence: UInt64) {
        self.transactions = transactions
        self.collections = collections
        self.sequence = sequence
    }
}

/// One state of an observed query's result.
public struct QueryUpdate: Sendable, Equatable {
    public var items: [Value]
    /// The transactions whose commit produced this state; empty for the first state.
    public var transactions: [TransactionID]
}

/// What an observed query reads: its result and the change-log sequence the result
/// reflects, read in one snapshot. The engine's side of `QueryUpdates`.
package protocol QuerySnapshots: AnyObject, Sendable {
    /// `inline`: the read is expected to be short, and may run on the caller's thread.
    func snapshot(_ select: SelectStatement, arguments: [String: Value], inline: Bool) async throws(ShoalError)
        -> ([Value], UInt64)
    /// Reads that took less than this are expected to be short the next time.
    var shortAccess: Duration { get }
}

/// A registered observer; it runs until cancelled or until the store closes, held by
/// the store (`DocumentDatabase.observers`) whether or not the caller keeps it.
public final class StoreObserver: Sendable {
    public let query: String
    public let arguments: [String: Value]
    private struct State {
        var task: Task<Void, Never>?
        var stopped = false
    }
    private let state = Locked(State())

    package init(query: String, arguments: [String: Value]) {
        self.query = query
        self.arguments = arguments
    }

    package func start(_ task: Task<Void, Never>) {
        let stopped = state.withLock { state -> Bool in
            state.task = task
            return state.stopped
        }
        if stopped { task.cancel() }
    }

    package func stopped() { state.withLock { $0.stopped = true } }

    /// Whether it no longer runs: cancelled, or the store closed.
    public var isCancelled: Bool { state.withLock { $0.stopped } }

    /// Stops it: its handler is not called again. A second call does nothing.
    public func cancel() {
        let task = state.withLock { state -> Task<Void, Never>? in
            state.stopped = true
            return state.task
        }
        task?.cancel()
    }
}

/// The observers a store runs (`DocumentDatabase.observers`).
package struct LiveObservers: Sendable {
    package var list: [StoreObserver] = []
    package init() {}
}

extension Locked where Value == LiveObservers {
    /// Calls `handler` with each state of `updates` until the observer returned is
    /// cancelled or the updates end (the store closed), holding the observer meanwhile
    /// (`DocumentDatabase.registerObserver`).
    package func register(
        _ updates: QueryUpdates, query: String, arguments: [String: ShoalCRDT.Value],
        handler: @escaping @Sendable (QueryUpdate) -> Void
    ) -> StoreObserver {
        let observer = StoreObserver(query: query, arguments: arguments)
        withLock { $0.list.append(observer) }
        // The one task a store starts: a handler API needs someone to iterate for it.
        observer.start(
            Task { [weak observer] in
                do {
                    for try await observation in updates {
                        guard !Task.isCancelled else { break }
                        handler(observation)
                    }
                } catch {}
                self.withLock { $0.list.removeAll { $0 === observer } }
                observer?.stopped()
            })
        return observer
    }

    /// The observers registered and still running, oldest first.
    package var list: [StoreObserver] { withLock { $0.list } }
}

/// The states of an observed query; see `DocumentDatabase.observe`.
public struct QueryUpdates: AsyncSequence, Sendable {
    public typealias Element = QueryUpdate
    let store: any QuerySnapshots
    let select: SelectStatement
    let arguments: [String: Value]
    let commits: AsyncStream<Commit>

    package init(store: any QuerySnapshots, select: SelectStatement, arguments: [String: Value], commits: AsyncStream<Commit>) {
        self.store = store
        self.select = select
        self.arguments = arguments
        self.commits = commits
    }

    /// The states of `query` (one SELECT) on `store`, woken by `commits`, a feed to
    /// which it listens before its first read, so that no commit falls between the two.
    package init(
        observing query: String, arguments: [String: Value], on store: any QuerySnapshots, commits: ChangeFeed<Commit>
    ) throws(ShoalError) {
        self.init(
            store: store, select: try SelectStatement.parseOne(query, as: "an observed query"), arguments: arguments,
            commits: commits.updates())
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let store: any QuerySnapshots
        let select: SelectStatement
        let arguments: [String: Value]
        var commits: AsyncStream<Commit>.AsyncIterator
        var last: [Value]?
        /// Whether the query's last read took under the store's `shortAccess`: the next
        /// one runs on this task's thread, the first never does.
        var quick = false

        /// Reads the result now, and notes whether that was quick.
        mutating func snapshot() async throws -> ([Value], UInt64) {
            let started = ContinuousClock.now
            let result = try await store.snapshot(select, arguments: arguments, inline: quick)
            quick = ContinuousClock.now - started < store.shortAccess
            return result
        }

        public mutating func next() async throws -> QueryUpdate? {
            guard var previous = last else {
                let (items, _) = try await snapshot()
                last = items
                return QueryUpdate(items: items, transactions: [])
            }
            while let commit = await commits.next() {
                guard commit.collections.contains(select.collection) else { continue }
                // The result is read after the fact, so it may already include later
                // commits: credit every commit the snapshot contains, none twice.
                let (items, snapshotSequence) = try await snapshot()
                var transactions = commit.transactions
                var latest = commit.sequence
                while latest < snapshotSequence, let more = await commits.next() {
                    latest = Swift.max(latest, more.sequence)
                    if more.collections.contains(select.collection) { transactions += more.transactions }
                }
                if items != previous {
                    last = items
                    return QueryUpdate(items: items, transactions: transactions)
                }
                previous = items
            }
            return nil
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(store: store, select: select, arguments: arguments, commits: commits.makeAsyncIterator(), last: nil)
    }
}

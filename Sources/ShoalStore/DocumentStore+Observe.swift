public import ShoalCRDT
public import ShoalStorage
import ShoalQuery
import Synchronization
import GRDB

/// A commit that changed documents: what observers wake up for.
public struct Commit: Sendable, Equatable {
    /// The transactions the commit applied (one local, or several received in one batch).
    public var transactions: [TransactionID]
    public var collections: Set<String>
    /// The change-log sequence after the commit (0 for EVICT, which logs nothing).
    public var sequence: UInt64
}

/// One state of an observed query's result.
public struct QueryUpdate: Sendable, Equatable {
    public var items: [Value]
    /// The transactions whose commit produced this state; empty for the first state.
    public var transactions: [TransactionID]
}

extension DocumentStore {
    /// A SELECT's result and the change-log sequence it reflects, read in one snapshot.
    /// `inline`: the read is expected to be short (`read(inline:)`).
    func snapshot(
        _ select: SelectStatement, arguments: [String: Value], inline: Bool = false
    ) async throws(ShoalError) -> ([Value], UInt64) {
        try await read(inline: inline) { db in
            let items = try Self.select(select, arguments: arguments, db: db)
            let sequence = try ChangeLogRecord.lastSequence(db)
            return (items, sequence)
        }
    }

    /// The result of a SELECT now, then again after every commit, local or
    /// received, that changes it — once per commit, with its transaction IDs.
    ///
    /// The sequence does its work in the task that iterates it and ends when the
    /// store closes.
    public func observe(_ query: String, arguments: [String: Value] = [:]) throws(ShoalError) -> QueryUpdates {
        let select = try SelectStatement.parseOne(query, as: "an observed query")
        // Listen before the first read, so no commit falls between the two.
        return QueryUpdates(store: self, select: select, arguments: arguments, commits: commits.updates())
    }

    /// `observe` with arguments of Swift values, `["color": color]` (see `ValueConvertible`).
    public func observe(_ query: String, arguments: [String: any ValueConvertible]) throws(ShoalError) -> QueryUpdates {
        try observe(query, arguments: arguments.mapValues(\.shoalValue))
    }

    /// Calls `handler` with each new state of the query's result (see `observe`),
    /// until the returned observer is cancelled or the store closes. The store holds
    /// the observer meanwhile (`observers`): dropping the handle does not stop it.
    public func registerObserver(
        _ query: String, arguments: [String: Value] = [:], handler: @escaping @Sendable (QueryUpdate) -> Void
    ) throws(ShoalError) -> StoreObserver {
        let sequence = try observe(query, arguments: arguments)
        let registry = liveObservers
        let observer = StoreObserver(query: query, arguments: arguments)
        registry.withLock { $0.list.append(observer) }
        // The one task the store starts: a handler API needs someone to iterate for it.
        observer.start(
            Task { [weak observer] in
                do {
                    for try await observation in sequence {
                        guard !Task.isCancelled else { break }
                        handler(observation)
                    }
                } catch {}
                registry.withLock { $0.list.removeAll { $0 === observer } }
                observer?.stopped()
            })
        return observer
    }

    /// The observers registered and still running, oldest first.
    public var observers: [StoreObserver] { liveObservers.withLock { $0.list } }

    /// `registerObserver` with arguments of Swift values, `["color": color]` (see `ValueConvertible`).
    public func registerObserver(
        _ query: String, arguments: [String: any ValueConvertible], handler: @escaping @Sendable (QueryUpdate) -> Void
    ) throws(ShoalError) -> StoreObserver {
        try registerObserver(query, arguments: arguments.mapValues(\.shoalValue), handler: handler)
    }
}

/// A registered observer; it runs until cancelled or until the store closes, held by
/// the store (`DocumentStore.observers`) whether or not the caller keeps it.
public final class StoreObserver: Sendable {
    public let query: String
    public let arguments: [String: Value]
    private struct State {
        var task: Task<Void, Never>?
        var stopped = false
    }
    private let state = Locked(State())

    init(query: String, arguments: [String: Value]) {
        self.query = query
        self.arguments = arguments
    }

    func start(_ task: Task<Void, Never>) {
        let stopped = state.withLock { state -> Bool in
            state.task = task
            return state.stopped
        }
        if stopped { task.cancel() }
    }

    func stopped() { state.withLock { $0.stopped = true } }

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

/// The observers a store runs (`DocumentStore.observers`).
struct LiveObservers: Sendable {
    var list: [StoreObserver] = []
}

/// The states of an observed query; see `DocumentStore.observe`.
public struct QueryUpdates: AsyncSequence, Sendable {
    public typealias Element = QueryUpdate
    let store: DocumentStore
    let select: SelectStatement
    let arguments: [String: Value]
    let commits: AsyncStream<Commit>

    public struct AsyncIterator: AsyncIteratorProtocol {
        let store: DocumentStore
        let select: SelectStatement
        let arguments: [String: Value]
        var commits: AsyncStream<Commit>.AsyncIterator
        var last: [Value]?
        /// Whether the query's last read took under `DocumentStore.shortAccess`: the next
        /// one runs on this task's thread (`read(inline:)`), the first never does.
        var quick = false

        /// Reads the result now, and notes whether that was quick.
        mutating func snapshot() async throws -> ([Value], UInt64) {
            let started = ContinuousClock.now
            let result = try await store.snapshot(select, arguments: arguments, inline: quick)
            quick = ContinuousClock.now - started < DocumentStore.shortAccess
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

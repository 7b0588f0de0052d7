public import ShoalCRDT
public import ShoalStorage
package import ShoalQuery
import GRDB

extension DocumentStore {
    /// A SELECT's result and the change-log sequence it reflects, read in one snapshot.
    /// `inline`: the read is expected to be short (`read(inline:)`).
    package func snapshot(
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
    public func observe(_ query: String, arguments: [String: Value]) throws(ShoalError) -> QueryUpdates {
        try QueryUpdates(observing: query, arguments: arguments, on: self, commits: commits)
    }

    /// Calls `handler` with each new state of the query's result (see `observe`),
    /// until the returned observer is cancelled or the store closes. The store holds
    /// the observer meanwhile (`observers`): dropping the handle does not stop it.
    public func registerObserver(
        _ query: String, arguments: [String: Value], handler: @escaping @Sendable (QueryUpdate) -> Void
    ) throws(ShoalError) -> StoreObserver {
        liveObservers.register(try observe(query, arguments: arguments), query: query, arguments: arguments, handler: handler)
    }

    /// The observers registered and still running, oldest first.
    public var observers: [StoreObserver] { liveObservers.list }

}

extension DocumentStore: DocumentDatabase, QuerySnapshots {
    package var shortAccess: Duration { Self.shortAccess }
}

extension DocumentStore: NodeStore {}

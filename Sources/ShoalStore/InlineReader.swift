import GRDB
import ShoalStorage
import Synchronization

/// One read-only connection for short reads, run on the calling thread.
///
/// An async read of the pool hops to a reader's queue and back, and its reader
/// pool's semaphore to a queue of its own first: three thread wake-ups, 0.1–0.25 ms
/// on two cores, several times what reading one page of the change log or one
/// observed document costs. The reads on the path from a commit to a peer's
/// observer (a session's page near the end of the log, an observer's query that ran
/// quickly last time) take this connection instead, on the task's own thread.
///
/// It never waits: while one read holds it, `read` returns nil at once and the caller
/// reads through the pool. So a cooperative thread never blocks on it, and at most one
/// short read at a time runs outside the pool's readers.
final class InlineReader: Sendable {
    private let connection: DatabaseQueue
    private let busy = Atomic<Bool>(false)

    init(path: String, configuration: Configuration) throws {
        var configuration = configuration
        configuration.readonly = true
        configuration.label = "shoal.inline-read"
        connection = try DatabaseQueue(path: path, configuration: configuration)
    }

    /// `body` in a read transaction of its own, on this thread; nil when another read
    /// holds the connection.
    func read<T>(_ body: (Database) throws -> T) throws -> T? {
        guard busy.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged else { return nil }
        defer { busy.store(false, ordering: .releasing) }
        return try connection.inDatabase { db in try DocumentStore.inTransaction(db, .deferred, body) }
    }

    func close() {
        try? connection.close()
    }
}

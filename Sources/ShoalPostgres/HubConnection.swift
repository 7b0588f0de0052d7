import Logging
import NIOCore
package import PostgresNIO

/// A pooled connection lent to a hub's body (`PostgresHubDatabase.withConnection`),
/// whose statements are all answered, even when the connection closes under them.
///
/// PostgresNIO sends a statement by writing it to the channel with no promise. A
/// statement written after the channel closed, once its handlers are gone, is dropped,
/// and its caller waits for ever: a hub cut off from its database would hold the session
/// whose statement that was. On the connection's event loop, a channel that is still
/// active still has its handlers, and they fail every statement they hold when it
/// closes. So each statement is checked and written there, in one step:
///
/// ```
///  caller ──► event loop: closed? ──yes──► fails at once (`Closed`)
///                            └──no───► written to the handlers ──► answered, or failed
///                                                                  when the channel closes
/// ```
///
/// The hop to the event loop is the one PostgresNIO makes anyway to write from another thread.
package struct HubConnection: Sendable {
    let connection: PostgresConnection

    init(_ connection: PostgresConnection) {
        self.connection = connection
    }

    /// The error of a statement on a connection that had closed before it was sent.
    struct Closed: Error, CustomStringConvertible {
        var description: String { "the connection to the server had closed before the statement was sent" }
    }

    /// Whether the connection has closed.
    var isClosed: Bool { connection.isClosed }

    /// Runs one statement and reads all its rows.
    @discardableResult
    package func query(
        _ query: PostgresQuery, logger: Logger, file: String = #fileID, line: Int = #line
    ) async throws -> [PostgresRow] {
        try await send(query, logger: logger, file: file, line: line).get().rows
    }

    /// Sends one statement and returns at once: the answer comes in the future returned.
    /// The connection runs its statements one at a time in the order sent, so a statement
    /// sent after this one, by `send` or `query`, runs after it and sees what it did.
    func send(_ query: PostgresQuery, logger: Logger, file: String = #fileID, line: Int = #line) -> EventLoopFuture<PostgresQueryResult> {
        let connection = self.connection
        return connection.eventLoop.flatSubmit { () -> EventLoopFuture<PostgresQueryResult> in
            guard !connection.isClosed else { return connection.eventLoop.makeFailedFuture(Closed()) }
            return connection.query(query, logger: logger, file: file, line: line)
        }
    }

    /// Closes the connection.
    func close() async throws {
        try await connection.close()
    }

    /// Rolls back what the connection has open; a connection that cannot is closed, so
    /// that the pool never hands out one inside a transaction.
    func rollBack(logger: Logger) async {
        guard !isClosed else { return }
        do {
            try await query("ROLLBACK", logger: logger)
        } catch {
            try? await connection.close()
        }
    }
}

public import ShoalQuery

/// Everything Shoal refuses or fails at, in words a user can act on: the one error
/// the store, sync, the node and the admin client throw, each call with typed
/// `throws(ShoalError)`. `code` says what kind of failure it is, `message` says it
/// for a person.
public struct ShoalError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        // The store.

        /// The statement does not parse or cannot be evaluated; `queryError` says where.
        case invalidQuery
        /// INSERT met an existing `_id` under `ON ID CONFLICT FAIL`.
        case documentExists
        /// A value is not what the statement needs (a document that is not an object, say).
        case invalidDocument
        /// The database could not be opened, read or written.
        case database
        /// A read-only transaction met a statement that writes; nothing of it ran.
        case readOnly
        /// A write was started beside a read-write transaction open in the same task
        /// (a nested transaction, or a store write outside the open `Transaction`),
        /// which could only wait for itself.
        case nestedTransaction
        /// The store is shutting down or closed, or the transaction has already finished.
        case closed
        /// The task was cancelled; what it had begun was rolled back.
        case cancelled
        /// A write would exceed a size limit (`document_size_hard_limit_bytes`); nothing of it was written.
        case tooLarge
        /// A request's budget (`Deadline`) ran out before its write committed; nothing of it was written.
        case deadlineExceeded
        /// A transaction's body threw an error of its own (in `underlyingError`); the
        /// transaction rolled back.
        case aborted

        // The node and the admin client.

        case invalidConfiguration
        /// Another node holds the data directory's lock.
        case dataDirectoryInUse
        /// A key file is missing, too short, or open to other users.
        case keyFile
        /// A connection could not be made.
        case connectionFailed
        /// The node answered the request with an error.
        case requestFailed
        /// No answer came in time after the request was sent: whether it was applied is
        /// unknown (the node may have committed it, or may still). On a hub, also a write
        /// whose COMMIT answer PostgreSQL's connection lost, where the database could not
        /// say since whether it committed.
        case timedOut
        case protocolError
        /// A local file the client was given cannot be read or written.
        case file
        /// The node is not running: it stopped, or `run()` ended before it listened.
        case stopped
    }

    public var code: Code
    public var message: String
    public var queryError: QueryError?
    /// What a transaction's body threw, for `.aborted`: the app's own error, as it was.
    public var underlyingError: (any Error)?

    public init(_ code: Code, _ message: String, queryError: QueryError? = nil, underlyingError: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.queryError = queryError
        self.underlyingError = underlyingError
    }

    /// Equal when code, message and query error are: `underlyingError` is not compared.
    public static func == (lhs: ShoalError, rhs: ShoalError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message && lhs.queryError == rhs.queryError
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
        hasher.combine(queryError)
    }

    /// A query error as an `invalidQuery` store error, its message showing the offending line.
    public init(_ error: QueryError) {
        self.init(.invalidQuery, error.detailedDescription, queryError: error)
    }

    public var description: String { message }
}

extension ShoalError {
    /// What a transaction throws when its body (or its begin or commit) threw `error`:
    /// a `ShoalError` as it is, cancellation as `.cancelled`, and anything else, the
    /// app's own error, as `.aborted` carrying it.
    package init(thrownByTransactionBody error: any Error, _ info: TransactionInfo) {
        switch error {
        case let error as ShoalError: self = error
        case is CancellationError:
            self.init(.cancelled, "cancelled: the \(info.described) rolled back")
        default:
            self.init(
                .aborted, "the \(info.described) rolled back: its body threw \(error)", underlyingError: error)
        }
    }
}

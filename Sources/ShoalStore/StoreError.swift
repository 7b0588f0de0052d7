public import ShoalQuery
public import GRDB

/// Everything the store refuses, in words a user can act on.
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
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
    }

    public var code: Code
    public var message: String
    public var queryError: QueryError?

    public init(_ code: Code, _ message: String, queryError: QueryError? = nil) {
        self.code = code
        self.message = message
        self.queryError = queryError
    }

    /// A query error as an `invalidQuery` store error, its message showing the offending line.
    public init(_ error: QueryError) {
        self.init(.invalidQuery, error.detailedDescription, queryError: error)
    }

    public var description: String { message }

    /// `error` as a store error: store errors as they are, cancellation as `.cancelled`,
    /// anything else (a GRDB error) as `.database`, saying what was being done.
    static func wrapping(_ error: any Error, _ doing: String) -> StoreError {
        switch error {
        case let error as StoreError: error
        case is CancellationError: StoreError(.cancelled, "cancelled while \(doing)")
        case let error as DatabaseError where error.resultCode == .SQLITE_FULL:
            StoreError(
                .database,
                "\(doing) failed: the disk that holds the data directory is full (SQLite: \(error.message ?? "database or disk is full")); nothing of it was written. Free some space and try again")
        case let error as DatabaseError where error.resultCode == .SQLITE_READONLY:
            StoreError(
                .database,
                "\(doing) failed: the data directory is read-only (SQLite: \(error.message ?? "attempt to write a readonly database")); nothing of it was written")
        case let error as DatabaseError where error.resultCode == .SQLITE_IOERR:
            StoreError(
                .database,
                "\(doing) failed: an I/O error on the data directory's disk (SQLite: \(error.message ?? "disk I/O error"), extended code \(error.extendedResultCode.rawValue)); nothing of it was written")
        default: StoreError(.database, "\(doing) failed: \(error)")
        }
    }
}

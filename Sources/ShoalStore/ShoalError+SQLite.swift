import GRDB
import ShoalStorage

extension ShoalError {
    /// `error` as a store error: store errors as they are, cancellation as `.cancelled`,
    /// anything else (a GRDB error) as `.database`, saying what was being done.
    static func wrapping(_ error: any Error, _ doing: String) -> ShoalError {
        switch error {
        case let error as ShoalError: error
        case is CancellationError: ShoalError(.cancelled, "cancelled while \(doing)")
        case let error as DatabaseError where error.resultCode == .SQLITE_FULL:
            ShoalError(
                .database,
                "\(doing) failed: the disk that holds the data directory is full (SQLite: \(error.message ?? "database or disk is full")); nothing of it was written. Free some space and try again")
        case let error as DatabaseError where error.resultCode == .SQLITE_READONLY:
            ShoalError(
                .database,
                "\(doing) failed: the data directory is read-only (SQLite: \(error.message ?? "attempt to write a readonly database")); nothing of it was written")
        case let error as DatabaseError where error.resultCode == .SQLITE_IOERR:
            ShoalError(
                .database,
                "\(doing) failed: an I/O error on the data directory's disk (SQLite: \(error.message ?? "disk I/O error"), extended code \(error.extendedResultCode.rawValue)); nothing of it was written")
        default: ShoalError(.database, "\(doing) failed: \(error)")
        }
    }
}

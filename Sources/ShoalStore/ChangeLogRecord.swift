import ShoalCRDT
import ShoalStorage
import GRDB

/// One row of `change_log`: a run of one transaction's documents, its header decoded
/// once and its entries (`LogEntries`) read in place.
///
/// Every read of the log goes through it: a page for a peer (`LogRow`), what the log
/// holds of a transaction already (`InboundWriter.apply`, `DocumentStore.record`), a
/// history's newest delta, a reissue.
struct ChangeLogRecord: Sendable {
    var sequence: UInt64
    var transaction: TransactionID
    /// How many deltas the whole transaction wrote.
    var deltaCount: UInt32
    /// How many documents the row's entries hold.
    var documents: UInt32

    static let table = "change_log"

    enum Column: Int32, HotColumn {
        case sequence, transactionSite, transactionSequence, deltaCount, documents, entries

        var name: String {
            switch self {
            case .sequence: "seq"
            case .transactionSite: "txn_site"
            case .transactionSequence: "txn_seq"
            case .deltaCount: "txn_count"
            case .documents: "documents"
            case .entries: "entries"
            }
        }
    }

    /// Every column, for a `HotStatement` whose SQL adds its own conditions.
    static let select = "SELECT \(Column.selection) FROM change_log"
    static let ofTransaction = "\(select) WHERE txn_site = ? AND txn_seq = ? ORDER BY seq"
    static let atSequence = "\(select) WHERE seq = ?"

    init(_ row: HotStatement.Row) throws(ShoalError) {
        sequence = try row.unsigned(Column.sequence, of: Self.table)
        transaction = TransactionID(
            origin: SiteID(row.bitPattern(Column.transactionSite)),
            sequence: try row.unsigned(Column.transactionSequence, of: Self.table))
        deltaCount = try row.unsigned(Column.deltaCount, of: Self.table)
        documents = try row.unsigned(Column.documents, of: Self.table)
    }

    /// Runs `statement` (`select` and its conditions, bound), handing each row and its
    /// entries, valid until the next row, to `body` until it returns false.
    static func query(
        _ statement: inout HotStatement, _ body: (ChangeLogRecord, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        try statement.query { row in try body(ChangeLogRecord(row), row.blob(Column.entries)) }
    }

    /// Every row of transaction `id`, in log order, with its entries as `query` hands them.
    static func forEach(
        _ db: Database, of id: TransactionID, _ body: (ChangeLogRecord, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        var statement = try HotStatement(db, sql: ofTransaction, transaction: id)
        try query(&statement) { record, entries in
            try body(record, entries)
            return true
        }
    }

    /// The row at `sequence`, nil when the log has none there.
    static func fetch(_ db: Database, at sequence: UInt64) throws -> ChangeLogRecord? {
        var statement = try HotStatement(db, sql: atSequence)
        try statement.bind(sequence)
        var found: ChangeLogRecord?
        try query(&statement) { record, _ in
            found = record
            return false
        }
        return found
    }

    /// The log's highest sequence, 0 for an empty log.
    static func lastSequence(_ db: Database) throws -> UInt64 {
        let last = try Int64.fetchOne(db.cachedStatement(sql: "SELECT MAX(seq) FROM change_log")) ?? 0
        return try StoredInteger.unsigned(last, table: table, column: "seq")
    }

    /// How many rows the log holds.
    static func count(_ db: Database) throws -> UInt64 {
        UInt64(try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM change_log")) ?? 0)
    }
}

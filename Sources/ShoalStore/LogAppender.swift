import ShoalCRDT
import GRDB

/// Appends one transaction's change-log rows, one per document, several to an
/// INSERT: the local commit and the remote apply both write the log through it.
///
/// A row is held until `rowsPerInsert` are waiting or `finish()`; then one statement
/// inserts them all. The transaction's site, sequence and delta count are bound once
/// per statement. SQLite numbers the rows of one INSERT consecutively (each takes the
/// largest `seq` so far plus one), so the rows written are `first...last`.
struct LogAppender {
    /// The most rows one INSERT writes.
    static let rowsPerInsert = 8

    private let db: Database
    private let site: UInt64
    private let sequence: UInt64
    private let deltaCount: Int
    private var waiting: [(document: DocumentRef, deltas: Int, bytes: [UInt8])] = []
    private var statements = MultiRowStatements(LogAppender.insertSQL)

    /// The INSERTs of 1 to `rowsPerInsert` rows: parameters 1 to 3 are the
    /// transaction's, each row's own four follow in order.
    static let insertSQL = MultiRowStatements.statements(upTo: rowsPerInsert) { rows in
        """
        INSERT INTO change_log (txn_site, txn_seq, txn_count, collection, doc_id, doc_deltas, deltas)
        VALUES \(MultiRowStatements.values("(?1, ?2, ?3, ?, ?, ?, ?)", count: rows))
        """
    }

    /// The sequences of the rows written so far, nil before the first.
    private(set) var first: UInt64?
    private(set) var last: UInt64?

    /// For the rows of transaction `sequence` of `site`, which wrote `deltaCount` deltas in all.
    init(_ db: Database, site: UInt64, sequence: UInt64, deltaCount: Int) {
        self.db = db
        self.site = site
        self.sequence = sequence
        self.deltaCount = deltaCount
        waiting.reserveCapacity(Self.rowsPerInsert)
    }

    /// Logs `deltas` (packed, `deltaCount` of the document's in the transaction) to `document`.
    mutating func append(_ document: DocumentRef, deltaCount: Int, _ deltas: [UInt8]) throws {
        waiting.append((document, deltaCount, deltas))
        if waiting.count == Self.rowsPerInsert { try flush() }
    }

    /// Writes what is waiting.
    mutating func finish() throws {
        if !waiting.isEmpty { try flush() }
    }

    private mutating func flush() throws {
        let rows = waiting.count
        try statements.run(db, rows: rows) { statement in
            statement.bind(site)
            statement.bind(sequence)
            statement.bind(deltaCount)
            for row in waiting {
                statement.bind(row.document.collection)
                statement.bind(row.document.id)
                statement.bind(row.deltas)
                statement.bind(row.bytes)
            }
        }
        let end = UInt64(db.lastInsertedRowID)
        if first == nil { first = end - UInt64(rows) + 1 }
        last = end
        waiting.removeAll(keepingCapacity: true)
    }
}

import ShoalCRDT
import ShoalStorage
import GRDB

/// Appends one transaction's change-log rows: the local commit and the remote apply
/// both write the log through it.
///
/// A row holds a run of the transaction's documents, each an entry of `LogEntries`:
/// up to `documentsPerRow` of them, or fewer once the row's bytes reach
/// `bytesPerRow`, so that a page of the log, which takes rows whole, stays near its
/// budget. A transaction of a hundred small documents is one row. The transaction's
/// site, sequence and delta count are written once per row. Each row takes the
/// largest `seq` so far plus one, so the rows written are `first...last`.
struct LogAppender {
    static let documentsPerRow = LogEntries.documentsPerRow
    static let bytesPerRow = LogEntries.bytesPerRow

    static let insertSQL = """
        INSERT INTO change_log (txn_site, txn_seq, txn_count, documents, entries) VALUES (?, ?, ?, ?, ?)
        """

    private let db: Database
    private let site: UInt64
    private let sequence: UInt64
    private let deltaCount: Int
    private var entries: [UInt8] = []
    private var documents = 0

    /// The sequences of the rows written so far, nil before the first.
    private(set) var first: UInt64?
    private(set) var last: UInt64?

    /// For the rows of transaction `sequence` of `site`, which wrote `deltaCount` deltas in all.
    init(_ db: Database, site: UInt64, sequence: UInt64, deltaCount: Int) {
        self.db = db
        self.site = site
        self.sequence = sequence
        self.deltaCount = deltaCount
    }

    /// Logs `deltas` (packed, `deltaCount` of the document's in the transaction) to `document`.
    mutating func append(_ document: DocumentRef, deltaCount: Int, _ deltas: [UInt8]) throws {
        LogEntries.append(document, documentDeltas: deltaCount, deltas: deltas, to: &entries)
        documents += 1
        if documents == Self.documentsPerRow || entries.count >= Self.bytesPerRow { try flush() }
    }

    /// Writes what is waiting.
    mutating func finish() throws {
        if documents > 0 { try flush() }
    }

    private mutating func flush() throws {
        var statement = try HotStatement(db, sql: Self.insertSQL)
        try statement.bind(site)
        try statement.bind(sequence)
        try statement.bind(deltaCount)
        try statement.bind(documents)
        try statement.bind(entries)
        try statement.run()
        let row = UInt64(db.lastInsertedRowID)
        if first == nil { first = row }
        last = row
        entries.removeAll(keepingCapacity: true)
        documents = 0
    }
}

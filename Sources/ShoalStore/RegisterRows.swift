import ShoalCRDT
import GRDB

/// One row of `field`: a register of a document, decoded once.
struct FieldRecord: FetchableRecord {
    var name: String
    var state: RegisterState

    /// The columns `init(row:)` reads, in its order (a removal's origin site is
    /// `txn_site`; NULL there, from before `v4-observed-removals`, means `site`).
    static let columns = "name, value, ts, site, COALESCE(txn_site, site), txn_seq"

    init(row: Row) {
        name = row[0]
        state = RegisterState(
            json: row[1],
            version: RegisterVersion(timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: row[2])), site: SiteID(UInt64(bitPattern: row[3]))),
            transaction: TransactionID(origin: SiteID(UInt64(bitPattern: row[4])), sequence: UInt64(row[5] as Int64)))
    }
}

/// Loading and saving a document's registers and body: all the store does with the
/// CRDT rules, which live in `DocumentRegisters` and `DocumentEditor` (ShoalCRDT).
/// Every statement is prepared once per connection.
enum RegisterRows {
    static let load = "SELECT \(FieldRecord.columns) FROM field WHERE collection = ? AND doc_id = ?"
    static let upsert = """
        INSERT INTO field (collection, doc_id, name, value, ts, site, txn_seq, txn_index, txn_count, txn_site)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)
        ON CONFLICT (collection, doc_id, name) DO UPDATE SET value = excluded.value, ts = excluded.ts,
            site = excluded.site, txn_seq = excluded.txn_seq, txn_index = excluded.txn_index, txn_site = excluded.txn_site
        """
    static let saveBody = """
        INSERT INTO document (collection, doc_id, body, deleted) VALUES (?, ?, ?, 0)
        ON CONFLICT (collection, doc_id) DO UPDATE SET body = excluded.body, deleted = 0
        """

    /// Every register of one document.
    static func load(_ db: Database, collection: String, key: String) throws -> DocumentRegisters {
        var registers: [String: RegisterState] = [:]
        let cursor = try FieldRecord.fetchCursor(db.cachedStatement(sql: load), arguments: [collection, key])
        while let record = try cursor.next() { registers[record.name] = record.state }
        return DocumentRegisters(registers)
    }

    /// Writes one register (`index`: its delta's position in the writing transaction).
    static func save(_ db: Database, collection: String, key: String, name: String, state: RegisterState, index: Int) throws {
        try db.cachedStatement(sql: upsert).execute(arguments: [
            collection, key, name, state.json, Int64(bitPattern: state.version.timestamp.rawValue),
            Int64(bitPattern: state.version.site.rawValue), Int64(state.transaction.sequence), index,
            Int64(bitPattern: state.transaction.origin.rawValue),
        ])
    }

    /// Saves what the registers materialize to: the body of a live document; a deleted
    /// one keeps its last body, flagged, so sync can still route its tombstone; a
    /// document with nothing live and no tombstone has no row.
    @discardableResult
    static func saveBody(_ db: Database, collection: String, key: String, _ registers: DocumentRegisters) throws -> Value? {
        let body: DocumentRegisters.Body
        do {
            body = try registers.materialize(key: key)
        } catch {
            throw StoreError(.database, "a stored register of \(collection) \(key) is not valid JSON: \(error)")
        }
        switch body {
        case .live(let value):
            try db.cachedStatement(sql: saveBody).execute(arguments: [collection, key, value.canonicalJSON])
            return value
        case .deleted:
            try db.cachedStatement(sql: "UPDATE document SET deleted = 1 WHERE collection = ? AND doc_id = ?")
                .execute(arguments: [collection, key])
        case .absent:
            try db.cachedStatement(sql: "DELETE FROM document WHERE collection = ? AND doc_id = ?").execute(arguments: [collection, key])
        }
        return nil
    }

    /// Whether a user may write this top-level field name.
    static func checkWritable(_ name: String, collection: String) throws(StoreError) {
        if name.contains(Counter.separator) || name.contains(RegisterName.pathSeparator) {
            throw StoreError(.invalidDocument, "\(collection): field names may not contain the characters U+001E or U+001F")
        }
        if name.hasPrefix("_") && name != "_id" {
            throw StoreError(
                .invalidDocument,
                "\(collection): field names beginning with '_' are reserved (got '\(name)'); only _id may be written")
        }
    }
}

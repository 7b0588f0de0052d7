import ShoalCRDT
import GRDB

/// One row of `field`: a register of a document, decoded once.
struct FieldRecord {
    var name: String
    var state: RegisterState

    /// The columns a `FieldRecord` is read from, in the order `Column` numbers them (a
    /// removal's origin site is `txn_site`; NULL there, from before
    /// `v4-observed-removals`, means `site`).
    static let columns = "name, value, ts, site, COALESCE(txn_site, site), txn_seq"

    enum Column: Int32 {
        case name, value, timestamp, site, transactionSite, transactionSequence
    }

    init(_ row: HotStatement.Row) {
        name = row.text(Column.name.rawValue)
        state = RegisterState(
            json: row.text(Column.value.rawValue),
            version: RegisterVersion(
                timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: row.int64(Column.timestamp.rawValue))),
                site: SiteID(UInt64(bitPattern: row.int64(Column.site.rawValue)))),
            transaction: TransactionID(
                origin: SiteID(UInt64(bitPattern: row.int64(Column.transactionSite.rawValue))),
                sequence: UInt64(bitPattern: row.int64(Column.transactionSequence.rawValue))))
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

    static let loadEvicted = "SELECT \(FieldRecord.columns) FROM evicted_counter WHERE collection = ? AND doc_id = ?"
    static let upsertEvicted = """
        INSERT INTO evicted_counter (collection, doc_id, name, value, ts, site, txn_seq, txn_site)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (collection, doc_id, name) DO UPDATE SET value = excluded.value, ts = excluded.ts,
            site = excluded.site, txn_seq = excluded.txn_seq, txn_site = excluded.txn_site
        """

    /// The statements that load and save many documents' registers and bodies,
    /// looked up in the connection's cache once rather than once per row.
    struct Statements {
        var load: HotStatement
        var upsert: HotStatement
        var body: HotStatement

        init(_ db: Database) throws {
            load = try HotStatement(db, sql: RegisterRows.load)
            upsert = try HotStatement(db, sql: RegisterRows.upsert)
            body = try HotStatement(db, sql: RegisterRows.saveBody)
        }
    }

    /// Every register of one document (`from`: or every one EVICT kept of it, `loadEvicted`).
    static func load(_ db: Database, collection: String, key: String, from sql: String = load) throws -> DocumentRegisters {
        var statement = try HotStatement(db, sql: sql)
        return try load(&statement, collection: collection, key: key)
    }

    /// Every register of one document, through a prepared `load` (or `loadEvicted`).
    static func load(_ statement: inout HotStatement, collection: String, key: String) throws -> DocumentRegisters {
        var registers: [String: RegisterState] = [:]
        statement.bind(collection)
        statement.bind(key)
        try statement.query { row in
            let record = FieldRecord(row)
            registers[record.name] = record.state
            return true
        }
        return DocumentRegisters(registers)
    }

    /// Writes one register (`index`: its delta's position in the writing transaction).
    static func save(_ db: Database, collection: String, key: String, name: String, state: RegisterState, index: Int) throws {
        var statement = try HotStatement(db, sql: upsert)
        try save(&statement, collection: collection, key: key, name: name, state: state, index: index)
    }

    /// Writes one register through a prepared `upsert`.
    static func save(
        _ statement: inout HotStatement, collection: String, key: String, name: String, state: RegisterState, index: Int
    ) throws {
        statement.bind(collection)
        statement.bind(key)
        statement.bind(name)
        statement.bind(state.json)
        statement.bind(state.version.timestamp.rawValue)
        statement.bind(state.version.site.rawValue)
        statement.bind(state.transaction.sequence)
        statement.bind(index)
        statement.bind(state.transaction.origin.rawValue)
        try statement.run()
    }

    /// Keeps what EVICT must not forget of a document (`DocumentRegisters.counters(of:)`),
    /// merged with what an earlier EVICT kept of it.
    static func keepEvicted(_ db: Database, collection: String, key: String, _ kept: DocumentRegisters) throws {
        var merged = try load(db, collection: collection, key: key, from: loadEvicted)
        var statement = try HotStatement(db, sql: upsertEvicted)
        for (name, state) in kept.registers where merged.merge(name, state) {
            statement.bind(collection)
            statement.bind(key)
            statement.bind(name)
            statement.bind(state.json)
            statement.bind(state.version.timestamp.rawValue)
            statement.bind(state.version.site.rawValue)
            statement.bind(state.transaction.sequence)
            statement.bind(state.transaction.origin.rawValue)
            try statement.run()
        }
    }

    /// Drops kept registers the document now holds at the same version or a later one.
    static func dropEvicted(_ db: Database, collection: String, key: String, kept: DocumentRegisters, now held: DocumentRegisters) throws {
        for (name, state) in kept.registers where held.covers(name, state) {
            try db.cachedStatement(sql: "DELETE FROM evicted_counter WHERE collection = ? AND doc_id = ? AND name = ?")
                .execute(arguments: [collection, key, name])
        }
    }

    /// Saves what the registers materialize to: the body of a live document; a deleted
    /// one keeps its last body, flagged, so sync can still route its tombstone; a
    /// document with nothing live and no tombstone has no row.
    /// Returns the size of a live body in bytes (nil for no live body).
    @discardableResult
    static func saveBody(_ db: Database, collection: String, key: String, _ registers: DocumentRegisters) throws -> Int? {
        var statement = try HotStatement(db, sql: saveBody)
        return try self.saveBody(db, &statement, collection: collection, key: key, registers)
    }

    /// Saves a body (see the other `saveBody`), a live one through a prepared `saveBody`.
    @discardableResult
    static func saveBody(
        _ db: Database, _ statement: inout HotStatement, collection: String, key: String, _ registers: DocumentRegisters
    ) throws -> Int? {
        let body: DocumentRegisters.Body.Text
        do {
            body = try registers.materializedJSON(key: key)
        } catch {
            throw StoreError(.database, "a stored register of \(collection) \(key) is not valid JSON: \(error)")
        }
        switch body {
        case .live(let json):
            statement.bind(collection)
            statement.bind(key)
            statement.bind(json)
            try statement.run()
            return json.utf8.count
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
        // By byte: both are ASCII controls, which no other character's UTF-8 contains
        // (and `String.contains` of a `Character` walks grapheme clusters).
        if name.utf8.contains(where: { $0 == Counter.separatorByte || $0 == RegisterName.pathSeparatorByte }) {
            throw StoreError(.invalidDocument, "\(collection): field names may not contain the characters U+001E or U+001F")
        }
        if name.hasPrefix("_") && name != "_id" {
            throw StoreError(
                .invalidDocument,
                "\(collection): field names beginning with '_' are reserved (got '\(name)'); only _id may be written")
        }
    }
}

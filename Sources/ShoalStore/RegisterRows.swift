import ShoalCRDT
import ShoalStorage
import GRDB

/// How the SQLite store reads a `FieldRecord`: a row of `field` (or of
/// `evicted_counter`, which has its shape), decoded once.
extension FieldRecord {
    /// The columns a `FieldRecord` is read from (a removal's origin site is `txn_site`;
    /// NULL there, from before `v4-observed-removals`, means `site`).
    enum Column: Int32, HotColumn {
        case name, value, timestamp, site, transactionSite, transactionSequence

        var name: String {
            switch self {
            case .name: "name"
            case .value: "value"
            case .timestamp: "ts"
            case .site: "site"
            case .transactionSite: "COALESCE(txn_site, site)"
            case .transactionSequence: "txn_seq"
            }
        }
    }

    static let columns = Column.selection
    /// A document's registers in name order, for the context a piece carries.
    static let contextSQL = "SELECT \(columns) FROM field WHERE collection = ? AND doc_id = ? ORDER BY name"

    /// `table`: where the row was read from, for errors.
    init(_ row: HotStatement.Row, of table: String = "field") throws(ShoalError) {
        self.init(
            name: row.text(Column.name),
            state: RegisterState(
            json: row.text(Column.value),
            version: RegisterVersion(
                timestamp: HybridTimestamp(rawValue: row.bitPattern(Column.timestamp)), site: SiteID(row.bitPattern(Column.site))),
            transaction: TransactionID(
                origin: SiteID(row.bitPattern(Column.transactionSite)),
                sequence: try row.unsigned(Column.transactionSequence, of: table))))
    }
}

/// Loading and saving a document's registers and body: all the store does with the
/// CRDT rules, which live in `DocumentRegisters` and `DocumentEditor` (ShoalCRDT).
/// Every statement is prepared once per connection.
enum RegisterRows {
    static let load = "SELECT \(FieldRecord.columns) FROM field WHERE collection = ? AND doc_id = ?"
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
        var upsert: Upserts
        var bodies: Bodies

        init(_ db: Database) throws {
            load = try HotStatement(db, sql: RegisterRows.load)
            upsert = Upserts(db)
            bodies = Bodies(db)
        }
    }

    /// The most registers one upsert statement writes (`upsertSQL`).
    static let rowsPerUpsert = 8

    /// The register upserts for 1 to `rowsPerUpsert` registers of one document: the
    /// collection and key are parameters 1 and 2, bound once; each row's own seven
    /// follow in order. One statement per document rather than per register.
    static let upsertSQL = MultiRowStatements.statements(upTo: rowsPerUpsert) { rows in
        """
        INSERT INTO field (collection, doc_id, name, value, ts, site, txn_seq, txn_index, txn_count, txn_site)
        VALUES \(MultiRowStatements.values("(?1, ?2, ?, ?, ?, ?, ?, ?, 0, ?)", count: rows))
        ON CONFLICT (collection, doc_id, name) DO UPDATE SET value = excluded.value, ts = excluded.ts,
            site = excluded.site, txn_seq = excluded.txn_seq, txn_index = excluded.txn_index, txn_site = excluded.txn_site
        """
    }

    /// Writes the registers of documents, those of one document in as few statements as
    /// `rowsPerUpsert` allows.
    struct Upserts {
        let db: Database
        private var statements = MultiRowStatements(RegisterRows.upsertSQL)

        init(_ db: Database) { self.db = db }

        /// Writes registers of one document (`index`: each one's delta's position in
        /// the writing transaction).
        mutating func save(collection: String, key: String, _ writes: [String: (state: RegisterState, index: UInt32)]) throws {
            var next = writes.startIndex
            var left = writes.count
            while left > 0 {
                let rows = min(left, RegisterRows.rowsPerUpsert)
                try statements.run(db, rows: rows) { statement in
                    try statement.bind(collection)
                    try statement.bind(key)
                    for _ in 0..<rows {
                        let (name, write) = writes[next]
                        try statement.bind(name)
                        try statement.bind(write.state.json)
                        try statement.bind(write.state.version.timestamp.rawValue)
                        try statement.bind(write.state.version.site.rawValue)
                        try statement.bind(write.state.transaction.sequence)
                        try statement.bind(Int64(write.index))
                        try statement.bind(write.state.transaction.origin.rawValue)
                        next = writes.index(after: next)
                    }
                }
                left -= rows
            }
        }
    }

    /// Every register of one document (`from`: or every one EVICT kept of it, `loadEvicted`).
    static func load(_ db: Database, collection: String, key: String, from sql: String = load) throws -> DocumentRegisters {
        var statement = try HotStatement(db, sql: sql)
        return try load(&statement, collection: collection, key: key, table: sql == loadEvicted ? "evicted_counter" : "field")
    }

    /// Every register of one document, through a prepared `load` (or `loadEvicted`).
    static func load(_ statement: inout HotStatement, collection: String, key: String, table: String = "field") throws -> DocumentRegisters {
        var registers: [String: RegisterState] = [:]
        try statement.bind(collection)
        try statement.bind(key)
        try statement.query { row in
            let record = try FieldRecord(row, of: table)
            registers[record.name] = record.state
            return true
        }
        return DocumentRegisters(registers)
    }

    /// Keeps what EVICT must not forget of a document (`DocumentRegisters.counters(of:)`),
    /// merged with what an earlier EVICT kept of it.
    static func keepEvicted(_ db: Database, collection: String, key: String, _ kept: DocumentRegisters) throws {
        var merged = try load(db, collection: collection, key: key, from: loadEvicted)
        var statement = try HotStatement(db, sql: upsertEvicted)
        for (name, state) in kept.registers where merged.merge(name, state) {
            try statement.bind(collection)
            try statement.bind(key)
            try statement.bind(name)
            try statement.bind(state.json)
            try statement.bind(state.version.timestamp.rawValue)
            try statement.bind(state.version.site.rawValue)
            try statement.bind(state.transaction.sequence)
            try statement.bind(state.transaction.origin.rawValue)
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
        switch try body(of: registers, collection: collection, key: key) {
        case .live(let json):
            var statement = try HotStatement(db, sql: saveBody)
            try statement.bind(collection)
            try statement.bind(key)
            try statement.bind(json)
            try statement.run()
            return json.utf8.count
        case .deleted:
            try saveNoBody(db, collection: collection, key: key, deleted: true)
        case .absent:
            try saveNoBody(db, collection: collection, key: key, deleted: false)
        }
        return nil
    }

    /// What `registers` materialize to, refused when no reader could take it back (`LocalWriteRules.body(of:)`).
    static func body(of registers: DocumentRegisters, collection: String, key: String) throws -> DocumentRegisters.Body.Text {
        try LocalWriteRules.body(of: registers, collection: collection, key: key)
    }

    /// Flags a document's body deleted, or with `deleted` false, drops its row.
    static func saveNoBody(_ db: Database, collection: String, key: String, deleted: Bool) throws {
        if deleted {
            try db.cachedStatement(sql: "UPDATE document SET deleted = 1 WHERE collection = ? AND doc_id = ?")
                .execute(arguments: [collection, key])
        } else {
            try db.cachedStatement(sql: "DELETE FROM document WHERE collection = ? AND doc_id = ?").execute(arguments: [collection, key])
        }
    }

    /// Saves the bodies of many documents (as `saveBody` does), the live ones several
    /// to a statement: a body is held until `rowsPerUpsert` are waiting, a document
    /// with no live body is written, or `finish()`.
    ///
    /// Nothing reads a held body before `finish()`: the remote apply, which uses it,
    /// reads registers only. A document may be saved at most once between flushes (one
    /// statement may not update a row twice); the apply saves each document once.
    struct Bodies {
        let db: Database
        private var waiting: [(collection: String, key: String, json: String)] = []
        private var statements = MultiRowStatements(Bodies.upsertSQL)

        /// The body upserts for 1 to `rowsPerUpsert` documents.
        static let upsertSQL = MultiRowStatements.statements(upTo: RegisterRows.rowsPerUpsert) { rows in
            """
            INSERT INTO document (collection, doc_id, body, deleted) VALUES \(MultiRowStatements.values("(?, ?, ?, 0)", count: rows))
            ON CONFLICT (collection, doc_id) DO UPDATE SET body = excluded.body, deleted = 0
            """
        }

        init(_ db: Database) {
            self.db = db
            waiting.reserveCapacity(RegisterRows.rowsPerUpsert)
        }

        /// Saves what `registers` materialize to, holding a live body for a later statement.
        mutating func save(collection: String, key: String, _ registers: DocumentRegisters) throws {
            try save(collection: collection, key: key, body: try RegisterRows.body(of: registers, collection: collection, key: key))
        }

        /// Saves a body materialized already.
        mutating func save(collection: String, key: String, body: DocumentRegisters.Body.Text) throws {
            switch body {
            case .live(let json):
                waiting.append((collection, key, json))
                if waiting.count == RegisterRows.rowsPerUpsert { try flush() }
            case .deleted:
                try finish()
                try RegisterRows.saveNoBody(db, collection: collection, key: key, deleted: true)
            case .absent:
                try finish()
                try RegisterRows.saveNoBody(db, collection: collection, key: key, deleted: false)
            }
        }

        /// Writes the bodies held.
        mutating func finish() throws {
            if !waiting.isEmpty { try flush() }
        }

        private mutating func flush() throws {
            try statements.run(db, rows: waiting.count) { statement in
                for body in waiting {
                    try statement.bind(body.collection)
                    try statement.bind(body.key)
                    try statement.bind(body.json)
                }
            }
            waiting.removeAll(keepingCapacity: true)
        }
    }
}


import ShoalCRDT
import ShoalStorage
import ShoalQuery
import GRDB

/// The writes of one local read-write transaction, inside its open SQLite transaction.
///
/// INSERT, UPDATE and DELETE are ShoalStorage's `LocalWrites`, the same on every
/// engine, over this connection's rows (`Rows`); EVICT and the commit's log rows
/// (`finish()`) are SQLite's. `finish()` numbers the deltas, appends them to the change
/// log under this transaction's ID with its manifest, and bumps the transaction
/// counter, all before the SQLite transaction commits.
///
/// A `Transaction` spans several database accesses (one per `execute`), and a
/// `Database` may not outlive its access, so what the transaction has written so
/// far lives in `progress`, a value carried from one access to the next: a
/// `LocalTransaction` is made again around it for each access.
struct LocalTransaction {
    /// What a transaction has written so far, between its database accesses.
    struct Progress: Sendable {
        /// This transaction's number, if it commits any write.
        let sequence: Int64
        var pending: [LocalDelta] = []
        /// Set when EVICT removed local data: peers must resend what subscriptions still match.
        var evicted = false
    }

    /// A local write's rows: read and written on the writer connection at once.
    struct Rows: LocalRows {
        let db: Database
        /// The register upserts, prepared once for all the documents of this access.
        var upserts: RegisterRows.Upserts

        func registers(collection: String, key: String) throws -> DocumentRegisters {
            try RegisterRows.load(db, collection: collection, key: key)
        }

        func remembered(collection: String, key: String) throws -> DocumentRegisters {
            try RegisterRows.load(db, collection: collection, key: key, from: RegisterRows.loadEvicted)
        }

        func forgetRemembered(collection: String, key: String, kept: DocumentRegisters, now: DocumentRegisters) throws {
            try RegisterRows.dropEvicted(db, collection: collection, key: key, kept: kept, now: now)
        }

        func liveBody(collection: String, key: String) throws -> [String: Value]? {
            guard
                let text = try String.fetchOne(
                    db.cachedStatement(sql: "SELECT body FROM document WHERE collection = ? AND doc_id = ? AND deleted = 0"),
                    arguments: [collection, key])
            else { return nil }
            // A body an older version stored past the limits reads as its `_id` alone (as
            // `matchingDocuments` sees it), so an upsert can still repair the document.
            return (try? JSON.parse(text).objectValue) ?? ["_id": (try? JSON.parse(key)) ?? .null]
        }

        func matching(
            collection: String, predicate: Expression?, orderBy: [OrderTerm], limit: Expression?, offset: Expression?,
            arguments: [String: Value]
        ) throws -> [(key: String, body: Value)] {
            try DocumentStore.matchingDocuments(
                collection: collection, predicate: predicate, orderBy: orderBy, limit: limit, offset: offset,
                arguments: arguments, db: db)
        }

        mutating func save(
            collection: String, key: String, written: [String: (state: RegisterState, index: UInt32)],
            registers: DocumentRegisters
        ) throws -> Int? {
            try upserts.save(collection: collection, key: key, written)
            return try RegisterRows.saveBody(db, collection: collection, key: key, registers)
        }
    }

    private(set) var writes: LocalWrites<Rows>
    private(set) var evicted: Bool

    var db: Database { writes.rows.db }
    var site: SiteID { writes.site }
    var counterSite: SiteID { writes.counterSite }
    var clock: HybridLogicalClock { writes.clock }
    var sequence: Int64 { Int64(writes.sequence) }
    var progress: Progress { Progress(sequence: sequence, pending: writes.pending, evicted: evicted) }

    init(db: Database, site: SiteID, counterSite: SiteID, clock: HybridLogicalClock, progress: Progress) {
        writes = LocalWrites(
            rows: Rows(db: db, upserts: RegisterRows.Upserts(db)), site: site, counterSite: counterSite, clock: clock,
            sequence: UInt64(progress.sequence), pending: progress.pending)
        evicted = progress.evicted
    }

    /// The progress of a transaction that starts now: numbered after the last one committed.
    static func begin(db: Database) throws -> Progress {
        let previous = try DocumentStore.unsignedMeta(db, "transaction_counter")
        return Progress(sequence: Int64(previous) + 1)
    }

    mutating func insert(_ insert: InsertStatement, arguments: [String: Value]) throws -> [Value] {
        try writes.insert(insert, documents: try LocalWriteRules.documents(of: insert, arguments: arguments))
    }

    mutating func update(_ update: UpdateStatement, arguments: [String: Value]) throws -> [Value] {
        try writes.update(update, arguments: arguments)
    }

    mutating func delete(_ delete: DeleteStatement, arguments: [String: Value]) throws -> [Value] {
        try writes.delete(delete, arguments: arguments)
    }

    /// The live bodies written since the last call, and forgets them.
    mutating func takeWrittenBodies() -> [(collection: String, key: String, bytes: Int)] { writes.takeWrittenBodies() }

    /// EVICT: forgets local copies without telling anyone, and never what only this
    /// node holds (DATA_MODEL.md §11).
    ///
    /// The change log is untouched: it still sends every peer what it logged, evicted
    /// documents included. A document that holds a write of this node's own that no
    /// peer has acknowledged (`holdings`) is kept whole: dropped here, nobody would give
    /// it back to this node, since peers never stream a node's own writes back unless
    /// it asks from the start. Peer cursors restart, so subscriptions refill what they
    /// match, this node's own writes included. What this site's next increments need
    /// (its own counter contributions, their bases, the tombstone) is kept aside in
    /// `evicted_counter`. Returns the `_id`s evicted and those kept.
    mutating func evict(
        _ evict: DeleteStatement, arguments: [String: Value], holdings: PeerHoldings
    ) throws -> (evicted: [Value], kept: [Value]) {
        let matches = try DocumentStore.matchingDocuments(
            collection: evict.collection, predicate: evict.whereClause, arguments: arguments, db: db)
        var evicted: [Value] = [], kept: [Value] = []
        for (key, body) in matches {
            let registers = try RegisterRows.load(db, collection: evict.collection, key: key)
            let own = ownSequences(registers)
            if let sequence = try lastOwnWrite(own),
                !holdings.someoneHolds(collection: evict.collection, body: body, through: sequence, refusing: try refusing(own))
            {
                kept.append(body["_id"] ?? .null)
                continue
            }
            evicted.append(body["_id"] ?? .null)
            // What the clock adopts of the forgotten timestamps outlives them in the high-water mark.
            if let latest = registers.latestTimestamp { clock.observe(latest) }
            // This site's increments must outlive them too, until peers send them back.
            let kept = registers.counters(of: counterSite)
            if !kept.isEmpty { try RegisterRows.keepEvicted(db, collection: evict.collection, key: key, kept) }
            try db.execute(sql: "DELETE FROM field WHERE collection = ? AND doc_id = ?", arguments: [evict.collection, key])
            try db.execute(sql: "DELETE FROM document WHERE collection = ? AND doc_id = ?", arguments: [evict.collection, key])
        }
        if !evicted.isEmpty {
            try saveClockHighWater()
            try DocumentStore.forgetPeerCursors(db)
            // From now on this node may lack its own transactions: it asks peers for them.
            try db.execute(sql: "INSERT OR REPLACE INTO shoal_meta (key, value) VALUES ('evicted', 1)")
            self.evicted = true
        }
        return (evicted, kept)
    }

    /// The sequences of this site's transactions that wrote a register `registers` hold now.
    private func ownSequences(_ registers: DocumentRegisters) -> Set<UInt64> {
        Set(registers.registers.values.lazy.map(\.transaction).filter { $0.origin == site }.map(\.sequence))
    }

    /// The peers that refused one of `own`, this node's own transactions whose values a
    /// document holds (`peer_refusal`): they hold the document without those values.
    private func refusing(_ own: Set<UInt64>) throws -> Set<SiteID> {
        guard !own.isEmpty else { return [] }
        let statement = try db.cachedStatement(sql: "SELECT peer FROM peer_refusal WHERE txn_seq = ?")
        var peers: Set<SiteID> = []
        for sequence in own {
            for peer in try Int64.fetchAll(statement, arguments: [Int64(bitPattern: sequence)]) {
                peers.insert(SiteID(UInt64(bitPattern: peer)))
            }
        }
        return peers
    }

    /// The highest change-log sequence of `own`, this site's transactions that wrote a
    /// register a document holds now; nil when there are none.
    private func lastOwnWrite(_ own: Set<UInt64>) throws -> UInt64? {
        guard !own.isEmpty else { return nil }
        let statement = try db.cachedStatement(sql: "SELECT MAX(seq) FROM change_log WHERE txn_site = ? AND txn_seq = ?")
        var last: UInt64 = 0
        for sequence in own {
            let row = try Int64.fetchOne(statement, arguments: [Int64(bitPattern: site.rawValue), Int64(sequence)]) ?? 0
            last = max(last, try StoredInteger.unsigned(row, table: "change_log", column: "seq"))
        }
        return last
    }

    /// Appends the transaction's deltas to the change log and records its manifest;
    /// `nil` when it wrote nothing.
    func finish() throws -> (transaction: TransactionID, lastSequence: UInt64, appended: LogEnd.Appended)? {
        let pending = writes.pending
        guard !pending.isEmpty else { return nil }
        let transaction = TransactionID(origin: site, sequence: UInt64(sequence))
        try db.cachedStatement(
            sql: "INSERT INTO shoal_meta (key, value) VALUES ('transaction_counter', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        ).execute(arguments: [sequence])
        try saveClockHighWater()
        // One log entry per document, its deltas in transaction order (`logRuns`).
        let documents = LocalWriteRules.logRuns(pending)
        var log = LogAppender(db, site: site.rawValue, sequence: UInt64(sequence), deltaCount: pending.count)
        var packed = PackedDeltas()
        var counts: [(collection: String, deltas: Int)] = []
        counts.reserveCapacity(documents.count)
        func pack(_ range: Range<Int>) {
            for index in range {
                let d = pending[index]
                packed.append(index: UInt32(index), timestamp: d.ts.rawValue, name: d.field, value: d.json)
            }
        }
        for (document, run, more) in documents {
            packed.removeAll()
            pack(run)
            for range in more { pack(range) }
            counts.append((document.collection, packed.count))
            try log.append(document, deltaCount: packed.count, packed.bytes)
        }
        try log.finish()
        let last = log.last ?? UInt64(db.lastInsertedRowID)
        let manifest = CollectionCount.manifest(documents: counts)
        // The log's rows are numbered on from its last one: this transaction's follow it.
        let appended = LogEnd.Appended(
            after: (log.first ?? last) - 1, collections: Set(manifest.map(\.collection)), transactions: [transaction],
            documents: documents.count)
        try db.cachedStatement(sql: FieldSQL.insertTransaction).execute(arguments: [
            Int64(bitPattern: site.rawValue), sequence, pending.count, documents.count,
            CollectionCount.encode(manifest), TransactionRecord.State.applied.rawValue, "", "", 0,
        ])
        return (transaction, last, appended)
    }

    /// Keeps the clock's reading durable (`clock_high_water`), so that after a restart
    /// it starts above every timestamp it issued or adopted, even those EVICT removed
    /// from `field`. Timestamps a write took above a far-ahead stored value, which the
    /// clock never adopts, stay out of it.
    func saveClockHighWater() throws {
        try db.cachedStatement(
            sql: "INSERT INTO shoal_meta (key, value) VALUES ('clock_high_water', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        ).execute(arguments: [Int64(bitPattern: clock.current.rawValue)])
    }
}

/// Change-log and transaction SQL shared by local and remote writes, prepared once per connection.
enum FieldSQL {
    static let insertTransaction = """
        INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (origin, seq) DO UPDATE SET state = excluded.state, rest = excluded.rest,
            reports = excluded.reports, delta_count = excluded.delta_count,
            document_count = excluded.document_count, collections = excluded.collections
        WHERE txn.state IN (0, 2)
        """
}

package import ShoalCRDT
package import ShoalStorage
import Foundation
import GRDB

/// Change-log compaction: a transaction every one of whose registers has since been
/// overwritten leaves the log.
///
/// The log is what sync streams from, one whole transaction at a time. A row's
/// entry for a document is *superseded* when each register it wrote now holds
/// another transaction's write (`field`'s writer is not the row's transaction), or
/// its document's tombstone, when that is at least as new
/// (another transaction's DELETE hides it for ever; the DELETE stays, and on a
/// replica hides it too, or finds nothing to hide); a row is, when each of its
/// entries is. A transaction goes only when
/// every row of it is superseded and all its rows are at or below the compaction
/// point; it goes whole, so every transaction the log still holds is complete and a
/// receiver can still take it atomically. The registers it wrote are carried by the
/// later transactions that overwrote them, which stay in the log for as long as they
/// hold a current value, so a peer that streams the compacted log from any point
/// ends with the same registers as one that streamed it all.
///
/// What a peer behind the compaction point does not see is the order: streaming from
/// below it, it may see a later transaction without an earlier one it overwrote (a
/// state the origin never had) until it passes the point. The node therefore
/// compacts only through the lowest position its known peers acknowledged (a peer
/// unheard for longer than the horizon no longer counts), and a peer that resumes
/// below the point is told so in the log (`PeerSession`) as a resync.
///
/// Bounds: rows that still hold a current value are never removed, so the log holds
/// at most (the largest transaction's size) × (the live registers) entries, plus what
/// is above the compaction point. Registers of evicted documents are kept (their
/// entries are not judged superseded). The `txn` table keeps one small row per
/// transaction, so a resend of a compacted transaction is still known as applied.
/// The log's last transaction is never removed, so its sequences are never reused.
extension DocumentStore {
    /// Rows scanned per write: a compaction holds the write gate a chunk at a time.
    static let compactionChunk: UInt64 = 20_000

    /// Whether the document entry `d` of the change-log row `c` (an element of
    /// `shoal_log_documents(c.entries)`: `[collection, doc_id, [[name, timestamp], ...]]`)
    /// is superseded: for each of its deltas, the register it wrote holds another
    /// transaction's write, or its document's tombstone, written by another
    /// transaction, is at least as new.
    static let documentSuperseded = """
        NOT EXISTS (
            SELECT 1 FROM json_each(d.value -> 2) k WHERE NOT EXISTS (
                SELECT 1 FROM field f WHERE f.collection = d.value ->> 0 AND f.doc_id = d.value ->> 1
                AND (f.name = k.value ->> 0 OR (f.name = '_deleted' AND f.ts >= k.value ->> 1))
                AND NOT (f.txn_seq = c.txn_seq AND COALESCE(f.txn_site, f.site) = c.txn_site)))
        """

    /// Whether the change-log row `c` is superseded: every document entry of it is.
    static let rowSuperseded = """
        NOT EXISTS (SELECT 1 FROM json_each(shoal_log_documents(c.entries)) d WHERE NOT \(documentSuperseded))
        """

    /// Transactions that wrote a row in `(lo, hi]`, lie wholly at or below `through`,
    /// and hold no current value.
    static let supersededTransactions = """
        SELECT c.txn_site AS txn_site, c.txn_seq AS txn_seq, COUNT(*) AS row_count FROM change_log c
        WHERE (c.txn_site, c.txn_seq) IN (SELECT txn_site, txn_seq FROM change_log WHERE seq > ? AND seq <= ?)
        GROUP BY c.txn_site, c.txn_seq
        HAVING MAX(c.seq) <= ? AND MIN(\(rowSuperseded)) = 1
        """

    /// Removes from the change log every transaction that holds no current value and
    /// lies wholly at or below `through`; `progress` hears after each chunk how far
    /// the scan got (sequence) and the report so far. Returns the report. `after`
    /// limits the scan to transactions with a row above it (0: the whole log).
    package func compactChangeLog(
        after start: UInt64 = 0, through: UInt64, progress: @Sendable (UInt64, CompactionReport) async -> Void = { _, _ in }
    ) async throws(ShoalError) -> CompactionReport {
        let (rows, last) = try await read { db in
            (
                try ChangeLogRecord.count(db),
                try ChangeLogRecord.lastSequence(db)
            )
        }
        let point = min(through, last)
        var report = CompactionReport(through: point, rowsBefore: rows)
        var low = min(start, point)
        while low < point {
            let high = min(low + Self.compactionChunk, point)
            // The log's last transaction stays whatever it holds: SQLite gives a new row
            // the largest sequence + 1, so removing the last rows would hand their
            // sequences out again, under peers' cursors that already passed them.
            let chunk = [Int64(bitPattern: low), Int64(bitPattern: high), Int64(bitPattern: min(point, last - 1))]
            let (removedRows, removedTransactions) = try await write { db -> (UInt64, UInt64) in
                let found = try SupersededTransaction.fetchAll(
                    db, sql: Self.supersededTransactions, arguments: StatementArguments(chunk))
                let delete = try db.cachedStatement(sql: "DELETE FROM change_log WHERE txn_site = ? AND txn_seq = ?")
                var removed: UInt64 = 0
                for transaction in found {
                    try Self.recordSupersession(db, site: transaction.site, sequence: transaction.sequence)
                    try delete.execute(arguments: [transaction.site, transaction.sequence])
                    removed += transaction.rows
                }
                try Self.setMeta(db, "compacted_through", Int64(bitPattern: max(point, try Self.unsignedMeta(db, "compacted_through"))))
                try Self.setMeta(db, "compacted_at", Int64(Date().timeIntervalSince1970 * 1000))
                return (removed, UInt64(found.count))
            }
            report.rowsRemoved += removedRows
            report.transactionsRemoved += removedTransactions
            low = high
            await progress(high, report)
        }
        if point == 0 { await progress(0, report) }
        return report
    }

    /// For each document entry of a transaction's rows, the transactions now holding
    /// the registers its deltas wrote (or the tombstone that hides them): what
    /// superseded it (`documentSuperseded`), by collection.
    static let supersedingTransactions = """
        SELECT DISTINCT d.value ->> 0 AS collection, COALESCE(f.txn_site, f.site) AS txn_site, f.txn_seq AS txn_seq
        FROM change_log c, json_each(shoal_log_documents(c.entries)) d, json_each(d.value -> 2) k, field f
        WHERE c.txn_site = ? AND c.txn_seq = ?
        AND f.collection = d.value ->> 0 AND f.doc_id = d.value ->> 1
        AND (f.name = k.value ->> 0 OR (f.name = '_deleted' AND f.ts >= k.value ->> 1))
        AND f.txn_seq IS NOT NULL AND NOT (f.txn_seq = c.txn_seq AND COALESCE(f.txn_site, f.site) = c.txn_site)
        """

    /// Before a transaction's rows leave the log: records in its `supersession`, per collection,
    /// the transactions that superseded them (`SUPERSEDED`), so that a peer that asks
    /// about it later (holding it in part: PROTOCOL.md 8.8, 8.9) learns what to apply
    /// to complete it, instead of nothing to go on.
    static func recordSupersession(_ db: Database, site: Int64, sequence: Int64) throws {
        var by: [String: Set<TransactionID>] = [:]
        for writer in try SupersedingWrite.fetchAll(db.cachedStatement(sql: supersedingTransactions), arguments: [site, sequence]) {
            by[writer.collection, default: []].insert(writer.transaction)
        }
        guard !by.isEmpty else { return }
        let recorded =
            try String.fetchOne(db, sql: "SELECT supersession FROM txn WHERE origin = ? AND seq = ?", arguments: [site, sequence]) ?? ""
        try db.execute(
            sql: "UPDATE txn SET supersession = ? WHERE origin = ? AND seq = ?",
            arguments: [LogCompaction.recorded(recorded, adding: by), site, sequence])
    }

    /// Registers a DELETE hides: every one but the tombstone written at or before its
    /// document's tombstone (deleted now, or written again since). Nothing shows them
    /// again: a register written later has a later timestamp, one arriving late from
    /// a peer is hidden as well, and a DELETE's tombstone goes above every register
    /// its replica holds. They are kept for nothing.
    static let hiddenRegisters = """
        DELETE FROM field WHERE name != '_deleted'
        AND (collection, doc_id) IN (SELECT collection, doc_id FROM field WHERE name = '_deleted')
        AND ts <= (SELECT t.ts FROM field t WHERE t.collection = field.collection AND t.doc_id = field.doc_id AND t.name = '_deleted')
        """

    /// Removes the registers that the tombstones of deleted documents hide (see
    /// `hiddenRegisters`); returns how many. Runs as one write.
    package func purgeHiddenRegisters() async throws(ShoalError) -> Int {
        try await write { db in
            try db.execute(sql: Self.hiddenRegisters)
            return db.changesCount
        }
    }

    /// Runs SQLite's `VACUUM`, giving the file's free pages back to the file system.
    package func vacuum() async throws(ShoalError) {
        try await write(inTransaction: false) { db in
            try db.execute(sql: "VACUUM")
            // The rewritten pages sit in the write-ahead log until a checkpoint: move them
            // into the file and truncate the log, so the space shows as given back; after
            // a checkpoint of `runCheckpoints` that may be copying them already.
            self.checkpointing.lock()
            defer { self.checkpointing.unlock() }
            _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }

    package func storageStatus() async throws(ShoalError) -> StorageStatus {
        var status = try await read { db in
            StorageStatus(
                changeLogRows: try ChangeLogRecord.count(db),
                lastSequence: try ChangeLogRecord.lastSequence(db),
                compactedThrough: try Self.unsignedMeta(db, "compacted_through"),
                compactedAt: try Self.meta(db, "compacted_at").map { Date(timeIntervalSince1970: Double($0) / 1000) },
                documentsForgotten: try Self.unsignedMeta(db, "documents_forgotten"),
                forgottenThroughMillis: try Self.unsignedMeta(db, "forgotten_through"),
                freshness: try Self.freshness(db).entries,
                freshSinceMillis: try Self.unsignedMeta(db, "fresh_since"))
        }
        status.location = pool.path
        return status
    }

    // MARK: Forgetting deleted documents

    /// The largest timestamp whose wall clock is before `millis`.
    static func lastTimestamp(beforeMillis millis: UInt64) -> Int64 {
        millis == 0 ? 0 : Int64(bitPattern: (millis - 1) << 16 | 0xFFFF)
    }

    /// Documents deleted before a time and not written since: the tombstone is at or
    /// below the argument (a timestamp) and the newest register of the document.
    /// `millis` is when the deletion happened as far as peers' freshness goes: the
    /// later of the tombstone's time and when this node logged its DELETE.
    static let expiredDocuments = """
        INSERT INTO temp.forget_document (collection, doc_id, millis)
        SELECT t.collection, t.doc_id, MAX(t.ts >> 16, COALESCE(
            (SELECT x.first_seen FROM txn x WHERE x.origin = COALESCE(t.txn_site, t.site) AND x.seq = t.txn_seq), 0))
        FROM field t
        WHERE t.name = '_deleted' AND t.ts <= ?
        AND NOT EXISTS (SELECT 1 FROM field n WHERE n.collection = t.collection AND n.doc_id = t.doc_id AND n.ts > t.ts)
        """

    /// Every document entry of every logged transaction that wrote one of the
    /// candidates, with whether it is superseded (NULL collection and key: an entry
    /// that does not decode).
    static let rowsOfCandidateTransactions = """
        SELECT c.txn_site AS txn_site, c.txn_seq AS txn_seq, c.seq AS seq, d.value ->> 0 AS collection,
            d.value ->> 1 AS doc_id, \(documentSuperseded) AS superseded
        FROM change_log c, json_each(shoal_log_documents(c.entries)) d
        WHERE (c.txn_site, c.txn_seq) IN (
            SELECT l.txn_site, l.txn_seq FROM change_log l, json_each(shoal_log_documents(l.entries)) e
            WHERE (e.value ->> 0, e.value ->> 1) IN (SELECT collection, doc_id FROM temp.forget_document))
        """

    /// Forgets the documents deleted before `deletedBefore` (Unix ms) and not written
    /// since: their tombstone, every register, their body and every transaction of
    /// the log that wrote them go, and the store remembers only the newest deletion it
    /// forgot (`forgotten_through`), which a peer's freshness must reach (DATA_MODEL.md
    /// §18).
    ///
    /// The log must not keep a row of a forgotten document (a replica streaming it
    /// would get the document back without its DELETE), and a transaction leaves it
    /// only whole. So a document is forgotten only when every logged transaction that
    /// wrote it lies at or below `through` (the compaction point: every counted peer
    /// has it), is not the log's last, and holds nothing else current: each of its other entries is superseded,
    /// or writes a document forgotten with it. A document created in one transaction
    /// with others that live on stays (tombstone and all) until they are overwritten
    /// or deleted too. Runs as one write.
    package func forgetDeletedDocuments(deletedBefore: UInt64, through point: UInt64) async throws(ShoalError) -> ForgetReport {
        let expiry = Self.lastTimestamp(beforeMillis: deletedBefore)
        let forgotten = try await write { db -> UInt64 in
            try db.execute(
                sql: """
                    CREATE TEMP TABLE IF NOT EXISTS forget_document (
                        collection TEXT NOT NULL, doc_id TEXT NOT NULL, millis INTEGER NOT NULL, PRIMARY KEY (collection, doc_id));
                    DELETE FROM temp.forget_document;
                    """)
            defer { try? db.execute(sql: "DELETE FROM temp.forget_document") }
            try db.execute(sql: Self.expiredDocuments, arguments: [expiry])
            guard db.changesCount > 0 else { return 0 }
            var candidates: [DocumentRef: Int64] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT collection, doc_id, millis FROM temp.forget_document") {
                let row = StoredRow(row, of: "temp.forget_document")
                candidates[DocumentRef(collection: try row.value(Column("collection")), id: try row.value(Column("doc_id")))] =
                    try row.value(Column("millis"))
            }
            struct Logged {
                var documents: Set<DocumentRef> = []
                var highest: Int64 = 0
                /// Documents of entries that hold something current.
                var current: Set<DocumentRef> = []
            }
            var transactions: [TransactionKey: Logged] = [:]
            let entries = try CandidateEntry.fetchCursor(db, sql: Self.rowsOfCandidateTransactions)
            while let entry = try entries.next() {
                let key = entry.transaction
                // An entry that does not decode names no candidate, and holds its transaction.
                let document = DocumentRef(
                    collection: entry.collection ?? "", id: entry.documentID ?? "unreadable entry of row \(entry.sequence)")
                transactions[key, default: Logged()].documents.insert(document)
                transactions[key]!.highest = max(transactions[key]!.highest, entry.sequence)
                if !entry.superseded { transactions[key]!.current.insert(document) }
            }
            // A transaction may leave when it lies below the point and each of its entries
            // is superseded or writes a document still to be forgotten; a document is
            // forgotten when every transaction that wrote it may leave. Dropping one
            // candidate can keep another's transaction: repeat until nothing changes.
            // Not the log's last transaction: its sequences would be handed out again.
            let last = try ChangeLogRecord.lastSequence(db)
            let point = min(point, last &- 1)
            var forget = Set(candidates.keys)
            var changed = true
            while changed {
                changed = false
                for logged in transactions.values where !logged.documents.isDisjoint(with: forget) {
                    let leaves = UInt64(bitPattern: logged.highest) <= point && logged.current.isSubset(of: forget)
                    if !leaves {
                        let kept = logged.documents.intersection(forget)
                        forget.subtract(kept)
                        changed = changed || !kept.isEmpty
                    }
                }
            }
            guard !forget.isEmpty else { return 0 }
            let removeTransaction = try db.cachedStatement(sql: "DELETE FROM change_log WHERE txn_site = ? AND txn_seq = ?")
            for (key, logged) in transactions where !logged.documents.isDisjoint(with: forget) {
                try removeTransaction.execute(arguments: [key.site, key.sequence])
            }
            let fields = try db.cachedStatement(sql: "DELETE FROM field WHERE collection = ? AND doc_id = ?")
            let bodies = try db.cachedStatement(sql: "DELETE FROM document WHERE collection = ? AND doc_id = ?")
            var newest: Int64 = 0
            for document in forget {
                try fields.execute(arguments: [document.collection, document.id])
                try bodies.execute(arguments: [document.collection, document.id])
                newest = max(newest, candidates[document] ?? 0)
            }
            try Self.setMeta(db, "forgotten_through", max(newest, try Self.meta(db, "forgotten_through") ?? 0))
            try Self.setMeta(db, "documents_forgotten", (try Self.meta(db, "documents_forgotten") ?? 0) + Int64(forget.count))
            return UInt64(forget.count)
        }
        let through = try await read { db in try Self.unsignedMeta(db, "forgotten_through") }
        return ForgetReport(documents: forgotten, forgottenThroughMillis: through)
    }

    /// Removal registers (a field's UNSET: `''`; a map entry's: `~` and a site) older
    /// than the argument, a timestamp.
    static let expiredRemovals = "(value = '' OR substr(value, 1, 1) = '~') AND ts <= ?"

    /// Forgets removals written before `removedBefore` (Unix ms): the registers UNSET and
    /// map-entry removals leave, which no body shows and which only stop an older write
    /// of the same field or entry from coming back. After the tombstone horizon only a
    /// stale peer could send one, and the handshake refuses it: the store raises
    /// `forgotten_through` to the newest removal forgotten. The log keeps the rows
    /// that wrote them; a replica that streams them holds a removal again, which
    /// changes no body. Returns how many registers went. Runs as one write.
    package func forgetRemovals(removedBefore: UInt64) async throws(ShoalError) -> Int {
        let expiry = Self.lastTimestamp(beforeMillis: removedBefore)
        return try await write { db in
            guard let newest = try Int64.fetchOne(db, sql: "SELECT MAX(ts) FROM field WHERE \(Self.expiredRemovals)", arguments: [expiry])
            else { return 0 }
            try db.execute(sql: "DELETE FROM field WHERE \(Self.expiredRemovals)", arguments: [expiry])
            let removed = db.changesCount
            let millis = Int64(UInt64(bitPattern: newest) >> 16)
            try Self.setMeta(db, "forgotten_through", max(millis, try Self.meta(db, "forgotten_through") ?? 0))
            return removed
        }
    }

    /// A logged transaction's key in the log's columns.
    struct TransactionKey: Hashable {
        var site: Int64
        var sequence: Int64
    }

    /// A row of `supersededTransactions`: a transaction compaction may remove, and how
    /// many rows of the log it has.
    struct SupersededTransaction: FetchableRecord {
        var site: Int64
        var sequence: Int64
        var rows: UInt64

        enum Columns {
            static let site = Column("txn_site")
            static let sequence = Column("txn_seq")
            static let rows = Column("row_count")
        }

        init(row: Row) throws {
            let row = StoredRow(row, of: "change_log")
            site = try row.value(Columns.site)
            sequence = try row.value(Columns.sequence)
            rows = try row.unsigned(Columns.rows)
        }
    }

    /// A row of `supersedingTransactions`: a transaction whose write superseded a delta
    /// of the one compacted, in `collection`.
    struct SupersedingWrite: FetchableRecord {
        var collection: String
        var transaction: TransactionID

        enum Columns {
            static let collection = Column("collection")
            static let site = Column("txn_site")
            static let sequence = Column("txn_seq")
        }

        init(row: Row) throws {
            let row = StoredRow(row, of: "field")
            collection = try row.value(Columns.collection)
            transaction = TransactionID(origin: SiteID(try row.bitPattern(Columns.site)), sequence: try row.unsigned(Columns.sequence))
        }
    }

    /// A row of `rowsOfCandidateTransactions`: a document entry of a change-log row of a
    /// transaction that wrote a document to forget.
    struct CandidateEntry: FetchableRecord {
        var transaction: TransactionKey
        var sequence: Int64
        /// Nil for an entry that does not decode, as is `documentID`.
        var collection: String?
        var documentID: String?
        var superseded: Bool

        enum Columns {
            static let site = Column("txn_site")
            static let transactionSequence = Column("txn_seq")
            static let sequence = Column("seq")
            static let collection = Column("collection")
            static let documentID = Column("doc_id")
            static let superseded = Column("superseded")
        }

        init(row: Row) throws {
            let row = StoredRow(row, of: "change_log")
            transaction = TransactionKey(site: try row.value(Columns.site), sequence: try row.value(Columns.transactionSequence))
            sequence = try row.value(Columns.sequence)
            collection = try row.value(Columns.collection)
            documentID = try row.value(Columns.documentID)
            superseded = try row.value(Columns.superseded)
        }
    }

    /// What the store keeps of a document, live, deleted or forgotten: its registers
    /// (the tombstone among them), whether it has a body row, and its change-log rows.
    /// The log is scanned whole: for checks, not for a hot path.
    package func retained(_ document: DocumentRef) async throws(ShoalError) -> (registers: Int, body: Bool, logRows: Int) {
        try await read { db in
            let arguments: StatementArguments = [document.collection, document.id]
            return (
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM field WHERE collection = ? AND doc_id = ?", arguments: arguments) ?? 0,
                try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM document WHERE collection = ? AND doc_id = ?)", arguments: arguments) ?? false,
                try Int.fetchOne(
                    db,
                    sql: """
                        SELECT COUNT(*) FROM change_log c, json_each(shoal_log_documents(c.entries)) d
                        WHERE d.value ->> 0 = ? AND d.value ->> 1 = ?
                        """,
                    arguments: arguments) ?? 0
            )
        }
    }

    /// This node's freshness entries and the newest deletion it forgot (ShoalSync's `Freshness`).
    package func savedFreshness() throws(ShoalError) -> (entries: [SiteID: UInt64], forgottenThrough: UInt64) {
        do {
            return try pool.read { db in try Self.freshness(db) }
        } catch {
            throw ShoalError.wrapping(error, "database read")
        }
    }

    static func freshness(_ db: Database) throws -> (entries: [SiteID: UInt64], forgottenThrough: UInt64) {
        var entries: [SiteID: UInt64] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT site, through FROM freshness") {
            let row = StoredRow(row, of: "freshness")
            entries[SiteID(try row.bitPattern(Column("site")))] = try row.unsigned(Column("through"))
        }
        return (entries, try unsignedMeta(db, "forgotten_through"))
    }

    /// Saves this node's freshness entries, each raised (never lowered) to the one given.
    package func saveFreshness(_ entries: [SiteID: UInt64]) async throws(ShoalError) {
        guard !entries.isEmpty else { return }
        try await write { db in
            let upsert = try db.cachedStatement(
                sql: "INSERT INTO freshness (site, through) VALUES (?, ?) ON CONFLICT (site) DO UPDATE SET through = MAX(through, excluded.through)")
            for (site, through) in entries {
                try upsert.execute(arguments: [Int64(bitPattern: site.rawValue), Int64(clamping: through)])
            }
        }
    }

    /// When the store started keeping its freshness (Unix ms; migration `v11-freshness`).
    package func freshSince() async throws(ShoalError) -> UInt64 {
        try await read { db in try Self.unsignedMeta(db, "fresh_since") }
    }

    /// Whether the store holds anything another node wrote: a transaction of another
    /// origin, applied, waiting or evicted since (the `txn` table keeps a row for each).
    /// A store that holds only its own writes cannot bring back a document another node
    /// deleted: the others had it from this node, and know its transactions as applied.
    package func holdsOthersWrites() async throws(ShoalError) -> Bool {
        let site = Int64(bitPattern: siteID.rawValue)
        return try await read { db in
            try Bool.fetchOne(
                db, sql: "SELECT EXISTS (SELECT 1 FROM txn WHERE origin < ?) OR EXISTS (SELECT 1 FROM txn WHERE origin > ?)",
                arguments: [site, site]) ?? true
        }
    }


    // MARK: Peers' positions

    /// Saves what peers acknowledged; `forget`: peers that no longer hold the log
    /// (they ask for nothing, or were unheard past the horizon).
    package func savePeerAcknowledgements(_ acknowledgements: [PeerAcknowledgement], forget: [SiteID] = []) async throws(ShoalError) {
        guard !acknowledgements.isEmpty || !forget.isEmpty else { return }
        try await write { db in
            for a in acknowledgements {
                try db.execute(
                    sql: """
                        INSERT INTO peer_ack (peer, through, heard_at) VALUES (?, ?, ?)
                        ON CONFLICT (peer) DO UPDATE SET through = excluded.through, heard_at = excluded.heard_at
                        """,
                    arguments: [Int64(bitPattern: a.peer.rawValue), Int64(bitPattern: a.through), Int64(a.heardAt.timeIntervalSince1970 * 1000)])
            }
            for peer in forget {
                try db.execute(sql: "DELETE FROM peer_ack WHERE peer = ?", arguments: [Int64(bitPattern: peer.rawValue)])
            }
        }
    }

    /// Every peer position saved, lowest first.
    package func peerAcknowledgements() async throws(ShoalError) -> [PeerAcknowledgement] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT peer, through, heard_at FROM peer_ack ORDER BY through, peer").map { row in
                let row = StoredRow(row, of: "peer_ack")
                return PeerAcknowledgement(
                    peer: SiteID(try row.bitPattern(Column("peer"))), through: try row.unsigned(Column("through")),
                    heardAt: Date(timeIntervalSince1970: Double(try row.value(Column("heard_at"), as: Int64.self)) / 1000))
            }
        }
    }

    /// A value of `shoal_meta`, through the connection's cached statement: every
    /// inbound commit reads the cursor epoch when it records a cursor, and compiling
    /// the query each time was most of what recording one cost.
    static func meta(_ db: Database, _ key: String) throws -> Int64? {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT value FROM shoal_meta WHERE key = ?"), arguments: [key])
    }

    /// A value of `shoal_meta` that counts or marks a position or a time: 0 when absent,
    /// and a negative one a damaged row.
    static func unsignedMeta(_ db: Database, _ key: String) throws -> UInt64 {
        try StoredInteger.unsigned(meta(db, key) ?? 0, table: "shoal_meta", column: "value of \(key)")
    }

    static func setMeta(_ db: Database, _ key: String, _ value: Int64) throws {
        try db.execute(
            sql: "INSERT INTO shoal_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            arguments: [key, value])
    }
}

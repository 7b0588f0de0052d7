import ShoalCRDT
import ShoalStorage
import GRDB
import Foundation

/// The schema, as the named migrations that made it, oldest first: a store opens by
/// running those it has not run (docs/ARCHITECTURE.md lists the tables; a schema change
/// is a new migration, never an edit of one that shipped).
extension DocumentStore {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE shoal_meta (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
                    CREATE TABLE field (
                        collection TEXT NOT NULL, doc_id TEXT NOT NULL, name TEXT NOT NULL,
                        value TEXT NOT NULL, ts INTEGER NOT NULL, site INTEGER NOT NULL,
                        txn_seq INTEGER NOT NULL, txn_index INTEGER NOT NULL, txn_count INTEGER NOT NULL,
                        PRIMARY KEY (collection, doc_id, name)) WITHOUT ROWID;
                    CREATE TABLE document (
                        collection TEXT NOT NULL, doc_id TEXT NOT NULL, body TEXT NOT NULL,
                        PRIMARY KEY (collection, doc_id)) WITHOUT ROWID;
                    CREATE TABLE change_log (
                        seq INTEGER PRIMARY KEY, collection TEXT NOT NULL, doc_id TEXT NOT NULL,
                        name TEXT NOT NULL, value TEXT NOT NULL, ts INTEGER NOT NULL,
                        txn_site INTEGER NOT NULL, txn_seq INTEGER NOT NULL,
                        txn_index INTEGER NOT NULL, txn_count INTEGER NOT NULL);
                    CREATE TABLE peer_cursor (
                        peer INTEGER NOT NULL, subscription_key TEXT NOT NULL, through INTEGER NOT NULL,
                        PRIMARY KEY (peer, subscription_key)) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v2-tombstones") { db in
            // A deleted document keeps its last body (deleted = 1) so sync can route its tombstone.
            try db.execute(sql: "ALTER TABLE document ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v3-subscriptions") { db in
            // Persistent sync subscriptions added at run time (`shoal subscribe`).
            try db.execute(
                sql: "CREATE TABLE subscription (id TEXT PRIMARY KEY NOT NULL, query TEXT NOT NULL, arguments TEXT NOT NULL)")
        }
        migrator.registerMigration("v4-observed-removals") { db in
            // A map entry's removal carries the version it removed, whose site is not the
            // remover's: the writing transaction's origin gets its own column (NULL: same as site).
            try db.execute(sql: "ALTER TABLE field ADD COLUMN txn_site INTEGER")
        }
        migrator.registerMigration("v5-attachments") { db in
            // Attachment bytes by SHA-256; documents hold tokens that name them.
            try db.execute(
                sql: "CREATE TABLE attachment (hash TEXT PRIMARY KEY NOT NULL, length INTEGER NOT NULL, data BLOB NOT NULL) WITHOUT ROWID")
        }
        migrator.registerMigration("v6-transactions") { db in
            // Every piece of a transaction is logged once (also one that lost LWW, so a
            // relay can pass the whole transaction on); each log row knows how many
            // deltas its transaction wrote to its document; table txn keeps each
            // transaction's manifest, state and what peers said of it; txn_piece and
            // txn_context are the durable buffer of transactions waiting for coverage.
            try db.execute(
                sql: """
                    ALTER TABLE change_log ADD COLUMN doc_deltas INTEGER NOT NULL DEFAULT 0;
                    DELETE FROM change_log WHERE seq NOT IN (
                        SELECT MIN(seq) FROM change_log GROUP BY txn_site, txn_seq, txn_index);
                    CREATE UNIQUE INDEX change_log_by_transaction ON change_log (txn_site, txn_seq, txn_index);
                    UPDATE change_log SET doc_deltas = (
                        SELECT COUNT(*) FROM change_log c WHERE c.txn_site = change_log.txn_site
                        AND c.txn_seq = change_log.txn_seq AND c.collection = change_log.collection
                        AND c.doc_id = change_log.doc_id);
                    CREATE TABLE txn (
                        origin INTEGER NOT NULL, seq INTEGER NOT NULL,
                        delta_count INTEGER NOT NULL, document_count INTEGER NOT NULL,
                        collections TEXT NOT NULL, state INTEGER NOT NULL,
                        rest TEXT NOT NULL DEFAULT '', reports TEXT NOT NULL DEFAULT '',
                        first_seen INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (origin, seq)) WITHOUT ROWID;
                    CREATE INDEX txn_by_state ON txn (state) WHERE state != 1;
                    CREATE TABLE txn_piece (
                        origin INTEGER NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL,
                        collection TEXT NOT NULL, doc_id TEXT NOT NULL, doc_deltas INTEGER NOT NULL,
                        name TEXT NOT NULL, value TEXT NOT NULL, ts INTEGER NOT NULL,
                        PRIMARY KEY (origin, seq, idx)) WITHOUT ROWID;
                    CREATE TABLE txn_context (
                        origin INTEGER NOT NULL, seq INTEGER NOT NULL,
                        collection TEXT NOT NULL, doc_id TEXT NOT NULL, name TEXT NOT NULL,
                        value TEXT NOT NULL, ts INTEGER NOT NULL, src_origin INTEGER NOT NULL, src_seq INTEGER NOT NULL,
                        PRIMARY KEY (origin, seq, collection, doc_id, name)) WITHOUT ROWID;
                    """)
            // Transactions logged before: their manifest is what the log holds of them.
            struct LoggedDocument {
                var site: Int64, sequence: Int64, deltas: Int64, collection: String, document: String, rows: Int
            }
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT txn_site, txn_seq, MAX(txn_count) AS deltas, collection, doc_id, COUNT(*) AS row_count FROM change_log
                    GROUP BY txn_site, txn_seq, collection, doc_id ORDER BY txn_site, txn_seq
                    """
            ).map { row in
                let row = StoredRow(row, of: "change_log")
                return LoggedDocument(
                    site: try row.value(Column("txn_site")), sequence: try row.value(Column("txn_seq")),
                    deltas: try row.value(Column("deltas")), collection: try row.value(Column("collection")),
                    document: try row.value(Column("doc_id")), rows: Int(try row.unsigned(Column("row_count"), as: UInt32.self)))
            }
            var index = 0
            while index < rows.count {
                let site = rows[index].site, seq = rows[index].sequence
                var end = index
                var deltas: Int64 = 0
                while end < rows.count, rows[end].site == site, rows[end].sequence == seq {
                    deltas = max(deltas, rows[end].deltas)
                    end += 1
                }
                let part = rows[index..<end]
                let manifest = CollectionCount.manifest(
                    of: part.flatMap { row in Array(repeating: (collection: row.collection, document: row.document), count: row.rows) })
                try db.execute(
                    sql: "INSERT INTO txn (origin, seq, delta_count, document_count, collections, state) VALUES (?, ?, ?, ?, ?, 1)",
                    arguments: [site, seq, deltas, part.count, CollectionCount.encode(manifest)])
                index = end
            }
        }
        migrator.registerMigration("v7-evicted-counters") { db in
            // EVICT keeps this site's own counter contributions of the documents it
            // forgets, with their bases and the tombstone: an increment made before
            // peers send the document back carries on from them.
            try db.execute(
                sql: """
                    CREATE TABLE evicted_counter (
                        collection TEXT NOT NULL, doc_id TEXT NOT NULL, name TEXT NOT NULL,
                        value TEXT NOT NULL, ts INTEGER NOT NULL, site INTEGER NOT NULL,
                        txn_site INTEGER NOT NULL, txn_seq INTEGER NOT NULL,
                        PRIMARY KEY (collection, doc_id, name)) WITHOUT ROWID
                    """)
        }
        migrator.registerMigration("v8-attachment-chunks") { db in
            // Attachments of any size: the bytes in chunks of a blob, streamed in and out.
            // A put or fetch fills a staging entry (a fetch's keeps the hash it expects,
            // so an interrupted one resumes); the attachment row exists only once every
            // byte is there and its SHA-256 checked. `unreferenced_since` is when the
            // collector first saw no live document name it (NULL: named, or not looked at).
            try db.execute(
                sql: """
                    CREATE TABLE attachment_staging (
                        blob INTEGER PRIMARY KEY AUTOINCREMENT, hash TEXT UNIQUE,
                        received INTEGER NOT NULL, updated_at INTEGER NOT NULL);
                    CREATE TABLE attachment_chunk (
                        blob INTEGER NOT NULL, start INTEGER NOT NULL, data BLOB NOT NULL,
                        PRIMARY KEY (blob, start));
                    CREATE TABLE attachment_v8 (
                        hash TEXT PRIMARY KEY NOT NULL, length INTEGER NOT NULL, blob INTEGER NOT NULL,
                        stored_at INTEGER NOT NULL, unreferenced_since INTEGER) WITHOUT ROWID;
                    INSERT INTO attachment_staging (hash, received, updated_at) SELECT hash, length, 0 FROM attachment;
                    INSERT INTO attachment_chunk (blob, start, data)
                        SELECT s.blob, 0, a.data FROM attachment a JOIN attachment_staging s ON s.hash = a.hash
                        WHERE a.length > 0;
                    INSERT INTO attachment_v8 (hash, length, blob, stored_at)
                        SELECT hash, received, blob, 0 FROM attachment_staging;
                    DELETE FROM attachment_staging;
                    DROP TABLE attachment;
                    ALTER TABLE attachment_v8 RENAME TO attachment;
                    """)
        }
        migrator.registerMigration("v9-compaction") { db in
            // Each known peer's acknowledged position in this node's log: compaction
            // runs no further than the lowest one heard within the horizon.
            try db.execute(
                sql: "CREATE TABLE peer_ack (peer INTEGER PRIMARY KEY NOT NULL, through INTEGER NOT NULL, heard_at INTEGER NOT NULL)")
        }
        migrator.registerMigration("v10-user-indexes") { db in
            // The indexes declared with CREATE INDEX: the name as written (unique
            // ignoring case, as SQLite's index names are), the collection, and the
            // paths as a JSON array of arrays of field names.
            try db.execute(
                sql: """
                    CREATE TABLE user_index (
                        name TEXT PRIMARY KEY NOT NULL COLLATE NOCASE, collection TEXT NOT NULL,
                        paths TEXT NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID
                    """)
        }
        migrator.registerMigration("v11-freshness") { db in
            // The node's freshness: for each node, the time on its clock through which
            // this store holds its log (PROTOCOL.md §8.10). `fresh_since` is when the
            // store started keeping it: the node forgets no deletion until it has kept
            // it for a whole tombstone horizon, so peers it met meanwhile carry an entry.
            try db.execute(
                sql: """
                    CREATE TABLE freshness (site INTEGER PRIMARY KEY NOT NULL, through INTEGER NOT NULL);
                    INSERT OR IGNORE INTO shoal_meta (key, value) VALUES ('fresh_since', ?);
                    """,
                arguments: [Int64(Date().timeIntervalSince1970 * 1000)])
        }
        migrator.registerMigration("v12-packed-log") { db in
            // One change-log row per document per transaction, its deltas packed
            // (`PackedDeltas`), where there was one row per delta: a commit writes and
            // a page reads a sixth of the rows for documents of six fields. A packed
            // row takes the largest sequence of the rows it replaces, so a peer whose
            // cursor is inside them gets them again (merges are idempotent) and no
            // sequence is handed out twice.
            try db.execute(
                sql: """
                    CREATE TABLE change_log_packed (
                        seq INTEGER PRIMARY KEY, collection TEXT NOT NULL, doc_id TEXT NOT NULL,
                        txn_site INTEGER NOT NULL, txn_seq INTEGER NOT NULL, txn_count INTEGER NOT NULL,
                        doc_deltas INTEGER NOT NULL, deltas BLOB NOT NULL)
                    """)
            let rows = try Row.fetchCursor(
                db,
                sql: """
                    SELECT seq, collection, doc_id, txn_site, txn_seq, txn_count, doc_deltas, txn_index, ts, name, value
                    FROM change_log ORDER BY txn_site, txn_seq, collection, doc_id, txn_index
                    """)
            let insert = try db.makeStatement(
                sql: """
                    INSERT INTO change_log_packed (seq, collection, doc_id, txn_site, txn_seq, txn_count, doc_deltas, deltas)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """)
            var group: (seq: Int64, collection: String, id: String, site: Int64, txn: Int64, count: Int64, documentDeltas: Int64)?
            var packed = PackedDeltas()
            func flush() throws {
                guard let g = group else { return }
                try insert.execute(arguments: [g.seq, g.collection, g.id, g.site, g.txn, g.count, g.documentDeltas, Data(packed.bytes)])
                packed.removeAll()
            }
            while let next = try rows.next() {
                let row = StoredRow(next, of: "change_log")
                let seq: Int64 = try row.value(Column("seq")), collection: String = try row.value(Column("collection"))
                let id: String = try row.value(Column("doc_id"))
                let site: Int64 = try row.value(Column("txn_site")), txn: Int64 = try row.value(Column("txn_seq"))
                if let g = group, g.site == site, g.txn == txn, DocumentRef(collection: g.collection, id: g.id).is(collection: collection, id: id) {
                    group!.seq = max(g.seq, seq)
                } else {
                    try flush()
                    group = (seq, collection, id, site, txn, try row.value(Column("txn_count")), try row.value(Column("doc_deltas")))
                }
                packed.append(
                    index: try row.unsigned(Column("txn_index")), timestamp: try row.bitPattern(Column("ts")),
                    name: try row.value(Column("name")), value: try row.value(Column("value")))
            }
            try flush()
            try db.execute(
                sql: """
                    DROP TABLE change_log;
                    ALTER TABLE change_log_packed RENAME TO change_log;
                    CREATE INDEX change_log_by_transaction ON change_log (txn_site, txn_seq);
                    """)
        }
        migrator.registerMigration("v13-log-entries") { db in
            // One change-log row per run of up to `LogAppender.documentsPerRow`
            // documents of a transaction (`LogEntries`), where there was one per
            // document: a commit of a hundred documents writes one row, not a hundred.
            // A row takes the largest sequence of the rows it replaces, as in
            // `v12-packed-log`.
            try db.execute(
                sql: """
                    CREATE TABLE change_log_entries (
                        seq INTEGER PRIMARY KEY, txn_site INTEGER NOT NULL, txn_seq INTEGER NOT NULL,
                        txn_count INTEGER NOT NULL, documents INTEGER NOT NULL, entries BLOB NOT NULL)
                    """)
            let rows = try Row.fetchCursor(
                db, sql: "SELECT seq, collection, doc_id, txn_site, txn_seq, txn_count, doc_deltas, deltas FROM change_log ORDER BY seq")
            let insert = try db.makeStatement(
                sql: "INSERT INTO change_log_entries (seq, txn_site, txn_seq, txn_count, documents, entries) VALUES (?, ?, ?, ?, ?, ?)")
            var group: (seq: Int64, site: Int64, txn: Int64, count: Int64)?
            var entries: [UInt8] = []
            var documents = 0
            func flush() throws {
                guard let g = group else { return }
                try insert.execute(arguments: [g.seq, g.site, g.txn, g.count, documents, Data(entries)])
                entries.removeAll(keepingCapacity: true)
                documents = 0
                group = nil
            }
            while let next = try rows.next() {
                let row = StoredRow(next, of: "change_log")
                let seq: Int64 = try row.value(Column("seq")), site: Int64 = try row.value(Column("txn_site"))
                let txn: Int64 = try row.value(Column("txn_seq"))
                if let g = group, g.site != site || g.txn != txn { try flush() }
                if group == nil { group = (seq, site, txn, try row.value(Column("txn_count"))) } else { group!.seq = seq }
                let deltas: Data = try row.value(Column("deltas"))
                LogEntries.append(
                    DocumentRef(collection: try row.value(Column("collection")), id: try row.value(Column("doc_id"))),
                    documentDeltas: Int(try row.unsigned(Column("doc_deltas"), as: UInt32.self)), deltas: [UInt8](deltas),
                    to: &entries)
                documents += 1
                if documents == LogAppender.documentsPerRow || entries.count >= LogAppender.bytesPerRow { try flush() }
            }
            try flush()
            try db.execute(
                sql: """
                    DROP TABLE change_log;
                    ALTER TABLE change_log_entries RENAME TO change_log;
                    CREATE INDEX change_log_by_transaction ON change_log (txn_site, txn_seq);
                    """)
        }
        migrator.registerMigration("v14-refusals") { db in
            // Why a received transaction was refused (state 3): a document this node
            // cannot hold (`DocumentLimits`). Kept for status; NULL for every other state.
            try db.execute(
                sql: """
                    ALTER TABLE txn ADD COLUMN refusal TEXT;
                    """)
        }
        migrator.registerMigration("v15-neighbour-interest") { db in
            // What each neighbour asked this node for (`DocumentStore+Interest.swift`),
            // as `[[query, arguments], ...]`: a relay's upstream sets survive a restart.
            try db.execute(
                sql: """
                    CREATE TABLE neighbour_interest (site INTEGER PRIMARY KEY NOT NULL, subscriptions TEXT NOT NULL);
                    """)
        }
        migrator.registerMigration("v16-subscription-sets") { db in
            // The entries of each subscription set a cursor is kept for (`peer_cursor`'s
            // key is a hash of them): a narrower set resumes from the cursor of a set
            // that holds all its entries (`DocumentStore.resumePoint(peer:subscriptions:)`).
            try db.execute(
                sql: """
                    CREATE TABLE subscription_set (key TEXT PRIMARY KEY NOT NULL, entries TEXT NOT NULL) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v17-interest-origins") { db in
            // Interest by the node that stated it (`InterestTable`): `site` is now that
            // origin, `generation` its clock when it stated the set (0: a neighbour that
            // states none, whose whole Subscribe is kept), `heard_from` the neighbours whose
            // latest Subscribe listed it, as a JSON array of site IDs in hex.
            try db.execute(
                sql: """
                    ALTER TABLE neighbour_interest ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE neighbour_interest ADD COLUMN heard_from TEXT NOT NULL DEFAULT '[]';
                    UPDATE neighbour_interest SET heard_from = json_array(printf('%016x', site));
                    """)
        }
        migrator.registerMigration("v18-peer-refusals") { db in
            // This node's own transactions each peer refused whole (its Ack said so): the
            // peer acknowledged the log past them, and EVICT must not count on it for what
            // they wrote (`LocalTransaction.evict`).
            try db.execute(
                sql: """
                    CREATE TABLE peer_refusal (txn_seq INTEGER NOT NULL, peer INTEGER NOT NULL, PRIMARY KEY (txn_seq, peer)) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v19-supersession") { db in
            // What compaction records of a transaction it takes out of the log, apart from
            // what an apply left out (`LogCompaction.recorded(_:adding:)`): an `UNKNOWN`
            // in `rest` now counts as leaving documents out (PROTOCOL.md 8.11), and one
            // compaction wrote must not. Those recorded before cannot be told apart: every
            // `UNKNOWN` of an applied transaction moves, so that they count as little as
            // they did. A partial one's rest is recorded again when it completes.
            try db.execute(
                sql: """
                    ALTER TABLE txn ADD COLUMN supersession TEXT NOT NULL DEFAULT '';
                    UPDATE txn SET
                        supersession = (
                            SELECT CASE WHEN count(*) = 0 THEN '' ELSE json_group_array(json(value)) END FROM json_each(txn.rest)
                            WHERE json_extract(value, '$.u') IS NOT NULL),
                        rest = (
                            SELECT CASE WHEN count(*) = 0 THEN '' ELSE json_group_array(json(value)) END FROM json_each(txn.rest)
                            WHERE json_extract(value, '$.u') IS NULL)
                    WHERE state = 1 AND rest LIKE '%"u":%' AND json_valid(rest);
                    """)
        }
        return migrator
    }
}

public import ShoalCRDT
import ShoalQuery
package import Logging
package import Metrics
import GRDB
import Foundation

/// A node's embedded database: documents in collections, every field a
/// last-writer-wins register, and the change log that sync streams from.
///
/// One `DatabasePool` in WAL mode: one writer at a time, readers concurrent with
/// it. Every invariant (a write, its change-log rows and the transaction counter;
/// a received batch and the cursor that acknowledges it) holds inside one SQLite
/// transaction. Every write takes the `WriteGate` first, in order of arrival: a
/// read-write `Transaction` holds it from `BEGIN IMMEDIATE` to `COMMIT` across
/// awaits, and `write(_:)` for one `write {}`.
///
/// Tables:
/// - `field`: the current value and version of each (collection, document, field),
///   with the transaction that wrote it (its origin is `site`).
/// - `document`: the materialized JSON body of each live document, for queries.
/// - `change_log`: every delta this store committed, local or received, in commit
///   order, under a local sequence number; sync reads it from a peer's cursor.
/// - `peer_cursor`: per peer and subscription set, the highest sequence of that
///   peer's change log durably applied here.
/// - `evicted_counter`: registers EVICT removed that this site's next increment of
///   the same counter needs (`DocumentRegisters.counters(of:)`).
public final class DocumentStore: Sendable {
    public let siteID: SiteID
    /// The name this store's counter contributions go under while it is open: a new
    /// random one at each opening, never the site ID, so that a store restored from a
    /// copy (which no opening can tell from the original) never writes a contribution
    /// from the copy's total over the one its peers hold (DATA_MODEL.md §7).
    package let counterSite = SiteID.random()
    package let clock: HybridLogicalClock
    let pool: DatabasePool
    /// Short reads on the calling thread (`read(inline:)`); nil if it could not be opened.
    let inlineReader: InlineReader?
    /// JSON paths with an expression index (created on first use, remembered across restarts).
    let indexedPaths = Locked<Set<String>>([])
    /// The indexes declared with `CREATE INDEX`, as last committed.
    let userIndexes = Locked<[UserIndex]>([])
    /// When the planner's statistics are due to be refreshed.
    let statistics = Locked(StatisticsSchedule())
    /// The statements of recently executed DQL texts: an app or a client that runs
    /// the same text with new arguments parses it once.
    let parsed = Locked(ParseCache())
    /// Held by a checkpoint of `runCheckpoints` while it copies, and by VACUUM's
    /// truncating checkpoint, which SQLite would otherwise refuse at once (it does not
    /// wait for another checkpointer).
    let checkpointing = NSLock()
    let feed = ChangeFeed<LogEnd>(bufferingPolicy: .bufferingNewest(1), replayLatest: true)
    /// Fires when EVICT restarted every peer cursor.
    let resets = ChangeFeed<UInt64>(bufferingPolicy: .bufferingNewest(1), replayLatest: false)
    /// Every commit that wrote something: for observers.
    let commits = ChangeFeed<Commit>(bufferingPolicy: .unbounded, replayLatest: false)
    /// The observers `registerObserver` started and that still run.
    let liveObservers = Locked(LiveObservers())
    let logger: Logger
    /// Whether EVICT ever removed documents here (then a logged document may lack a body).
    let evictions = Locked(false)
    /// What peers acknowledged of this node's log, for EVICT (noted by sync sessions).
    package let peerHoldings = PeerHoldings()
    /// Local read-write transactions committed since the store opened.
    let localCommits = Locked<UInt64>(0)
    /// Whether the last write of `execute`, or of a `Transaction`'s statements, took
    /// under `shortWrite`: then the next runs on the calling thread (`write(inline:)`).
    let quickExecutes = Locked(false)
    /// How long an observer's read may have taken for the next one to run on the
    /// calling thread (`read(inline:)`). A wrong guess costs once: a long one run there
    /// holds that thread for its length, and the next goes back to the pool.
    static let shortAccess: Duration = .milliseconds(1)
    /// The same for a write. Longer than a read's: the hop to the writer's queue and
    /// back is two thread wake-ups on the path of every commit, each of which waits for
    /// a core while the node is busy (0.5–1 ms on two cores under load), and the queue
    /// is idle anyway, since the write gate keeps every other writer out.
    static let shortWrite: Duration = .milliseconds(5)

    var evictedSomething: Bool { evictions.withLock { $0 } }

    /// Whether this store has ever evicted documents, and so may lack some of its
    /// own transactions until its peers send them back.
    package var mayLackOwnTransactions: Bool { evictedSomething }

    /// Times each local commit that wrote something (its change-log rows and COMMIT), if given.
    let commitDuration: Metrics.Timer?

    /// Local read-write transactions committed since the store opened.
    package var committedLocalTransactions: UInt64 { localCommits.withLock { $0 } }
    /// The one writer, taken by every write in order of arrival.
    let gate = WriteGate()
    /// The transactions running now: for the long-transaction log and for shutdown.
    let running = TransactionRegistry()
    /// `ALTER SYSTEM SET` changes these; they live as long as this object.
    let parameters: Locked<SystemParameters>

    /// Opens (creating if needed) the store in `directory`.
    ///
    /// The clock starts above everything this store's clock issued or adopted before
    /// (`clock_high_water` in `shoal_meta`, which EVICT cannot remove) and above the
    /// newest field timestamp the drift rule lets it adopt.
    ///
    /// - Parameters:
    ///   - parameters: the run-time parameters to start from (`ALTER SYSTEM SET`
    ///     changes them until the store closes; see `SystemParameters`).
    ///   - wallClock: milliseconds since 1970 for the store's clock; tests skew it.
    ///   - commitDuration: records how long each local commit that wrote something
    ///     took, one sample per transaction.
    ///   - synchronousFull: `PRAGMA synchronous = FULL`: every commit is on disk
    ///     before it returns, so an acknowledged one survives a power failure too, at the
    ///     cost of an fsync per commit. Otherwise NORMAL, safe against the process dying.
    package init(
        directory: String, logger: Logger = Logger(label: "shoal.store"),
        parameters: SystemParameters = SystemParameters(),
        wallClock: @escaping @Sendable () -> UInt64 = HybridLogicalClock.systemMilliseconds,
        commitDuration: Metrics.Timer? = nil, synchronousFull: Bool = false
    ) throws(ShoalError) {
        self.logger = logger
        self.commitDuration = commitDuration
        self.parameters = Locked(parameters)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw ShoalError(.database, "cannot create data directory \(directory): \(error.localizedDescription)")
        }
        let path = (directory as NSString).appendingPathComponent("shoal.sqlite")
        var configuration = Configuration()
        configuration.label = "shoal"
        configuration.maximumReaderCount = 4
        configuration.busyMode = .timeout(10)
        // A read-write Transaction keeps its SQLite transaction open across several
        // database accesses (BEGIN IMMEDIATE in one, COMMIT in a later one).
        configuration.allowsUnsafeTransactions = true
        // Checkpoints run beside the writer (`runCheckpoints`), not inside a commit; a
        // commit checkpoints only if the write-ahead log grew this far without them.
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA wal_autocheckpoint = \(DocumentStore.inlineCheckpointPages)")
            db.add(function: DocumentStore.logDocuments)
        }
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            if synchronousFull {
                // On the one writer connection, after GRDB has set WAL mode's NORMAL.
                try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            }
            try Self.migrator.migrate(pool)
            do {
                inlineReader = try InlineReader(path: path, configuration: configuration)
            } catch {
                inlineReader = nil
                logger.warning(
                    "cannot open a connection for short reads; every read goes through the pool",
                    metadata: ["shoal.error": "\(error)"])
            }
            let clock = HybridLogicalClock(wallClock: wallClock)
            // The newest field the drift rule would adopt: one far-future row must not
            // make the clock refuse the rest.
            let adoptable = clock.newestAdoptable
            let file = Self.fileIdentity(path)
            let (site, highWater, newestField, former) = try pool.write { db -> (SiteID, Int64, Int64, SiteID?) in
                var site: SiteID
                var former: SiteID?
                if let raw = try Int64.fetchOne(db, sql: "SELECT value FROM shoal_meta WHERE key = 'site_id'") {
                    site = SiteID(UInt64(bitPattern: raw))
                    if let file, let device = try Self.meta(db, "store_device"), let inode = try Self.meta(db, "store_inode"),
                        device != file.device || inode != file.inode
                    {
                        former = site
                        site = try Self.takeNewIdentity(db, from: site)
                    }
                } else {
                    site = SiteID.random()
                    try Self.setMeta(db, "site_id", Int64(bitPattern: site.rawValue))
                }
                if let file {
                    try Self.setMeta(db, "store_device", file.device)
                    try Self.setMeta(db, "store_inode", file.inode)
                }
                let highWater = try Int64.fetchOne(db, sql: "SELECT value FROM shoal_meta WHERE key = 'clock_high_water'") ?? 0
                let newest = try Int64.fetchOne(
                    db, sql: "SELECT MAX(ts) FROM field WHERE ts BETWEEN 0 AND ?", arguments: [Int64(bitPattern: adoptable.rawValue)]) ?? 0
                return (site, highWater, newest, former)
            }
            if let former {
                logger.warning(
                    "this data directory's database is not the file it was created as (copied, restored from a backup, or moved to another filesystem): this node continues as a new site, \(site), so that it never reuses a transaction number of its former site \(former), whose transactions it keeps and asks its peers for",
                    metadata: ["shoal.site": "\(site)", "shoal.site.former": "\(former)", "shoal.store.path": "\(path)"])
            }
            clock.restore(HybridTimestamp(rawValue: UInt64(bitPattern: highWater)))
            clock.observe(HybridTimestamp(rawValue: UInt64(bitPattern: newestField)))
            self.clock = clock
            let evicted = try pool.read { db in
                try Int64.fetchOne(db, sql: "SELECT value FROM shoal_meta WHERE key = 'evicted'") != nil
            }
            evictions.withLock { $0 = evicted }
            siteID = site
            let (existing, declared, counted) = try pool.read { db in
                (
                    try String.fetchAll(
                        db, sql: "SELECT sql FROM sqlite_master WHERE type = 'index' AND name LIKE 'document_by_%'"),
                    try UserIndex.fetchAll(db),
                    try StatisticsSchedule.documents(db)
                )
            }
            indexedPaths.withLock { $0.formUnion(existing.compactMap(Self.automaticIndexPath)) }
            userIndexes.withLock { $0 = declared }
            statistics.withLock { $0.documentsAtRefresh = counted ?? 0 }
            // Sessions learn where the log ends from the feed: from the start, not only at the next commit.
            feed.publish(
                LogEnd(sequence: try pool.read { db in try ChangeLogRecord.lastSequence(db) }))
        } catch let error as ShoalError {
            throw error
        } catch {
            throw Self.openFailure(error, path: path, directory: directory)
        }
        logger.debug("store opened", metadata: ["shoal.store.path": "\(path)", "shoal.site": "\(siteID)"])
    }

    /// The device and inode of the database file: a copy or a restore of the data
    /// directory has other ones. Nil when they cannot be read.
    static func fileIdentity(_ path: String) -> (device: Int64, inode: Int64)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return (Int64(bitPattern: UInt64(info.st_dev)), Int64(bitPattern: UInt64(info.st_ino)))
    }

    /// Gives the store a new site ID (its database file is a copy or a restore): what
    /// the former site wrote stays, as another node's writes, and every peer cursor
    /// goes, so that peers send the former site's transactions this copy lacks.
    static func takeNewIdentity(_ db: Database, from former: SiteID) throws -> SiteID {
        var site = SiteID.random()
        while site == former { site = SiteID.random() }
        try setMeta(db, "site_id", Int64(bitPattern: site.rawValue))
        try setMeta(db, "former_site", Int64(bitPattern: former.rawValue))
        try setMeta(db, "history_confirmed", 0)
        try forgetPeerCursors(db)
        return site
    }

    /// Where the cursor epoch is kept (`ResumePoint`).
    static let cursorEpochKey = "cursor_epoch"

    /// Forgets every peer cursor, so that peers send everything again, and raises the
    /// cursor epoch, so that no batch of a stream read before records one again.
    static func forgetPeerCursors(_ db: Database) throws {
        try db.execute(sql: "DELETE FROM peer_cursor")
        try setMeta(db, cursorEpochKey, Int64(try cursorEpoch(db) + 1))
    }

    /// The cursor epoch now (`ResumePoint`).
    static func cursorEpoch(_ db: Database) throws -> UInt64 {
        try unsignedMeta(db, cursorEpochKey)
    }

    /// Below this many bytes free, a disk counts as full when the database cannot open.
    static let fullDiskMargin: UInt64 = 1 << 20

    /// Why the database at `path` cannot open, for a user to act on.
    ///
    /// On a full disk SQLite says only "disk I/O error": before it reads anything it
    /// must size its shared-memory index (`shoal.sqlite-shm`) and may write its log
    /// (`shoal.sqlite-wal`), and both fail. The space left on the disk tells that
    /// case apart.
    static func openFailure(_ error: any Error, path: String, directory: String) -> ShoalError {
        if let error = error as? DatabaseError, error.resultCode == .SQLITE_FULL || error.resultCode == .SQLITE_IOERR,
            let free = availableBytes(directory), free < fullDiskMargin
        {
            return ShoalError(
                .database,
                "cannot open the database at \(path): the disk that holds \(directory) is full (\(free) bytes free; SQLite: \(error.message ?? "disk I/O error")). "
                    + "SQLite needs room beside the database for its shared-memory index (shoal.sqlite-shm) and write-ahead log (shoal.sqlite-wal) before it can read anything. "
                    + "Free some space on that disk, or move the data directory to a larger one, and start again; nothing was written")
        }
        return ShoalError(.database, "cannot open the database at \(path): \(error)")
    }

    /// Bytes an unprivileged process may still write on the filesystem that holds `directory`.
    static func availableBytes(_ directory: String) -> UInt64? {
        var stats = statvfs()
        guard statvfs(directory, &stats) == 0 else { return nil }
        return UInt64(stats.f_bavail) * UInt64(stats.f_frsize)
    }

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
        return migrator
    }

    /// `shoal_log_documents(entries)`: a change-log row's documents, each with its
    /// deltas' keys, as `[[collection, doc_id, [[name, timestamp], ...]], ...]` (JSON),
    /// for the SQL that judges rows superseded and finds the rows of a document. Bytes
    /// that do not decode give `[[null, null, [[null, null]]]]`: a document no row
    /// names, with a key nothing supersedes, so a row that cannot be read is kept.
    static let logDocuments = DatabaseFunction("shoal_log_documents", argumentCount: 1, pure: true) { values -> String in
        let unreadable = "[[null,null,[[null,null]]]]"
        guard let data = Data.fromDatabaseValue(values[0]) else { return unreadable }
        return (try? data.withUnsafeBytes { bytes -> String in
            var json = "["
            try LogEntries.forEach(bytes) { collection, id, _, deltas in
                if json.utf8.count > 1 { json += "," }
                json += "[\(Value.string(collection).canonicalJSON),\(Value.string(id).canonicalJSON),["
                var first = true
                try PackedDeltas.forEach(deltas) { _, timestamp, name, _ in
                    if !first { json += "," }
                    first = false
                    json += "[\(Value.string(name).canonicalJSON),\(Int64(bitPattern: timestamp))]"
                }
                json += "]]"
            }
            return json + "]"
        }) ?? unreadable
    }

    /// The highest change-log sequence committed so far.
    package func lastSequence() async throws(ShoalError) -> UInt64 {
        try await read { db in try ChangeLogRecord.lastSequence(db) }
    }

    /// The rows of the change log: what sync streams from, and what compaction trims.
    package func changeLogRowCount() async throws(ShoalError) -> UInt64 {
        try await read { db in try ChangeLogRecord.count(db) }
    }

    /// The number of live documents in each collection, by name.
    package func collectionCounts() async throws(ShoalError) -> [(name: String, documents: Int)] {
        try await read { db in
            try Row.fetchAll(
                db, sql: "SELECT collection, COUNT(*) AS documents FROM document WHERE deleted = 0 GROUP BY collection ORDER BY collection"
            ).map { row in
                let row = StoredRow(row, of: "document")
                return (name: try row.value(Column("collection")), documents: try row.value(Column("documents")))
            }
        }
    }

    /// A stream that yields whenever the change log grows, with its new end.
    package func changeLogUpdates() -> AsyncStream<LogEnd> { feed.updates() }

    package func listenToChangeLog(
        _ handler: @escaping @Sendable (LogEnd) -> Void, closed: @escaping @Sendable () -> Void
    ) -> ChangeFeedListening {
        feed.listen(handler, finished: closed)
    }

    /// The change log's last sequence as of the latest commit (or the store's opening).
    package var lastCommittedSequence: UInt64 { feed.latest?.sequence ?? 0 }

    /// A stream that yields when EVICT removed local data, so sessions should
    /// resubscribe from their (restarted) cursors and refill what subscriptions match.
    package func cursorResets() -> AsyncStream<UInt64> { resets.updates() }

    /// Closes the store now, whatever is running, and ends every `changeLogUpdates()`
    /// stream. `shutdown()` waits for running transactions first; this is for tests
    /// and for callers that know nothing runs.
    package func close() {
        running.close(completely: true)
        gate.close(admittingNested: false)
        feed.finishAll()
        resets.finishAll()
        commits.finishAll()
        inlineReader?.close()
        try? pool.close()
    }

    /// Runs `body` in a read transaction of its own. With `inline`, for a read known to
    /// be short, on the calling thread through `inlineReader` when it is free (see
    /// `InlineReader`); otherwise on one of the pool's readers.
    func read<T: Sendable>(
        inline: Bool = false, _ body: @escaping @Sendable (Database) throws -> T
    ) async throws(ShoalError) -> T {
        do {
            if inline, let inlineReader, let result = try inlineReader.read(body) { return result }
            return try await pool.unsafeRead { db in try Self.inTransaction(db, .deferred, body) }
        } catch {
            throw ShoalError.wrapping(error, "database read")
        }
    }

    /// Runs `body` in one SQLite transaction of its own, holding the write gate: the
    /// way every write other than a `Transaction`'s reaches the database (received
    /// deltas, attachments, saved subscriptions).
    ///
    /// It waits in line behind a running read-write transaction, and throws
    /// `ShoalError.Code.nestedTransaction` at once when called from inside one of this
    /// store's (it would wait for itself).
    ///
    /// With `inline`, for a write known to be short, `body` runs on the calling thread:
    /// the gate keeps every other writer out, so the writer connection's queue is idle
    /// and takes the work at once, without the two thread wake-ups of the hop there
    /// and back.
    func write<T: Sendable>(
        inTransaction: Bool = true, inline: Bool = false, _ body: @escaping @Sendable (Database) throws -> T
    ) async throws(ShoalError) -> T {
        let marks = OpenTransactions.marks
        try refuseWriteBesideOpenTransaction(marks)
        try await acquireGate(nested: marks.contains { $0.store == ObjectIdentifier(self) })
        defer { gate.release() }
        do {
            if inline { return try Self.writeHere(pool, transaction: inTransaction, body) }
            // VACUUM, for one, cannot run inside a transaction.
            return inTransaction
                ? try await pool.writeWithoutTransaction { db in try Self.inTransaction(db, .immediate, body) }
                : try await pool.writeWithoutTransaction(body)
        } catch {
            throw ShoalError.wrapping(error, "database write")
        }
    }

    /// A statement's or a commit's access to the writer connection, in no transaction
    /// of its own (the caller's SQL holds BEGIN and COMMIT): on this thread when the
    /// last such access was quick (`quickExecutes`), otherwise on the writer's queue.
    /// `timed`: how long it takes decides where the next one runs (a commit's does not:
    /// it logs about what the statements wrote, and follows them).
    func quickWrite<T: Sendable>(timed: Bool = true, _ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let inline = quickExecutes.withLock { $0 }
        let started = ContinuousClock.now
        do {
            let result = inline ? try Self.writeHere(pool, transaction: false, body) : try await pool.writeWithoutTransaction(body)
            if timed { quickExecutes.withLock { $0 = ContinuousClock.now - started < Self.shortWrite } }
            return result
        } catch {
            if timed { quickExecutes.withLock { $0 = false } }
            throw error
        }
    }

    /// `body` on the writer connection, in a write transaction or (`transaction` false)
    /// in none, on this thread: the writer's queue runs it here when idle. Synchronous,
    /// so that the synchronous overloads are the ones called.
    static func writeHere<T>(_ pool: DatabasePool, transaction: Bool, _ body: (Database) throws -> T) throws -> T {
        transaction
            ? try pool.writeWithoutTransaction { db in try Self.inTransaction(db, .immediate, body) }
            : try pool.writeWithoutTransaction(body)
    }

    /// `body` in one SQLite transaction: `BEGIN` of `kind` (IMMEDIATE to write,
    /// DEFERRED to read a snapshot), then `COMMIT`, or `ROLLBACK` when it throws.
    ///
    /// GRDB's own `write`, `read` and `inTransaction` compile their BEGIN and COMMIT
    /// again on every call; these are prepared once per connection.
    static func inTransaction<T>(_ db: Database, _ kind: Database.TransactionKind, _ body: (Database) throws -> T) throws -> T {
        try db.cachedStatement(sql: kind == .immediate ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED").execute()
        do {
            let result = try body(db)
            try db.cachedStatement(sql: "COMMIT").execute()
            return result
        } catch {
            if db.isInsideTransaction { try? db.execute(sql: "ROLLBACK") }
            throw error
        }
    }
}

/// How a document's `_id` becomes its key: the canonical JSON of the value, so
/// string, number and object IDs never collide and compare byte for byte.
public enum DocumentKey {
    public static func make(_ id: Value) -> String { id.canonicalJSON }
}

public import ShoalCRDT
package import ShoalStorage
import CShoalFile
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
                    if let file, try Self.isAnotherFile(db, than: file) {
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
                    if let born = file.born { try Self.setMeta(db, "store_born", born) }
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

    /// What tells the database file from a copy of it: its device and inode, and its
    /// birth time in nanoseconds where the file system keeps one. A copy or a restore
    /// of the data directory differs in one of them: ext4 gives a file copied into a
    /// deleted one's place the same inode number at once, but not the same birth time.
    /// Nil when they cannot be read.
    package static func fileIdentity(_ path: String) -> (device: Int64, inode: Int64, born: Int64?)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        var seconds: Int64 = 0
        var nanoseconds: UInt32 = 0
        let born: Int64? =
            shoal_file_birth_time(path, &seconds, &nanoseconds) == 0
            ? seconds &* 1_000_000_000 &+ Int64(nanoseconds) : nil
        return (Int64(bitPattern: UInt64(info.st_dev)), Int64(bitPattern: UInt64(info.st_ino)), born)
    }

    /// Whether the database file is not the one this store recorded at its last open.
    /// A birth time is compared only when both are known: a store written before
    /// Shoal kept one, or on a file system that keeps none, is told by device and
    /// inode alone.
    static func isAnotherFile(_ db: Database, than file: (device: Int64, inode: Int64, born: Int64?)) throws -> Bool {
        guard let device = try meta(db, "store_device"), let inode = try meta(db, "store_inode") else { return false }
        if device != file.device || inode != file.inode { return true }
        if let recorded = try meta(db, "store_born"), let born = file.born, recorded != born { return true }
        return false
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

package import Logging
package import Metrics
package import ShoalCRDT
package import ShoalStorage
import Foundation
import NIOCore
import PostgresNIO

/// The sync side of a hub's store on PostgreSQL: what ShoalSync reads and writes
/// (`SyncStore`), on the tables of migration `v3-store`, shared by every hub process on
/// the database (docs/ARCHITECTURE.md, "Hubs on PostgreSQL").
///
/// ```
///   writeInbound ──► local write gate ──► BEGIN (READ COMMITTED)
///                                         writers' lock, shared; a lock per name claimed
///                                         … InboundWriting calls (only what it named) …
///                                         SELECT log_end FOR UPDATE; INSERT its log rows
///                                         UPDATE log_end; pg_notify    (delivered at commit)
///                                         COMMIT ──► this hub's feed ──► its sessions
///   every other write: the writers' lock exclusively, then log_end FOR UPDATE, to COMMIT
///   reads ──► REPEATABLE READ READ ONLY snapshots: never wait for the writer
/// ```
///
/// A received batch that names what it writes (`InboundClaim`) commits beside the other
/// hubs' batches that name nothing in common with it; every other writing transaction,
/// and a batch that must write more than it named, is the hubs' one writer, as one
/// SQLite node's is (`withWriter`). Sequences are given out under `log_end`'s lock,
/// held to COMMIT, so they are committed in order (a reader never sees a row appear
/// below one it already read). A hub's own gate queues its writers before they take a
/// connection, so that waiting writers do not hold the pool's connections.
///
/// The rows are those of the SQLite store (docs/ARCHITECTURE.md, "The SQLite schema"),
/// with the log's entries packed the same way (`LogEntries`); unsigned 64-bit values
/// are BIGINT bit patterns, and keys compare byte by byte (`COLLATE "C"`), as SQLite's do.
///
/// Here: the contract's log, records, buffer, registers and cursors, the store's saved
/// interest and peer positions, and following the other hubs' commits. Its own
/// transactions are in `PostgresStore+Documents.swift`, its upkeep in `+Node.swift`,
/// attachments in `+Attachments.swift`, compaction in `+Compaction.swift`, and repairing
/// a database that went back in `+History.swift`.
package final class PostgresStore: SyncStore, Sendable {
    package let database: PostgresHubDatabase
    package let siteID: SiteID
    package let clock: HybridLogicalClock
    /// What this hub's counter contributions are named by: a new one each time the store
    /// opens, as a SQLite store's (DATA_MODEL.md §7), and each time the hub finds its
    /// database went back while it ran (`nameCounterContributionsAnew`), so that
    /// increments made from a restored database never overwrite those made after its
    /// backup.
    package var counterSite: SiteID { counterSites.withLock { $0 } }
    let counterSites = Locked(SiteID.random())
    /// The hub's run-time parameters (`ALTER SYSTEM SET` changes them, in this process).
    let parameters: Locked<SystemParameters>
    package var systemParameters: SystemParameters { parameters.withLock { $0 } }

    /// The parameters' limits, a bound on keys (`maximumKeyBytes`), and no U+0000 in a
    /// collection's name, which PostgreSQL's `TEXT` cannot hold.
    package var documentLimits: DocumentLimits {
        var limits = systemParameters.documentLimits
        limits.keyBytes = Self.maximumKeyBytes
        limits.collectionNamesHoldNul = false
        return limits
    }

    /// The most bytes of a document's collection name, stored `_id` and field name
    /// together that a hub writes. They are the key of `field` (collection, doc_id, name)
    /// and, but the field, of `document`, and a btree entry holds 2,704 bytes at most;
    /// an automatic index adds up to 256 bytes of value to the collection's name. A
    /// received transaction over it is refused whole (PROTOCOL.md 8.8), a local write
    /// fails; a SQLite node has no such bound.
    package static let maximumKeyBytes = 2_048
    let logger: Logger

    /// Queues this hub's writers, first come first served, before they take a connection.
    let gate = WriteGate()
    /// The log's end as this hub last knew it: its own commits, and the others' as announced.
    let feed = ChangeFeed<LogEnd>(bufferingPolicy: .bufferingNewest(1), replayLatest: true)
    /// Fires when every peer cursor was forgotten (a repair of a database that went back,
    /// here or on another hub).
    let resets = ChangeFeed<UInt64>(bufferingPolicy: .bufferingNewest(1), replayLatest: false)
    /// The interest saved, as read at open (`savedInterest` is read once, at start).
    let interestAtOpen: [SiteID: SavedInterest]
    /// What peers acknowledged of this node's log, by peer (for EVICT, which is not yet built here).
    let holdings = Locked<[SiteID: UInt64]>([:])
    /// The highest end of the log told to the feed (`publish`).
    let told = Locked<UInt64>(0)
    /// What this hub knew of the log: the highest sequence committed (every end told,
    /// every row its sessions read) and the newest row it read or wrote. A log that ends
    /// below it, or holds another row there, went back under the running hub (a failover
    /// that lost commits, a backup restored in place), and the hubs' one writer repairs it
    /// before it writes (`PostgresInboundWriter.repairWentBack`).
    let known = Locked(KnownLog())
    /// Where this hub keeps what it knew of the log between runs (`RememberedLog`, in its
    /// data directory), and what it last kept there; nil: nowhere.
    let rememberedAt: String?
    /// The file's name in a hub's data directory, one per database (by its site).
    package static func rememberedFileName(_ site: SiteID) -> String { "hub-log-\(String(site.rawValue, radix: 16)).json" }
    /// What the file holds; whether its directory was synced since (the rename of the
    /// file in it); and whether the store closed, after which nothing is written.
    let remembered = Locked<(known: KnownLog?, synced: Bool, closed: Bool)>((nil, false, false))
    /// How often the hub's keeper (`followOtherHubs`) looks whether what it knows of the
    /// log moved, and writes the file if so, its directory not synced: a renamed file
    /// survives the process killed, and the next tick syncs the directory for a power cut.
    static let keepEvery: Duration = .milliseconds(250)
    /// Set while a repair a page read asked for runs (`wentBackSeen`).
    let repairAsked = Locked(false)
    /// How many repairs of a database that went back this hub committed
    /// (`repairCommitted`): each forgot every peer cursor under a new epoch.
    package var repairs: Int { repairCount.withLock { $0 } }
    let repairCount = Locked(0)
    /// Commits that changed documents, this hub's own and the others': what observers
    /// wake up for, told by `announcer`.
    let commits = ChangeFeed<Commit>(bufferingPolicy: .unbounded, replayLatest: false)
    /// The attachments the other hubs asked for, as `followOtherHubs` hears them.
    let attachmentRequests = ChangeFeed<String>(bufferingPolicy: .bufferingNewest(256), replayLatest: false)
    let announcer: CommitAnnouncer
    let liveObservers = Locked(LiveObservers())
    /// Local transactions this hub committed since it opened.
    let localCommits = Locked<UInt64>(0)
    /// Times each local commit that wrote something, once the node gives one (`timeCommits`).
    let commitDuration = Locked<Metrics.Timer?>(nil)
    /// This hub's transactions open now: what `status` lists and the long-transaction log reports.
    let running = TransactionRegistry()
    /// The freshness saved and through when deletions were forgotten: read at open, kept as saved.
    let freshness: Locked<(entries: [SiteID: UInt64], forgottenThrough: UInt64)>
    /// The mark (`txn.mark`) of each waiting or partial record as this hub last wrote or
    /// read it: another mark in the table says another hub wrote the record since
    /// (`PostgresInboundWriter.writtenElsewhere`). Written only by this hub's writer.
    let recordMarks = Locked<[TransactionID: Int64]>([:])
    /// Whether the database may lack some of the hubs' own transactions (it went back
    /// and was repaired, `PostgresStore+History.swift`): read at open, set by a repair
    /// here or heard of from another hub.
    let lacksOwn: Locked<Bool>
    /// The cursor epoch as this hub last knew it: a higher one heard from another hub
    /// (every cursor forgotten there) restarts this hub's streams too.
    let cursorEpoch: Locked<UInt64>
    /// The most names a received batch locks to commit beside other hubs' batches
    /// (`withWriter`), from the server's lock table as read at open.
    let mostClaimed: Int
    /// The database's size on the server, as `maintain` last read it.
    let databaseBytes = Locked<UInt64>(0)
    /// DQL texts parsed lately (`parse`).
    let parsed = Locked(ParseCache())
    /// The automatic indexes asked for and known (`PostgresStore+AutomaticIndexes.swift`).
    let automaticIndexes = Locked(AutomaticIndexRequests())
    /// Wakes the builder of automatic indexes (`buildAutomaticIndexes`) when one is asked for.
    let indexWake: AsyncStream<Void>.Continuation
    let indexWakes: AsyncStream<Void>

    private init(
        database: PostgresHubDatabase, siteID: SiteID, clock: HybridLogicalClock, systemParameters: SystemParameters,
        interest: [SiteID: SavedInterest], freshness: (entries: [SiteID: UInt64], forgottenThrough: UInt64),
        history: (lacksOwn: Bool, cursorEpoch: UInt64), lockTable: Int, remembering: String?, logger: Logger
    ) {
        self.rememberedAt = remembering
        self.mostClaimed = Self.mostClaimed(lockTable: lockTable)
        self.lacksOwn = Locked(history.lacksOwn)
        self.cursorEpoch = Locked(history.cursorEpoch)
        self.database = database
        self.siteID = siteID
        self.clock = clock
        self.parameters = Locked(systemParameters)
        self.interestAtOpen = interest
        self.freshness = Locked(freshness)
        self.logger = logger
        announcer = CommitAnnouncer(feed: commits, logger: logger)
        (indexWakes, indexWake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Opens the store on `database`, whose connection pool must be running
    /// (`PostgresHubDatabase.run()`): migrates the schema, reads the site every hub on it
    /// shares and where the log ends.
    ///
    /// With `rememberingIn`, the hub's data directory, it takes what the hub knew of the
    /// log when it last ran there as known (`RememberedLog`), and repairs the database
    /// before it returns if that went back since (a repair whose check fails is made
    /// by the first write, which checks too); it keeps what it knows there from then on
    /// (`rememberKnown`).
    package static func open(
        _ database: PostgresHubDatabase, systemParameters: SystemParameters = SystemParameters(),
        clock: HybridLogicalClock = HybridLogicalClock(), rememberingIn directory: String? = nil, logger: Logger
    ) async throws(ShoalError) -> PostgresStore {
        let site: SiteID
        do {
            try await database.migrate()
            site = try await database.siteID()
        } catch {
            throw ShoalError(.database, error.message)
        }
        let interest = try await Self.readInterest(database, logger: logger)
        let store = PostgresStore(
            database: database, siteID: site, clock: clock, systemParameters: systemParameters, interest: interest,
            freshness: try await Self.readFreshness(database, logger: logger), history: try await Self.readHistory(database, logger: logger),
            lockTable: try await Self.readLockTable(database, logger: logger),
            remembering: directory.map { ($0 as NSString).appendingPathComponent(Self.rememberedFileName(site)) }, logger: logger)
        store.feed.publish(LogEnd(sequence: try await store.lastSequence()))
        store.told.withLock { $0 = store.lastCommittedSequence }
        store.known.withLock { $0.end = store.lastCommittedSequence }
        if store.recallKnown() {
            // Before any write of this hub numbers on from a log that went back.
            await store.repairIfWentBack()
        }
        store.rememberKnown()
        store.announcer.start(at: store.lastCommittedSequence, reading: store)
        return store
    }

    /// Takes what the hub knew of the log when it last ran on this data directory
    /// (`rememberedAt`) as known; whether there was anything of this database there.
    func recallKnown() -> Bool {
        guard let path = rememberedAt else { return false }
        let file: RememberedLog?
        do {
            file = try RememberedLog.read(path)
        } catch {
            logger.warning("what this hub knew of the log when it last ran is lost (\(error.message)); it is written again")
            return false
        }
        guard let file else { return false }
        guard let recalled = file.known(of: siteID) else {
            logger.warning("\(path) is not what this version of a hub writes for the database of site \(siteID): ignored, and written again")
            return false
        }
        known.withLock { known in
            known.end = max(known.end, recalled.end)
            known.witness = recalled.witness
        }
        // Not known synced: the last run may have been killed before syncing its rename.
        remembered.withLock { $0 = (recalled, false, false) }
        return true
    }

    /// Keeps what the hub knows of the log in its data directory (`RememberedLog`), when
    /// it changed since it last kept it, or, `synced`, when that was not synced yet: synced
    /// at open, at each tick of `followOtherHubs` and when the store closes (`closing`,
    /// the last write); by the keeper, every `keepEvery`, with its directory not synced,
    /// so that a hub killed between ticks has kept it too.
    func rememberKnown(synced: Bool = true, closing: Bool = false) {
        guard let path = rememberedAt else { return }
        // Under the lock from the comparison to the rename: the tick, the keeper and
        // close() may all write, and an older state must not be renamed over a newer one.
        remembered.withLock { kept in
            guard !kept.closed else { return }
            kept.closed = closing
            let now = known.withLock { $0 }
            guard kept.known != now || (synced && !kept.synced) else { return }
            do {
                try RememberedLog(site: siteID, known: now).write(to: path, syncingDirectory: synced)
                kept.known = now
                kept.synced = synced
            } catch {
                logger.warning("what this hub knows of the log could not be kept for its next start: \(error)")
            }
        }
    }

    /// How many locks the server's lock table holds for every session at once.
    static func readLockTable(_ database: PostgresHubDatabase, logger: Logger) async throws(ShoalError) -> Int {
        do {
            var table = 1
            for (perTransaction, connections, prepared) in try await database.query(
                """
                SELECT current_setting('max_locks_per_transaction')::bigint, current_setting('max_connections')::bigint,
                    current_setting('max_prepared_transactions')::bigint
                """, logger: logger
            ).decode((Int64, Int64, Int64).self) {
                table = Int(perTransaction * (connections + prepared))
            }
            return table
        } catch {
            throw ShoalError(.database, "reading the size of the server's lock table on \(database.location): \(PostgresHubDatabase.describe(error))")
        }
    }

    /// Ends every listener of the log and of cursor resets; the pool is the caller's to stop.
    package func close() {
        rememberKnown(closing: true)
        gate.close(admittingNested: false)
        feed.finishAll()
        resets.finishAll()
        announcer.close()
        commits.finishAll()
        attachmentRequests.finishAll()
    }

    // MARK: Running SQL

    /// Runs `body`, turning what PostgreSQL or the connection throws into a `ShoalError`
    /// that says what was being done and where.
    nonisolated(nonsending) func failing<T>(_ doing: String, _ body: () async throws -> T) async throws(ShoalError) -> T {
        do {
            return try await body()
        } catch let error as ShoalError {
            throw error
        } catch is CancellationError {
            throw ShoalError(.cancelled, "cancelled while \(doing)")
        } catch {
            throw ShoalError(.database, "\(doing) on \(database.location): \(PostgresHubDatabase.describe(error))")
        }
    }

    /// Runs `body` on one connection in a read-only snapshot (`REPEATABLE READ`): every
    /// query it makes sees the same committed state, and none waits for a writer.
    nonisolated(nonsending) func snapshot<T: Sendable>(
        _ doing: String, _ body: (HubConnection) async throws -> T
    ) async throws(ShoalError) -> T {
        try await transaction(doing, begin: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", body)
    }

    /// Runs `body` on one connection in one database transaction (`READ COMMITTED`, as
    /// `begin` has it) and commits it; rolls it back when `body` throws, and rethrows
    /// what it threw as it is (PostgresNIO's `withTransaction` wraps it).
    nonisolated(nonsending) func transaction<T: Sendable>(
        _ doing: String, begin: String = "BEGIN ISOLATION LEVEL READ COMMITTED", _ body: (HubConnection) async throws -> T
    ) async throws(ShoalError) -> T {
        try await failing(doing) {
            try await database.withConnection { connection in
                do {
                    // Inside: a BEGIN whose answer was lost leaves the connection rolled back or closed.
                    try await connection.query(PostgresQuery(unsafeSQL: begin), logger: logger)
                    let result = try await body(connection)
                    try await connection.query("COMMIT", logger: logger)
                    return result
                } catch {
                    await connection.rollBack(logger: logger)
                    throw error
                }
            }
        }
    }

    /// Runs one statement outside any writer (a single statement is atomic on its own).
    func run(_ doing: String, _ query: PostgresQuery) async throws(ShoalError) {
        _ = try await failing(doing) { try await database.query(query, logger: logger) }
    }

    // MARK: Outbound

    package var mayLackOwnTransactions: Bool { lacksOwn.withLock { $0 } }

    package func resumePoint(peer: SiteID, subscriptions: SubscriptionSet) async throws(ShoalError) -> ResumePoint {
        let key = subscriptions.key
        let entries = Set(subscriptions.entries.map(\.id))
        let entriesText = Value.array(entries.sorted().map(Value.string)).canonicalJSON
        let site = Int64(bitPattern: peer.rawValue)
        try await run(
            "recording a subscription set",
            "INSERT INTO subscription_set (key, entries) VALUES (\(key), \(entriesText)) ON CONFLICT (key) DO NOTHING")
        return try await snapshot("reading where a peer's stream resumes") { connection in
            var point = try await Self.resumePoint(connection, peer: peer, subscriptionKey: key, logger: logger)
            let wider = try await connection.query(
                """
                SELECT c.through, s.entries FROM peer_cursor c JOIN subscription_set s ON s.key = c.subscription_key
                WHERE c.peer = \(site) AND c.subscription_key <> \(key) AND c.through > \(Int64(clamping: point.through))
                """, logger: logger)
            for (through, text) in try wider.decode((Int64, String).self) {
                guard case .array(let items)? = try? JSON.parse(text) else { continue }
                guard entries.isSubset(of: Set(items.compactMap(\.stringValue))) else { continue }
                point.through = max(point.through, try Stored.unsigned(through, "peer_cursor", "through"))
            }
            return point
        }
    }

    static func resumePoint(
        _ connection: HubConnection, peer: SiteID, subscriptionKey: String, logger: Logger
    ) async throws -> ResumePoint {
        let site = Int64(bitPattern: peer.rawValue)
        let refillKey = SubscriptionSet.refillKey(subscriptionKey)
        var point = ResumePoint(through: 0, refill: 0, epoch: try await meta(connection, "cursor_epoch", logger: logger))
        let rows = try await connection.query(
            """
            SELECT subscription_key, through FROM peer_cursor
            WHERE peer = \(site) AND subscription_key IN (\(subscriptionKey), \(refillKey))
            """, logger: logger)
        for (key, through) in try rows.decode((String, Int64).self) {
            let value: UInt64 = try Stored.unsigned(through, "peer_cursor", "through")
            if key == subscriptionKey { point.through = value } else { point.refill = value }
        }
        return point
    }

    /// A value of `shoal_meta` that counts or marks: 0 when absent.
    static func meta(_ connection: HubConnection, _ key: String, logger: Logger) async throws -> UInt64 {
        let rows = try await connection.query("SELECT value FROM shoal_meta WHERE key = \(key)", logger: logger)
        for value in try rows.decode(Int64.self) { return try Stored.unsigned(value, "shoal_meta", "value of \(key)") }
        return 0
    }

    package func ownTransactionsBack(peer: SiteID, subscriptionKey: String) async throws(ShoalError) {
        let site = Int64(bitPattern: peer.rawValue)
        let refill = SubscriptionSet.refillKey(subscriptionKey)
        // Under the writer's lock, as every write of cursors: a cursor recorded at once
        // by an inbound write cannot interleave with it.
        _ = try await withWriter("taking over a refilled stream's cursor") { writer in
            try await writer.connection.query(
                """
                WITH taken AS (DELETE FROM peer_cursor WHERE peer = \(site) AND subscription_key = \(refill) RETURNING through)
                INSERT INTO peer_cursor (peer, subscription_key, through) SELECT \(site), \(subscriptionKey), through FROM taken
                ON CONFLICT (peer, subscription_key) DO UPDATE SET through = GREATEST(peer_cursor.through, excluded.through)
                """, logger: logger)
        }
    }

    /// The most rows one query of a page reads: a page reads on in such steps, within
    /// its snapshot, so that a page of small rows is one round trip and one of large
    /// rows holds no more than this many in memory beyond the page.
    static let pageRowsPerQuery = 64

    package func logPage(
        after sequence: UInt64, limit: Int, stretch: Int, byteLimit: Int, records wanted: @escaping @Sendable (TransactionID) -> Bool
    ) async throws(ShoalError) -> LogPage {
        try await snapshot("reading the change log") { connection in
            var page = LogPageFitting(limit: limit, stretch: stretch, byteLimit: byteLimit)
            var cursor = Int64(sequence)
            var newest: LogRecord?
            reading: while true {
                let batch = try await Self.logRows(
                    connection, "seq > \(cursor) ORDER BY seq LIMIT \(Self.pageRowsPerQuery)", logger: logger)
                for row in batch {
                    guard try page.offer({ rows in try row.decode(into: &rows) }) else { break reading }
                    if page.rows.last?.sequence == row.sequence { newest = row }
                }
                guard batch.count == Self.pageRowsPerQuery, let last = batch.last else { break }
                cursor = Int64(last.sequence)
            }
            let (rows, next) = (page.rows, page.next)
            guard !rows.isEmpty else { return LogPage(rows: [], next: nil) }
            var ids: [TransactionID] = []
            for row in rows where row.delta.transaction != ids.last { ids.append(row.delta.transaction) }
            let records = try await Self.storedTransactions(connection, Array(Set(ids.filter(wanted))), logger: logger)
            // The row this hub saw newest, read in the same snapshot: one that changed under
            // the page says the database went back, and stays what the hub knows.
            let witness = known.withLock { $0.witness }
            let (previous, there) = try await Self.rows(connection, at: sequence, witness: witness, logger: logger)
            if let witness, let there, there != witness {
                wentBackSeen()
            } else if let newest {
                let seen = LogWitness(newest)
                known.withLock { $0.saw(seen, checked: witness) }
            }
            return LogPage(rows: rows, next: next, previous: previous, records: records)
        }
    }

    package func logPage(of id: TransactionID) async throws(ShoalError) -> LogPage {
        try await snapshot("reading a transaction's rows of the change log") { connection in
            var rows: [LogRow] = []
            for row in try await Self.logRows(connection, Self.ofTransaction(id), logger: logger) { try row.decode(into: &rows) }
            let records = try await Self.storedTransactions(connection, [id], logger: logger)
            return LogPage(rows: rows, next: nil, records: records)
        }
    }

    /// The condition of a transaction's log rows, in log order.
    static func ofTransaction(_ id: TransactionID) -> String {
        "txn_site = \(Int64(bitPattern: id.origin.rawValue)) AND txn_seq = \(Int64(bitPattern: id.sequence)) ORDER BY seq"
    }

    package func logHolds(_ ids: [TransactionID]) async throws(ShoalError) -> Set<TransactionID> {
        guard !ids.isEmpty else { return [] }
        let (sites, sequences) = Self.columns(ids)
        return try await failing("reading which transactions the change log holds") {
            let rows = try await database.query(
                """
                SELECT DISTINCT txn_site, txn_seq FROM change_log
                WHERE (txn_site, txn_seq) IN (SELECT * FROM UNNEST(\(sites)::bigint[], \(sequences)::bigint[]))
                """, logger: logger)
            var held: Set<TransactionID> = []
            for (site, sequence) in try rows.decode((Int64, Int64).self) {
                held.insert(TransactionID(origin: SiteID(UInt64(bitPattern: site)), sequence: try Stored.unsigned(sequence, "change_log", "txn_seq")))
            }
            return held
        }
    }

    package func bodies(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRef: String] {
        guard !documents.isEmpty else { return [:] }
        let collections = documents.map(\.collection), keys = documents.map(\.id)
        return try await failing("reading document bodies") {
            let rows = try await database.query(
                """
                SELECT collection, doc_id, body FROM document
                WHERE (collection, doc_id) IN (SELECT * FROM UNNEST(\(collections)::text[], \(keys)::text[]))
                """, logger: logger)
            var bodies: [DocumentRef: String] = [:]
            for (collection, key, body) in try rows.decode((String, String, String).self) {
                bodies[DocumentRef(collection: collection, id: key)] = body
            }
            return bodies
        }
    }

    package func storedTransactions(_ ids: [TransactionID]) async throws(ShoalError) -> [TransactionID: StoredTransaction] {
        guard !ids.isEmpty else { return [:] }
        return try await snapshot("reading transaction records") { connection in
            try await Self.storedTransactions(connection, ids, logger: logger)
        }
    }

    package func currentFields(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRef: [FieldRecord]] {
        guard !documents.isEmpty else { return [:] }
        return try await snapshot("reading current fields") { connection in
            var fields = try await Self.registerRows(connection, of: documents, logger: logger)
            for document in documents where fields[document] == nil { fields[document] = [] }
            return fields
        }
    }

    package func listenToChangeLog(
        _ handler: @escaping @Sendable (LogEnd) -> Void, closed: @escaping @Sendable () -> Void
    ) -> ChangeFeedListening {
        feed.listen(handler, finished: closed)
    }

    package func cursorResets() -> AsyncStream<UInt64> { resets.updates() }

    package var lastCommittedSequence: UInt64 { feed.latest?.sequence ?? 0 }

    package func history(of origin: SiteID) async throws(ShoalError) -> OriginHistory {
        let site = Int64(bitPattern: origin.rawValue)
        return try await snapshot("reading how far this hub holds a node's transactions") { connection in
            let rows = try await connection.query(
                "SELECT MAX(seq) FROM txn WHERE origin = \(site) AND state IN (1, 2)", logger: logger)
            var through: UInt64?
            for value in try rows.decode(Int64?.self) { through = try value.map { v throws in try Stored.unsigned(v, "txn", "seq") } }
            guard let through else { return .none }
            let newest = try await Self.newestDelta(connection, TransactionID(origin: origin, sequence: through), logger: logger)
            return OriginHistory(through: through, index: newest?.index ?? 0, timestamp: newest?.timestamp ?? 0)
        }
    }

    /// The delta with the newest timestamp (the lowest index among equals) logged of
    /// transaction `id`, or `only` that index's; nil when none is.
    static func newestDelta(
        _ connection: HubConnection, _ id: TransactionID, only: UInt32? = nil, logger: Logger
    ) async throws -> (index: UInt32, timestamp: UInt64)? {
        var newest: (index: UInt32, timestamp: UInt64)?
        for row in try await logRows(connection, ofTransaction(id), logger: logger) {
            try row.entries.withUnsafeReadableBytes { entries in try OriginHistory.newestDelta(in: entries, only: only, above: &newest) }
        }
        return newest
    }

    package func savedInterest() throws(ShoalError) -> [SiteID: SavedInterest] { interestAtOpen }

    static func readInterest(_ database: PostgresHubDatabase, logger: Logger) async throws(ShoalError) -> [SiteID: SavedInterest] {
        do {
            let rows = try await database.query(
                "SELECT site, subscriptions, generation, heard_from FROM neighbour_interest", logger: logger)
            var interest: [SiteID: SavedInterest] = [:]
            for (site, subscriptions, generation, heard) in try rows.decode((Int64, String, Int64, String).self) {
                if let saved = SavedInterest(
                    subscriptionsText: subscriptions, generation: UInt64(bitPattern: generation), heardFromText: heard)
                {
                    interest[SiteID(UInt64(bitPattern: site))] = saved
                }
            }
            return interest
        } catch {
            throw ShoalError(.database, "reading the saved interest on \(database.location): \(PostgresHubDatabase.describe(error))")
        }
    }

    package func saveInterest(_ interest: [SiteID: SavedInterest], forgetting: [SiteID]) async throws(ShoalError) {
        guard !interest.isEmpty || !forgetting.isEmpty else { return }
        let forget = forgetting.map { Int64(bitPattern: $0.rawValue) }
        let sites = interest.keys.map { Int64(bitPattern: $0.rawValue) }
        let saved = interest.keys.map { interest[$0]! }
        let texts = saved.map(\.subscriptionsText), generations = saved.map { Int64(bitPattern: $0.generation) }
        let heard = saved.map(\.heardFromText)
        try await transaction("saving the interest this hub relays for") { connection in
            try await connection.query("DELETE FROM neighbour_interest WHERE site = ANY(\(forget)::bigint[])", logger: logger)
            try await connection.query(
                """
                INSERT INTO neighbour_interest (site, subscriptions, generation, heard_from)
                SELECT * FROM UNNEST(\(sites)::bigint[], \(texts)::text[], \(generations)::bigint[], \(heard)::text[])
                ON CONFLICT (site) DO UPDATE SET subscriptions = excluded.subscriptions,
                    generation = excluded.generation, heard_from = excluded.heard_from
                WHERE excluded.generation >= neighbour_interest.generation
                """, logger: logger)
        }
    }

    package func notePeerHolding(_ peer: SiteID, through: UInt64, subscriptions: SubscriptionSet) {
        holdings.withLock { $0[peer] = max($0[peer] ?? 0, through) }
    }

    /// Nothing kept: a hub never evicts (`notOnAHub`), the one reader of refusals. Every
    /// one of its own is new to it, then.
    package func notePeerRefused(_ peer: SiteID, transactions: [TransactionID]) async throws(ShoalError) -> Set<TransactionID> {
        Set(transactions.filter { $0.origin == siteID })
    }

    package func refusedTransactions(of origin: SiteID, limit: Int) async throws(ShoalError) -> [(id: TransactionID, reason: String)] {
        let site = Int64(bitPattern: origin.rawValue)
        return try await failing("reading the transactions of a peer this hub refused") {
            let rows = try await database.query(
                "SELECT seq, COALESCE(refusal, '') FROM txn WHERE state = 3 AND origin = \(site) ORDER BY seq DESC LIMIT \(limit)",
                logger: logger)
            var refused: [(id: TransactionID, reason: String)] = []
            for (sequence, reason) in try rows.decode((Int64, String).self) {
                refused.append((TransactionID(origin: origin, sequence: UInt64(bitPattern: sequence)), reason))
            }
            return refused
        }
    }

    package func holdsOthersWrites() async throws(ShoalError) -> Bool {
        let site = Int64(bitPattern: siteID.rawValue)
        return try await failing("reading whether this hub holds others' writes") {
            let rows = try await database.query(
                "SELECT EXISTS (SELECT 1 FROM txn WHERE origin <> \(site))", logger: logger)
            for held in try rows.decode(Bool.self) { return held }
            return true
        }
    }

    // MARK: Inbound

    package func transactionRecords() async throws(ShoalError) -> [TransactionRecord] {
        try await snapshot("reading the transactions waiting or partial") { connection in
            let rows = try await connection.query(
                PostgresQuery(unsafeSQL: "\(StoredTransactionRow.select) WHERE state IN (0, 2)"), logger: logger)
            var stored: [StoredTransaction] = []
            for row in try rows.decode(StoredTransactionRow.Columns.self) { stored.append(try StoredTransactionRow.make(row)) }
            var records: [TransactionRecord] = []
            for transaction in stored.sorted(by: { ($0.id.origin, $0.id.sequence) < ($1.id.origin, $1.id.sequence) }) {
                records.append(try await Self.record(connection, transaction, logger: logger))
            }
            // The records as read here are what this hub holds of them now (only the
            // inbound pipeline reads them, at its start).
            let marks = try await connection.query("SELECT origin, seq, mark FROM txn WHERE state IN (0, 2)", logger: logger)
            var read: [TransactionID: Int64] = [:]
            for (origin, sequence, mark) in try marks.decode((Int64, Int64, Int64).self) {
                read[TransactionID(origin: SiteID(UInt64(bitPattern: origin)), sequence: try Stored.unsigned(sequence, "txn", "seq"))] = mark
            }
            recordMarks.withLock { $0.merge(read) { _, new in new } }
            return records
        }
    }

    /// A waiting or partial transaction as a record: its header and reports from `txn`,
    /// what is held of it from the buffer (waiting) or the change log (partial).
    static func record(_ connection: HubConnection, _ stored: StoredTransaction, logger: Logger) async throws -> TransactionRecord {
        var record = TransactionRecord(stored)
        if stored.state == .waiting {
            for delta in try await bufferedDeltas(connection, of: stored.id, logger: logger) {
                record.hold(delta.document, expected: delta.documentDeltas, [delta.delta.index])
                record.bufferedBytes += delta.delta.valueJSON.utf8.count
            }
        } else {
            for row in try await logRows(connection, ofTransaction(stored.id), logger: logger) {
                try row.entries.withUnsafeReadableBytes { entries in try record.holdLogged(entries) }
            }
        }
        return record
    }

    // MARK: Compaction

    package func lastSequence() async throws(ShoalError) -> UInt64 {
        try await failing("reading the change log's end") {
            let rows = try await database.query("SELECT MAX(seq) FROM change_log", logger: logger)
            for last in try rows.decode(Int64?.self) { return try last.map { v throws in try Stored.unsigned(v, "change_log", "seq") } ?? 0 }
            return 0
        }
    }

    package func savePeerAcknowledgements(_ acknowledgements: [PeerAcknowledgement], forget: [SiteID]) async throws(ShoalError) {
        guard !acknowledgements.isEmpty || !forget.isEmpty else { return }
        var latest: [SiteID: PeerAcknowledgement] = [:]
        for a in acknowledgements { latest[a.peer] = a }
        let peers = latest.keys.map { Int64(bitPattern: $0.rawValue) }
        let through = latest.values.map { Int64(bitPattern: $0.through) }
        let heard = latest.values.map { Int64($0.heardAt.timeIntervalSince1970 * 1000) }
        let forgotten = forget.map { Int64(bitPattern: $0.rawValue) }
        try await transaction("saving what peers acknowledged") { connection in
            try await connection.query(
                """
                INSERT INTO peer_ack (peer, through, heard_at) SELECT * FROM UNNEST(\(peers)::bigint[], \(through)::bigint[], \(heard)::bigint[])
                ON CONFLICT (peer) DO UPDATE SET through = excluded.through, heard_at = excluded.heard_at
                """, logger: logger)
            try await connection.query("DELETE FROM peer_ack WHERE peer = ANY(\(forgotten)::bigint[])", logger: logger)
        }
    }

    package func peerAcknowledgements() async throws(ShoalError) -> [PeerAcknowledgement] {
        try await failing("reading what peers acknowledged") {
            let rows = try await database.query("SELECT peer, through, heard_at FROM peer_ack ORDER BY through, peer", logger: logger)
            var acknowledgements: [PeerAcknowledgement] = []
            for (peer, through, heard) in try rows.decode((Int64, Int64, Int64).self) {
                acknowledgements.append(
                    PeerAcknowledgement(
                        peer: SiteID(UInt64(bitPattern: peer)), through: UInt64(bitPattern: through),
                        heardAt: Date(timeIntervalSince1970: Double(heard) / 1000)))
            }
            return acknowledgements
        }
    }

    // MARK: Following the other hubs

    /// Hears the other hubs' commits until the task is cancelled: each announced end of
    /// the log above this hub's wakes its sessions (`listenToChangeLog`). It reads again
    /// what they announce each time it starts listening, and every `interval` besides
    /// (`lookAgain`), since PostgreSQL drops what it announced while this hub was not
    /// listening; and keeps what the hub knows of the log in its data directory
    /// (`rememberKnown`): looked at every `keepEvery`, its directory synced at each tick.
    package func followOtherHubs(every interval: Duration = .seconds(5)) async {
        let (started, listening) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    do {
                        try await self.database.followLog(
                            listening: { listening.yield() },
                            asked: { hash, by in
                                if by != self.database.process { self.attachmentRequests.publish(hash) }
                            },
                            forgot: { self.forgotCursors(epoch: $0) }
                        ) { await self.heard($0) }
                    } catch {
                        if Task.isCancelled { break }
                        self.logger.warning("following the other hubs' commits failed, trying again in a second: \(error)")
                    }
                    try? await Task.sleep(for: .seconds(1))
                }
                listening.finish()
            }
            group.addTask {
                for await _ in started { await self.lookAgain() }
            }
            group.addTask {
                while (try? await Task.sleep(for: interval)) != nil {
                    await self.lookAgain()
                    await self.rememberKnownOffThePool(synced: true)
                }
            }
            group.addTask {
                while (try? await Task.sleep(for: Self.keepEvery)) != nil {
                    await self.rememberKnownOffThePool(synced: false)
                }
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// `rememberKnown` on a thread of Dispatch's: its writes and syncs are blocking I/O,
    /// which the concurrency pool's few threads should not wait on, nor on its lock
    /// while another write holds it.
    func rememberKnownOffThePool(synced: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global(qos: .utility).async {
                self.rememberKnown(synced: synced)
                continuation.resume()
            }
        }
    }

    /// Reads again what the other hubs announce, for what this hub may not have heard
    /// (PostgreSQL drops announcements while a hub does not listen, and a listening
    /// connection whose link died without a word hears nothing): whether the database
    /// went back (`repairIfWentBack`), where the log ends, and whether another hub forgot
    /// every cursor.
    func lookAgain() async {
        await repairIfWentBack()
        if let last = try? await lastSequence() { await heard(last) }
        if let (lacksOwn, epoch) = try? await Self.readHistory(database, logger: logger), lacksOwn,
            epoch > cursorEpoch.withLock({ $0 })
        {
            forgotCursors(epoch: epoch)
        }
    }

    /// Tells this hub's sessions and observers of the other hubs' commits through `end`:
    /// sessions first, at once; observers once the rows are read (`CommitAnnouncer`).
    func heard(_ end: UInt64) async {
        publish(LogEnd(sequence: end))
        await announcer.heard(end)
    }

    /// Tells this hub's sessions where the log ends: after its own commit, or another
    /// hub's as announced or read. Only an end past the last one told is told, so the
    /// end a session sees never goes back when announcements and commits cross.
    func publish(_ end: LogEnd) {
        known.withLock { $0.end = max($0.end, end.sequence) }
        told.withLock { told in
            guard end.sequence > told else { return }
            told = end.sequence
            feed.publish(end)
        }
    }

    // MARK: Columns

    /// Two columns of transaction IDs, for `UNNEST`.
    static func columns(_ ids: [TransactionID]) -> (sites: [Int64], sequences: [Int64]) {
        (ids.map { Int64(bitPattern: $0.origin.rawValue) }, ids.map { Int64(bitPattern: $0.sequence) })
    }
}

/// Reading and writing stored values: a value no version of Shoal writes fails the read
/// with the table and column, never a trap.
enum Stored {
    /// A field name as its column holds it (BYTEA: UTF-8, U+0000 included).
    static func bytes(_ name: String) -> ByteBuffer { ByteBuffer(string: name) }

    /// A field name read back.
    static func name(_ buffer: ByteBuffer) -> String { String(buffer: buffer) }

    static func unsigned<T: FixedWidthInteger & UnsignedInteger>(_ value: Int64, _ table: String, _ column: String) throws -> T {
        guard let converted = T(exactly: value) else {
            throw ShoalError(
                .database, "table \(table), column \(column) holds \(value), which no version of Shoal writes: the database was changed by hand or is damaged")
        }
        return converted
    }

    /// A length or count: never negative.
    static func count(_ value: Int64, _ table: String, _ column: String) throws -> Int {
        Int(try unsigned(value, table, column) as UInt64)
    }
}

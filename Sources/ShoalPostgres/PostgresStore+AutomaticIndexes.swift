import Logging
import PostgresNIO
import ShoalCRDT
import ShoalQuery
import ShoalStorage

/// An index a hub makes by itself for a path its queries filter on, as SQLite's store
/// makes `document_by_<hash>`: `shoal_auto_<hash>` on `document (collection,
/// shoal_at(body, path))` over the live documents of every collection, so that the
/// expression a query's filter compares (`PostgresFilter`) is searched rather than cast
/// for each body. Its path is kept as the index's comment, for `SHOW INDEXES`.
package struct AutomaticIndex: Hashable, Sendable {
    let path: [String]

    /// The path as the index's comment holds it: a JSON array of its names.
    var key: String { Value.array(path.map(Value.string)).canonicalJSON }

    /// PostgreSQL's name for it, from a hash of its path (a name is cut at 63 bytes).
    var name: String { "shoal_auto_\(StableHash.fnv1a(key))" }

    /// The statement that builds it, without holding the hubs' writes
    /// (`PostgresStore.buildAutomaticIndex`).
    var createConcurrently: String {
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS \(name) ON document (collection, (\(PostgresFilter.at(path)))) WHERE NOT deleted"
    }

    /// What `SHOW INDEXES` shows of it: as SQLite's automatic indexes, of no one collection.
    var row: Value { UserIndex.automaticRow(name: name, path: path) }

    /// The automatic index whose comment is `comment`, nil for a comment that is no path.
    init?(comment: String) {
        guard case .array(let names)? = try? JSON.parse(comment), !names.isEmpty else { return nil }
        let path = names.compactMap(\.stringValue)
        guard path.count == names.count else { return nil }
        self.path = path
    }

    init(path: [String]) { self.path = path }
}

/// The automatic indexes a hub asked for and knows of: which paths of which collections
/// its queries filtered on that have none yet. No I/O; `PostgresStore.buildAskedIndexes`
/// builds what it holds.
package struct AutomaticIndexRequests: Sendable {
    package struct Wanted: Hashable, Sendable {
        var collection: String
        var index: AutomaticIndex
    }

    /// The names of the automatic indexes known to exist, built by any hub.
    private(set) var built: Set<String> = []
    /// Whether the database holds as many automatic indexes as it may: nothing more is asked.
    var full = false
    /// When each path of each collection was last asked for: not again before `again`.
    private(set) var asked: [Wanted: ContinuousClock.Instant] = [:]
    /// What was asked for and is not taken yet, in order, each once.
    private(set) var pending: [Wanted] = []
    private var pendingSet: Set<Wanted> = []
    /// The indexes whose build failed, by name: how many times in a row, and until when
    /// none of them is asked for (`backOff`).
    private(set) var failures: [String: (count: Int, until: ContinuousClock.Instant)] = [:]
    /// When `asked` was last pruned of what is past `again`.
    private var pruned: ContinuousClock.Instant?

    /// How long a path asked for is not asked again: the build may be under way, or
    /// have found a declared index serving it.
    static let again: Duration = .seconds(60)
    /// The most paths remembered as asked, and builds as failed; past it, those asked
    /// more than `again` ago, and failures whose wait is over, are forgotten.
    static let mostRemembered = 1_024
    /// The longest wait after failed builds: each failure in a row doubles it from `again`.
    static let longestBackOff: Duration = .seconds(3_600)

    /// Records the paths of `collection` that have no automatic index and were not asked
    /// for lately; returns whether any was.
    mutating func ask(collection: String, paths: [[String]], now: ContinuousClock.Instant) -> Bool {
        guard !full else { return false }
        var added = false
        for path in paths where !path.isEmpty {
            let wanted = Wanted(collection: collection, index: AutomaticIndex(path: path))
            guard !built.contains(wanted.index.name), !pendingSet.contains(wanted) else { continue }
            if let failure = failures[wanted.index.name], now < failure.until { continue }
            if let last = asked[wanted], now - last < Self.again { continue }
            // Pruned at most once a second: a full map of fresh entries costs no scan a query.
            if asked.count >= Self.mostRemembered, pruned.map({ now - $0 >= .seconds(1) }) ?? true {
                asked = asked.filter { now - $0.value < Self.again }
                pruned = now
            }
            guard asked.count < Self.mostRemembered else { break }
            asked[wanted] = now
            pending.append(wanted)
            pendingSet.insert(wanted)
            added = true
        }
        return added
    }

    /// What was asked for since the last call.
    mutating func take() -> [Wanted] {
        defer {
            pending = []
            pendingSet = []
        }
        return pending
    }

    /// Whether `wanted` needs no build: its index is known built, or no more may be.
    func settled(_ wanted: Wanted) -> Bool { full || built.contains(wanted.index.name) }

    /// Records that the indexes named `names` exist, and, given the `count` of automatic
    /// ones in all, whether that is the `most` there may be.
    mutating func found(_ names: some Sequence<String>, count: Int? = nil, most: Int) {
        for name in names {
            built.insert(name)
            failures[name] = nil
        }
        if let count { full = count >= most }
    }

    /// Records a failed build of `name`: none of it is asked for until a wait that
    /// doubles with each failure in a row, from `again` up to `longestBackOff`.
    mutating func failed(_ name: String, now: ContinuousClock.Instant) {
        if failures.count >= Self.mostRemembered { failures = failures.filter { now < $0.value.until } }
        let count = (failures[name]?.count ?? 0) + 1
        let wait = min(Self.again * (1 << min(count - 1, 16)), Self.longestBackOff)
        failures[name] = (count, now + wait)
    }
}

extension PostgresStore {
    /// How many automatic indexes the hubs of a database make, as SQLite's store.
    static let maximumAutomaticIndexes = UserIndex.maximumAutomatic

    /// What became of an automatic index asked for.
    package enum AutomaticIndexOutcome: Equatable, Sendable {
        /// Built now.
        case built
        /// It existed (another hub built it).
        case existed
        /// A declared index of the collection leads with the path, and serves it.
        case declared
        /// Another build was running (another hub's, or a declared index's statement), or
        /// one ended this build: it is asked for again when a query asks after
        /// `AutomaticIndexRequests.again`.
        case busy
        /// The database holds `maximumAutomaticIndexes` already.
        case full
        /// PostgreSQL could not build it (a body that is not JSON): the message.
        case failed(String)
    }

    /// Asks for automatic indexes on the paths `filter` reads of `collection`, built in
    /// the background (`buildAutomaticIndexes`); the query that asks does not wait.
    func askForIndexes(collection: String, filter: PreFilter?) {
        guard let filter, !collection.utf8.contains(0) else { return }
        let paths = filter.paths.filter { !$0.contains { $0.utf8.contains(0) } }
        if automaticIndexes.withLock({ $0.ask(collection: collection, paths: paths, now: .now) }) {
            indexWake.yield()
        }
    }

    /// Builds the automatic indexes asked for, as they are asked, until cancelled (`maintain`).
    func buildAutomaticIndexes() async {
        do {
            let existing = try await snapshot("reading the automatic indexes") { connection in
                try await Self.automaticIndexes(connection, logger: self.logger)
            }
            automaticIndexes.withLock { $0.found(existing.map(\.name), count: existing.count, most: Self.maximumAutomaticIndexes) }
        } catch {
            logger.warning("could not read the automatic indexes", metadata: ["shoal.error": "\(error)"])
        }
        // What a build of the last run (or another hub's) left, mended as the builder starts.
        indexWake.yield()
        for await _ in indexWakes {
            let mended = await mendIndexes()
            let outcomes = await buildAskedIndexes()
            // Another build (or a declared index's statement) held the lock, or a mend or a
            // build failed and may have left an invalid index: look again, sooner for the
            // first.
            let failed = outcomes.values.contains { if case .failed = $0 { true } else { false } }
            if mended == .busy || failed || { if case .failed? = mended { true } else { false } }() {
                let wait: Duration = mended == .busy ? .seconds(5) : AutomaticIndexRequests.again
                Task {
                    try? await Task.sleep(for: wait)
                    self.indexWake.yield()
                }
            }
        }
    }

    /// The state `mendIndexes` looks at, in one statement: whether a build left an index
    /// invalid, or one of its own without the comment naming its path (ended between the
    /// two), and whether `shoal_unfilterable` is wanted (an index exists) and not valid.
    static let indexesToMend = """
        SELECT EXISTS (SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                       WHERE i.indrelid = 'document'::regclass
                           AND (c.relname LIKE 'shoal\\_auto\\_%' OR c.relname = 'shoal_unfilterable')
                           AND (NOT i.indisvalid OR (c.relname LIKE 'shoal\\_auto\\_%' AND obj_description(c.oid, 'pg_class') IS NULL))),
               NOT EXISTS (SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                           WHERE i.indrelid = 'document'::regclass AND i.indisvalid AND c.relname = 'shoal_unfilterable')
                   AND (EXISTS (SELECT FROM user_index) OR EXISTS (SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                                WHERE i.indrelid = 'document'::regclass AND i.indisvalid AND c.relname LIKE 'shoal\\_auto\\_%'))
        """

    /// Mends what builds that ended left: drops the indexes they left invalid (and one of
    /// theirs left without its comment, whose path only a query can tell again), and makes
    /// `shoal_unfilterable` where an index needs it and it is not valid (a declared
    /// index's statement that finds one left invalid goes on without it, and wakes the
    /// builder). Holding `buildsLock`, as a build, and deciding again under it, since a
    /// declared index may have been dropped meanwhile; `.busy` when another held it, nil
    /// when there was nothing to mend.
    @discardableResult
    package func mendIndexes() async -> AutomaticIndexOutcome? {
        @Sendable func state(_ connection: HubConnection) async throws -> (Bool, Bool) {
            try await connection.query(PostgresQuery(unsafeSQL: Self.indexesToMend), logger: logger).decode((Bool, Bool).self).first ?? (false, false)
        }
        do {
            let seen = try await snapshot("reading the indexes") { connection in try await state(connection) }
            guard seen.0 || seen.1, !gate.isClosed else { return nil }
            return try await failing("mending the indexes") {
                try await self.database.withConnection { connection in
                    try await self.holdingBuildsLock(connection) {
                        let now = try await state(connection)
                        guard now.0 || now.1 else { return nil }
                        try await Self.dropInvalidIndexes(connection, logger: self.logger)
                        if now.1 { try await connection.query(PostgresQuery(unsafeSQL: Self.createUnfilterableConcurrently), logger: self.logger) }
                        return .built
                    }
                }
            }
        } catch {
            logger.warning("could not mend the indexes that builds left", metadata: ["shoal.error": "\(error)"])
            return .failed(error.message)
        }
    }

    /// Runs `body` on `connection` holding `buildsLock` as a lock of its session, outside
    /// any transaction, with `buildLockWait` as its lock timeout; `.busy` without running it
    /// when another holds the lock, and when its backend was ended meanwhile (by a declared
    /// index's statement, `takeBuildsLock`: what it built is asked for again, not counted
    /// as a failure).
    private func holdingBuildsLock(
        _ connection: HubConnection, _ body: () async throws -> AutomaticIndexOutcome?
    ) async throws -> AutomaticIndexOutcome? {
        do {
            guard try await Self.one(Bool.self, connection.query("SELECT pg_try_advisory_lock(\(Self.buildsLock))", logger: logger)) == true
            else { return .busy }
        } catch {
            // Whether the lock was had is not known: the connection goes, and the lock with it.
            try? await connection.close()
            throw error
        }
        do {
            try await connection.query(PostgresQuery(unsafeSQL: "SET lock_timeout = '\(Self.buildLockWait.wholeMilliseconds)ms'"), logger: logger)
            let outcome = try await body()
            try await connection.query("RESET lock_timeout", logger: logger)
            try await connection.query("SELECT pg_advisory_unlock(\(Self.buildsLock))", logger: logger)
            return outcome
        } catch {
            // Ended by an administrator's command (SQLSTATE 57P01): a declared index's
            // statement ended it, or the server is shutting down.
            let ended = (error as? PSQLError)?.serverInfo?[.sqlState] == "57P01" || connection.isClosed
            // A connection that still answers is given back clean; one that does not (its
            // backend ended) took the lock with it.
            do {
                try await connection.query("RESET lock_timeout", logger: logger)
                try await connection.query("SELECT pg_advisory_unlock(\(Self.buildsLock))", logger: logger)
            } catch {
                try? await connection.close()
            }
            if ended { return .busy }
            throw error
        }
    }

    /// Builds each automatic index asked for since the last call, and returns what became
    /// of each. Best effort: a failure is logged, and the index asked for again after a
    /// while that grows with each failure in a row (`AutomaticIndexRequests.failed`).
    @discardableResult
    package func buildAskedIndexes() async -> [AutomaticIndexRequests.Wanted: AutomaticIndexOutcome] {
        var outcomes: [AutomaticIndexRequests.Wanted: AutomaticIndexOutcome] = [:]
        for wanted in automaticIndexes.withLock({ $0.take() }) {
            guard !Task.isCancelled, !gate.isClosed else { break }
            let outcome: AutomaticIndexOutcome
            do {
                outcome = try await buildAutomaticIndex(wanted)
            } catch {
                outcome = .failed(error.message)
            }
            outcomes[wanted] = outcome
            if case .failed(let message) = outcome {
                automaticIndexes.withLock { $0.failed(wanted.index.name, now: .now) }
                logger.warning(
                    "could not build an index for a queried path of \(wanted.collection); trying again later",
                    metadata: [
                        "shoal.collection": "\(wanted.collection)", "shoal.index": "\(wanted.index.name)", "shoal.error": "\(message)",
                    ])
            }
        }
        return outcomes
    }

    /// Builds one automatic index with `CREATE INDEX CONCURRENTLY`, outside any
    /// transaction and without the hubs' writer: every hub writes on meanwhile. (Built as
    /// the one writer, as a declared index is, it held every hub's writes for as long as
    /// the build took, seconds for 100,000 documents.)
    ///
    /// A concurrent build waits for every transaction older than it, and a declared
    /// index's statement waits for the build's lock on `document`: each would wait for
    /// the other. So the two share `buildsLock`: the build tries for it as a lock of its
    /// session and finds another build running (`.busy`) if it cannot have it; a declared
    /// index's statement takes it for its transaction and ends the backend of a build
    /// that holds it (`takeBuildsLock`), since a declared index is what someone asked for
    /// and an automatic one is asked for again.
    ///
    /// A build that fails, or whose backend ended, leaves an invalid index behind
    /// (PostgreSQL's way): one that failed on a body drops it at once; one that waited too
    /// long for a lock leaves it, since dropping it would wait again; each build, and the
    /// builder (`mendIndexes`), first drops those left (`dropInvalidIndexes`). What needs no build
    /// (known built, or as many as may be, or served by a declared index) is told first
    /// from memory, then on a snapshot, and under the lock again, since another hub may
    /// have built it meanwhile. Each of its waits for a lock (on `document`, for older
    /// transactions to end) lasts `buildLockWait` at most.
    func buildAutomaticIndex(_ wanted: AutomaticIndexRequests.Wanted) async throws(ShoalError) -> AutomaticIndexOutcome {
        let index = wanted.index
        if let known = automaticIndexes.withLock({ $0.settled(wanted) ? ($0.full ? AutomaticIndexOutcome.full : .existed) : nil }) {
            return known
        }
        if let needless = try await snapshot("reading the indexes", { connection in try await self.needless(wanted, connection) }) {
            return needless
        }
        // Not through the writers' gate, which would queue this hub's writes behind it.
        guard !gate.isClosed else { throw ShoalError(.cancelled, "the store closed before building index \(index.name)") }
        let outcome = try await failing("building index \(index.name)") {
            try await self.database.withConnection { connection in
                try await self.holdingBuildsLock(connection) { try await self.buildConcurrently(wanted, connection) } ?? .busy
            }
        }
        if outcome == .built {
            automaticIndexes.withLock { $0.found([index.name], most: Self.maximumAutomaticIndexes) }
        }
        return outcome
    }

    /// `buildAutomaticIndex` holding `buildsLock` on `connection`, outside any transaction.
    private func buildConcurrently(_ wanted: AutomaticIndexRequests.Wanted, _ connection: HubConnection) async throws -> AutomaticIndexOutcome {
        let index = wanted.index
        if let version = try await Self.one(Int.self, connection.query("SELECT current_setting('server_version_num')::int", logger: logger)),
            (140_000..<140_004).contains(version)
        {
            return .failed("PostgreSQL 14.0 to 14.3 can build an index concurrently that misses rows (fixed in 14.4): upgrade the server")
        }
        try await Self.dropInvalidIndexes(connection, logger: logger)
        if let needless = try await needless(wanted, connection) { return needless }
        do {
            try await connection.query(PostgresQuery(unsafeSQL: Self.createUnfilterableConcurrently), logger: logger)
            // A valid index of that name without its comment: a build that ended after
            // it made the index, before the comment; the comment makes it whole.
            try await connection.query(PostgresQuery(unsafeSQL: index.createConcurrently), logger: logger)
        } catch let error as PSQLError where error.serverInfo?[.sqlState]?.hasPrefix("22") == true {
            try await undoFailedBuild(connection)
            return .failed(error.serverInfo?[.message] ?? "\(error)")
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" {
            // Not undone here: dropping the index concurrently would wait for the same
            // transactions again. The builder mends it (`mendIndexes`) a minute later.
            return .failed(
                "it waited \(Self.buildLockWait.wholeMilliseconds / 1000) s for another session's lock on the documents (a VACUUM, an administrator's statement) or for older transactions to end")
        }
        try await connection.query(
            PostgresQuery(unsafeSQL: "COMMENT ON INDEX \(index.name) IS \(PostgresFilter.literal(index.key))"), logger: logger)
        try await connection.query("ANALYZE document", logger: logger)
        return .built
    }

    /// Leaves nothing of a build that failed: its invalid index, and `shoal_unfilterable`
    /// when no index needs it (it costs every update of a body its HOT update).
    private func undoFailedBuild(_ connection: HubConnection) async throws {
        try await Self.dropInvalidIndexes(connection, logger: logger)
        if try await Self.automaticIndexes(connection, logger: logger).isEmpty, try await Self.userIndexes(connection, logger: logger).isEmpty {
            try await connection.query("DROP INDEX CONCURRENTLY IF EXISTS shoal_unfilterable", logger: logger)
        }
    }

    /// The session lock an automatic build holds while it runs, and a declared index's
    /// statement holds for its transaction (`takeBuildsLock`): never both at once.
    static let buildsLock: Int64 = 0x73_68_6F_61_6C_49_58

    /// How long a build waits for a lock: on `document`, another session's (a VACUUM, an
    /// administrator's statement), or for the transactions older than it to end. It
    /// holds no hub's writes meanwhile.
    static let buildLockWait: Duration = .seconds(60)

    /// Takes `buildsLock` for the transaction on `connection` (a declared index's
    /// statement, as the one writer), ending the backend of an automatic build that holds
    /// it, whose lock ends with it; that build is asked for again later. Only backends of
    /// this hub's role are ended (PostgreSQL lets a role end only its own); 10 s at most:
    /// a build that does not end fails the statement.
    static func takeBuildsLock(_ connection: HubConnection, logger: Logger) async throws {
        let started = ContinuousClock.now
        while try await one(Bool.self, connection.query("SELECT pg_try_advisory_xact_lock(\(buildsLock))", logger: logger)) != true {
            guard ContinuousClock.now - started < .seconds(10) else {
                throw ShoalError(
                    .database,
                    "an automatic index build held the index builds' lock for 10 s and did not end (a hub logged in as another role, whose backends this one may not end: give every hub of a database one role)")
            }
            // A lock of one bigint key shows its high half as classid, its low as objid.
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        SELECT pg_terminate_backend(pid) FROM pg_locks
                        WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
                            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                            AND classid = \(UInt64(bitPattern: buildsLock) >> 32) AND objid = \(UInt64(bitPattern: buildsLock) & 0xFFFF_FFFF)
                            AND objsubid = 1
                            AND pid IN (SELECT pid FROM pg_stat_activity WHERE usename = current_user)
                        """), logger: logger)
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Drops the automatic indexes, and `shoal_unfilterable`, that builds which failed or
    /// ended left invalid, and an automatic index left without the comment naming its path
    /// (a build ended between the two: a query asks for the path again); outside any
    /// transaction, holding `buildsLock`.
    static func dropInvalidIndexes(_ connection: HubConnection, logger: Logger) async throws {
        let rows = try await connection.query(
            """
            SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = 'document'::regclass
                AND (c.relname LIKE 'shoal\\_auto\\_%' OR c.relname = 'shoal_unfilterable')
                AND (NOT i.indisvalid OR (c.relname LIKE 'shoal\\_auto\\_%' AND obj_description(c.oid, 'pg_class') IS NULL))
            """, logger: logger)
        for name in try rows.decode(String.self) {
            try await connection.query(PostgresQuery(unsafeSQL: "DROP INDEX CONCURRENTLY IF EXISTS \(name)"), logger: logger)
        }
    }

    /// The one value of a one-row, one-column answer; nil without a row.
    static func one<T: PostgresDecodable>(_ type: T.Type, _ rows: [PostgresRow]) throws -> T? {
        for row in rows { return try row.decode(T.self) }
        return nil
    }

    /// Why `wanted` needs no build, as `connection` sees the database (nil: it needs one),
    /// after recording which automatic indexes exist.
    private func needless(_ wanted: AutomaticIndexRequests.Wanted, _ connection: HubConnection) async throws -> AutomaticIndexOutcome? {
        let index = wanted.index
        let existing = try await Self.automaticIndexes(connection, logger: logger)
        automaticIndexes.withLock { $0.found(existing.map(\.name), count: existing.count, most: Self.maximumAutomaticIndexes) }
        if let same = existing.first(where: { $0.name == index.name }) {
            // Two paths whose names hash alike: the other's index is no index of this one.
            return same == index ? .existed : .failed("its name \(index.name) is that of the index of path \(same.path.joined(separator: "."))")
        }
        if existing.count >= Self.maximumAutomaticIndexes { return .full }
        let declared = try await Self.userIndexes(connection, logger: logger)
        if declared.contains(where: { $0.collection == wanted.collection && $0.paths.first == index.path }) { return .declared }
        return nil
    }

    /// The automatic indexes `connection` sees.
    static func automaticIndexes(_ connection: HubConnection, logger: Logger) async throws -> [AutomaticIndex] {
        let rows = try await connection.query(
            """
            SELECT c.relname, obj_description(c.oid, 'pg_class')
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = 'document'::regclass AND i.indisvalid AND c.relname LIKE 'shoal\\_auto\\_%'
            ORDER BY c.relname
            """, logger: logger)
        return try rows.decode((String, String?).self).compactMap { name, comment in
            // One whose comment is not its path's (altered by hand) is left alone.
            comment.flatMap(AutomaticIndex.init(comment:)).flatMap { $0.name == name ? $0 : nil }
        }
    }

    /// The index of the bodies `jsonb` cannot hold, which a range searches beside an
    /// index on its path (`PostgresFilter.unreadable`): made with the first index, of
    /// either kind.
    static let createUnfilterable =
        "CREATE INDEX IF NOT EXISTS shoal_unfilterable ON document (collection, doc_id) WHERE \(PostgresFilter.unreadable)"
    /// The same, built as automatic indexes are (`buildAutomaticIndex`).
    static let createUnfilterableConcurrently =
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS shoal_unfilterable ON document (collection, doc_id) WHERE \(PostgresFilter.unreadable)"
}

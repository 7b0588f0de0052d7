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

    /// The statement that builds it.
    var create: String {
        "CREATE INDEX \(name) ON document (collection, (\(PostgresFilter.at(path)))) WHERE NOT deleted"
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
        for await _ in indexWakes {
            await buildAskedIndexes()
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

    /// Builds one automatic index as the hubs' one writer, in a transaction of its own,
    /// as a declared one is built: PostgreSQL holds every hub's writes to `document`
    /// meanwhile (as SQLite's store holds its writer), and a hub killed in the middle
    /// leaves nothing. `CREATE INDEX CONCURRENTLY`, which would not hold them, waits for
    /// every transaction older than its own, a declared index's too, which would wait for
    /// it in turn: a deadlock PostgreSQL ends by failing one of them.
    ///
    /// What needs no build (known built, or as many as may be, or served by a declared
    /// index) is told first from memory, then on a snapshot, without the writer; and under
    /// the writer again, since another hub may have built it meanwhile. The build waits
    /// `buildLockWait` at most for a lock another session holds on `document` (a VACUUM,
    /// an administrator's statement), so that it never holds every hub's writes for long
    /// while it waits.
    func buildAutomaticIndex(_ wanted: AutomaticIndexRequests.Wanted) async throws(ShoalError) -> AutomaticIndexOutcome {
        let index = wanted.index
        if let known = automaticIndexes.withLock({ $0.settled(wanted) ? ($0.full ? AutomaticIndexOutcome.full : .existed) : nil }) {
            return known
        }
        if let needless = try await snapshot("reading the indexes", { connection in try await self.needless(wanted, connection) }) {
            return needless
        }
        try await acquireGate()
        defer { gate.release() }
        let (outcome, _) = try await withWriter("building index \(index.name)") { writer in
            let connection = writer.connection
            return try await writer.access("building index \(index.name)") { () async throws -> AutomaticIndexOutcome in
                if let needless = try await self.needless(wanted, connection) { return needless }
                do {
                    try await connection.query(
                        PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = '\(Self.buildLockWait.wholeMilliseconds)ms'"), logger: self.logger)
                    try await connection.query(PostgresQuery(unsafeSQL: Self.createUnfilterable), logger: self.logger)
                    try await connection.query(PostgresQuery(unsafeSQL: index.create), logger: self.logger)
                } catch let error as PSQLError where error.serverInfo?[.sqlState]?.hasPrefix("22") == true {
                    writer.discarded = true
                    return .failed(error.serverInfo?[.message] ?? "\(error)")
                } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" {
                    writer.discarded = true
                    return .failed(
                        "another session held a lock on the documents for \(Self.buildLockWait.wholeMilliseconds / 1000) s (a VACUUM, an administrator's statement)")
                }
                try await connection.query(
                    PostgresQuery(unsafeSQL: "COMMENT ON INDEX \(index.name) IS \(PostgresFilter.literal(index.key))"), logger: self.logger)
                try await connection.query("ANALYZE document", logger: self.logger)
                return .built
            }
        }
        if outcome == .built {
            automaticIndexes.withLock { $0.found([index.name], most: Self.maximumAutomaticIndexes) }
        }
        return outcome
    }

    /// How long a build waits for a lock on `document` that another session holds.
    static let buildLockWait: Duration = .seconds(5)

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
            WHERE i.indrelid = 'document'::regclass AND c.relname LIKE 'shoal\\_auto\\_%'
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
}

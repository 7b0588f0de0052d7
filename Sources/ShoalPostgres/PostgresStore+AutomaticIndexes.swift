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
        "CREATE INDEX IF NOT EXISTS \(name) ON document (collection, (\(PostgresFilter.at(path)))) WHERE NOT deleted"
    }

    /// What `SHOW INDEXES` shows of it: as SQLite's automatic indexes, of no one collection.
    var row: Value {
        ["name": .string(name), "collection": .null, "paths": [.string(path.joined(separator: "."))], "automatic": true]
    }

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
    var built: Set<String> = []
    /// Whether the database holds as many automatic indexes as it may: nothing more is asked.
    var full = false
    /// When each path of each collection was last asked for: not again before `again`.
    private(set) var asked: [Wanted: ContinuousClock.Instant] = [:]
    /// What was asked for and is not built yet, in order.
    private(set) var pending: [Wanted] = []

    /// How long a path asked for is not asked again: the build may be under way, or
    /// have found a declared index serving it, or failed.
    static let again: Duration = .seconds(60)
    /// The most paths remembered as asked; past it, those asked before `again` are forgotten.
    static let mostRemembered = 1_024

    /// Records the paths of `collection` that have no automatic index and were not asked
    /// for lately; returns whether any was.
    mutating func ask(collection: String, paths: [[String]], now: ContinuousClock.Instant) -> Bool {
        guard !full else { return false }
        var added = false
        for path in paths where !path.isEmpty {
            let wanted = Wanted(collection: collection, index: AutomaticIndex(path: path))
            guard !built.contains(wanted.index.name) else { continue }
            if let last = asked[wanted], now - last < Self.again { continue }
            if asked.count >= Self.mostRemembered { asked = asked.filter { now - $0.value < Self.again } }
            guard asked.count < Self.mostRemembered else { break }
            asked[wanted] = now
            pending.append(wanted)
            added = true
        }
        return added
    }

    /// What was asked for since the last call.
    mutating func take() -> [Wanted] {
        defer { pending = [] }
        return pending
    }
}

extension PostgresStore {
    /// How many automatic indexes the hubs of a database make, as SQLite's store
    /// (`DocumentStore.maximumAutomaticIndexes`): each costs space and write time.
    static let maximumAutomaticIndexes = 32

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
            automaticIndexes.withLock {
                $0.built.formUnion(existing.map(\.name))
                $0.full = existing.count >= Self.maximumAutomaticIndexes
            }
        } catch {
            logger.warning("could not read the automatic indexes", metadata: ["shoal.error": "\(error)"])
        }
        for await _ in indexWakes {
            await buildAskedIndexes()
        }
    }

    /// Builds each automatic index asked for since the last call, and returns what became
    /// of each. Best effort: a failure is logged, and the path asked again later.
    @discardableResult
    package func buildAskedIndexes() async -> [AutomaticIndexRequests.Wanted: AutomaticIndexOutcome] {
        var outcomes: [AutomaticIndexRequests.Wanted: AutomaticIndexOutcome] = [:]
        for wanted in automaticIndexes.withLock({ $0.take() }) {
            do {
                let outcome = try await buildAutomaticIndex(wanted)
                outcomes[wanted] = outcome
                if case .failed(let message) = outcome {
                    logger.warning(
                        "could not build an index for a queried path of \(wanted.collection)",
                        metadata: ["shoal.collection": "\(wanted.collection)", "shoal.error": "\(message)"])
                }
            } catch {
                outcomes[wanted] = .failed(error.message)
                logger.warning(
                    "could not build an index for a queried path of \(wanted.collection)",
                    metadata: ["shoal.collection": "\(wanted.collection)", "shoal.error": "\(error)"])
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
    func buildAutomaticIndex(_ wanted: AutomaticIndexRequests.Wanted) async throws(ShoalError) -> AutomaticIndexOutcome {
        try await acquireGate()
        defer { gate.release() }
        let index = wanted.index
        let (outcome, _) = try await withWriter("building index \(index.name)") { writer in
            let connection = writer.connection
            return try await writer.access("building index \(index.name)") { () async throws -> AutomaticIndexOutcome in
                let existing = try await Self.automaticIndexes(connection, logger: self.logger)
                self.automaticIndexes.withLock {
                    $0.built.formUnion(existing.map(\.name))
                    $0.full = existing.count >= Self.maximumAutomaticIndexes
                }
                if existing.contains(index) { return .existed }
                guard existing.count < Self.maximumAutomaticIndexes else { return .full }
                let declared = try await Self.userIndexes(connection, logger: self.logger)
                if declared.contains(where: { $0.collection == wanted.collection && $0.paths.first == index.path }) {
                    return .declared
                }
                do {
                    try await connection.query(PostgresQuery(unsafeSQL: Self.createUnfilterable), logger: self.logger)
                    try await connection.query(PostgresQuery(unsafeSQL: index.create), logger: self.logger)
                } catch let error as PSQLError where error.serverInfo?[.sqlState]?.hasPrefix("22") == true {
                    writer.discarded = true
                    return .failed(error.serverInfo?[.message] ?? "\(error)")
                }
                try await connection.query(
                    PostgresQuery(unsafeSQL: "COMMENT ON INDEX \(index.name) IS \(PostgresFilter.literal(index.key))"), logger: self.logger)
                try await connection.query("ANALYZE document", logger: self.logger)
                return .built
            }
        }
        if outcome == .built { automaticIndexes.withLock { _ = $0.built.insert(index.name) } }
        return outcome
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

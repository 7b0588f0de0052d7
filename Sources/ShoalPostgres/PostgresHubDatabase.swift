public import Logging
public import ShoalCRDT
package import PostgresNIO

/// The PostgreSQL database that hubs share: its schema, the one identity every hub on
/// it has, and the change log's sequence numbers, which no two hubs are ever given.
///
/// Several `shoal run --store postgresql://...` processes on one database are one
/// logical node of the mesh (ARCHITECTURE.md, "Hubs on PostgreSQL"). This is the part
/// of that store which does not depend on the store contract: the contract, and the
/// documents, registers and log behind it, build on it.
///
/// ```
///   hub 1 ──┐                        shoal_migration  (name): each migration once
///   hub 2 ──┼── one database ──────► shoal_meta       (key, value): site, log_end, clock
///   hub N ──┘        ▲               (an advisory lock serializes hubs that migrate at once)
///                    ├──── NOTIFY shoal_log, 'N': the log now ends at N (`followLog`)
///                    └──── NOTIFY shoal_log, 'attachment P H': process P asks for attachment H
/// ```
public final class PostgresHubDatabase: Sendable {
    public let location: PostgresLocation
    let client: PostgresClient
    let logger: Logger
    /// How long a call waits for a pooled connection while the server gives none to
    /// anyone (`withConnection`), before it fails saying so.
    public let unreachableAfter: Duration
    let reachability = Locked(Reachability())

    /// The advisory lock key hubs take while they migrate ("shoal" in ASCII).
    static let migrationLock: Int64 = 0x73_68_6F_61_6C

    /// The schema, in order; a migration's name is recorded when it ran, and never changes.
    package static let migrations: [(name: String, statements: [String])] = [
        (
            "v1-identity",
            [
                "CREATE TABLE shoal_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
                // The highest change-log sequence given out to any hub (its writers, `withWriter`).
                "INSERT INTO shoal_meta (key, value) VALUES ('log_end', 0)",
            ]
        ),
        (
            "v2-clock",
            [
                // The highest hybrid timestamp any hub's own write took (`PostgresDocumentTransaction`).
                "INSERT INTO shoal_meta (key, value) VALUES ('clock', 0)"
            ]
        ),
        (
            // The store's tables (`PostgresStore`), as docs/ARCHITECTURE.md "The SQLite
            // schema" describes them; unsigned 64-bit values (sites, timestamps) are
            // BIGINT bit patterns, as there. Field names are BYTEA (UTF-8): a JSON key
            // may hold U+0000, which TEXT cannot.
            "v3-store",
            [
                // Raised each time every peer cursor is forgotten (`ResumePoint`).
                "INSERT INTO shoal_meta (key, value) VALUES ('cursor_epoch', 0)",
                """
                CREATE TABLE document (
                    collection TEXT COLLATE "C" NOT NULL, doc_id TEXT COLLATE "C" NOT NULL, body TEXT NOT NULL, deleted BOOLEAN NOT NULL DEFAULT false,
                    PRIMARY KEY (collection, doc_id))
                """,
                """
                CREATE TABLE field (
                    collection TEXT COLLATE "C" NOT NULL, doc_id TEXT COLLATE "C" NOT NULL, name BYTEA NOT NULL, value TEXT NOT NULL,
                    ts BIGINT NOT NULL, site BIGINT NOT NULL, txn_site BIGINT NOT NULL, txn_seq BIGINT NOT NULL,
                    txn_index BIGINT NOT NULL, PRIMARY KEY (collection, doc_id, name))
                """,
                // A row per run of one transaction's documents, its entries packed (`LogEntries`).
                """
                CREATE TABLE change_log (
                    seq BIGINT PRIMARY KEY, txn_site BIGINT NOT NULL, txn_seq BIGINT NOT NULL, txn_count BIGINT NOT NULL,
                    documents BIGINT NOT NULL, entries BYTEA NOT NULL)
                """,
                "CREATE INDEX change_log_by_transaction ON change_log (txn_site, txn_seq)",
                """
                CREATE TABLE txn (
                    origin BIGINT NOT NULL, seq BIGINT NOT NULL, delta_count BIGINT NOT NULL, document_count BIGINT NOT NULL,
                    collections TEXT NOT NULL, state BIGINT NOT NULL, rest TEXT NOT NULL DEFAULT '',
                    reports TEXT NOT NULL DEFAULT '', first_seen BIGINT NOT NULL, refusal TEXT,
                    PRIMARY KEY (origin, seq))
                """,
                "CREATE INDEX txn_unfinished ON txn (state) WHERE state IN (0, 2)",
                """
                CREATE TABLE txn_piece (
                    origin BIGINT NOT NULL, seq BIGINT NOT NULL, idx BIGINT NOT NULL, collection TEXT COLLATE "C" NOT NULL,
                    doc_id TEXT COLLATE "C" NOT NULL, doc_deltas BIGINT NOT NULL, name BYTEA NOT NULL, value TEXT NOT NULL,
                    ts BIGINT NOT NULL, PRIMARY KEY (origin, seq, idx))
                """,
                """
                CREATE TABLE txn_context (
                    origin BIGINT NOT NULL, seq BIGINT NOT NULL, collection TEXT COLLATE "C" NOT NULL, doc_id TEXT COLLATE "C" NOT NULL,
                    name BYTEA NOT NULL, value TEXT NOT NULL, ts BIGINT NOT NULL, src_origin BIGINT NOT NULL,
                    src_seq BIGINT NOT NULL, PRIMARY KEY (origin, seq, collection, doc_id, name))
                """,
                """
                CREATE TABLE peer_cursor (
                    peer BIGINT NOT NULL, subscription_key TEXT COLLATE "C" NOT NULL, through BIGINT NOT NULL,
                    PRIMARY KEY (peer, subscription_key))
                """,
                "CREATE TABLE subscription_set (key TEXT COLLATE \"C\" PRIMARY KEY, entries TEXT NOT NULL)",
                "CREATE TABLE peer_ack (peer BIGINT PRIMARY KEY, through BIGINT NOT NULL, heard_at BIGINT NOT NULL)",
                """
                CREATE TABLE neighbour_interest (
                    site BIGINT PRIMARY KEY, subscriptions TEXT NOT NULL, generation BIGINT NOT NULL,
                    heard_from TEXT NOT NULL)
                """,
            ]
        ),
        (
            "v4-local-writes",
            [
                // The last number a hub's own transaction took (the site's, shared by every hub).
                "INSERT INTO shoal_meta (key, value) VALUES ('transaction_counter', 0)",
                // The node's upkeep, as the SQLite store keeps it: subscriptions added at run
                // time, and its freshness (PROTOCOL.md §8.10), kept since `fresh_since`.
                "CREATE TABLE subscription (id TEXT COLLATE \"C\" PRIMARY KEY, query TEXT NOT NULL, arguments TEXT NOT NULL)",
                "CREATE TABLE freshness (site BIGINT PRIMARY KEY, through BIGINT NOT NULL)",
                "INSERT INTO shoal_meta (key, value) VALUES ('fresh_since', (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT)",
                "INSERT INTO shoal_meta (key, value) VALUES ('forgotten_through', 0)",
            ]
        ),
        (
            // Attachments, as the SQLite store keeps them (its migration v8): the bytes in
            // chunks of a blob; a put or a fetch under way in a staging entry (a fetch's
            // keeps its hash, so that an interrupted one resumes, on any hub); the
            // attachment row only once every byte is there and its SHA-256 checked.
            // Blob numbers are shared by every hub, so an upload begun on one hub can be
            // continued on another. `taken` counts the hubs that took up another's request
            // to fetch the bytes (`PostgresStore.fetchThroughOtherProcesses`).
            "v5-attachments",
            [
                """
                CREATE TABLE attachment_staging (
                    blob BIGSERIAL PRIMARY KEY, hash TEXT COLLATE "C" UNIQUE, received BIGINT NOT NULL,
                    updated_at BIGINT NOT NULL, taken BIGINT NOT NULL DEFAULT 0)
                """,
                "CREATE TABLE attachment_chunk (blob BIGINT NOT NULL, start BIGINT NOT NULL, data BYTEA NOT NULL, PRIMARY KEY (blob, start))",
                """
                CREATE TABLE attachment (
                    hash TEXT COLLATE "C" PRIMARY KEY, length BIGINT NOT NULL, blob BIGINT NOT NULL,
                    stored_at BIGINT NOT NULL, unreferenced_since BIGINT)
                """,
            ]
        ),
        (
            // Each write of a waiting or partial transaction's record sets a new random
            // mark: a hub that finds another mark than the one it last wrote or read knows
            // another hub wrote the record since (`PostgresInboundWriter.writtenElsewhere`).
            "v6-record-marks",
            ["ALTER TABLE txn ADD COLUMN mark BIGINT NOT NULL DEFAULT 0"]
        ),
        (
            // A history that went back (`PostgresStore+History.swift`): how far a peer
            // confirmed the hubs' own transactions, and whether the database may lack
            // some of them since a repair (peers streaming from the start send them).
            "v7-history",
            [
                "INSERT INTO shoal_meta (key, value) VALUES ('history_confirmed', 0), ('may_lack_own_transactions', 0)"
            ]
        ),
        (
            // Declared indexes (`PostgresStore+Indexes.swift`). `shoal_at` is the value a
            // query's filter compares and an index holds (`PostgresFilter`): the body's
            // value at a path; or a value every filter keeps, `unfilterable`, for a body
            // `jsonb` cannot hold (one with the escape \u0000) and for a value of more
            // than 256 bytes, so that an index entry of eight paths stays within what a
            // btree page holds (2,704 bytes) and no document is too large to write.
            "v8-user-indexes",
            [
                #"""
                CREATE FUNCTION shoal_at(body TEXT, path TEXT[]) RETURNS jsonb
                LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
                DECLARE v jsonb;
                BEGIN
                    IF strpos(body, E'\\u0000') > 0 THEN RETURN '{"shoal": "unfilterable"}'; END IF;
                    v := body::jsonb #> path;
                    IF pg_column_size(v) > 256 THEN RETURN '{"shoal": "unfilterable"}'; END IF;
                    RETURN v;
                END $$
                """#,
                // `key` is the name in lower case: names ignore case, as on SQLite.
                """
                CREATE TABLE user_index (
                    key TEXT COLLATE "C" PRIMARY KEY, name TEXT NOT NULL, collection TEXT COLLATE "C" NOT NULL,
                    paths TEXT NOT NULL, created_at BIGINT NOT NULL)
                """,
            ]
        ),
        (
            // The transactions the hubs refused, by origin: told again to their origin at
            // each session with it (`PostgresStore.refusedTransactions`). Few, and never
            // looked for among the applied.
            "v9-refused-by-origin",
            ["CREATE INDEX txn_refused ON txn (origin, seq) WHERE state = 3"]
        ),
        (
            // What compaction records of a transaction it takes out of the log, apart from
            // what an apply left out (`LogCompaction.recorded(_:adding:)`), as on SQLite
            // (its migration v19): every `UNKNOWN` an applied transaction recorded before
            // moves, since the two cannot be told apart. A rest `jsonb` cannot read (a
            // name with the escape \u0000) stays as it is.
            "v10-supersession",
            [
                "ALTER TABLE txn ADD COLUMN supersession TEXT NOT NULL DEFAULT ''",
                """
                UPDATE txn SET
                    supersession = COALESCE((SELECT jsonb_agg(v)::text FROM jsonb_array_elements(rest::jsonb) v WHERE v ? 'u'), ''),
                    rest = COALESCE((SELECT jsonb_agg(v)::text FROM jsonb_array_elements(rest::jsonb) v WHERE NOT v ? 'u'), '')
                WHERE state = 1 AND rest LIKE '%"u":%' AND strpos(rest, '\\u0000') = 0
                """,
            ]
        ),
    ]

    /// What every connection of a hub sets: a hub that stops answering in the middle of a
    /// write (its machine gone, the network cut) must not hold `log_end`'s lock, and so
    /// every hub's writes, for the hours the default TCP keepalives take. The server
    /// probes an idle connection after 10 s, gives up after three probes 5 s apart, and
    /// ends a transaction left idle for a minute (a hub's writer never waits that long
    /// between its statements).
    static let sessionParameters: [(String, String)] = [
        ("tcp_keepalives_idle", "10"), ("tcp_keepalives_interval", "5"), ("tcp_keepalives_count", "3"),
        ("idle_in_transaction_session_timeout", "60000"),
    ]

    /// The channel on which hubs say how far the shared change log runs (`notifyLogEnd`).
    static let logChannel = "shoal_log"

    /// This process, as its connections name it to the server (`application_name`):
    /// random, so that hubs can count each other (`otherHubs`) and know their own requests.
    public let process = UInt64.random(in: 1...UInt64.max)

    static func applicationName(_ process: UInt64) -> String { "shoal-hub-" + String(process, radix: 16) }

    /// Connects lazily: nothing reaches the server before `run()` runs and a call is made.
    public init(location: PostgresLocation, logger: Logger, unreachableAfter: Duration = .seconds(10)) {
        self.location = location
        self.logger = logger
        self.unreachableAfter = unreachableAfter
        var configuration = PostgresClient.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: .disable)
        // A server far away may take longer than 10 s to connect to; waits on it are
        // bounded by `unreachableAfter` anyway.
        configuration.options.connectTimeout = max(.seconds(10), unreachableAfter)
        // No keep-alive statements on idle connections: the pool sends them itself, not
        // through `HubConnection`, so one sent as its connection closes would never be
        // answered, and that connection would stay out of the pool. The connections' TCP
        // keepalives (`sessionParameters`) and the lease's watch find dead links instead.
        configuration.options.keepAliveBehavior = nil
        configuration.options.additionalStartupParameters =
            Self.sessionParameters + [("application_name", Self.applicationName(process))]
        client = PostgresClient(configuration: configuration, backgroundLogger: logger)
    }

    /// The connection pool, for a caller that runs its own SQL (the benchmark's baseline).
    package var pool: PostgresClient { client }

    /// Runs the connection pool until the task is cancelled: every other call needs it running.
    public func run() async { await client.run() }

    /// Creates or upgrades the schema: the migrations not yet recorded, each in its own
    /// transaction, under an advisory lock so that hubs starting together take turns.
    /// Returns the names of the migrations it ran.
    @discardableResult
    public func migrate() async throws(PostgresStoreError) -> [String] {
        try await checkReachable()
        return try await failing("migrating the schema") {
            try await withConnection { connection in
                try await connection.query("BEGIN", logger: logger)
                do {
                    try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLock))", logger: logger)
                    try await connection.query(
                        "CREATE TABLE IF NOT EXISTS shoal_migration (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                        logger: logger)
                    let applied = Set(try await connection.query("SELECT name FROM shoal_migration", logger: logger).decode(String.self))
                    var ran: [String] = []
                    for migration in Self.migrations where !applied.contains(migration.name) {
                        for statement in migration.statements {
                            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                        }
                        try await connection.query("INSERT INTO shoal_migration (name) VALUES (\(migration.name))", logger: logger)
                        ran.append(migration.name)
                    }
                    try await connection.query("COMMIT", logger: logger)
                    return ran
                } catch {
                    await connection.rollBack(logger: logger)
                    throw error
                }
            }
        }
    }

    /// The site ID of the node that the hubs on this database are together: made by the
    /// first hub to ask, read by every other, the same for ever after.
    public func siteID() async throws(PostgresStoreError) -> SiteID {
        try await failing("reading the hub's site ID") {
            let candidate = Int64(bitPattern: SiteID.random().rawValue)
            try await query(
                "INSERT INTO shoal_meta (key, value) VALUES ('site', \(candidate)) ON CONFLICT (key) DO NOTHING", logger: logger)
            for value in try await query("SELECT value FROM shoal_meta WHERE key = 'site'", logger: logger)
                .decode(Int64.self)
            {
                return SiteID(UInt64(bitPattern: value))
            }
            throw PostgresStoreError("the database has no site ID after one was written: is the schema migrated?")
        }
    }

    /// Gives out `count` consecutive change-log sequence numbers and returns the first.
    /// The row lock on `log_end` serializes hubs: no number is given out twice, and a
    /// block is never interleaved with another hub's. Not for log rows: it commits at
    /// once, and rows inserted under these numbers in a later transaction could commit
    /// after rows numbered above them, which a stream reading past them never goes back
    /// for. The hubs' writers number their rows under the lock, through their commit.
    package func allocateSequences(_ count: Int) async throws(PostgresStoreError) -> UInt64 {
        guard count > 0 else { throw PostgresStoreError("allocating \(count) sequence numbers: at least one") }
        return try await failing("allocating change-log sequence numbers") {
            let rows = try await query(
                "UPDATE shoal_meta SET value = value + \(Int64(count)) WHERE key = 'log_end' RETURNING value",
                logger: logger)
            for end in try rows.decode(Int64.self) { return UInt64(end - Int64(count) + 1) }
            throw PostgresStoreError("the database has no log_end row: is the schema migrated?")
        }
    }

    /// Tells every hub following the log (`followLog`) that it now runs through
    /// `sequence`: a hub announces after it commits. On a connection of its own, this
    /// is not part of the commit: a hub that stops between the two announces nothing
    /// (the followers' slow timer finds it), and announcements of two hubs may arrive
    /// out of order (a follower takes the highest it heard).
    package func notifyLogEnd(_ sequence: UInt64) async throws(PostgresStoreError) {
        _ = try await failing("announcing the change log's end") {
            try await query("SELECT pg_notify(\(Self.logChannel), \(String(sequence)))", logger: logger)
        }
    }

    /// Follows what hubs announce of the change log's end (`notifyLogEnd`), calling
    /// `announced` with each sequence, in the order PostgreSQL delivers them, until the
    /// task is cancelled or the connection fails. `listening` is called once the
    /// server listens: announcements after it are delivered. Cancelled, it returns or
    /// throws, depending on where it was: a caller that follows again on an error
    /// checks `Task.isCancelled` first.
    ///
    /// A hub's wake-up, not its record: PostgreSQL drops what it announced while a hub
    /// was not listening (reconnecting, say), so a hub reads the log from where it is
    /// each time it starts following, and on a slow timer as well.
    ///
    /// The same channel carries the hubs' requests for attachments
    /// (`askForAttachment`), handed to `asked`, and `cursors <epoch>` when a hub forgot
    /// every peer cursor (a repair, `PostgresStore+History.swift`), handed to `forgot`.
    ///
    /// A listening connection sends nothing of its own, so a link that died without a
    /// word (a failover to another machine behind the same address, a firewall that
    /// forgot the flow) would leave it waiting for ever, the hub hearing the other hubs
    /// only at its slow timer. So the connection is asked for an answer every
    /// `listenCheck` (or `unreachableAfter`, if shorter); one that gives none within
    /// `unreachableAfter`, or fails, is closed, and this throws saying so.
    public func followLog(
        listening: @Sendable () -> Void = {}, asked: @Sendable (_ hash: String, _ by: UInt64) async -> Void = { _, _ in },
        forgot: @Sendable (_ epoch: UInt64) async -> Void = { _ in }, _ announced: @Sendable (UInt64) async -> Void
    ) async throws(PostgresStoreError) {
        try await failing("following the change log's announcements") {
            try await client.withConnection { connection in
                noteAnswer()
                let dead = Locked<String?>(nil)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    // From before LISTEN: on a dead link, LISTEN itself is never answered.
                    group.addTask { await self.watchListening(HubConnection(connection), dead: dead) }
                    defer { group.cancelAll() }
                    do {
                        try await connection.listen(on: Self.logChannel) { notifications in
                            listening()
                            for try await notification in notifications {
                                let payload = notification.payload
                                if let sequence = UInt64(payload) {
                                    await announced(sequence)
                                } else if let (hash, by) = Self.attachmentRequest(payload) {
                                    await asked(hash, by)
                                } else if payload.hasPrefix("cursors "), let epoch = UInt64(payload.dropFirst("cursors ".count)) {
                                    await forgot(epoch)
                                } else {
                                    logger.warning("ignoring an announcement on \(Self.logChannel) that Shoal does not send: \(payload.prefix(80))")
                                }
                            }
                        }
                    } catch {
                        // The watch closed it: its words say why.
                        if let dead = dead.withLock({ $0 }) { throw PostgresStoreError(dead) }
                        throw error
                    }
                    if let dead = dead.withLock({ $0 }) { throw PostgresStoreError(dead) }
                }
            }
        }
    }

    /// How often a listening connection is asked for an answer (`followLog`).
    static let listenCheck: Duration = .seconds(5)

    /// Asks `connection` for an answer every `listenCheck` until cancelled; when none
    /// comes within `unreachableAfter`, or the statement fails, says why in `dead` and
    /// closes the connection, which ends what listens on it.
    func watchListening(_ connection: HubConnection, dead: Locked<String?>) async {
        let every = min(Self.listenCheck, unreachableAfter)
        while (try? await Task.sleep(for: every)) != nil {
            let failure: String? = await withTaskGroup(of: String?.self) { group in
                group.addTask {
                    do {
                        // A statement's wait ignores cancellation: cancelled (the hub
                        // stopping) while no answer comes, the connection is closed, or
                        // the stop would wait for TCP to give up on a dead link.
                        try await withTaskCancellationHandler {
                            try await connection.query("SELECT 1", logger: self.logger)
                        } onCancel: {
                            Task { try? await connection.close() }
                        }
                        return nil
                    } catch {
                        return "failed: \(Self.describe(error))"
                    }
                }
                group.addTask {
                    // Cancelled once the answer came: then it says nothing.
                    guard (try? await Task.sleep(for: self.unreachableAfter)) != nil else { return nil }
                    return "gave no answer within \(self.unreachableAfter)"
                }
                defer { group.cancelAll() }
                // The first to end. A statement still waiting ends when the connection closes.
                guard let first = await group.next() ?? nil, !Task.isCancelled else { return nil }
                dead.withLock { $0 = "the connection that listens for the other hubs' commits \(first): closed, to listen on another" }
                try? await connection.close()
                return first
            }
            if failure != nil { return }
            noteAnswer()
        }
    }

    /// Asks the other hubs following the log to fetch attachment `hash` from their peers:
    /// `attachment <this process, hex> <hash>` on the log's channel.
    public func askForAttachment(_ hash: String) async throws(PostgresStoreError) {
        let payload = "attachment \(String(process, radix: 16)) \(hash)"
        _ = try await failing("asking the other hubs for attachment \(hash)") {
            try await query("SELECT pg_notify(\(Self.logChannel), \(payload))", logger: logger)
        }
    }

    /// The hash and asking process of an attachment request's payload.
    package static func attachmentRequest(_ payload: String) -> (hash: String, by: UInt64)? {
        let parts = payload.split(separator: " ")
        guard parts.count == 3, parts[0] == "attachment", let by = UInt64(parts[1], radix: 16) else { return nil }
        return (String(parts[2]), by)
    }

    /// How many other hub processes are connected to the database now (by their
    /// connections' `application_name`, `shoal-hub-<process>`; the server drops a
    /// process's name when its last connection ends).
    public func otherHubs() async throws(PostgresStoreError) -> Int {
        try await failing("counting the other hubs") {
            let rows = try await query(
                """
                SELECT count(DISTINCT application_name) FROM pg_stat_activity
                WHERE datname = current_database() AND application_name LIKE 'shoal-hub-%'
                AND application_name <> \(Self.applicationName(process))
                """, logger: logger)
            for count in try rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }

    /// Connects once, outside the pool, and says why when that fails: the pool itself
    /// retries an unreachable server for ever, which would leave a hub starting without
    /// a word. A hub calls it (through `migrate()`) before it serves.
    public func checkReachable() async throws(PostgresStoreError) {
        try await failing("connecting") { try await connectOnce(within: max(.seconds(10), unreachableAfter)) }
    }

    /// Connects outside the pool, logs in and disconnects, all within `timeout`.
    func connectOnce(within timeout: Duration) async throws {
        var configuration = PostgresConnection.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: .disable)
        configuration.options.connectTimeout = TimeAmount(timeout)
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
        try await connection.close()
    }

    /// Runs one statement that takes no arguments, such as an operator's `CREATE DATABASE`.
    public func execute(_ sql: String) async throws(PostgresStoreError) {
        _ = try await failing("running \(sql)") {
            try await query(PostgresQuery(unsafeSQL: sql), logger: logger)
        }
    }

    /// Runs `body`, turning what PostgreSQL or the connection throws into an error that
    /// says what was being done and where.
    func failing<T>(_ doing: String, _ body: () async throws -> T) async throws(PostgresStoreError) -> T {
        do {
            return try await body()
        } catch let error as PostgresStoreError {
            throw error
        } catch {
            throw PostgresStoreError("\(doing) on \(location): \(Self.describe(error))")
        }
    }

    /// What went wrong, in PostgreSQL's words when the server said it.
    static func describe(_ error: any Error) -> String {
        if let error = error as? Unreachable { return error.description }
        guard let error = error as? PSQLError else {
            // The pool's own errors (PostgresNIO's connection pool module) say what they are
            // only in their names.
            let text = "\(error)"
            if text.contains("connectionCreationCircuitBreakerTripped") {
                return "cannot connect to the server: the last attempts failed (the hub keeps trying)"
            }
            if text.contains("poolShutdown") { return "the connection pool has shut down" }
            return text
        }
        if let message = error.serverInfo?[.message] { return message }
        if error.code == .connectionError || error.code == .serverClosedConnection || error.code == .clientClosedConnection {
            return "the connection to the server failed (\(error.code)): \(error.underlying.map { "\($0)" } ?? "no reason given")"
        }
        return error.underlying.map { "\($0)" } ?? "\(error.code)"
    }
}

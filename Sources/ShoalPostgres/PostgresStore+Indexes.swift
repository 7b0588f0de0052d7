import Logging
import PostgresNIO
package import ShoalCRDT
package import ShoalQuery
package import ShoalStorage

/// A declared index (`UserIndex`) as a hub keeps it: a partial expression index on
/// `document` over the values `shoal_at` reads at its paths, limited to the live
/// documents of its collection, so other collections' rows hold no entries in it
/// (though, `body` being indexed, no update of a document is a HOT update). A query's
/// filter reads its paths with the same expression (`PostgresFilter`), so the
/// planner can search the index. The declaration is kept in `user_index` (migration
/// `v8-user-indexes`), shared by every hub.
extension UserIndex {
    /// PostgreSQL's name for it, from a hash of its key: PostgreSQL cuts a name at 63
    /// bytes, and two names that hash alike fail to be created ("already exists").
    var postgresName: String { "shoal_index_\(StableHash.fnv1a(key))" }

    /// The statement that builds it.
    var postgresCreate: String {
        "CREATE INDEX \(postgresName) ON document ("
            + paths.map { "(\(PostgresFilter.at($0)))" }.joined(separator: ", ")
            + ") WHERE collection = \(PostgresFilter.literal(collection)) AND NOT deleted"
    }
}

extension PostgresStore {
    /// The declared indexes, by key, as `connection` sees them.
    static func userIndexes(_ connection: HubConnection, key: String? = nil, logger: Logger) async throws -> [UserIndex] {
        let rows = try await connection.query(
            key.map { "SELECT name, collection, paths FROM user_index WHERE key = \($0)" }
                ?? "SELECT name, collection, paths FROM user_index ORDER BY key", logger: logger)
        return try rows.decode((String, String, String).self).map { name, collection, paths in
            UserIndex(name: name, collection: collection, paths: UserIndex.paths(fromJSON: paths))
        }
    }

    /// `SHOW INDEXES`, on a snapshot or in a write: the declared indexes, then the automatic ones.
    static func showIndexes(_ connection: HubConnection, logger: Logger) async throws -> [Value] {
        try await userIndexes(connection, logger: logger).map(\.row) + automaticIndexes(connection, logger: logger).map(\.row)
    }

    /// Runs `CREATE INDEX` or `DROP INDEX` as the hubs' one writer, inside the statement's
    /// transaction (so a transaction that rolls back leaves no index), and returns its rows.
    /// Its statements go through the writer (`access`), which a failure leaves aborted;
    /// the caller rolls back to a savepoint taken before the call
    /// (`PostgresDocumentTransaction.run`, `PostgresInboundWriter.undo(to:)`).
    ///
    /// Building an index locks `document` against writes, and dropping one against reads
    /// too, until the transaction commits: every hub waits for it. Either first takes the
    /// index builds' lock, ending an automatic build that runs (`takeBuildsLock`), which
    /// would wait for this transaction while it waited for the build.
    func runIndexStatement(_ statement: IndexStatement, writer: PostgresInboundWriter) async throws(ShoalError) -> [Value] {
        let connection = writer.connection
        switch statement {
        case .show:
            // Through `access`: a failure here aborts the database transaction, which must not commit.
            return try await writer.access("listing the declared indexes") { try await Self.showIndexes(connection, logger: logger) }
        case .create(let definition, let ifNotExists):
            let index = UserIndex(definition)
            let existing = try await writer.access("reading the declared indexes") {
                try await Self.userIndexes(connection, key: index.key, logger: logger).first
            }
            if let existing {
                if ifNotExists { return [existing.row] }
                throw existing.exists(at: definition.namePosition)
            }
            guard !index.collection.utf8.contains(0), !index.paths.joined().contains(where: { $0.utf8.contains(0) }) else {
                throw UserIndex.error(
                    "a collection or path whose name holds a NUL character cannot be indexed on a hub", at: definition.namePosition)
            }
            // A build that fails on a body (one stored by hand that is not JSON: a data
            // exception, SQLSTATE class 22) says so; the caller (`run`) undoes the statement.
            let failure: String? = try await writer.access("creating index \(index.name)") {
                try await Self.takeBuildsLock(connection, logger: logger)
                // One an automatic build left invalid is not dropped here (that would lock
                // the documents against every reader): the builder makes it again.
                if try await Self.unfilterableInvalid(connection, logger: logger) { indexWake.yield() }
                do {
                    // The bodies `jsonb` cannot hold, which a range keeps by their text
                    // (`PostgresFilter.unreadable`): few, and only where indexes are, since a
                    // partial index over `body` ends HOT updates of every document.
                    try await connection.query(PostgresQuery(unsafeSQL: Self.createUnfilterable), logger: logger)
                    try await connection.query(PostgresQuery(unsafeSQL: index.postgresCreate), logger: logger)
                } catch let error as PSQLError where error.serverInfo?[.sqlState]?.hasPrefix("22") == true {
                    return error.serverInfo?[.message] ?? "\(error)"
                }
                try await connection.query(
                    """
                    INSERT INTO user_index (key, name, collection, paths, created_at)
                    VALUES (\(index.key), \(index.name), \(index.collection), \(index.pathsJSON),
                            (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT)
                    """, logger: logger)
                // The planner's figures for the new expressions, as SQLite's store refreshes
                // its own (from a sample: its cost does not grow with the table).
                try await connection.query("ANALYZE document", logger: logger)
                return nil
            }
            if let failure {
                throw UserIndex.error(
                    "index \(index.name) could not be built on \(database.location): \(failure)", at: definition.namePosition)
            }
            return [index.row]
        case .drop(let name, let ifExists, let position):
            return try await writer.access("dropping index \(name)") {
                try await Self.takeBuildsLock(connection, logger: logger)
                guard let index = try await Self.userIndexes(connection, key: name.lowercased(), logger: logger).first else {
                    if try await Self.automaticIndexes(connection, logger: logger).contains(where: { $0.name == name.lowercased() }) {
                        throw UserIndex.automatic(name, at: position)
                    }
                    if ifExists { return [] }
                    throw UserIndex.missing(name, at: position)
                }
                try await connection.query(PostgresQuery(unsafeSQL: "DROP INDEX IF EXISTS \(index.postgresName)"), logger: logger)
                try await connection.query("DELETE FROM user_index WHERE key = \(index.key)", logger: logger)
                // With the last index goes the one of the bodies `jsonb` cannot hold, and
                // documents' updates may be HOT updates again. (The builds' lock keeps
                // automatic builds out meanwhile.)
                if try await Self.userIndexes(connection, logger: logger).isEmpty,
                    try await Self.automaticIndexes(connection, logger: logger).isEmpty
                {
                    try await connection.query("DROP INDEX IF EXISTS shoal_unfilterable", logger: logger)
                }
                return [index.row]
            }
        }
    }

    /// Whether `shoal_unfilterable` is there, left invalid by an automatic build that ended.
    static func unfilterableInvalid(_ connection: HubConnection, logger: Logger) async throws -> Bool {
        try await one(
            Bool.self,
            connection.query(
                """
                SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                WHERE i.indrelid = 'document'::regclass AND c.relname = 'shoal_unfilterable'
                """, logger: logger)) == true
    }
}

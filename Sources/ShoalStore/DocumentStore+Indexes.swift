import ShoalCRDT
import ShoalStorage
import ShoalQuery
import GRDB
import Foundation
import Logging

/// A declared index (`UserIndex`) as SQLite keeps it: a partial expression index on
/// `document`, limited to the live documents of its collection, so it costs nothing to
/// other collections' writes.
///
/// The candidate query writes the collection into its SQL (`SQLFilter.collectionCondition`)
/// so that SQLite can prove the index covers it. The declaration is kept in
/// `user_index` (migration `v10-user-indexes`); the index itself in SQLite's schema
/// as `shoal_index_<name>`, apart from the automatic `document_by_<hash>` ones.
extension UserIndex {
    /// SQLite's name for it (index names in SQLite ignore case, as `user_index.name` does).
    var sqliteName: String { "shoal_index_\(key)" }

    var createStatement: String {
        let columns = paths.compactMap(SQLFilter.jsonPath).map(SQLFilter.extract).joined(separator: ", ")
        return "CREATE INDEX \"\(sqliteName)\" ON document (\(columns)) "
            + "WHERE collection = \(SQLFilter.literal(collection)) AND deleted = 0"
    }

    static func fetchAll(_ db: Database) throws -> [UserIndex] {
        try Row.fetchAll(db, sql: "SELECT name, collection, paths FROM user_index ORDER BY name").map { row in
            let row = StoredRow(row, of: "user_index")
            return UserIndex(
                name: try row.value(Column("name")), collection: try row.value(Column("collection")),
                paths: (try? row.value(Column("paths"), as: String.self)).map(paths(fromJSON:)) ?? [])
        }
    }

    static func fetch(_ db: Database, named name: String) throws -> UserIndex? {
        try fetchAll(db).first { $0.key == name.lowercased() }
    }
}

/// When the planner's statistics are due: after enough documents were written since
/// the last refresh.
struct StatisticsSchedule: Sendable {
    /// Document entries logged since the last refresh (or since the store opened).
    var loggedSinceRefresh: UInt64 = 0
    /// The documents the last refresh counted (`sqlite_stat1`), 0 if none is known.
    var documentsAtRefresh: UInt64 = 0
    /// The fewest documents written between two refreshes; beyond it, a refresh waits
    /// for half as many writes as the last one counted documents.
    var minimumGrowth: UInt64 = 10_000

    /// Counts `logged` more documents; true when a refresh is due, and then counts
    /// from 0 again.
    mutating func note(_ logged: Int) -> Bool {
        loggedSinceRefresh += UInt64(max(0, logged))
        guard loggedSinceRefresh >= max(minimumGrowth, documentsAtRefresh / 2) else { return false }
        loggedSinceRefresh = 0
        return true
    }

    /// The number of documents `sqlite_stat1` holds for table `document` (the first
    /// figure of its `stat`), nil when there are no statistics.
    static func documents(_ db: Database) throws -> UInt64? {
        guard try db.tableExists("sqlite_stat1") else { return nil }
        return try Int64.fetchOne(db, sql: "SELECT CAST(stat AS INTEGER) FROM sqlite_stat1 WHERE tbl = 'document' LIMIT 1")
            .map { UInt64(max(0, $0)) }
    }
}

extension DocumentStore {
    /// Runs `CREATE INDEX`, `DROP INDEX` or `SHOW INDEXES` on `db` (the writer for the
    /// first two, inside the statement's transaction) and returns its rows.
    func runIndexStatement(_ statement: IndexStatement, db: Database) throws -> [Value] {
        switch statement {
        case .show:
            return try UserIndex.fetchAll(db).map(\.row) + Self.automaticIndexRows(db)
        case .create(let definition, let ifNotExists):
            let index = UserIndex(definition)
            if let existing = try UserIndex.fetch(db, named: index.name) {
                if ifNotExists { return [existing.row] }
                throw existing.exists(at: definition.namePosition)
            }
            guard !index.collection.utf8.contains(0) else {
                throw UserIndex.error("a collection whose name holds a NUL character cannot be indexed", at: definition.namePosition)
            }
            try db.execute(sql: index.createStatement)
            try db.execute(
                sql: "INSERT INTO user_index (name, collection, paths, created_at) VALUES (?, ?, ?, ?)",
                arguments: [index.name, index.collection, index.pathsJSON, Int64(Date().timeIntervalSince1970 * 1000)])
            try Self.refreshStatistics(db)
            return [index.row]
        case .drop(let name, let ifExists, let position):
            guard let index = try UserIndex.fetch(db, named: name) else {
                if try Self.automaticIndexRows(db).contains(where: { $0["name"] == .string(name) }) {
                    throw UserIndex.automatic(name, at: position)
                }
                if ifExists { return [] }
                throw UserIndex.missing(name, at: position)
            }
            try db.execute(sql: "DROP INDEX \"\(index.sqliteName)\"")
            try db.execute(sql: "DELETE FROM user_index WHERE name = ?", arguments: [index.name])
            return [index.row]
        }
    }

    /// The automatic indexes, as `SHOW INDEXES` rows: they serve every collection.
    static func automaticIndexRows(_ db: Database) throws -> [Value] {
        let rows = try Row.fetchAll(
            db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name LIKE 'document_by_%' ORDER BY name")
        return try rows.compactMap { row -> Value? in
            let row = StoredRow(row, of: "sqlite_master")
            guard let path = automaticIndexPath(try row.value(Column("sql"))) else { return nil }
            // `$."a"."b"`, whose components hold no '"': split between the quotes.
            let components = path.dropFirst(2).split(separator: "\".\"").map {
                String($0).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            }
            return UserIndex.automaticRow(name: try row.value(Column("name")), path: components)
        }
    }

    /// The JSON path of an automatic index, recovered from its SQL
    /// ("... json_extract(body, '$."a"'))").
    static func automaticIndexPath(_ sql: String) -> String? {
        guard let start = sql.range(of: "json_extract(body, '"), let end = sql.range(of: "'))", options: .backwards)
        else { return nil }
        return String(sql[start.upperBound..<end.lowerBound]).replacingOccurrences(of: "''", with: "'")
    }

    /// Reads the declared indexes again, after a commit that created or dropped one.
    func reloadUserIndexes() async {
        do {
            let indexes = try await read { db in try UserIndex.fetchAll(db) }
            userIndexes.withLock { $0 = indexes }
        } catch {
            logger.warning("could not read the declared indexes", metadata: ["shoal.error": "\(error)"])
        }
    }

    /// The JSON paths a declared index of `collection` leads with: no automatic index
    /// is made for them, since that index serves them.
    func declaredLeadingPaths(of collection: String) -> Set<String> {
        userIndexes.withLock { indexes in
            Set(indexes.filter { $0.collection == collection }.compactMap { $0.paths.first.flatMap(SQLFilter.jsonPath) })
        }
    }

    /// Recomputes the planner's statistics on `document` and its indexes (`ANALYZE`),
    /// so that it prefers an index to the primary key where the index narrows more.
    static func refreshStatistics(_ db: Database) throws {
        try db.execute(sql: "ANALYZE document")
    }

    /// Refreshes the statistics inside the committing write, which logged `logged`
    /// document entries, once `minimumGrowth` documents were written since the last
    /// refresh, and half as many as that refresh counted (`StatisticsSchedule`; the
    /// store reads the count `sqlite_stat1` holds when it opens). Best effort: a commit
    /// never fails for it.
    func refreshStatisticsIfGrown(_ db: Database, logged: Int) {
        guard logged > 0, statistics.withLock({ $0.note(logged) }) else { return }
        do {
            try Self.refreshStatistics(db)
            let counted = try StatisticsSchedule.documents(db) ?? 0
            statistics.withLock { $0.documentsAtRefresh = counted }
        } catch {
            logger.warning("could not refresh the query planner's statistics", metadata: ["shoal.error": "\(error)"])
        }
    }
}

package import Foundation
import Logging
package import Metrics
import NIOCore
import PostgresNIO
package import ShoalCRDT
package import ShoalStorage
import ShoalQuery

/// A hub's upkeep (`NodeStore`): its saved subscriptions and freshness, status, counts,
/// and the background work a node runs while it serves.
///
/// Compaction and forgetting tombstones are in `PostgresStore+Compaction.swift`,
/// attachments in `PostgresStore+Attachments.swift`.
extension PostgresStore: NodeStore {
    package var committedLocalTransactions: UInt64 { localCommits.withLock { $0 } }

    package var runningTransactions: [TransactionInfo] { running.transactions }

    package func page(_ query: String, arguments: [String: Value], after key: String, limit: Int) async throws(ShoalError)
        -> DocumentPage
    {
        let select = try DocumentPage.select(of: try parse(query), limit: limit)
        do {
            return try await snapshot("reading a page of \(select.collection)") { connection in
                var match = try DocumentMatch(predicate: select.whereClause, limit: .literal(.int(Int64(limit))), arguments: arguments)
                try await Self.liveBodies(connection, of: select.collection, after: key, logger: self.logger) { key, body in
                    try match.offer(key: key, body: { body })
                    return match.wantsMore
                }
                let documents = try match.finish()
                return DocumentPage(
                    items: try DocumentMatch.items(documents.map(\.body), select, arguments: arguments), lastKey: documents.last?.key)
            }
        } catch {
            throw error.locating(in: query)
        }
    }

    // MARK: Saved subscriptions

    /// Times each local commit that writes something with `timer` from now on (the
    /// node's `shoal_commit_duration_seconds`, as a store on SQLite feeds it).
    package func timeCommits(with timer: Metrics.Timer) {
        commitDuration.withLock { $0 = timer }
    }

    package func savedSubscriptions() async throws(ShoalError) -> [SavedSubscription] {
        try await snapshot("reading the saved subscriptions") { connection in
            var saved: [SavedSubscription] = []
            let rows = try await connection.query("SELECT id, query, arguments FROM subscription ORDER BY id", logger: self.logger)
            for (id, query, arguments) in try rows.decode((String, String, String).self) {
                guard let parsed = try? JSON.parse(arguments).objectValue else {
                    throw ShoalError(.database, "table subscription, row \(id): its arguments are not a JSON object")
                }
                saved.append(SavedSubscription(id: id, query: query, arguments: parsed))
            }
            return saved
        }
    }

    package func saveSubscription(_ subscription: SavedSubscription) async throws(ShoalError) {
        try Self.refuseNul(subscription.query, "a subscription's query")
        try await run(
            "saving a subscription",
            "INSERT INTO subscription (id, query, arguments) VALUES (\(subscription.id), \(subscription.query), \(Value.object(subscription.arguments).canonicalJSON)) ON CONFLICT (id) DO NOTHING"
        )
    }

    package func removeSavedSubscription(id: String) async throws(ShoalError) -> Bool {
        try await failing("removing a subscription") {
            let rows = try await database.query("DELETE FROM subscription WHERE id = \(id) RETURNING id", logger: logger)
            var removed = false
            for _ in try rows.decode(String.self) { removed = true }
            return removed
        }
    }

    // MARK: Freshness

    package func savedFreshness() throws(ShoalError) -> (entries: [SiteID: UInt64], forgottenThrough: UInt64) {
        freshness.withLock { $0 }
    }

    /// The freshness saved and the forgotten point, read at open: `savedFreshness` is synchronous.
    static func readFreshness(_ database: PostgresHubDatabase, logger: Logger) async throws(ShoalError)
        -> (entries: [SiteID: UInt64], forgottenThrough: UInt64)
    {
        do {
            var entries: [SiteID: UInt64] = [:]
            for (site, through) in try await database.query("SELECT site, through FROM freshness", logger: logger)
                .decode((Int64, Int64).self)
            {
                entries[SiteID(UInt64(bitPattern: site))] = try Stored.unsigned(through, "freshness", "through")
            }
            var forgotten: UInt64 = 0
            for value in try await database.query(
                "SELECT value FROM shoal_meta WHERE key = 'forgotten_through'", logger: logger
            ).decode(Int64.self) {
                forgotten = try Stored.unsigned(value, "shoal_meta", "value of forgotten_through")
            }
            return (entries, forgotten)
        } catch let error as ShoalError {
            throw error
        } catch {
            throw ShoalError(.database, "reading the hub's freshness on \(database.location): \(PostgresHubDatabase.describe(error))")
        }
    }

    package func saveFreshness(_ entries: [SiteID: UInt64]) async throws(ShoalError) {
        guard !entries.isEmpty else { return }
        let sites = entries.keys.map { Int64(bitPattern: $0.rawValue) }
        let throughs = entries.keys.map { Int64(clamping: entries[$0]!) }
        try await run(
            "saving the hub's freshness",
            """
            INSERT INTO freshness (site, through) SELECT * FROM UNNEST(\(sites)::bigint[], \(throughs)::bigint[])
            ON CONFLICT (site) DO UPDATE SET through = GREATEST(freshness.through, excluded.through)
            """)
        freshness.withLock { saved in
            for (site, through) in entries { saved.entries[site] = max(saved.entries[site] ?? 0, through) }
        }
    }

    package func freshSince() async throws(ShoalError) -> UInt64 {
        try await snapshot("reading when the hub's freshness starts") { connection in
            try await Self.meta(connection, "fresh_since", logger: self.logger)
        }
    }

    // MARK: Status

    package func storageStatus() async throws(ShoalError) -> StorageStatus {
        var status = try await snapshot("reading the hub's status") { connection in
            var rows: UInt64 = 0
            for count in try await connection.query("SELECT COUNT(*) FROM change_log", logger: self.logger).decode(Int64.self) {
                rows = UInt64(count)
            }
            let meta = { (key: String) async throws -> UInt64 in try await Self.meta(connection, key, logger: self.logger) }
            let compactedAt = try await meta("compacted_at")
            let saved = self.freshness.withLock { $0 }
            return StorageStatus(
                changeLogRows: rows, lastSequence: try await meta("log_end"), compactedThrough: try await meta("compacted_through"),
                compactedAt: compactedAt == 0 ? nil : Date(timeIntervalSince1970: Double(compactedAt) / 1000),
                documentsForgotten: try await meta("documents_forgotten"),
                forgottenThroughMillis: max(saved.forgottenThrough, try await meta("forgotten_through")), freshness: saved.entries,
                freshSinceMillis: try await meta("fresh_since"))
        }
        status.engine = "postgresql"
        status.location = database.location.description
        // The other hubs, counted by their connections; a failure to count is no failure of status.
        status.processes = 1 + ((try? await database.otherHubs()) ?? 0)
        return status
    }

    package func collectionCounts() async throws(ShoalError) -> [(name: String, documents: Int)] {
        try await snapshot("counting the hub's documents") { connection in
            var counts: [(name: String, documents: Int)] = []
            let rows = try await connection.query(
                "SELECT collection, COUNT(*) FROM document WHERE NOT deleted GROUP BY collection ORDER BY collection", logger: self.logger)
            for (name, count) in try rows.decode((String, Int64).self) { counts.append((name, Int(count))) }
            return counts
        }
    }

    package func changeLogRowCount() async throws(ShoalError) -> UInt64 {
        try await storageStatus().changeLogRows
    }

    /// The database's size on the server, as last read (`maintain` reads it each minute).
    package func storeBytes() -> UInt64 { databaseBytes.withLock { $0 } }

    // MARK: Running

    /// Logs this hub's transactions that stay open too long (`TransactionRegistry.monitor`),
    /// as a node logs its own, until cancelled.
    package func monitorTransactions() async {
        await running.monitor(parameters: { systemParameters }, logger: logger)
    }

    /// Follows the other hubs' commits (`followOtherHubs`), builds the automatic indexes
    /// queries ask for (`buildAutomaticIndexes`) and reads the database's size each
    /// minute, until cancelled.
    package func maintain() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.followOtherHubs() }
            group.addTask { await self.buildAutomaticIndexes() }
            group.addTask {
                while !Task.isCancelled {
                    if let bytes = try? await self.snapshot("reading the database's size", { connection in
                        var bytes: Int64 = 0
                        for size in try await connection.query(
                            "SELECT pg_database_size(current_database())", logger: self.logger
                        ).decode(Int64.self) {
                            bytes = size
                        }
                        return bytes
                    }) {
                        self.databaseBytes.withLock { $0 = UInt64(max(0, bytes)) }
                    }
                    try? await Task.sleep(for: .seconds(60))
                }
            }
            await group.waitForAll()
        }
    }

    /// Refuses new writes, waits for the running one, and closes. Called inside a
    /// read-write transaction of this store, it closes without waiting for that one
    /// (which holds the writer), and that transaction keeps nothing, as on SQLite.
    package func shutdown() async {
        await gate.shutDown(of: self, logger: logger, closeStore: close)
    }
}

package import ShoalCRDT
package import ShoalStorage
import GRDB


/// What the nodes this node relays for asked for, kept across restarts.
///
/// A relay asks its peers for its own subscriptions and those of the nodes it carries
/// changes for (ARCHITECTURE.md, "Relaying for neighbours"). Were that interest rebuilt
/// only as neighbours reconnect, a relay that restarts would first subscribe upstream
/// with its own, narrower set, apply what arrives with verdicts for that narrower set,
/// and relay them so: the neighbours behind it would wait on those transactions and,
/// once the origin compacted the rest away, hold them in part for ever. Saved, the first
/// Subscribe after a restart is the one before it, and its cursors apply at once.
extension DocumentStore {
    /// The saved interest of every origin (table `neighbour_interest`, `v15-neighbour-interest`
    /// and `v17-interest-origins`).
    package func savedInterest() throws(ShoalError) -> [SiteID: SavedInterest] {
        do {
            return try pool.read { db in
                var out: [SiteID: SavedInterest] = [:]
                for row in try Row.fetchAll(db, sql: "SELECT site, subscriptions, generation, heard_from FROM neighbour_interest") {
                    let row = StoredRow(row, of: "neighbour_interest")
                    let saved = SavedInterest(
                        subscriptionsText: try row.value(Column("subscriptions")), generation: try row.bitPattern(Column("generation")),
                        heardFromText: try row.value(Column("heard_from")))
                    if let saved { out[SiteID(try row.bitPattern(Column("site")))] = saved }
                }
                return out
            }
        } catch {
            throw ShoalError.wrapping(error, "database read")
        }
    }

    /// Saves the interest of these origins, replacing what was saved of them unless
    /// that was of a higher generation (saves may cross), and forgets that of `forgetting`.
    package func saveInterest(_ interest: [SiteID: SavedInterest], forgetting: [SiteID]) async throws(ShoalError) {
        guard !interest.isEmpty || !forgetting.isEmpty else { return }
        try await write { db in
            for site in forgetting {
                try db.execute(sql: "DELETE FROM neighbour_interest WHERE site = ?", arguments: [Int64(bitPattern: site.rawValue)])
            }
            for (site, saved) in interest {
                try db.execute(
                    sql: """
                        INSERT INTO neighbour_interest (site, subscriptions, generation, heard_from) VALUES (?, ?, ?, ?)
                        ON CONFLICT (site) DO UPDATE SET subscriptions = excluded.subscriptions,
                            generation = excluded.generation, heard_from = excluded.heard_from
                        WHERE excluded.generation >= neighbour_interest.generation
                        """,
                    arguments: [
                        Int64(bitPattern: site.rawValue), saved.subscriptionsText, Int64(bitPattern: saved.generation),
                        saved.heardFromText,
                    ])
            }
        }
    }
}

public import ShoalCRDT
import GRDB

/// What each neighbour asked this node for, kept across restarts.
///
/// A relay asks its peers for its own subscriptions and those its neighbours asked it
/// for (ARCHITECTURE.md, "Relaying for neighbours"). Were that interest rebuilt only as
/// neighbours reconnect, a relay that restarts would first subscribe upstream with its
/// own, narrower set, apply what arrives with verdicts for that narrower set, and relay
/// them so: the neighbours behind it would wait on those transactions and, once the
/// origin compacted the rest away, hold them in part for ever. Saved, the first
/// Subscribe after a restart is the one before it, and its cursors apply at once.
extension DocumentStore {
    /// The saved interest of every neighbour (table `neighbour_interest`, `v15-neighbour-interest`).
    public func savedNeighbourInterest() throws(StoreError) -> [SiteID: SubscriptionFilter] {
        do {
            return try pool.read { db in
                var out: [SiteID: SubscriptionFilter] = [:]
                for row in try Row.fetchAll(db, sql: "SELECT site, subscriptions FROM neighbour_interest") {
                    let row = StoredRow(row, of: "neighbour_interest")
                    let text: String = try row.value(Column("subscriptions"))
                    guard case .array(let items)? = try? JSON.parse(text) else { continue }
                    let entries = items.compactMap { item -> SubscriptionFilter.Entry? in
                        guard case .array(let parts) = item, parts.count == 2, case .string(let query) = parts[0],
                            case .string(let arguments) = parts[1]
                        else { return nil }
                        return SubscriptionFilter.Entry(query: query, argumentsJSON: arguments)
                    }
                    out[SiteID(try row.bitPattern(Column("site")))] = SubscriptionFilter(entries)
                }
                return out
            }
        } catch {
            throw StoreError.wrapping(error, "database read")
        }
    }

    /// Saves what `site` has asked this node for, replacing what was saved of it.
    public func saveNeighbourInterest(_ site: SiteID, _ filter: SubscriptionFilter) async throws(StoreError) {
        let text = Value.array(filter.entries.map { .array([.string($0.query), .string($0.argumentsJSON)]) }).canonicalJSON
        try await write { db in
            try db.execute(
                sql: """
                    INSERT INTO neighbour_interest (site, subscriptions) VALUES (?, ?)
                    ON CONFLICT (site) DO UPDATE SET subscriptions = excluded.subscriptions
                    """,
                arguments: [Int64(bitPattern: site.rawValue), text])
        }
    }

    /// Forgets what these neighbours asked this node for.
    public func forgetNeighbourInterest(_ sites: [SiteID]) async throws(StoreError) {
        guard !sites.isEmpty else { return }
        try await write { db in
            for site in sites {
                try db.execute(sql: "DELETE FROM neighbour_interest WHERE site = ?", arguments: [Int64(bitPattern: site.rawValue)])
            }
        }
    }
}

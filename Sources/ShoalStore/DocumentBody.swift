import ShoalCRDT
import GRDB

/// Rebuilds a document's materialized body from its field registers.
///
/// A document's fields are last-writer-wins registers; two field names are special:
/// - `_deleted` is the tombstone DELETE writes. Every field written before it (by
///   the HLC) is hidden; a field written after it brings the document back.
/// - a register whose value is the empty string was removed by UNSET.
///
/// The `document` row keeps the last live body even after a delete, flagged
/// `deleted = 1`, so that sync can still decide which subscriptions the
/// tombstone belongs to; queries see only rows with `deleted = 0`.
enum DocumentBody {
    static let tombstoneField = "_deleted"
    static let removedValue = ""
    /// `~SITE`: a map entry removed by someone who saw the value written at (timestamp, SITE).
    static let observedRemovalPrefix = "~"
    /// Separates the path components of a map entry's field name: `m\u{1E}a\u{1E}b` is `m.a.b`.
    static let pathSeparator: Character = "\u{1E}"

    static func isRemoval(_ value: String) -> Bool {
        value == removedValue || value.hasPrefix(observedRemovalPrefix)
    }

    /// The version a received delta gives its field: its own, or for an observed
    /// removal the version it removed.
    static func version(of delta: Delta) -> RegisterVersion {
        if delta.valueJSON.hasPrefix(observedRemovalPrefix), let site = SiteID(hex: delta.valueJSON.dropFirst()) {
            return RegisterVersion(timestamp: delta.timestamp, site: site)
        }
        return delta.version
    }

    /// Recomputes the body of one document; returns it, or nil when the document
    /// is deleted or has no live field.
    @discardableResult
    static func materialize(db: Database, collection: String, key: String) throws -> Value? {
        let rows = try Row.fetchAll(
            db, sql: "SELECT name, value, ts, site FROM field WHERE collection = ? AND doc_id = ?",
            arguments: [collection, key])
        let tombstone = rows.first { ($0[0] as String) == tombstoneField }.map { UInt64(bitPattern: $0[2]) }
        var body: [String: Value] = [:]
        var bases: [String: UInt64] = [:]
        var registerVersions: [String: RegisterVersion] = [:]
        var contributions: [String: [Counter.Contribution]] = [:]
        var entries: [String: [(path: [String], value: Value, version: RegisterVersion)]] = [:]
        var anyLive = false
        for row in rows {
            let name: String = row[0], value: String = row[1]
            guard name != tombstoneField else { continue }
            if let tombstone, UInt64(bitPattern: row[2]) <= tombstone { continue }
            // Only a write revives a deleted document; a removal does not.
            if !isRemoval(value) { anyLive = true }
            if let counter = Counter.counterName(ofContribution: name) {
                if let c = try Counter.Contribution(DocumentStore.parseBody(value)) { contributions[counter, default: []].append(c) }
                continue
            }
            let version = RegisterVersion(
                timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: row[2])), site: SiteID(UInt64(bitPattern: row[3])))
            if name.contains(pathSeparator) {
                guard !isRemoval(value) else { continue }
                let path = name.split(separator: pathSeparator, omittingEmptySubsequences: false).map(String.init)
                entries[path[0], default: []].append((Array(path.dropFirst()), try DocumentStore.parseBody(value), version))
                continue
            }
            bases[name] = UInt64(bitPattern: row[2])
            if !isRemoval(value) {
                body[name] = try DocumentStore.parseBody(value)
                registerVersions[name] = version
            }
        }
        // A field that is both a register and a map shows whichever was written last.
        for (name, list) in entries {
            let newest = list.map(\.version).max()!
            if let register = registerVersions[name], register > newest { continue }
            var map: Value = .object([:])
            for entry in list.sorted(by: { $0.version < $1.version }) {
                map = LocalTransaction.setting(map, path: entry.path[...], to: entry.value)
            }
            body[name] = map
        }
        for (name, parts) in contributions {
            // Without a visible base the counter counts from the tombstone (or from time zero).
            let epoch = bases[name] ?? tombstone ?? 0
            guard body[name] != nil || parts.contains(where: { $0.epoch == epoch }) else { continue }
            body[name] = Counter.value(base: body[name], baseTimestamp: epoch, contributions: parts)
        }
        guard anyLive else {
            if tombstone != nil {
                try db.execute(
                    sql: "UPDATE document SET deleted = 1 WHERE collection = ? AND doc_id = ?", arguments: [collection, key])
            } else {
                try db.execute(sql: "DELETE FROM document WHERE collection = ? AND doc_id = ?", arguments: [collection, key])
            }
            return nil
        }
        // A field written after a delete revives the document; its identity comes from the key.
        if body["_id"] == nil { body["_id"] = try DocumentStore.parseBody(key) }
        let value = Value.object(body)
        try db.cachedStatement(sql: FieldSQL.saveBody).execute(arguments: [collection, key, value.canonicalJSON])
        return value
    }

    /// Whether a user may write this top-level field name.
    static func checkWritable(_ name: String, collection: String) throws {
        if name.contains(Counter.separator) || name.contains(pathSeparator) {
            throw StoreError(.invalidDocument, "\(collection): field names may not contain the characters U+001E or U+001F")
        }
        if name.hasPrefix("_") && name != "_id" {
            throw StoreError(
                .invalidDocument,
                "\(collection): field names beginning with '_' are reserved (got '\(name)'); only _id may be written")
        }
    }
}

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

    /// Recomputes the body of one document; returns it, or nil when the document
    /// is deleted or has no live field.
    @discardableResult
    static func materialize(db: Database, collection: String, key: String) throws -> Value? {
        let rows = try Row.fetchAll(
            db, sql: "SELECT name, value, ts FROM field WHERE collection = ? AND doc_id = ?",
            arguments: [collection, key])
        let tombstone = rows.first { ($0[0] as String) == tombstoneField }.map { UInt64(bitPattern: $0[2]) }
        var body: [String: Value] = [:]
        var bases: [String: UInt64] = [:]
        var contributions: [String: [Counter.Contribution]] = [:]
        var anyLive = false
        for row in rows {
            let name: String = row[0], value: String = row[1]
            guard name != tombstoneField else { continue }
            if let tombstone, UInt64(bitPattern: row[2]) <= tombstone { continue }
            anyLive = true
            if let counter = Counter.counterName(ofContribution: name) {
                if let c = try Counter.Contribution(DocumentStore.parseBody(value)) { contributions[counter, default: []].append(c) }
                continue
            }
            bases[name] = UInt64(bitPattern: row[2])
            if value != removedValue { body[name] = try DocumentStore.parseBody(value) }
        }
        for (name, parts) in contributions {
            body[name] = Counter.value(base: body[name], baseTimestamp: bases[name] ?? 0, contributions: parts)
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
        if name.contains(Counter.separator) {
            throw StoreError(.invalidDocument, "\(collection): field names may not contain the character U+001F")
        }
        if name.hasPrefix("_") && name != "_id" {
            throw StoreError(
                .invalidDocument,
                "\(collection): field names beginning with '_' are reserved (got '\(name)'); only _id may be written")
        }
    }
}

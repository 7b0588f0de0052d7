package import ShoalCRDT
package import ShoalStorage
import ShoalQuery

extension DocumentStore {
    /// Up to `limit` documents that `query` matches and whose key sorts after `key`
    /// ("" for the first page), in key order, read on one snapshot.
    ///
    /// A document's key is the canonical JSON of its `_id` (`DocumentKey`), compared
    /// byte by byte as the primary key orders them: each document has one of its own,
    /// so pages that each start after the last key of the one before read every
    /// document once. DQL's `_id > :last` cannot: it finds `1` and `1.0`, or "é" in its
    /// two Unicode forms, equal, though they are distinct documents, and it does not
    /// order booleans, arrays or objects at all. `query` is one SELECT, with a WHERE and
    /// a SELECT list if need be, without ORDER BY, LIMIT, OFFSET or COUNT(*).
    package func page(_ query: String, arguments: [String: Value] = [:], after key: String, limit: Int) async throws(ShoalError)
        -> DocumentPage
    {
        let statements = try parse(query)
        let select = try DocumentPage.select(of: statements, limit: limit)
        await createIndexesIfWriterIsFree(for: statements, arguments: arguments)
        do {
            return try await read { db in
                let documents = try Self.matchingDocuments(
                    collection: select.collection, predicate: select.whereClause, limit: .literal(.int(Int64(limit))),
                    after: key, arguments: arguments, db: db)
                return DocumentPage(
                    items: try DocumentMatch.items(documents.map(\.body), select, arguments: arguments), lastKey: documents.last?.key)
            }
        } catch {
            throw error.locating(in: query)
        }
    }
}

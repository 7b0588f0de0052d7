import ShoalCRDT
import GRDB
import Logging

extension DocumentStore {
    /// Checks the bodies a statement just wrote against the document size limits
    /// (`document_size_soft_limit_bytes`, `document_size_hard_limit_bytes`).
    ///
    /// Over the soft limit, the write stands and a warning is logged; over the hard
    /// limit, it throws `tooLarge`, which undoes the statement (the caller's SAVEPOINT
    /// or transaction). The size is the body's canonical JSON in bytes, what queries
    /// return and peers rebuild.
    func checkDocumentSizes(collection: String, ids: [Value], db: Database) throws {
        guard !ids.isEmpty else { return }
        let limits = systemParameters
        let soft = min(limits.documentSizeSoftLimitBytes, limits.documentSizeHardLimitBytes)
        // Chunks stay well under SQLite's limit on bound variables.
        for start in stride(from: 0, to: ids.count, by: 500) {
            let keys = ids[start..<min(start + 500, ids.count)].map(DocumentKey.make)
            let marks = Array(repeating: "?", count: keys.count).joined(separator: ",")
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT doc_id, length(CAST(body AS BLOB)) AS size FROM document
                    WHERE collection = ? AND doc_id IN (\(marks)) AND length(CAST(body AS BLOB)) > ?
                    """,
                arguments: StatementArguments([collection] + keys + [soft]))
            for row in rows {
                let key: String = row["doc_id"]
                let size: Int64 = row["size"]
                if size > limits.documentSizeHardLimitBytes {
                    throw StoreError(
                        .tooLarge,
                        "document \(key) in \(collection) would be \(size) bytes, over the hard limit of \(limits.documentSizeHardLimitBytes) bytes (document_size_hard_limit_bytes); nothing of the statement was written"
                    )
                }
                logger.warning(
                    "document \(key) in \(collection) is \(size) bytes, over the soft limit of \(limits.documentSizeSoftLimitBytes) bytes (document_size_soft_limit_bytes)",
                    metadata: ["shoal.collection": "\(collection)", "shoal.document": "\(key)", "shoal.document.bytes": "\(size)"])
            }
        }
    }
}

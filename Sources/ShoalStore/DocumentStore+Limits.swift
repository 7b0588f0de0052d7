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
        // The keys travel as one JSON array, so the statement is the same for any number.
        let keys = ids.map(DocumentKey.make)
        let keysJSON = JSON.encode(.array(keys.map { .string($0) }))
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT doc_id, length(CAST(body AS BLOB)) AS size FROM document
                    WHERE collection = ? AND doc_id IN (SELECT value FROM json_each(?)) AND length(CAST(body AS BLOB)) > ?
                    """),
            arguments: [collection, keysJSON, soft])
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

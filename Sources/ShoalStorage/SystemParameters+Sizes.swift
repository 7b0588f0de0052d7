package import Logging
import ShoalCRDT

extension SystemParameters {
    /// Checks the bodies a statement just wrote against the document size limits
    /// (`document_size_soft_limit_bytes`, `document_size_hard_limit_bytes`).
    ///
    /// Over the soft limit, the write stands and a warning is logged; over the hard
    /// limit, it throws `tooLarge`, which undoes the statement (the caller's SAVEPOINT
    /// or transaction). The size is the body's canonical JSON in bytes, as the statement
    /// wrote it: what queries return and peers rebuild.
    package func checkDocumentSizes(_ written: [(collection: String, key: String, bytes: Int)], logger: Logger) throws(ShoalError) {
        let limits = self
        let soft = min(limits.documentSizeSoftLimitBytes, limits.documentSizeHardLimitBytes)
        for (collection, key, bytes) in written where Int64(bytes) > soft {
            let size = Int64(bytes)
            if size > limits.documentSizeHardLimitBytes {
                throw ShoalError(
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

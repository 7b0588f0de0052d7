import ShoalCRDT
import ShoalStorage
import Logging

extension DocumentStore {
    /// Checks the bodies a statement just wrote against the document size limits
    /// (`SystemParameters.checkDocumentSizes`): over the hard limit it throws
    /// `tooLarge`, which undoes the statement (the caller's SAVEPOINT or transaction).
    func checkDocumentSizes(_ written: [(collection: String, key: String, bytes: Int)]) throws {
        try systemParameters.checkDocumentSizes(written, logger: logger)
    }
}

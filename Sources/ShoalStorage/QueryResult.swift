public import ShoalCRDT

/// What running statements returns: the result of the last one.
public struct QueryResult: Sendable, Equatable {
    /// Result documents of a SELECT (empty for mutations).
    public var items: [Value]
    /// The `_id` of every document the statements wrote, each once, in the order first written.
    public var mutatedDocumentIDs: [Value]
    /// The transaction that committed the writes, `nil` when nothing was written.
    public var transactionID: TransactionID?

    public init(items: [Value] = [], mutatedDocumentIDs: [Value] = [], transactionID: TransactionID? = nil) {
        self.items = items
        self.mutatedDocumentIDs = mutatedDocumentIDs
        self.transactionID = transactionID
    }
}

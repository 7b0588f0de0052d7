public import ShoalCRDT

/// What a transaction's body asks for when it returns.
public enum TransactionCompletion: Sendable, Hashable {
    case commit
    case rollback
}

/// How a transaction ended.
public struct TransactionResult: Sendable, Hashable {
    public var info: TransactionInfo
    /// What the body returned (a body that throws has no result: the error is rethrown).
    public var completion: TransactionCompletion
    /// The ID the transaction committed under: nil after a rollback, for a read-only
    /// transaction, and when it wrote nothing.
    public var transactionID: TransactionID?

    public init(info: TransactionInfo, completion: TransactionCompletion, transactionID: TransactionID?) {
        self.info = info
        self.completion = completion
        self.transactionID = transactionID
    }
}

/// Who a transaction is: its unique ID, the hint it was given, and its kind.
public struct TransactionInfo: Sendable, Hashable {
    /// Unique among every transaction of every store: 128 random bits as 32 hex digits.
    /// The node's own handle for it (the long-transaction log, an admin session's
    /// transaction in `status`); an app names a transaction by the `TransactionID` it
    /// commits under, in `TransactionResult` and `DocumentTransaction.transactionID`.
    package var id: String
    /// Free text from whoever started the transaction ("nightly import"), shown in logs.
    public var hint: String?
    public var isReadOnly: Bool

    package init(id: String, hint: String?, isReadOnly: Bool) {
        self.id = id
        self.hint = hint
        self.isReadOnly = isReadOnly
    }

    /// "read-write transaction 'nightly import'" or "read-only transaction", for
    /// messages: errors name a transaction by its kind and hint, never by a second ID.
    package var described: String {
        (isReadOnly ? "read-only transaction" : "read-write transaction") + (hint.map { " '\($0)'" } ?? "")
    }
}

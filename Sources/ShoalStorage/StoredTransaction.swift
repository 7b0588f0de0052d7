package import ShoalCRDT

/// What a node recorded of one transaction (a row of the SQLite store's `txn`): its
/// manifest, its state, the verdicts on what it does not hold, the reports of the peers
/// that sent it.
package struct StoredTransaction: Sendable, Hashable {
    package var id: TransactionID
    package var deltaCount: UInt32
    package var documentCount: UInt32
    package var collections: [CollectionCount]
    package var state: TransactionRecord.State
    /// Verdicts on the documents this node does not hold: what it left out when it
    /// applied the transaction (column `rest`), then what compaction took out of the
    /// log (column `supersession`, `LogCompaction.recorded(_:adding:)`). What it says
    /// of them when it relays the transaction or answers for it.
    package var rest: [Verdict]
    package var reports: [SiteID: TransactionRecord.Report]
    package var firstSeen: UInt64

    package init(
        id: TransactionID, deltaCount: UInt32, documentCount: UInt32, collections: [CollectionCount],
        state: TransactionRecord.State, rest: [Verdict], reports: [SiteID: TransactionRecord.Report], firstSeen: UInt64
    ) {
        self.id = id
        self.deltaCount = deltaCount
        self.documentCount = documentCount
        self.collections = collections
        self.state = state
        self.rest = rest
        self.reports = reports
        self.firstSeen = firstSeen
    }
}

extension StoredTransaction {
    /// The most superseding transactions a record names per collection, and a verdict
    /// that follows them names; past it, `unknown` (a verdict must fit a peer's frame,
    /// PROTOCOL.md 6.1).
    package static let supersessionLimit = 1000
}

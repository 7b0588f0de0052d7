public import ShoalCRDT

/// What a received batch's commit names before it reads anything: the documents its
/// pieces write (with those of their transactions already held), those transactions,
/// and the cursors it records (`SyncStore.writeInbound`).
///
/// A store whose writers can commit side by side (hubs on one database) locks just
/// these, so that two batches that touch nothing in common commit at once; one that
/// finds it must write something it did not name (a held transaction its wait released,
/// another hub's pieces) is run again as the one writer. A store with one writer
/// ignores it.
package struct InboundClaim: Sendable, Equatable {
    /// A peer's cursor under one subscription set.
    package struct Cursor: Sendable, Hashable {
        package var peer: SiteID
        package var key: String

        package init(peer: SiteID, key: String) {
            self.peer = peer
            self.key = key
        }
    }

    package var documents: Set<DocumentRef> = []
    package var transactions: Set<TransactionID> = []
    package var cursors: Set<Cursor> = []

    package init() {}

    /// How many names it holds.
    package var count: Int { documents.count + transactions.count + cursors.count }
}

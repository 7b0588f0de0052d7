public import ShoalCRDT

/// Which peers delivered the deltas of each remote transaction this node received
/// while it runs, so that a transaction is not streamed back to the one peer it all
/// came from: that peer holds every row of it this node holds.
///
/// ```
///  B ── T ──► C        C logs T once; C's publisher for B would stream T back to B
///  B ◄── T ── C        (B originated it? excluded already) — unless B is its only source:
///                      then every row of T on C came from B, and nothing is sent.
/// ```
///
/// A transaction delivered by two peers (pieces from each, or the same piece twice)
/// is sent to both, as before: this only removes the certain echo. The ledger keeps
/// the newest `capacity` transactions; one it forgot is simply sent again, which the
/// receiver's log absorbs (PROTOCOL.md §8.1).
///
/// A peer is a sole source only once the inbound pipeline has said that the delivery
/// the ledger saw first brought the first deltas this node held of the transaction
/// (`committed`). Deltas held before (received in an earlier life of the process)
/// make the peer one source among others: C held T's boats, received before a
/// restart, and then its cars from B alone; B, which may lack the boats, still gets T.
public struct DeliveryLedger: Sendable {
    public let capacity: Int
    private var sources: [TransactionID: Set<SiteID>] = [:]
    /// Transactions whose first delivery in the ledger the pipeline has not yet said
    /// was the first this node held of them: no peer is their sole source meanwhile.
    private var unconfirmed: Set<TransactionID> = []
    private var order: [TransactionID] = []
    private var head = 0

    /// Stands for the deltas held before the first delivery the ledger saw: never a
    /// peer's site (a handshake with site 0 is refused, PROTOCOL.md §6.2).
    static let heldBefore = SiteID(0)

    public init(capacity: Int = 100_000) {
        self.capacity = capacity
    }

    /// Records that `site` delivered deltas of transaction `id`.
    public mutating func record(_ id: TransactionID, from site: SiteID) {
        if sources[id] == nil {
            order.append(id)
            unconfirmed.insert(id)
            if order.count - head > capacity {
                sources.removeValue(forKey: order[head])
                unconfirmed.remove(order[head])
                head += 1
                if head > capacity {
                    order.removeFirst(head)
                    head = 0
                }
            }
        }
        sources[id, default: []].insert(site)
    }

    /// The inbound pipeline committed pieces of `ids`: the transactions of `firstHeld`
    /// were held in no part before that commit, so the delivery the ledger saw first
    /// brought the first deltas of them; the others were held in part already.
    public mutating func committed(_ ids: some Sequence<TransactionID>, firstHeld: Set<TransactionID>) {
        for id in ids where unconfirmed.contains(id) {
            unconfirmed.remove(id)
            if !firstHeld.contains(id) { sources[id]?.insert(Self.heldBefore) }
        }
    }

    /// The one peer that delivered every delta of `id` this node holds, if there is one.
    public func soleSource(of id: TransactionID) -> SiteID? {
        guard !unconfirmed.contains(id), let set = sources[id], set.count == 1 else { return nil }
        return set.first
    }
}

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
public struct DeliveryLedger: Sendable {
    public let capacity: Int
    private var sources: [TransactionID: Set<SiteID>] = [:]
    private var order: [TransactionID] = []
    private var head = 0

    public init(capacity: Int = 100_000) {
        self.capacity = capacity
    }

    /// Records that `site` delivered deltas of transaction `id`.
    public mutating func record(_ id: TransactionID, from site: SiteID) {
        if sources[id] == nil {
            order.append(id)
            if order.count - head > capacity {
                sources.removeValue(forKey: order[head])
                head += 1
                if head > capacity {
                    order.removeFirst(head)
                    head = 0
                }
            }
        }
        sources[id, default: []].insert(site)
    }

    /// The one peer that delivered every delta of `id` this node received, if there is one.
    public func soleSource(of id: TransactionID) -> SiteID? {
        guard let set = sources[id], set.count == 1 else { return nil }
        return set.first
    }
}

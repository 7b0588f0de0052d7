public import ShoalCRDT
public import ShoalStorage

/// What each peer has acknowledged of this node's change log, and under which
/// subscriptions: what EVICT asks before it drops this node's own writes.
///
/// Sessions note it as Acks arrive (`SyncStore.notePeerHolding`); it lives in memory
/// until the node stops, and a peer that disconnects still holds what it acknowledged.
/// After a restart it is empty until peers connect again (their cursors come back with
/// their first Subscribe), so EVICT then keeps every document holding this node's own
/// writes: never less safe, only keeping more for a while.
public final class PeerHoldings: Sendable {
    public struct Holding: Sendable, Hashable {
        /// The highest sequence of this node's log the peer acknowledged.
        public var through: UInt64
        /// Its subscriptions when it did.
        public var subscriptions: SubscriptionSet
    }

    private let holdings = Locked<[SiteID: Holding]>([:])

    public init() {}

    /// `peer` acknowledged the log through `through` under `subscriptions`.
    public func note(_ peer: SiteID, through: UInt64, subscriptions: SubscriptionSet) {
        holdings.withLock { held in
            if let known = held[peer], known.through == through, known.subscriptions.key == subscriptions.key { return }
            held[peer] = Holding(through: through, subscriptions: subscriptions)
        }
    }

    public var all: [SiteID: Holding] { holdings.withLock { $0 } }

    /// Whether some peer other than `refusing` holds `body` (of `collection`) as this
    /// node's log left it through `sequence`: it acknowledged the log past `sequence`
    /// under subscriptions that want the document. `refusing`: the peers that refused a
    /// transaction whose values the document holds (they acknowledged past it anyway).
    public func someoneHolds(collection: String, body: Value, through sequence: UInt64, refusing: Set<SiteID> = []) -> Bool {
        all.contains { peer, holding in
            !refusing.contains(peer) && holding.through >= sequence
                && holding.subscriptions.matches(collection: collection, document: body)
        }
    }
}

public import ShoalCRDT
public import Foundation

/// A peer's position in this node's change log, as compaction sees it: it has
/// acknowledged everything through `through` that its subscriptions asked for.
public struct PeerAcknowledgement: Sendable, Hashable {
    public var peer: SiteID
    public var through: UInt64
    /// When the peer last said so (or was last connected).
    public var heardAt: Date

    public init(peer: SiteID, through: UInt64, heardAt: Date) {
        self.peer = peer
        self.through = through
        self.heardAt = heardAt
    }
}

/// How a compaction went.
public struct CompactionReport: Sendable, Hashable {
    /// The sequence it ran through: no transaction with a row above it was touched.
    public var through: UInt64
    public var rowsBefore: UInt64
    public var rowsRemoved: UInt64
    public var transactionsRemoved: UInt64

    public init(through: UInt64, rowsBefore: UInt64, rowsRemoved: UInt64 = 0, transactionsRemoved: UInt64 = 0) {
        self.through = through
        self.rowsBefore = rowsBefore
        self.rowsRemoved = rowsRemoved
        self.transactionsRemoved = transactionsRemoved
    }
}

/// Where compaction may run to, from what peers acknowledged.
public enum CompactionPoint {
    /// The lowest position among peers heard within `horizon` of `now`, or
    /// `lastSequence` when there are none; with the peers no longer counted.
    public static func compute(
        lastSequence: UInt64, acknowledgements: [PeerAcknowledgement], horizon: TimeInterval, now: Date
    ) -> (point: UInt64, heldBy: SiteID?, expired: [SiteID]) {
        var point = lastSequence
        var heldBy: SiteID?
        var expired: [SiteID] = []
        for a in acknowledgements {
            if now.timeIntervalSince(a.heardAt) > horizon {
                expired.append(a.peer)
            } else if a.through < point {
                point = a.through
                heldBy = a.peer
            }
        }
        return (point, heldBy, expired)
    }
}

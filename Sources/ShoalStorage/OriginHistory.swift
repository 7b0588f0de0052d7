import ShoalCRDT

/// How far a node holds one origin's transactions: the highest sequence applied, and
/// one delta it holds of that transaction, by its index in the transaction and its
/// timestamp (the newest it holds; 0 and 0 when its rows were compacted away). The
/// origin looks up its own delta of that index: the same timestamp is the same
/// transaction, another is another transaction under the same number. A delta, not the
/// transaction's newest timestamp, because a holder with narrower subscriptions holds
/// only some of a transaction's documents.
public struct OriginHistory: Sendable, Hashable {
    public var through: UInt64
    public var index: UInt32
    public var timestamp: UInt64

    public init(through: UInt64, index: UInt32, timestamp: UInt64) {
        self.through = through
        self.index = index
        self.timestamp = timestamp
    }

    public static let none = OriginHistory(through: 0, index: 0, timestamp: 0)
}

/// What a peer's view of this node's own history says of it.
public enum HistoryVerdict: Sendable, Hashable {
    /// The peer holds this node's transactions as this node wrote them.
    case consistent
    /// Nothing to compare (the peer holds none, or one this node no longer has rows of).
    case unknown
    /// The peer holds more of this node's history than this node, or another
    /// transaction under one of its numbers: this node's store went back (a restored
    /// backup, a lost commit). Its transactions since the last point a peer confirmed
    /// were committed again under new numbers, above any the peer holds, `from`…`to`.
    case reissued(count: Int, from: UInt64, to: UInt64)
}

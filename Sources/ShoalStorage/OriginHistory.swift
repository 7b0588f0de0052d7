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

extension OriginHistory {
    /// How far above the peer's number and its own counter a store that went back
    /// renumbers (DATA_MODEL.md §4.5): the history it lost may have gone further than
    /// this peer knows (another peer may hold more of it), and a number given twice
    /// names two transactions. Found by shoal-check: renumbered above the first peer's
    /// 172, a restored node gave 173 to 176 again, which a second peer held from the
    /// lost history, and the two never agreed.
    package static let reissueGap: UInt64 = 1 << 32

    /// The highest sequence a peer may name, of a change log or of an origin's
    /// transactions (PROTOCOL.md §8.2): far below what signed 64 bits hold, so that
    /// moving a log, or renumbering transactions, above it and `reissueGap` never
    /// overflows.
    package static let maximumSequence: UInt64 = 1 << 62

    /// The highest sequence a node acts on when a peer names one past its own: a cursor
    /// beyond the end of its log, which it moves its log above, or transactions of its
    /// own it does not have, which it renumbers above. 2^40 below `maximumSequence`, so
    /// that what it numbers after acting (the peer's number, `reissueGap`, and the rows
    /// or transactions it moves) stays below `maximumSequence`, and every peer that then
    /// holds those numbers is still served. No node numbers past it but by acting on a
    /// number past it (its clock's base reaches it in the year 2109): a higher one is
    /// not believed (PROTOCOL.md §8.2). Found by reading: a Subscribe at 2^62, then the
    /// largest taken, moved the log above 2^62, and every peer that synced after it
    /// resumed above 2^62 and was refused for good.
    package static let believable: UInt64 = maximumSequence - (1 << 40)

    /// Where a store that went back renumbers its unconfirmed transactions: `reissueGap`
    /// above the peer's number and its counter, and above the clock in milliseconds
    /// shifted left by 20 bits. The clock, since an earlier repair of a history that was
    /// lost again (a store restored twice from one copy) gave numbers the store cannot
    /// see, which a peer that held less renumbered into (found by shoal-check, seed
    /// 16629699536530087451: two repairs gave 4294967946 to two transactions, and every
    /// session between the node and the hub ended on it). A later millisecond is 2^20
    /// numbers above; 2^63 is reached in the year 2248.
    package static func reissueBase(peerThrough: UInt64, counter: UInt64, nowMillis: UInt64) -> UInt64 {
        max(max(peerThrough, counter) + reissueGap, nowMillis << 20)
    }
}

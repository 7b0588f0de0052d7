/// The mesh-wide name of a committed transaction: the site that ran it and that
/// site's commit counter. Printed as `SITE:SEQUENCE` (hex site, decimal counter).
public struct TransactionID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var origin: SiteID
    public var sequence: UInt64

    public init(origin: SiteID, sequence: UInt64) {
        self.origin = origin
        self.sequence = sequence
    }

    /// The highest sequence a transaction may have (2^63 - 1): stores keep sequences as
    /// signed 64-bit integers, and a node counts its transactions from 1, so a higher
    /// one can only come from a peer breaking the protocol (PROTOCOL.md 8.5).
    public static let maximumSequence = UInt64(Int64.max)

    public init?(_ text: some StringProtocol) {
        let parts = text.split(separator: ":")
        guard parts.count == 2, let site = SiteID(hex: parts[0]), let seq = UInt64(parts[1]) else { return nil }
        self.init(origin: site, sequence: seq)
    }

    public var description: String { "\(origin):\(sequence)" }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.origin, lhs.sequence) < (rhs.origin, rhs.sequence)
    }
}

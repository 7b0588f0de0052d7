/// The mesh-wide name of a committed transaction: the site that ran it and that
/// site's commit counter. Printed as `SITE:SEQUENCE` (hex site, decimal counter).
public struct TransactionID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var origin: SiteID
    public var sequence: UInt64

    public init(origin: SiteID, sequence: UInt64) {
        self.origin = origin
        self.sequence = sequence
    }

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

/// The identity of one replica: a random 64-bit number, chosen once per store.
///
/// It breaks ties between writes with equal timestamps and, with a counter,
/// names every transaction in the mesh. Printed as 16 lowercase hex digits.
public struct SiteID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var rawValue: UInt64

    public init(_ rawValue: UInt64) { self.rawValue = rawValue }

    /// A fresh random site ID (never zero, which the wire reserves for "none").
    public static func random() -> SiteID {
        var g = SystemRandomNumberGenerator()
        return SiteID(UInt64.random(in: 1...UInt64.max, using: &g))
    }

    /// Parses 1 to 16 hex digits.
    public init?(hex: some StringProtocol) {
        guard !hex.isEmpty, hex.count <= 16, let v = UInt64(hex, radix: 16) else { return nil }
        self.rawValue = v
    }

    public var description: String {
        let s = String(rawValue, radix: 16)
        return String(repeating: "0", count: 16 - s.count) + s
    }

    public static func < (lhs: SiteID, rhs: SiteID) -> Bool { lhs.rawValue < rhs.rawValue }
}

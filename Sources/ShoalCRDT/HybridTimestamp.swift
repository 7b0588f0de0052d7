/// A hybrid logical clock reading: physical milliseconds and a logical counter.
///
/// Packed into one `UInt64` (48 bits of Unix milliseconds, 16 bits of counter) so
/// that timestamps order as integers in SQLite and on the wire.
///
/// ```
///  63                                  16 15            0
/// +--------------------------------------+---------------+
/// |     milliseconds since 1970 (48)     |  counter (16) |
/// +--------------------------------------+---------------+
/// ```
public struct HybridTimestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var rawValue: UInt64

    public init(rawValue: UInt64) { self.rawValue = rawValue }

    public init(milliseconds: UInt64, counter: UInt16) {
        self.rawValue = (milliseconds << 16) | UInt64(counter)
    }

    public var milliseconds: UInt64 { rawValue >> 16 }
    public var counter: UInt16 { UInt16(truncatingIfNeeded: rawValue) }

    /// The largest number of milliseconds a timestamp holds (48 bits: the year 10889).
    public static let maximumMilliseconds: UInt64 = (1 << 48) - 1

    /// The timestamp of data that exists "at time zero" and loses to every real write.
    public static let zero = HybridTimestamp(rawValue: 0)

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String { "\(milliseconds).\(counter)" }
}

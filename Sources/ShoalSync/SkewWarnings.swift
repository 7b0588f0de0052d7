public import ShoalCRDT

/// Which far-ahead remote timestamps get a warning: the first from each origin, then
/// none from it until `interval` has passed, when the next one says how many went
/// unlogged. A peer whose clock runs a day ahead sends every transaction far ahead,
/// and one line per transaction would bury the log.
///
/// Time is passed in (milliseconds); no I/O.
public struct SkewWarnings: Sendable {
    /// What to do with one far-ahead transaction.
    public enum Decision: Sendable, Hashable {
        /// Log it, saying how many from its origin went unlogged since the last warning.
        case warn(suppressed: Int)
        /// Count it for the next warning.
        case suppress
    }

    public let interval: UInt64
    /// At most this many origins are remembered; past it, those whose interval has
    /// passed are forgotten (and, if none has, all of them), so hostile origins cannot
    /// grow the table without bound.
    public let capacity: Int
    private var origins: [SiteID: (warnedAt: UInt64, suppressed: Int)] = [:]

    /// - Parameter interval: milliseconds between two warnings about one origin (default a minute).
    public init(interval: UInt64 = 60_000, capacity: Int = 1024) {
        self.interval = interval
        self.capacity = capacity
    }

    /// One transaction from `origin` timestamped too far ahead to adopt, at `now`.
    public mutating func farAhead(from origin: SiteID, now: UInt64) -> Decision {
        if var seen = origins[origin], now >= seen.warnedAt, now - seen.warnedAt < interval {
            seen.suppressed += 1
            origins[origin] = seen
            return .suppress
        }
        let suppressed = origins[origin]?.suppressed ?? 0
        if origins[origin] == nil, origins.count >= capacity {
            origins = origins.filter { now >= $0.value.warnedAt && now - $0.value.warnedAt < interval }
            if origins.count >= capacity { origins.removeAll() }
        }
        origins[origin] = (now, 0)
        return .warn(suppressed: suppressed)
    }
}

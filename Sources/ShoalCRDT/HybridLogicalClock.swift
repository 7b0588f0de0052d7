
/// A hybrid logical clock: monotonic, close to wall time, and advanced past every
/// timestamp it has seen, so a write that follows a received write always wins
/// against it.
///
/// A remote timestamp more than `maximumDrift` ahead of this machine's wall clock
/// is not adopted: the write it belongs to still merges (and may win), but this
/// clock does not jump to a far future a faulty or hostile peer announced, so
/// local time can never be pushed to overflow.
///
/// Every wall-clock reading is taken as it comes, whatever it says: one before 1970
/// reads as 1970 and one past what a timestamp's 48 bits of milliseconds hold (the
/// year 10889) as that largest time, so a clock set wrong or stepped back slows the
/// clock down to its counter but never stops the node.
public final class HybridLogicalClock: Sendable {
    private let state: Locked<HybridTimestamp>
    private let now: @Sendable () -> UInt64
    public let maximumDrift: UInt64

    /// - Parameters:
    ///   - wallClock: milliseconds since 1970; injectable for tests.
    ///   - maximumDrift: milliseconds a remote clock may run ahead and still be adopted (default 10 minutes).
    public init(
        wallClock: @escaping @Sendable () -> UInt64 = HybridLogicalClock.systemMilliseconds,
        maximumDrift: UInt64 = 10 * 60 * 1000
    ) {
        self.now = wallClock
        self.maximumDrift = maximumDrift
        self.state = Locked(.zero)
    }

    /// This machine's wall clock, in milliseconds since 1970 (`milliseconds(of:)`).
    public static let systemMilliseconds: @Sendable () -> UInt64 = {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return milliseconds(of: ts)
    }

    /// A wall-clock reading in milliseconds since 1970, for any reading: 0 for one
    /// before 1970 (a negative `tv_sec`), and at most `HybridTimestamp.maximumMilliseconds`.
    package static func milliseconds(of reading: timespec) -> UInt64 {
        guard reading.tv_sec >= 0 else { return 0 }
        let seconds = UInt64(reading.tv_sec)
        let limit = HybridTimestamp.maximumMilliseconds
        guard seconds <= limit / 1000 else { return limit }
        return min(limit, seconds * 1000 + UInt64(max(0, min(reading.tv_nsec, 999_999_999))) / 1_000_000)
    }

    /// The wall clock, held to what a timestamp can carry.
    private func wall() -> UInt64 { min(now(), HybridTimestamp.maximumMilliseconds) }

    /// The newest timestamp `observe` adopts now: `maximumDrift` ahead of the wall clock.
    public var newestAdoptable: HybridTimestamp {
        let wall = wall()
        let limit = HybridTimestamp.maximumMilliseconds
        return HybridTimestamp(milliseconds: maximumDrift >= limit - wall ? limit : wall + maximumDrift, counter: .max)
    }

    /// A new timestamp, greater than every one this clock issued or observed.
    public func tick() -> HybridTimestamp {
        let wall = wall()
        return state.withLock { last in
            let next: HybridTimestamp
            if wall > last.milliseconds {
                next = HybridTimestamp(milliseconds: wall, counter: 0)
            } else {
                // Saturates at the last timestamp there is rather than wrap (a clock at the year 10889).
                next = HybridTimestamp(rawValue: last.rawValue == .max ? .max : last.rawValue + 1)
            }
            last = next
            return next
        }
    }

    /// Moves the clock up to a timestamp read from a peer or from disk; returns
    /// false when the timestamp is too far ahead to adopt.
    @discardableResult
    public func observe(_ remote: HybridTimestamp) -> Bool {
        guard remote <= newestAdoptable else { return false }
        state.withLock { last in
            if remote > last { last = remote }
        }
        return true
    }

    /// Moves the clock up to a timestamp it issued or adopted before (its high-water
    /// mark, read back from disk when a store opens), without the drift check: a
    /// clock must never issue below its own earlier readings, even when the wall
    /// clock has gone back since.
    public func restore(_ issued: HybridTimestamp) {
        state.withLock { last in
            if issued > last { last = issued }
        }
    }

    /// The latest timestamp issued or observed.
    public var current: HybridTimestamp { state.withLock { $0 } }
}

#if canImport(Glibc)
package import Glibc
#elseif canImport(Musl)
package import Musl
#elseif canImport(Darwin)
package import Darwin
#endif

import Synchronization

/// A hybrid logical clock: monotonic, close to wall time, and advanced past every
/// timestamp it has seen, so a write that follows a received write always wins
/// against it.
///
/// Readings from a remote clock further ahead than `maximumDrift` are still
/// observed (merges must not be refused) but the clock only moves its logical part.
public final class HybridLogicalClock: Sendable {
    private let state: Mutex<HybridTimestamp>
    private let now: @Sendable () -> UInt64

    /// - Parameter wallClock: milliseconds since 1970; injectable for tests.
    public init(wallClock: @escaping @Sendable () -> UInt64 = HybridLogicalClock.systemMilliseconds) {
        self.now = wallClock
        self.state = Mutex(.zero)
    }

    public static let systemMilliseconds: @Sendable () -> UInt64 = {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }

    /// A new timestamp, greater than every one this clock issued or observed.
    public func tick() -> HybridTimestamp {
        let wall = now()
        return state.withLock { last in
            let next: HybridTimestamp
            if wall > last.milliseconds {
                next = HybridTimestamp(milliseconds: wall, counter: 0)
            } else {
                next = HybridTimestamp(rawValue: last.rawValue + 1)
            }
            last = next
            return next
        }
    }

    /// Moves the clock past a timestamp read from a peer or from disk.
    public func observe(_ remote: HybridTimestamp) {
        state.withLock { last in
            if remote > last { last = remote }
        }
    }

    /// The latest timestamp issued or observed.
    public var current: HybridTimestamp { state.withLock { $0 } }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

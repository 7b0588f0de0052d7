public import ShoalCRDT

/// A hub's hybrid logical clock (PROTOCOL.md §5.3), which issues timestamps only from
/// ranges leased from the hubs' database (`PostgresHubDatabase.leaseTimestamps`).
///
/// Every hub on a database writes as one site: the clock's ticks must not repeat
/// across hubs. A lease is a range no other hub is ever given, so no tick is issued
/// twice; each hub's ticks rise; the database keeps the highest lease, so a restarted
/// hub's ticks start above every one leased before. (Which write to a field wins is
/// kept right by the rule that a write takes a timestamp above the one it overwrites,
/// PROTOCOL.md §5.3, under serializable writes: ARCHITECTURE.md, "Hubs on PostgreSQL".)
///
/// As any node's clock, a tick is above every timestamp issued or observed, and keeps
/// up with the wall clock: a lease whose next timestamp has fallen more than
/// `maximumLag` behind the wall clock (read when `tick` is called), or is not above one
/// observed, is given up for a new one above them, so a hub idle for a while does not
/// write in the past. A round trip to the database per lease: one per `leaseSize`
/// ticks, per `maximumLag` of steady writes, or per timestamp observed above the lease
/// (a lease spans less than a millisecond); ticks that find the lease used up at once
/// each lease, and the highest lease is kept.
///
/// Not yet a store's clock: `SyncStore.clock` is a `HybridLogicalClock`, whose tick
/// neither waits nor fails, and this one may wait for a lease.
public final class HubClock: Sendable {
    /// How many timestamps one lease holds: a transaction of many fields, or a burst of
    /// small ones within a millisecond, takes them without another round trip.
    public static let leaseSize = 1024

    private struct State {
        /// The leased timestamps not yet issued: `next...end`, empty when next > end.
        var next: UInt64 = 1
        var end: UInt64 = 0
        /// The highest timestamp issued or observed.
        var last: UInt64 = 0
    }

    private let state = Locked(State())
    private let lease: @Sendable (_ count: Int, _ floor: UInt64) async throws(PostgresStoreError) -> ClosedRange<UInt64>
    private let now: @Sendable () -> UInt64
    /// Milliseconds a remote clock may run ahead and still be adopted, as `HybridLogicalClock`'s.
    public let maximumDrift: UInt64
    /// Milliseconds a lease's next timestamp may lag the wall clock before the lease is
    /// given up: a tick is at most this far behind the wall clock.
    public let maximumLag: UInt64

    /// - Parameters:
    ///   - lease: leases `count` timestamps above `floor` (`PostgresHubDatabase.leaseTimestamps`).
    ///   - now: the wall clock in Unix milliseconds.
    public init(
        lease: @escaping @Sendable (_ count: Int, _ floor: UInt64) async throws(PostgresStoreError) -> ClosedRange<UInt64>,
        now: @escaping @Sendable () -> UInt64 = HybridLogicalClock.systemMilliseconds, maximumDrift: UInt64 = 10 * 60 * 1000,
        maximumLag: UInt64 = 10
    ) {
        self.lease = lease
        self.now = now
        self.maximumDrift = maximumDrift
        self.maximumLag = maximumLag
    }

    /// A clock leasing from `database`.
    public convenience init(database: PostgresHubDatabase) {
        self.init(lease: { count, floor throws(PostgresStoreError) in try await database.leaseTimestamps(count, above: floor) })
    }

    /// The highest timestamp issued or observed.
    public var last: HybridTimestamp { HybridTimestamp(rawValue: state.withLock { $0.last }) }

    /// A fresh timestamp: above every one this hub issued or observed, at most
    /// `maximumLag` behind the wall clock, and never issued by another hub.
    public func tick() async throws(PostgresStoreError) -> HybridTimestamp {
        enum Step {
            case issued(UInt64)
            case lease(above: UInt64)
        }
        let milliseconds = min(now(), HybridTimestamp.maximumMilliseconds)
        let wall = HybridTimestamp(milliseconds: milliseconds, counter: 0).rawValue
        let lagging = HybridTimestamp(milliseconds: milliseconds - min(milliseconds, maximumLag), counter: 0).rawValue
        while true {
            let step: Step = state.withLock { s in
                guard s.next <= s.end, s.next > s.last, s.next >= lagging else { return .lease(above: max(s.last, wall > 0 ? wall - 1 : 0)) }
                s.last = s.next
                s.next += 1
                return .issued(s.last)
            }
            switch step {
            case .issued(let timestamp):
                return HybridTimestamp(rawValue: timestamp)
            case .lease(let floor):
                // The lease is used up, behind the wall clock or below what was observed:
                // a new one, above all of it.
                let leased = try await lease(Self.leaseSize, floor)
                state.withLock { s in
                    // Two ticks may lease at once: keep the higher lease, whose values
                    // are above the other's and above everything either saw.
                    if leased.upperBound > s.end {
                        s.next = max(leased.lowerBound, s.last &+ 1)
                        s.end = leased.upperBound
                    }
                }
            }
        }
    }

    /// A timestamp seen in a received delta: later ticks are above it. Returns false,
    /// adopting nothing, for one more than `maximumDrift` ahead of the wall clock, as
    /// any node's clock does (PROTOCOL.md §5.3).
    @discardableResult
    public func observe(_ remote: HybridTimestamp) -> Bool {
        let (ahead, overflow) = now().addingReportingOverflow(maximumDrift)
        let limit = HybridTimestamp(milliseconds: overflow ? HybridTimestamp.maximumMilliseconds : min(ahead, HybridTimestamp.maximumMilliseconds), counter: .max)
        guard remote <= limit else { return false }
        state.withLock { $0.last = max($0.last, remote.rawValue) }
        return true
    }
}

import ShoalCRDT
import ShoalPostgres
import Testing

/// A hub's clock over leases, here from an in-memory stand-in for the database's row:
/// what hubs issue never repeats, each hub's timestamps rise, and the clock keeps up
/// with the wall clock and with what it observes.
@Suite struct HubClockTests {
    /// The database's clock row: a lease is `GREATEST(value, floor) + count`.
    final class Row: Sendable {
        let value = Locked<UInt64>(0)
        let leases = Locked(0)

        func lease(_ count: Int, _ floor: UInt64) -> ClosedRange<UInt64> {
            leases.withLock { $0 += 1 }
            return value.withLock { v in
                v = max(v, floor) + UInt64(count)
                return (v - UInt64(count) + 1)...v
            }
        }
    }

    static func clock(_ row: Row, now: @escaping @Sendable () -> UInt64) -> HubClock {
        HubClock(lease: { count, floor in row.lease(count, floor) }, now: now)
    }

    @Test func twoHubsTickingAtOnceNeverIssueTheSameTimestampAndEachRises() async throws {
        let row = Row()
        let millisecond = Locked<UInt64>(1_700_000_000_000)
        // A wall clock that stands still most of the time: many ticks in one millisecond.
        let now: @Sendable () -> UInt64 = { millisecond.withLock { ms in ms += UInt64.random(in: 0...100) == 0 ? 1 : 0; return ms } }
        let hubs = [Self.clock(row, now: now), Self.clock(row, now: now)]
        let issued = try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for hub in hubs {
                group.addTask {
                    var mine: [UInt64] = []
                    for _ in 0..<5_000 { mine.append(try await hub.tick().rawValue) }
                    return mine
                }
            }
            return try await group.reduce(into: [[UInt64]]()) { $0.append($1) }
        }
        for mine in issued { #expect(zip(mine, mine.dropFirst()).allSatisfy { $0 < $1 }, "each hub's timestamps rise") }
        let all = issued.flatMap { $0 }
        #expect(Set(all).count == all.count, "no timestamp issued twice")
        #expect(row.leases.withLock { $0 } < 200, "ticks come from leases, not a round trip each")
    }

    /// One hub's writers ticking at once while leases are slow and timestamps are
    /// observed: leases overlap in time and a lower one may arrive after a higher, yet
    /// no tick repeats, each writer's rise, and a tick after an observe is above it.
    @Test func oneClockTickedAtOnceWhileLeasesAreSlowNeverRepeats() async throws {
        let row = Row()
        let wall = Locked<UInt64>(1_700_000_000_000)
        let hub = HubClock(
            lease: { count, floor in
                try? await Task.sleep(for: .microseconds(Int.random(in: 0...300)))
                return row.lease(count, floor)
            }, now: { wall.withLock { ms in ms += UInt64.random(in: 0...20) == 0 ? 1 : 0; return ms } })
        let issued = try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for writer in 0..<4 {
                group.addTask {
                    var mine: [UInt64] = []
                    for n in 0..<1_500 {
                        if writer == 0, n % 100 == 0 {
                            let seen = HybridTimestamp(milliseconds: wall.withLock { $0 } + 2, counter: 9)
                            #expect(hub.observe(seen))
                            let next = try await hub.tick()
                            #expect(next > seen)
                            mine.append(next.rawValue)
                        } else {
                            mine.append(try await hub.tick().rawValue)
                        }
                    }
                    return mine
                }
            }
            return try await group.reduce(into: [[UInt64]]()) { $0.append($1) }
        }
        for mine in issued { #expect(zip(mine, mine.dropFirst()).allSatisfy { $0 < $1 }) }
        let all = issued.flatMap { $0 }
        #expect(Set(all).count == all.count, "no tick issued twice")
    }

    @Test func aTickKeepsUpWithTheWallClockAndWithWhatItObserved() async throws {
        let row = Row()
        let wall = Locked<UInt64>(1_700_000_000_000)
        let hub = Self.clock(row, now: { wall.withLock { $0 } })
        let first = try await hub.tick()
        #expect(first.milliseconds == 1_700_000_000_000)
        // 5 ms on, the lease goes on (ticks at most `maximumLag`, 10 ms, behind); 20 ms
        // on, it is given up for one at the wall clock.
        wall.withLock { $0 += 5 }
        #expect(try await hub.tick() == HybridTimestamp(rawValue: first.rawValue + 1))
        #expect(row.leases.withLock { $0 } == 1)
        wall.withLock { $0 += 15 }
        #expect(try await hub.tick().milliseconds == 1_700_000_000_020)
        #expect(row.leases.withLock { $0 } == 2)
        // An hour idle: the lease's rest is behind the wall clock and given up.
        wall.withLock { $0 += 3_600_000 }
        let later = try await hub.tick()
        #expect(later.milliseconds == 1_700_003_600_020 && later > first)
        // A peer's write from a clock a minute ahead: later ticks are above it.
        let ahead = HybridTimestamp(milliseconds: 1_700_003_660_000, counter: 7)
        #expect(hub.observe(ahead))
        let after = try await hub.tick()
        #expect(after > ahead)
        // One from a day ahead is not adopted.
        let far = HybridTimestamp(milliseconds: 1_700_090_000_000, counter: 0)
        #expect(!hub.observe(far))
        #expect(try await hub.tick() < far)
        // A hub started again on the same row starts above what the last one leased.
        let restarted = Self.clock(row, now: { wall.withLock { $0 } })
        #expect(try await restarted.tick() > hub.last)
    }

    @Test func aFailedLeaseIsTheTicksError() async {
        let hub = HubClock(lease: { _, _ throws(PostgresStoreError) in throw PostgresStoreError("connecting on postgresql://x: refused") })
        let error = await #expect(throws: PostgresStoreError.self) { try await hub.tick() }
        #expect(error?.message.contains("refused") == true)
    }
}

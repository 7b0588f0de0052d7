import ShoalCRDT
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite struct RegisterTests {
    static let a = SiteID(1), b = SiteID(2)

    /// Merging any permutation of writes into a register ends at the same winner.
    @Test func mergeIsOrderIndependent() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let writes = (0..<6).map { _ in
                RegisterVersion(
                    timestamp: HybridTimestamp(milliseconds: UInt64.random(in: 1...4, using: &rng), counter: UInt16.random(in: 0...2, using: &rng)),
                    site: SiteID(UInt64.random(in: 1...3, using: &rng)))
            }
            func merge(_ order: [RegisterVersion]) -> RegisterVersion? {
                var current: RegisterVersion?
                for w in order where Register.incomingWins(w, over: current) { current = w }
                return current
            }
            let expected = merge(writes)
            #expect(merge(writes.shuffled(using: &rng)) == expected)
            #expect(merge(writes + writes.shuffled(using: &rng)) == expected, "duplicates change nothing")
            #expect(expected == writes.max())
        }
    }

    @Test func siteBreaksTimestampTies() {
        let ts = HybridTimestamp(milliseconds: 10, counter: 0)
        #expect(Register.incomingWins(RegisterVersion(timestamp: ts, site: Self.b), over: RegisterVersion(timestamp: ts, site: Self.a)))
        #expect(!Register.incomingWins(RegisterVersion(timestamp: ts, site: Self.a), over: RegisterVersion(timestamp: ts, site: Self.b)))
        #expect(!Register.incomingWins(RegisterVersion(timestamp: ts, site: Self.a), over: RegisterVersion(timestamp: ts, site: Self.a)), "idempotent")
        #expect(Register.incomingWins(RegisterVersion(timestamp: ts, site: Self.a), over: nil))
    }

    @Test func clockIsMonotonicAndObservesRemoteTime() {
        let wall = WallClock(1000)
        let clock = HybridLogicalClock(wallClock: { wall.value })
        let t1 = clock.tick()
        let t2 = clock.tick()
        #expect(t1 < t2)
        #expect(t2.milliseconds == 1000 && t2.counter == 1)
        clock.observe(HybridTimestamp(milliseconds: 5000, counter: 7))
        let t3 = clock.tick()
        #expect(t3 > HybridTimestamp(milliseconds: 5000, counter: 7))
        wall.value = 900  // the wall clock stepping back never makes time run backwards
        #expect(clock.tick() > t3)
    }

    @Test func farFutureTimestampsAreNotAdopted() {
        let wall = WallClock(1000)
        let clock = HybridLogicalClock(wallClock: { wall.value }, maximumDrift: 500)
        #expect(clock.observe(HybridTimestamp(milliseconds: 1400, counter: 3)))
        #expect(!clock.observe(HybridTimestamp(rawValue: .max)))
        #expect(!clock.observe(HybridTimestamp(milliseconds: 1600, counter: 0)))
        let t = clock.tick()
        #expect(t == HybridTimestamp(milliseconds: 1400, counter: 4))
    }

    @Test func aRestoredHighWaterMarkIsAdoptedHoweverFarAhead() {
        let wall = WallClock(1000)
        let clock = HybridLogicalClock(wallClock: { wall.value }, maximumDrift: 500)
        // This clock's own earlier reading, an hour ahead of the wall clock now.
        clock.restore(HybridTimestamp(milliseconds: 3_601_000, counter: 2))
        #expect(clock.tick() == HybridTimestamp(milliseconds: 3_601_000, counter: 3))
        clock.restore(HybridTimestamp(milliseconds: 10, counter: 0))
        #expect(clock.tick() == HybridTimestamp(milliseconds: 3_601_000, counter: 4), "a lower mark changes nothing")
    }

    /// Every wall-clock reading converts, however wrong: before 1970 (what a clock
    /// set back to 1969 gives), at the epoch, and past what a timestamp holds.
    @Test(arguments: [
        (Int(-1), Int(999_999_999), UInt64(0)), (Int.min, 0, 0), (-86_400 * 365, 500_000_000, 0), (0, 0, 0),
        (1_700_000_000, 123_456_789, 1_700_000_000_123), (Int.max, 999_999_999, HybridTimestamp.maximumMilliseconds),
        (Int(HybridTimestamp.maximumMilliseconds / 1000), 999_999_999, HybridTimestamp.maximumMilliseconds),
    ])
    func aWallClockReadingOfAnyTimeConverts(seconds: Int, nanoseconds: Int, milliseconds: UInt64) {
        let reading = timespec(tv_sec: seconds, tv_nsec: nanoseconds)
        #expect(HybridLogicalClock.milliseconds(of: reading) == milliseconds)
    }

    /// A wall clock that steps back to 1970 (how a clock set before it reads) or leaps
    /// past the year 10889 neither stops the clock nor takes it back.
    @Test func aWallClockSteppingBackOrLeapingFarAheadNeverTakesTheClockBack() {
        let wall = WallClock(1_700_000_000_000)
        let clock = HybridLogicalClock(wallClock: { wall.value })
        var last = clock.tick()
        for reading in [0, UInt64.max, HybridTimestamp.maximumMilliseconds, 1 << 60, 0] {
            wall.value = reading
            for _ in 0..<3 {
                let next = clock.tick()
                #expect(next > last, "after a wall clock reading \(reading)")
                last = next
            }
            #expect(clock.observe(HybridTimestamp(milliseconds: 1_000, counter: 0)))
        }
        #expect(last.milliseconds == HybridTimestamp.maximumMilliseconds)
    }

    /// A clock at the last millisecond a timestamp holds adopts nothing past it and
    /// keeps issuing timestamps, the last one there is at the very end.
    @Test func aClockAtTheEndOfTimeStillTicks() {
        let clock = HybridLogicalClock(wallClock: { .max }, maximumDrift: .max)
        #expect(clock.newestAdoptable == HybridTimestamp(rawValue: .max))
        #expect(clock.observe(HybridTimestamp(rawValue: .max)))
        #expect(clock.tick() == HybridTimestamp(rawValue: .max))
    }

    @Test func identifiersRoundTripThroughText() {
        let site = SiteID(0x00ab_cdef_0123_4567)
        #expect(site.description == "00abcdef01234567")
        #expect(SiteID(hex: site.description) == site)
        let txn = TransactionID(origin: site, sequence: 42)
        #expect(TransactionID(txn.description) == txn)
        #expect(TransactionID("nonsense") == nil)
        #expect(SiteID(hex: "xyz") == nil)
    }
}

final class WallClock: Sendable {
    private let state: Locked<UInt64>
    init(_ value: UInt64) { state = Locked(value) }
    var value: UInt64 {
        get { state.withLock { $0 } }
        set { state.withLock { $0 = newValue } }
    }
}

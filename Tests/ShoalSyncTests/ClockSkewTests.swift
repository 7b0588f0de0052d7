import Logging
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// A node whose wall clock jumps hours back and forth still converges with its peer,
/// and a peer does not adopt its far-future time.
@Suite struct ClockSkewTests {
    /// A wall clock that is the system's plus an offset the test moves.
    final class SkewedClock: Sendable {
        let offset = Locked<Int64>(0)
        var read: @Sendable () -> UInt64 {
            { [self] in UInt64(Int64(HybridLogicalClock.systemMilliseconds()) + self.offset.withLock { $0 }) }
        }
        func jump(hours: Int64) { offset.withLock { $0 = hours * 3_600_000 } }
    }

    static func body(_ node: TestNode) async throws -> [Value] {
        try await node.store.execute("SELECT * FROM cars ORDER BY _id").items
    }

    @Test func aNodeWhoseClockJumpsConvergesWithItsPeer() async throws {
        let clock = SkewedClock()
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM cars"], wallClock: clock.read)
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM cars"])
        defer { a.remove(); b.remove() }
        try await InProcessMesh.withLink(a.sync, b.sync) {
            func converged() async throws -> Bool {
                try await InProcessMesh.eventually {
                    let left = try await Self.body(a), right = try await Self.body(b)
                    return left == right && !left.isEmpty
                }
            }
            // Three hours behind: A's writes carry old times; B's later ones win on both.
            clock.jump(hours: -3)
            _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'x', 'color': 'a-past', 'doors': 2})")
            #expect(try await InProcessMesh.eventually { try await Self.body(b).count == 1 })
            _ = try await b.store.execute("UPDATE cars SET color = 'b-now' WHERE _id = 'x'")
            #expect(try await converged())
            #expect(try await Self.body(a).first?["color"] == "b-now")

            // Three hours ahead: B merges A's writes but does not adopt their time…
            clock.jump(hours: 3)
            _ = try await a.store.execute("UPDATE cars SET color = 'a-future', doors = 5 WHERE _id = 'x'")
            #expect(try await InProcessMesh.eventually { try await Self.body(b).first?["color"] == "a-future" })
            let future = a.store.clock.current
            #expect(b.store.clock.current.milliseconds + 3_600_000 < future.milliseconds, "B's clock stayed near its wall time")
            // …and B's own later write still supersedes the value it overwrites, everywhere.
            _ = try await b.store.execute("UPDATE cars SET color = 'b-after' WHERE _id = 'x'")
            #expect(try await converged())
            #expect(try await Self.body(a).first?["color"] == "b-after")
            #expect(try await Self.body(b).first?["doors"] == 5)

            // Back to the right time: A's clock stays monotonic, so its new write beats its own earlier ones.
            clock.jump(hours: 0)
            _ = try await a.store.execute("UPDATE cars SET doors = 3 WHERE _id = 'x'")
            _ = try await b.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'y', 'color': 'b'})")
            #expect(try await converged())
            #expect(try await Self.body(a).first?["doors"] == 3)
            #expect(try await Self.body(a).count == 2)
            #expect(a.store.clock.current > future, "A's clock never went back")
        }
    }

    /// A peer a day ahead sends every transaction far ahead: the receiver warns once,
    /// not once per transaction (it merged every one of them all the same).
    @Test func aPeerADayAheadIsWarnedOfOnceNotOncePerTransaction() async throws {
        let clock = SkewedClock()
        clock.jump(hours: 24)
        let records = LogRecords()
        let a = try TestNode(name: "a", wallClock: clock.read)
        let b = try TestNode(
            name: "b", subscriptions: ["SELECT * FROM cars"],
            syncLogger: Logger(label: "shoal.sync") { _ in CapturingLogHandler(records: records) })
        defer { a.remove(); b.remove() }
        for i in 0..<40 { _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c\(i)'})") }
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.body(b).count == 40 })
        }
        let warnings = records.all.filter { $0.level == .warning && $0.message.contains("timestamped far ahead") }
        #expect(warnings.count == 1, "\(warnings.map(\.message))")
        #expect(warnings.first?.metadata["shoal.txn"]?.hasPrefix(a.store.siteID.description) == true)
    }

    /// The first far-ahead transaction of an origin is logged, the rest of the interval
    /// only counted, and the first after it says how many went unlogged; each origin
    /// on its own.
    @Test func skewWarningsComeOncePerOriginPerIntervalWithTheCountSuppressed() {
        var warnings = SkewWarnings(interval: 1_000, capacity: 2)
        let a = SiteID(1), b = SiteID(2), c = SiteID(3)
        #expect(warnings.farAhead(from: a, now: 10_000) == .warn(suppressed: 0))
        #expect(warnings.farAhead(from: a, now: 10_001) == .suppress)
        #expect(warnings.farAhead(from: b, now: 10_002) == .warn(suppressed: 0), "another origin is its own")
        #expect(warnings.farAhead(from: a, now: 10_999) == .suppress)
        #expect(warnings.farAhead(from: a, now: 11_000) == .warn(suppressed: 2))
        #expect(warnings.farAhead(from: a, now: 11_001) == .suppress)
        #expect(warnings.farAhead(from: a, now: 5_000) == .warn(suppressed: 1), "a wall clock stepped back warns again")
        // A third origin past the capacity: the table forgets rather than grows.
        #expect(warnings.farAhead(from: c, now: 5_001) == .warn(suppressed: 0))
        #expect(warnings.farAhead(from: c, now: 5_002) == .suppress)
    }
}

@testable import ShoalSync
import Testing

/// When an admin connection counts as idle, with no connection at all: silence for
/// longer than the idle timeout while no request runs.
@Suite struct AdminWatchdogTests {
    static let second: UInt64 = 1_000_000

    static func watchdog() -> AdminWatchdog { AdminWatchdog(idleTimeout: .seconds(30), now: 0) }

    @Test func silenceLongerThanTheTimeoutCloses() {
        var w = Self.watchdog()
        #expect(w.handle(.tick, now: 30 * Self.second) == nil, "30 s is not more than 30 s")
        #expect(w.handle(.tick, now: 30 * Self.second + 1) == .close)
        // Anything heard, a whole frame or part of one, starts the time again.
        for heard: AdminWatchdog.Event in [.frameReceived, .inboundProgress, .answerSent] {
            var w = Self.watchdog()
            #expect(w.handle(heard, now: 20 * Self.second) == nil)
            #expect(w.handle(.tick, now: 50 * Self.second) == nil, "\(heard)")
            #expect(w.handle(.tick, now: 50 * Self.second + 1) == .close, "\(heard)")
        }
    }

    /// A request that runs longer than the timeout is not idleness; once it is answered,
    /// the time counts from the answer.
    @Test func aRunningRequestKeepsTheConnectionOpen() {
        var w = Self.watchdog()
        _ = w.handle(.frameReceived, now: Self.second)
        _ = w.handle(.requestStarted, now: Self.second)
        #expect(w.handle(.tick, now: 100 * Self.second) == nil)
        _ = w.handle(.answerSent, now: 100 * Self.second)
        _ = w.handle(.requestEnded, now: 100 * Self.second)
        #expect(w.running == 0)
        #expect(w.handle(.tick, now: 130 * Self.second) == nil)
        #expect(w.handle(.tick, now: 131 * Self.second) == .close)
    }

    /// An observation keeps the connection open while it runs, however silent the client;
    /// its end counts as no activity, and every request running must end first.
    @Test func anObservationKeepsItOpenUntilItAndEveryOtherRequestEnd() {
        var w = Self.watchdog()
        _ = w.handle(.requestStarted, now: 0)  // the observation
        _ = w.handle(.requestStarted, now: 10 * Self.second)  // a query beside it
        _ = w.handle(.answerSent, now: 20 * Self.second)
        _ = w.handle(.requestEnded, now: 20 * Self.second)
        #expect(w.handle(.tick, now: 60 * Self.second) == nil, "the observation still runs")
        _ = w.handle(.requestEnded, now: 60 * Self.second)
        #expect(w.running == 0)
        #expect(w.handle(.tick, now: 60 * Self.second) == .close, "silent since the answer at 20 s")
    }
}

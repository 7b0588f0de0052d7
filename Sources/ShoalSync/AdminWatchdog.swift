/// When an admin connection is idle, as a value: `PeerSession` tells it what happens
/// on the connection and closes the connection when it says so.
///
/// An admin client may be silent while a request of its own runs (a long query, an
/// observation it waits on), so idleness counts only while none runs:
///
/// ```
///  frame received, or 16 KiB of one (inboundProgress) ──► heard now
///  answer sent ──► as if heard now: the idle time counts from the last answer
///  requestStarted ──► one more running          requestEnded ──► one fewer
///  tick ──► close when nothing was heard for longer than the idle timeout and none runs
/// ```
///
/// Times are microseconds on the session's own monotonic clock.
struct AdminWatchdog: Sendable {
    enum Event: Sendable, Hashable {
        /// A whole frame arrived.
        case frameReceived
        /// Part of a frame arrived (`InboundProgress`): the client is alive, though
        /// nothing whole has come since.
        case inboundProgress
        /// The answer to a request went out: the idle time counts from now.
        case answerSent
        /// A request began to run.
        case requestStarted
        /// A request ended (answered, failed, or an observation that ended with the connection).
        case requestEnded
        /// The periodic check.
        case tick
    }

    enum Action: Sendable, Hashable {
        /// Close the connection: the client is idle.
        case close
    }

    let idleTimeout: UInt64
    private var lastHeard: UInt64
    /// Requests running now.
    private(set) var running = 0

    init(idleTimeout: Duration, now: UInt64) {
        self.idleTimeout = SessionStateMachine.micros(idleTimeout)
        self.lastHeard = now
    }

    mutating func handle(_ event: Event, now: UInt64) -> Action? {
        switch event {
        case .frameReceived, .inboundProgress, .answerSent:
            lastHeard = now
        case .requestStarted:
            running += 1
        case .requestEnded:
            running -= 1
        case .tick:
            if running == 0, now > lastHeard, now - lastHeard > idleTimeout { return .close }
        }
        return nil
    }
}

/// The time by which a request's write must have committed, or not happen at all.
///
/// An admin client that gives up waiting for an answer cannot tell whether the
/// request ran, unless the node promises not to start or commit it after a time the
/// client knows. The client sends a budget with the request (PROTOCOL.md §10.2); the
/// node counts it from when it read the request and checks it where a write could
/// still be abandoned: while it waits for the writer, and right before COMMIT. Past
/// it, nothing is written and the error says so.
///
/// A value with the time passed in, so the decision is tested without a clock.
public struct Deadline: Sendable, Hashable {
    /// Where the work was when the budget ran out, for the message.
    public enum Stage: Sendable, Hashable {
        /// Waiting for the store's one writer (another transaction held it).
        case waitingForWriter
        /// Its statements had run; COMMIT had not.
        case beforeCommit
    }

    /// The budget the request came with.
    public let budget: Duration
    /// When it runs out.
    public let instant: ContinuousClock.Instant

    /// The deadline `budget` after `start` (when the request was read).
    public init(budget: Duration, from start: ContinuousClock.Instant = .now) {
        self.budget = budget
        self.instant = start + budget
    }

    /// Whether the budget has run out at `now`.
    public func hasPassed(at now: ContinuousClock.Instant = .now) -> Bool { now >= instant }

    /// Throws `ShoalError.Code.deadlineExceeded` if the budget has run out at `now`.
    public func check(_ stage: Stage, at now: ContinuousClock.Instant = .now) throws(ShoalError) {
        if hasPassed(at: now) { throw exceeded(stage) }
    }

    /// The error of a request whose budget ran out at `stage`: nothing of it was written.
    public func exceeded(_ stage: Stage) -> ShoalError {
        let when =
            switch stage {
            case .waitingForWriter: "while it waited for the node's writer (another transaction held it)"
            case .beforeCommit: "before it committed"
            }
        return ShoalError(
            .deadlineExceeded,
            "the request's budget of \(budget.wholeMilliseconds) ms ran out \(when): nothing was written, so it was not applied and can be retried")
    }
}

extension Duration {
    /// The duration in whole milliseconds, rounded down: how a budget is written.
    package var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}

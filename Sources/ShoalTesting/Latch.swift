import Foundation
import ShoalCRDT

/// A one-shot signal between tasks: `open()` once, and every `wait()` returns.
/// Waiting polls, so a cancelled waiter stops waiting (it throws `CancellationError`).
public final class Latch: Sendable {
    private let opened = Locked(false)

    public init() {}

    public func open() { opened.withLock { $0 = true } }
    public var isOpen: Bool { opened.withLock { $0 } }

    public func wait() async throws {
        while !isOpen { try await Task.sleep(for: .milliseconds(5)) }
    }

    /// Blocks the calling thread until the latch opens, for code that cannot await (a
    /// store's synchronous write body); false when `limit` passed first, so that a test
    /// waiting for what cannot happen fails rather than hangs.
    @discardableResult
    public func waitBlocking(limit: Duration = .seconds(20)) -> Bool {
        let deadline = ContinuousClock.now + limit
        while !isOpen {
            if ContinuousClock.now >= deadline { return false }
            usleep(1_000)
        }
        return true
    }
}

/// Thrown by `withHangGuard` when the operation never finished.
public struct HangGuardExpired: Error, CustomStringConvertible {
    public var description: String { "the operation did not finish: it waits for something that cannot happen" }
}

/// Runs `body`, and throws `HangGuardExpired` (cancelling it) instead of hanging when
/// it has not finished after `limit`. The limit is generous: it turns a deadlock into
/// a failure, it times nothing.
public func withHangGuard<T: Sendable>(
    _ limit: Duration = .seconds(20), _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else { throw HangGuardExpired() }
        return value
    }
}

import ShoalCRDT

/// The store's one writer, handed out in order of arrival.
///
/// SQLite has one writer per database. A read-write `Transaction` keeps it from
/// `BEGIN IMMEDIATE` to `COMMIT` across any number of awaits, so it cannot be a
/// lock held by a thread: it is this gate, which suspends the tasks that wait for
/// it (first come, first served) instead of blocking threads. Every write of the
/// store takes it first; GRDB's own writer queue then only ever serves the holder.
///
/// ```
///   acquire ──► held ──────────────► release ──► handed to the first waiter
///                │  (awaits, several     │         (or free when none waits)
///   waiters:  [t2, t3, …]  accesses)     │
///                                        └──► a cancelled waiter leaves the queue
///                                             and throws; it never holds the gate
/// ```
///
/// Closing: once `close(admittingNested:)` is called, new callers are refused,
/// except those that say they are part of work already running (nested in an open
/// transaction); the waiters already queued keep their place.
final class WriteGate: Sendable {
    /// Why the gate refused a caller.
    enum Refusal: Error {
        /// The store is shutting down or closed.
        case closing
    }

    private struct Waiter {
        let id: Int
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var held = false
        var waiters: [Waiter] = []
        var nextID = 0
        /// Refuse callers that are not nested in running work.
        var closing = false
        /// Refuse every caller.
        var closed = false

        func refuses(nested: Bool) -> Bool { closed || (closing && !nested) }
    }

    private let state = Locked(State())

    /// Waits until this task holds the gate.
    ///
    /// - Parameters:
    ///   - nested: the caller belongs to a transaction that is already running, so it
    ///     is admitted while the store shuts down (until it is closed).
    ///   - cancellable: when true (the default), cancelling the task while it waits
    ///     throws `CancellationError` and the gate is not taken; shutdown waits
    ///     whatever happens.
    /// - Throws: `CancellationError`, or `Refusal.closing`.
    func acquire(nested: Bool = false, cancellable: Bool = true) async throws {
        let id: Int? = try state.withLock { s throws(Refusal) in
            if s.refuses(nested: nested) { throw Refusal.closing }
            if !s.held && s.waiters.isEmpty {
                s.held = true
                return nil
            }
            defer { s.nextID += 1 }
            return s.nextID
        }
        guard let id else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Outcome {
                    case taken, waiting
                    case failed(any Error)
                }
                let outcome = state.withLock { s -> Outcome in
                    // Cancellation sets the flag before it runs the handler, and the handler
                    // takes this lock: either the flag is seen here, or the handler finds the waiter.
                    if cancellable && Task.isCancelled { return .failed(CancellationError()) }
                    if s.refuses(nested: nested) { return .failed(Refusal.closing) }
                    if !s.held && s.waiters.isEmpty {
                        s.held = true
                        return .taken
                    }
                    s.waiters.append(Waiter(id: id, continuation: continuation))
                    return .waiting
                }
                switch outcome {
                case .taken: continuation.resume()
                case .waiting: break
                case .failed(let error): continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            guard cancellable else { return }
            let waiter = state.withLock { s -> Waiter? in
                guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: index)
            }
            // Not found: the gate was already handed to this task, which now holds it.
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Takes the gate only if it is free and nobody waits; never suspends.
    func tryAcquire() -> Bool {
        state.withLock { s in
            guard !s.closing, !s.closed, !s.held, s.waiters.isEmpty else { return false }
            s.held = true
            return true
        }
    }

    /// How many tasks wait for the gate now (for tests and diagnostics).
    var waiterCount: Int { state.withLock { $0.waiters.count } }

    /// Hands the gate to the first waiter, or frees it.
    func release() {
        let next = state.withLock { s -> Waiter? in
            precondition(s.held, "the write gate was released by a task that did not hold it")
            guard !s.waiters.isEmpty else {
                s.held = false
                return nil
            }
            return s.waiters.removeFirst()
        }
        next?.continuation.resume()
    }

    /// Refuses new callers from now on: those not nested in running work, or, once
    /// `admittingNested` is false, everyone, waiters included.
    func close(admittingNested: Bool) {
        let refused = state.withLock { s -> [Waiter] in
            s.closing = true
            guard !admittingNested else { return [] }
            s.closed = true
            defer { s.waiters.removeAll() }
            return s.waiters
        }
        for waiter in refused { waiter.continuation.resume(throwing: Refusal.closing) }
    }
}

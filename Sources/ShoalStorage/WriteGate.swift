package import Logging
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
///
/// A caller with a deadline waits until then at most: it leaves the queue as a
/// cancelled one does, and never holds the gate after its deadline has passed.
package final class WriteGate: Sendable {
    /// Why the gate refused a caller.
    package enum Refusal: Error {
        /// The store is shutting down or closed.
        case closing
        /// The caller's deadline passed before its turn came.
        case deadlinePassed
    }

    private struct Waiter {
        let id: Int
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var held = false
        var waiters: [Waiter] = []
        var nextID = 0
        /// Waiters whose deadline passed before they joined the queue (their timer ran
        /// first): they give up instead of joining it.
        var expired: Set<Int> = []
        /// Refuse callers that are not nested in running work.
        var closing = false
        /// Refuse every caller.
        var closed = false

        func refuses(nested: Bool) -> Bool { closed || (closing && !nested) }
    }

    private let state = Locked(State())

    package init() {}

    /// Waits until this task holds the gate.
    ///
    /// - Parameters:
    ///   - nested: the caller belongs to a transaction that is already running, so it
    ///     is admitted while the store shuts down (until it is closed).
    ///   - cancellable: when true (the default), cancelling the task while it waits
    ///     throws `CancellationError` and the gate is not taken; shutdown waits
    ///     whatever happens.
    ///   - deadline: when given, the caller waits until then at most, and a caller
    ///     whose deadline has already passed is refused even if the gate is free.
    /// - Throws: `CancellationError`, `Refusal.closing`, or `Refusal.deadlinePassed`.
    package func acquire(nested: Bool = false, cancellable: Bool = true, deadline: ContinuousClock.Instant? = nil) async throws {
        if let deadline, ContinuousClock.now >= deadline { throw Refusal.deadlinePassed }
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
        guard let deadline else { return try await wait(id, nested: nested, cancellable: cancellable) }
        // A timer beside the wait takes the waiter out of the queue at the deadline;
        // once the wait ends (the gate taken, or given up), the timer is cancelled.
        defer { _ = state.withLock { $0.expired.remove(id) } }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await Task.sleep(until: deadline, clock: .continuous)
                self.withdraw(id, throwing: Refusal.deadlinePassed)
            }
            defer { group.cancelAll() }
            try await wait(id, nested: nested, cancellable: cancellable)
            // Handed over just as the timer ran: too late all the same.
            if ContinuousClock.now >= deadline {
                release()
                throw Refusal.deadlinePassed
            }
        }
    }

    /// Queues waiter `id` and suspends until the gate is handed to it.
    private func wait(_ id: Int, nested: Bool, cancellable: Bool) async throws {
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
                    if s.expired.contains(id) { return .failed(Refusal.deadlinePassed) }
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
            withdraw(id, throwing: CancellationError(), marking: false)
        }
    }

    /// Takes waiter `id` out of the queue and resumes it with `error`. Not found: the
    /// gate was already handed to it (it now holds it), or it has not joined the
    /// queue yet, in which case `marking` makes it give up when it tries to.
    private func withdraw(_ id: Int, throwing error: any Error, marking: Bool = true) {
        let waiter = state.withLock { s -> Waiter? in
            guard let index = s.waiters.firstIndex(where: { $0.id == id }) else {
                if marking { s.expired.insert(id) }
                return nil
            }
            return s.waiters.remove(at: index)
        }
        waiter?.continuation.resume(throwing: error)
    }

    /// Takes the gate only if it is free and nobody waits; never suspends.
    package func tryAcquire() -> Bool {
        state.withLock { s in
            guard !s.closing, !s.closed, !s.held, s.waiters.isEmpty else { return false }
            s.held = true
            return true
        }
    }

    /// How many tasks wait for the gate now (for tests and diagnostics).
    package var waiterCount: Int { state.withLock { $0.waiters.count } }

    /// Hands the gate to the first waiter, or frees it.
    package func release() {
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

    /// Whether the gate refuses everyone: the store has closed.
    package var isClosed: Bool { state.withLock { $0.closed } }

    /// Refuses new callers from now on: those not nested in running work, or, once
    /// `admittingNested` is false, everyone, waiters included.
    package func close(admittingNested: Bool) {
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

extension WriteGate {
    /// A store's shutdown through this gate, called inside a transaction of the store
    /// or not: closes the gate to new writers, lets `drain` wait for the store's other
    /// transactions (it is given the ids of this task's own, which cannot end first),
    /// takes the gate after the writes queued before, unless this task's own read-write
    /// transaction holds it, and runs `closeStore` while holding it.
    ///
    /// Called inside a transaction, it logs that and closes without waiting for it: the
    /// transaction then keeps nothing, for its commit finds the gate closed.
    package func shutDown(
        of store: AnyObject, logger: Logger, drain: (Set<String>) async -> Void = { _ in }, closeStore: () -> Void
    ) async {
        close(admittingNested: true)
        let own = OpenTransactions.marks.filter { $0.store == ObjectIdentifier(store) }
        if !own.isEmpty {
            logger.error(
                "shutdown() was called inside a transaction of this store; it closes without waiting for that transaction",
                metadata: ["shoal.txn.id": "\(own.map(\.info.id).joined(separator: ","))"])
        }
        await drain(Set(own.map(\.info.id)))
        // The writes queued before shutdown began (sync, attachments) go first.
        var acquired = false
        if !own.contains(where: { !$0.info.isReadOnly }) {
            acquired = (try? await acquire(nested: true, cancellable: false)) != nil
        }
        closeStore()
        if acquired { release() }
    }
}

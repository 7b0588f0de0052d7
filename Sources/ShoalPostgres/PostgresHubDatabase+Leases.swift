import Logging
import NIOCore
import NIOPosix
import ShoalCRDT
import ShoalStorage
package import PostgresNIO

/// Pooled connections whose wait is bounded while the server cannot be reached.
///
/// PostgresNIO's pool queues a lease for as long as it keeps failing to connect (a
/// minute, until its circuit breaker trips), and a hub would hold a session, a commit
/// or a handshake that long without a word to its peer. Here a lease gives up when no
/// connection was had, by any caller, for `unreachableAfter`: a pool that is merely
/// busy hands connections out and back all the while, so its callers wait on. Once one
/// lease gave up, the next wait a second at most, until one is had again:
///
/// ```
///  lease ──► pool ──► connection ──────────────────────────────► body
///    │                                      (any lease or return: the server answers)
///    └── timer: no lease or return for `unreachableAfter` ──► give up ──► later leases
///                                                          wait 1 s, until one succeeds
/// ```
///
/// The lease is taken in a child task that lends the connection to the caller's task,
/// so the caller's body runs where it was called, and a lease given up is cancelled
/// (the pool drops the request) before the body could start.
///
/// Once the body runs, only a dead link ends it: when no one has had an answer from
/// the server for `unreachableAfter`, a connection of its own tells a slow statement
/// (the body goes on) from a link that drops packets (the body's connection is closed,
/// and its statement fails as a connection error does; a commit in flight may or may
/// not have been applied, as with any connection lost).
extension PostgresHubDatabase {
    /// What the bounds know: when the pool last handed out a connection, when the
    /// server last answered (a body done, a connection of its own made), and whether a
    /// lease gave up or a link was found dead since.
    ///
    /// Nothing is bounded before the pool first connects: a hub checks that it can
    /// reach the server as it starts (`checkReachable`), and a pool starting on a busy
    /// machine may take a while for its first connection.
    struct Reachability: Sendable {
        var lastLease: ContinuousClock.Instant?
        var lastAnswer: ContinuousClock.Instant?
        var givenUp = false
        /// A connection of the hub's own failed while a statement waited, and nothing
        /// answered since: the pool's other idle connections are likely dead too, and a
        /// statement on one is given a second, then a second's look with a connection of
        /// the hub's own, before its connection is closed.
        var linkDead = false
        /// Connections lent now: while some are, a pool that gives out no other is busy,
        /// not necessarily cut off, and a connection of the hub's own tells which.
        var lent = 0

        /// The later of the two: a pool that hands out connections is not unreachable.
        var lastSign: ContinuousClock.Instant? {
            guard let lastLease, let lastAnswer else { return lastLease ?? lastAnswer }
            return max(lastLease, lastAnswer)
        }
    }

    /// The error of a lease that gave up (`describe` words it).
    struct Unreachable: Error, CustomStringConvertible {
        var since: Duration
        var description: String {
            "cannot reach the server: no connection for \(since.components.seconds) s (the hub keeps trying)"
        }
    }

    /// Notes that the server answered: a body ran to its end, a connection was made.
    func noteAnswer() {
        reachability.withLock {
            $0.lastAnswer = .now
            $0.givenUp = false
            $0.linkDead = false
        }
    }

    /// Notes that the pool handed out a connection (an idle one may be dead: it proves
    /// only that the pool is not stuck connecting).
    func noteLease() {
        reachability.withLock { $0.lastLease = .now }
    }

    /// Runs `body` on a pooled connection, leased within the bound above.
    package nonisolated(nonsending) func withConnection<T>(_ body: (HubConnection) async throws -> T) async throws -> T {
        // Once a lease gave up, each waits only a moment: a probe of whether the server is back.
        let bound = reachability.withLock { $0.givenUp } ? min(unreachableAfter, .seconds(1)) : unreachableAfter
        let started = ContinuousClock.now
        let loan = Loan()
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [client] in
                do {
                    // A connection that closed before the pool heard of it is not lent: a
                    // statement sent on a closed connection is never answered (PostgresNIO).
                    while try await client.withConnection({ connection -> Bool in
                        if connection.isClosed { return true }
                        self.noteLease()
                        guard loan.lend(HubConnection(connection)) else { return false }
                        self.reachability.withLock { $0.lent += 1 }
                        defer { self.reachability.withLock { $0.lent -= 1 } }
                        // Closed before the pool gets it back, when the watcher found the link dead.
                        if await loan.returned() { try? await connection.close() }
                        return false
                    }) {}
                } catch {
                    loan.fail(error)
                }
            }
            group.addTask {
                // While the lease waits: give up once the server gave no one a connection
                // for `bound` (woken as soon as the lease is had or fails, and not cancelled
                // with the caller: a lease cancelled fails, which wakes it).
                while loan.waiting {
                    guard let sign = self.reachability.withLock({ $0.lastSign }) else {
                        // Not connected yet: look again in a while.
                        await loan.wait(until: .now + bound, lent: false)
                        continue
                    }
                    let from = max(started, sign)
                    await loan.wait(until: from + bound, lent: false)
                    guard loan.waiting else { break }
                    let (last, busy) = self.reachability.withLock { ($0.lastSign ?? from, $0.lent > 0) }
                    if last > from { continue }
                    if busy, await self.serverAnswers(within: self.unreachableAfter) != false { continue }
                    if loan.fail(Unreachable(since: ContinuousClock.now - last)) {
                        self.reachability.withLock { $0.givenUp = true }
                    }
                    return
                }
                // While the body runs: a server that stopped answering anyone (its link
                // dropping packets, not refusing them) would hold the body's query until
                // TCP gives up, a quarter of an hour. When no one has had an answer for
                // `unreachableAfter` since the watch began, a new connection tells a slow
                // query from a dead link; on a dead one, the body's connection is closed
                // and its query fails (`HubConnection` makes sure that it does).
                while loan.lentConnection != nil {
                    let dead = self.reachability.withLock { $0.linkDead }
                    let from = ContinuousClock.now
                    let patience = dead ? min(self.unreachableAfter, .seconds(1)) : self.unreachableAfter
                    if Task.isCancelled {
                        // The caller was cancelled, and its body still runs: a statement on a
                        // dead link does not end when its task is cancelled (the cancel request
                        // goes unanswered too), so the watch goes on, on a timer of its own.
                        await loan.wait(until: from + patience, lent: true)
                    } else {
                        // Cancelled when the body is done (or its caller is: then the above).
                        do { try await Task.sleep(until: from + patience, clock: .continuous) } catch { continue }
                    }
                    guard loan.lentConnection != nil else { return }
                    let cancelled = Task.isCancelled
                    if !cancelled, self.reachability.withLock({ ($0.lastAnswer ?? from) > from }) { continue }
                    // Dead already: a short look, the link most likely still down.
                    let answers = cancelled ? false : await self.serverAnswers(within: dead ? min(self.unreachableAfter, .seconds(1)) : self.unreachableAfter)
                    guard loan.lentConnection != nil else { return }
                    if answers == false {
                        self.logger.warning(
                            cancelled
                                ? "a cancelled statement is still waiting for the database: closing its connection"
                                : "the database stopped answering: closing a connection whose statement waits",
                            metadata: ["shoal.store": "\(self.location)", "shoal.unreachable.after": "\(self.unreachableAfter)"])
                        if !cancelled {
                            self.reachability.withLock {
                                $0.givenUp = true
                                $0.linkDead = true
                            }
                        }
                        try? await loan.condemn()?.close()
                        return
                    }
                }
            }
            defer { group.cancelAll() }
            let connection = try await loan.borrow()
            defer { loan.giveBack() }
            let result = try await body(connection)
            noteAnswer()
            return result
        }
    }

    /// Whether the server answers a connection of the hub's own within `timeout`: true
    /// when it does, or refuses it in words (too many clients, starting up: it is
    /// there); false when nothing answers; nil when the task was cancelled meanwhile.
    func serverAnswers(within timeout: Duration) async -> Bool? {
        do {
            try await connectOnce(within: timeout)
        } catch let error as PSQLError where error.serverInfo != nil {
            noteAnswer()
            return true
        } catch {
            return Task.isCancelled || error is CancellationError ? nil : false
        }
        noteAnswer()
        return true
    }

    /// Runs one query on a pooled connection and reads all its rows.
    package func query(_ query: PostgresQuery, logger: Logger? = nil) async throws -> [PostgresRow] {
        try await withConnection { connection in
            try await connection.query(query, logger: logger ?? self.logger)
        }
    }
}

/// A connection lent by the task holding its lease to the task that asked for it.
///
/// ```
///  waiting ──lend──► lent ──(borrow)──► lent, borrowed ──giveBack──► done
///     └──fail──► failed          the lender waits in `returned()` until done, so the
///                                pool gets the connection back only once it is unused
/// ```
private final class Loan: Sendable {
    private enum Phase {
        case waiting(borrower: CheckedContinuation<HubConnection, any Error>?)
        case lent(HubConnection, borrowed: Bool, lender: CheckedContinuation<Void, Never>?)
        case failed(any Error)
        case done
    }
    private struct State {
        var phase = Phase.waiting(borrower: nil)
        /// The watcher found the link dead: the connection is closed before the pool gets it back.
        var condemned = false
        /// The timer's wait (`wait(until:lent:)`), the number of that wait, and what ends
        /// it at its deadline.
        var watcher: CheckedContinuation<Void, Never>?
        var wait = 0
        var deadline: Scheduled<Void>?
    }
    private let state = Locked(State())

    /// Whether the lease is still waiting for a connection.
    var waiting: Bool {
        state.withLock { if case .waiting = $0.phase { true } else { false } }
    }

    /// The connection while it is lent and not yet given back.
    var lentConnection: HubConnection? {
        state.withLock { if case .lent(let connection, _, _) = $0.phase { connection } else { nil } }
    }

    /// Hands `connection` to the borrower; false when it no longer waits (it failed).
    func lend(_ connection: HubConnection) -> Bool {
        let outcome = state.withLock { state -> (lent: Bool, borrower: CheckedContinuation<HubConnection, any Error>?) in
            guard case .waiting(let borrower) = state.phase else { return (false, nil) }
            state.phase = .lent(connection, borrowed: borrower != nil, lender: nil)
            return (true, borrower)
        }
        outcome.borrower?.resume(returning: connection)
        if outcome.lent { wake() }
        return outcome.lent
    }

    /// Fails the borrower that still waits; true when it did.
    @discardableResult
    func fail(_ error: any Error) -> Bool {
        let outcome = state.withLock { state -> (failed: Bool, borrower: CheckedContinuation<HubConnection, any Error>?) in
            guard case .waiting(let borrower) = state.phase else { return (false, nil) }
            state.phase = .failed(error)
            return (true, borrower)
        }
        outcome.borrower?.resume(throwing: error)
        if outcome.failed { wake() }
        return outcome.failed
    }

    /// The connection, once lent; throws what failed the lease.
    func borrow() async throws -> HubConnection {
        try await withCheckedThrowingContinuation { continuation in
            let now: Result<HubConnection, any Error>? = state.withLock { state in
                switch state.phase {
                case .waiting:
                    state.phase = .waiting(borrower: continuation)
                    return nil
                case .lent(let connection, false, let lender):
                    state.phase = .lent(connection, borrowed: true, lender: lender)
                    return .success(connection)
                case .failed(let error):
                    return .failure(error)
                case .lent, .done:
                    return .failure(CancellationError())
                }
            }
            if let now { continuation.resume(with: now) }
        }
    }

    /// Waits, in the lending task, until the borrower gives the connection back; true
    /// when the watcher condemned it.
    func returned() async -> Bool {
        await withCheckedContinuation { continuation in
            let back = state.withLock { state -> Bool in
                guard case .lent(let connection, let borrowed, nil) = state.phase else { return true }
                state.phase = .lent(connection, borrowed: borrowed, lender: continuation)
                return false
            }
            if back { continuation.resume() }
        }
        return state.withLock { $0.condemned }
    }

    /// Gives the connection back to the lending task, which ends its lease.
    func giveBack() {
        let lender = state.withLock { state -> CheckedContinuation<Void, Never>? in
            defer { state.phase = .done }
            if case .lent(_, _, let lender) = state.phase { return lender }
            return nil
        }
        lender?.resume()
        wake()
    }

    /// Marks the connection to be closed, if it is still lent; returns it then.
    func condemn() -> HubConnection? {
        state.withLock { state in
            guard case .lent(let connection, _, _) = state.phase else { return nil }
            state.condemned = true
            return connection
        }
    }

    /// Resumes the timer's wait, if it waits, and drops its deadline from the event loop.
    private func wake() {
        let (watcher, deadline) = state.withLock { state in
            defer {
                state.watcher = nil
                state.deadline = nil
            }
            return (state.watcher, state.deadline)
        }
        deadline?.cancel()
        watcher?.resume()
    }

    /// Waits until `deadline` or until the loan moves on from where it is (`lent`:
    /// lent, else waiting for the pool), whichever comes first, whether or not the task
    /// is cancelled. Returns at once when it has moved on already.
    ///
    /// The deadline is a task scheduled on an event loop, cancelled (and so dropped from
    /// the loop's queue) when the loan moves on first, as it does for almost every lease.
    func wait(until deadline: ContinuousClock.Instant, lent: Bool) async {
        await withCheckedContinuation { continuation in
            state.withLock { state in
                switch (state.phase, lent) {
                case (.waiting, false), (.lent, true): break
                default: return continuation.resume()
                }
                let left = max(.zero, deadline - ContinuousClock.now)
                state.wait += 1
                state.watcher = continuation
                state.deadline = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: TimeAmount(left) + .milliseconds(1)) {
                    [wait = state.wait] in self.expire(wait)
                }
            }
        }
    }

    /// Ends the timer's wait number `wait` at its deadline, unless it was woken already.
    private func expire(_ wait: Int) {
        let watcher = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.wait == wait, let watcher = state.watcher else { return nil }
            state.watcher = nil
            state.deadline = nil
            return watcher
        }
        watcher?.resume()
    }
}

extension [PostgresRow] {
    /// Each row's one column, decoded.
    package func decode<Column: PostgresDecodable>(_ type: Column.Type) throws -> [Column] {
        try map { try $0.decode(type) }
    }

    /// Each row's columns, decoded.
    package func decode<each Column: PostgresDecodable>(_ types: (repeat each Column).Type) throws -> [(repeat each Column)] {
        try map { try $0.decode(types) }
    }
}


import ShoalCRDT
import ShoalStorage

/// The transactions running in one store: what the long-transaction log reports,
/// and what shutdown waits for.
///
/// Registering and unregistering are one lock each, so every transaction, the
/// implicit one of a one-document `execute` included, can afford it. Nothing here
/// runs on its own: `DocumentStore.monitorTransactions()` asks for the reports due.
final class TransactionRegistry: Sendable {
    struct Entry: Sendable {
        let info: TransactionInfo
        let start: ContinuousClock.Instant
        /// How many times it has been reported as long, and when last.
        var reports = 0
        var lastReport: ContinuousClock.Instant?
    }

    /// A transaction open for longer than the threshold, reported for the `number`-th time.
    struct Report: Sendable {
        let info: TransactionInfo
        let elapsed: Duration
        let number: Int
    }

    private struct State {
        var entries: [Int: Entry] = [:]
        var nextToken = 0
        /// Shutdown began: only transactions nested in running ones are admitted.
        var closing = false
        /// The store closed.
        var closed = false
        var idleWaiters: [IdleWaiter] = []
    }

    private struct IdleWaiter {
        let besides: Set<String>
        let continuation: CheckedContinuation<Void, Never>
    }

    private let state = Locked(State())

    /// Records a transaction that starts now; nil when the store no longer admits it.
    func register(_ info: TransactionInfo, nested: Bool) -> Int? {
        let start = ContinuousClock.now
        return state.withLock { s in
            if s.closed || (s.closing && !nested) { return nil }
            defer { s.nextToken += 1 }
            s.entries[s.nextToken] = Entry(info: info, start: start)
            return s.nextToken
        }
    }

    func unregister(_ token: Int) {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.entries.removeValue(forKey: token)
            let running = Set(s.entries.values.map(\.info.id))
            var ready: [CheckedContinuation<Void, Never>] = []
            s.idleWaiters.removeAll { waiter in
                guard running.isSubset(of: waiter.besides) else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Refuses new transactions from now on, except nested ones until `closed` is set too.
    func close(completely closed: Bool) {
        state.withLock { s in
            s.closing = true
            if closed { s.closed = true }
        }
    }

    var isClosed: Bool { state.withLock { $0.closed } }

    /// The transactions running now.
    var transactions: [TransactionInfo] {
        state.withLock { $0.entries.values.sorted { $0.start < $1.start }.map(\.info) }
    }

    /// Returns once no transaction is running but those with an ID in `besides` (at
    /// once if none is).
    func waitUntilIdle(besides: Set<String> = []) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = state.withLock { s -> Bool in
                if Set(s.entries.values.map(\.info.id)).isSubset(of: besides) { return true }
                s.idleWaiters.append(IdleWaiter(besides: besides, continuation: continuation))
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// The transactions due a report at `now`, and when the next one will be due.
    ///
    /// A transaction is due its first report `threshold` after it started, then one
    /// `interval` after the previous report. A late check makes one report, never a
    /// burst, so the reports of a transaction are numbered 1, 2, 3, … without gaps
    /// (and its levels rise one step at a time).
    func reports(at now: ContinuousClock.Instant, threshold: Duration, interval: Duration)
        -> (due: [Report], next: ContinuousClock.Instant?)
    {
        state.withLock { s in
            var due: [Report] = []
            var next: ContinuousClock.Instant?
            for (token, entry) in s.entries {
                var entry = entry
                var dueAt = entry.lastReport.map { $0 + interval } ?? entry.start + threshold
                if now >= dueAt {
                    entry.reports += 1
                    entry.lastReport = now
                    s.entries[token] = entry
                    due.append(Report(info: entry.info, elapsed: now - entry.start, number: entry.reports))
                    dueAt = now + interval
                }
                next = next.map { min($0, dueAt) } ?? dueAt
            }
            return (due.sorted { $0.elapsed > $1.elapsed }, next)
        }
    }
}

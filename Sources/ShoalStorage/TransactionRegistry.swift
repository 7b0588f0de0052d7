package import Logging
import ShoalCRDT

/// The transactions running in one store: what the long-transaction log reports,
/// and what shutdown waits for.
///
/// Registering and unregistering are one lock each, so every transaction, the
/// implicit one of a one-document `execute` included, can afford it. Nothing here
/// runs on its own: the store's `monitorTransactions()` runs `monitor`, which asks for
/// the reports due. Both engines keep one.
package final class TransactionRegistry: Sendable {
    struct Entry: Sendable {
        let info: TransactionInfo
        let start: ContinuousClock.Instant
        /// How many times it has been reported as long, and when last.
        var reports = 0
        var lastReport: ContinuousClock.Instant?
    }

    /// A transaction open for longer than the threshold, reported for the `number`-th time.
    package struct Report: Sendable {
        package let info: TransactionInfo
        package let elapsed: Duration
        package let number: Int
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

    package init() {}

    /// Records a transaction that starts now; nil when the store no longer admits it.
    package func register(_ info: TransactionInfo, nested: Bool) -> Int? {
        let start = ContinuousClock.now
        return state.withLock { s in
            if s.closed || (s.closing && !nested) { return nil }
            defer { s.nextToken += 1 }
            s.entries[s.nextToken] = Entry(info: info, start: start)
            return s.nextToken
        }
    }

    package func unregister(_ token: Int) {
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
    package func close(completely closed: Bool) {
        state.withLock { s in
            s.closing = true
            if closed { s.closed = true }
        }
    }

    package var isClosed: Bool { state.withLock { $0.closed } }

    /// The transactions running now.
    package var transactions: [TransactionInfo] {
        state.withLock { $0.entries.values.sorted { $0.start < $1.start }.map(\.info) }
    }

    /// Returns once no transaction is running but those with an ID in `besides` (at
    /// once if none is).
    package func waitUntilIdle(besides: Set<String> = []) async {
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
    package func reports(at now: ContinuousClock.Instant, threshold: Duration, interval: Duration)
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

    /// Logs the transactions that stay open too long, until the task is cancelled or
    /// the registry closes; `parameters` gives the store's parameters as they are now.
    ///
    /// A transaction still open `transaction_duration_before_logging_ms` after it
    /// started is logged at `notice`, then again every `transaction_trace_interval_ms`:
    /// the second time at `warning`, from the third on at `error`. Each line names the
    /// transaction's ID and hint, whether it is read-only, and how long it has been
    /// open. The monitor wakes when the next report is due, and at least once a
    /// second so that new parameter values apply (at most every 10 ms).
    package func monitor(parameters: () -> SystemParameters, logger: Logger) async {
        let clock = ContinuousClock()
        while !isClosed {
            let parameters = parameters()
            let threshold = Duration.milliseconds(parameters.transactionDurationBeforeLoggingMilliseconds)
            let interval = Duration.milliseconds(parameters.transactionTraceIntervalMilliseconds)
            let now = clock.now
            let (due, next) = reports(at: now, threshold: threshold, interval: interval)
            for report in due { Self.log(report, logger: logger) }
            // Not more often than every 10 ms, however small the parameters.
            let wake = max(min(next ?? now + threshold, now + .seconds(1)), now + .milliseconds(10))
            do {
                try await Task.sleep(until: wake, clock: clock)
            } catch {
                return
            }
        }
    }

    private static func log(_ report: Report, logger: Logger) {
        let level: Logger.Level =
            switch report.number {
            case 1: .notice
            case 2: .warning
            default: .error
            }
        let milliseconds = Int64(report.elapsed / .milliseconds(1))
        let seconds = Double(milliseconds / 100) / 10
        let hint = report.info.hint.map { "hint '\($0)'" } ?? "no hint"
        logger.log(
            level: level,
            "\(report.info.isReadOnly ? "read-only" : "read-write") transaction \(report.info.id) (\(hint)) has been open for \(seconds) s",
            metadata: [
                "shoal.txn.id": "\(report.info.id)",
                "shoal.txn.hint": "\(report.info.hint ?? "")",
                "shoal.txn.read_only": "\(report.info.isReadOnly)",
                "shoal.txn.open_ms": "\(milliseconds)",
                "shoal.txn.report": "\(report.number)",
            ])
    }
}

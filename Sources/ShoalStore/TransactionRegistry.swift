import Synchronization

/// The transactions running in one store: what shutdown waits for.
///
/// Registering and unregistering are one lock each, so every transaction, the
/// implicit one of a one-document `execute` included, can afford it.
final class TransactionRegistry: Sendable {
    struct Entry: Sendable {
        let info: TransactionInfo
        let start: ContinuousClock.Instant
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

    private let state = Mutex(State())

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
    var running: [TransactionInfo] { state.withLock { $0.entries.values.sorted { $0.start < $1.start }.map(\.info) } }

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
}

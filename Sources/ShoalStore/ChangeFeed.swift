import Synchronization

/// Tells waiting sync sessions that the change log grew.
///
/// Each listener gets an `AsyncStream` that holds only the newest sequence, so a
/// slow listener never queues notifications: it wakes, reads the log from its own
/// cursor, and waits again.
final class ChangeFeed: Sendable {
    private struct State {
        var latest: UInt64 = 0
        var listeners: [Int: AsyncStream<UInt64>.Continuation] = [:]
        var nextID = 0
    }

    private let state = Mutex(State())

    func publish(_ sequence: UInt64) {
        let listeners = state.withLock { s -> [AsyncStream<UInt64>.Continuation] in
            s.latest = max(s.latest, sequence)
            return Array(s.listeners.values)
        }
        for l in listeners { l.yield(sequence) }
    }

    func updates() -> AsyncStream<UInt64> {
        let (stream, continuation) = AsyncStream.makeStream(of: UInt64.self, bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { s in
            let id = s.nextID
            s.nextID += 1
            s.listeners[id] = continuation
            if s.latest > 0 { continuation.yield(s.latest) }
            return id
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.listeners.removeValue(forKey: id) }
        }
        return stream
    }

    func finishAll() {
        let listeners = state.withLock { s in
            defer { s.listeners.removeAll() }
            return Array(s.listeners.values)
        }
        for l in listeners { l.finish() }
    }
}

import ShoalCRDT

/// Fans one producer's events out to any number of async listeners.
///
/// Each listener gets its own `AsyncStream` with the buffering policy the feed
/// was made with: `.bufferingNewest(1)` for "something changed, look again"
/// signals, `.unbounded` when every event matters.
public final class ChangeFeed<Element: Sendable>: Sendable {
    private struct State {
        var latest: Element?
        var listeners: [Int: AsyncStream<Element>.Continuation] = [:]
        var nextID = 0
        var finished = false
    }

    private let state = Locked(State())
    private let policy: AsyncStream<Element>.Continuation.BufferingPolicy
    private let replayLatest: Bool

    /// - Parameter replayLatest: a new listener first receives the last event published.
    public init(bufferingPolicy: AsyncStream<Element>.Continuation.BufferingPolicy, replayLatest: Bool) {
        self.policy = bufferingPolicy
        self.replayLatest = replayLatest
    }

    /// The last event published, if any.
    public var latest: Element? { state.withLock { $0.latest } }

    public func publish(_ element: Element) {
        let listeners = state.withLock { s -> [AsyncStream<Element>.Continuation] in
            s.latest = element
            return Array(s.listeners.values)
        }
        for l in listeners { l.yield(element) }
    }

    public func updates() -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: policy)
        let id: Int? = state.withLock { s in
            guard !s.finished else { return nil }
            let id = s.nextID
            s.nextID += 1
            s.listeners[id] = continuation
            if replayLatest, let latest = s.latest { continuation.yield(latest) }
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.listeners.removeValue(forKey: id) }
        }
        return stream
    }

    public func finishAll() {
        let listeners = state.withLock { s in
            defer {
                s.listeners.removeAll()
                s.finished = true
            }
            return Array(s.listeners.values)
        }
        for l in listeners { l.finish() }
    }
}

public import ShoalCRDT

/// Fans one producer's events out to any number of async listeners.
///
/// Each listener gets its own `AsyncStream` with the buffering policy the feed
/// was made with: `.bufferingNewest(1)` for "something changed, look again"
/// signals, `.unbounded` when every event matters. A listener on a hot path
/// (a peer session waiting for commits) can `listen` with a handler instead,
/// which the publisher calls: no task in between to wake.
public final class ChangeFeed<Element: Sendable>: Sendable {
    private enum Listener: Sendable {
        case stream(AsyncStream<Element>.Continuation)
        case handler(@Sendable (Element) -> Void, finished: @Sendable () -> Void)

        func yield(_ element: Element) {
            switch self {
            case .stream(let continuation): continuation.yield(element)
            case .handler(let handler, _): handler(element)
            }
        }

        func finish() {
            switch self {
            case .stream(let continuation): continuation.finish()
            case .handler(_, let finished): finished()
            }
        }
    }

    private struct State {
        var latest: Element?
        var listeners: [Int: Listener] = [:]
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

    /// Whether anyone listens now.
    public var hasListeners: Bool { state.withLock { !$0.listeners.isEmpty } }

    public func publish(_ element: Element) {
        let listeners = state.withLock { s -> [Listener] in
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
            s.listeners[id] = .stream(continuation)
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

    /// Calls `handler` with every event published from now on (first with the last
    /// one, if the feed replays it), on the publisher's thread and outside the feed's
    /// lock, until the returned listening is cancelled; `finished` runs once when the
    /// feed finishes (at once if it has). Handlers must be quick and must not block.
    public func listen(
        _ handler: @escaping @Sendable (Element) -> Void, finished: @escaping @Sendable () -> Void
    ) -> ChangeFeedListening {
        let registered = state.withLock { s -> (id: Int, replay: Element?)? in
            guard !s.finished else { return nil }
            let id = s.nextID
            s.nextID += 1
            s.listeners[id] = .handler(handler, finished: finished)
            return (id, replayLatest ? s.latest : nil)
        }
        guard let registered else {
            finished()
            return ChangeFeedListening {}
        }
        if let replay = registered.replay { handler(replay) }
        return ChangeFeedListening { [weak self] in
            _ = self?.state.withLock { $0.listeners.removeValue(forKey: registered.id) }
        }
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

/// A handler listening to a `ChangeFeed`; `cancel()` stops it (idempotent).
public struct ChangeFeedListening: Sendable {
    private let stop: @Sendable () -> Void
    package init(_ stop: @escaping @Sendable () -> Void) { self.stop = stop }
    public func cancel() { stop() }
}

/// Where the change log ends after a commit, and what that commit appended when the
/// store knows it: what a sync session needs to tell whether its peer wants any of it.
public struct LogEnd: Sendable, Hashable {
    /// The rows one commit appended, after `after` through the new end, all of them.
    public struct Appended: Sendable, Hashable {
        /// The log's last sequence before the commit.
        public var after: UInt64
        /// The collections of the appended rows.
        public var collections: Set<String>
        /// The transactions the appended rows belong to.
        public var transactions: [TransactionID]
        /// The document entries of the appended rows (a document a commit logged for
        /// two transactions counts twice).
        public var documents: Int

        public init(after: UInt64, collections: Set<String>, transactions: [TransactionID], documents: Int = 0) {
            self.after = after
            self.collections = collections
            self.transactions = transactions
            self.documents = documents
        }
    }

    /// The log's last sequence.
    public var sequence: UInt64
    /// nil when not known (the log's end at the store's opening).
    public var appended: Appended?

    public init(sequence: UInt64, appended: Appended? = nil) {
        self.sequence = sequence
        self.appended = appended
    }
}

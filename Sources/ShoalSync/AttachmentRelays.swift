import ShoalCRDT

/// The AttachmentRequests a sync session could not answer from the store, on their
/// way to the session's relaying task; at most `limit` are relayed at once, each
/// counting until the fetch it started (if any) has ended.
///
/// The session's event loop never waits for a relay: it hands the request over, or,
/// when `limit` are running, answers "not found" itself, so a peer asking for many
/// hashes the node lacks costs it at most `limit` fetches.
final class AttachmentRelays: Sendable {
    /// A request, with the most bytes its answer may carry to this peer.
    struct Request: Sendable {
        var message: SessionMessage.AttachmentRequest
        var limit: Int
    }

    let requests: AsyncStream<Request>
    private let continuation: AsyncStream<Request>.Continuation
    private let running = Locked(0)
    let limit: Int

    init(limit: Int = 8) {
        (requests, continuation) = AsyncStream.makeStream(of: Request.self)
        self.limit = limit
    }

    /// Hands `request` to the relaying task; false when `limit` relays are running.
    func submit(_ request: Request) -> Bool {
        let admitted = running.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
        if admitted { continuation.yield(request) }
        return admitted
    }

    /// Ends one relay `submit` admitted.
    func finished() { running.withLock { $0 -= 1 } }
}

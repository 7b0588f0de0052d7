import ShoalCRDT
public import ShoalStorage
import Logging
import ShoalWire
import Synchronization
import Foundation

extension SyncEngine {
    /// The most bytes one AttachmentChunk carries (1 MiB).
    @usableFromInline package static let attachmentChunkSize: UInt32 = 1 << 20

    /// The most bytes of an attachment one AttachmentChunk carries to a node whose
    /// frames hold at most `frameLimit` bytes: 1 MiB, or less to leave room for the
    /// chunk's other fields (its hash, offsets and tags, under 256 bytes).
    package static func chunkSize(frameLimit: Int) -> UInt32 {
        UInt32(clamping: max(1, min(Int(attachmentChunkSize), frameLimit - 256)))
    }
    /// The largest attachment a node fetches from a peer (256 MiB): a peer's claim
    /// of a larger total ends that peer's attempt.
    public static let maximumAttachmentSize = 256 << 20

    /// A node relays an AttachmentRequest it cannot answer only while the request has
    /// passed fewer nodes than this (4), its asker included (`AttachmentRoute`).
    package static let attachmentRelayPath = 4

    /// Makes sure the attachment is held locally, fetching it chunk by chunk from
    /// connected peers when it is not, waiting `timeout` for each chunk
    /// (`SyncConfiguration.attachmentChunkWait` when nil). `progress` sees (bytes so
    /// far, total). Returns the attachment's length.
    ///
    /// Each chunk is stored as it arrives (a staging entry, never the whole attachment
    /// in memory) and hashed on the way; the bytes become an attachment only once their
    /// SHA-256 is `hash`. A fetch that stops part way (no peer could finish it, the node
    /// stopped) leaves what it stored, and the next fetch of `hash` resumes from there.
    /// Fetches of one hash run one at a time on a node. A peer that does not hold the
    /// bytes fetches them from its own peers in turn (`relay`).
    public func fetchAttachment(
        hash: String, timeout: Duration? = nil, progress: @Sendable (Int, Int) -> Void = { _, _ in }
    ) async throws(ShoalError) -> Int {
        try await fetchAttachment(hash: hash, timeout: timeout, askingOtherProcesses: true, progress: progress)
    }

    /// `fetchAttachment`; `askingOtherProcesses`: when this process's peers cannot send
    /// the bytes, whether to ask the node's other processes (hubs) to fetch them from
    /// theirs. A fetch one of them asked for does not ask back.
    func fetchAttachment(
        hash: String, timeout: Duration?, askingOtherProcesses: Bool, progress: @Sendable (Int, Int) -> Void = { _, _ in }
    ) async throws(ShoalError) -> Int {
        if let length = try await store.attachmentLength(hash: hash) {
            progress(length, length)
            return length
        }
        guard await beginFetch(hash) else {
            throw ShoalError(.invalidDocument, "the fetch of attachment \(hash) was cancelled while another fetch of it ran")
        }
        defer { endFetch(hash) }
        if let length = try await store.attachmentLength(hash: hash) {  // fetched while this one waited
            progress(length, length)
            return length
        }
        return try await fetch(
            hash, via: [siteID], timeout: timeout ?? configuration.attachmentChunkWait, askingOtherProcesses: askingOtherProcesses,
            progress: progress)
    }

    /// Fetches, from this process's peers, the attachments the node's other processes
    /// ask for (`SyncStore.followAttachmentRequests`), until the task is cancelled.
    func fetchForOtherProcesses() async {
        let (asked, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(256))
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await self.store.followAttachmentRequests { continuation.yield($0) }
                continuation.finish()
            }
            for await hash in asked where AttachmentToken.isHash(hash) {
                group.addTask {
                    do {
                        _ = try await self.fetchAttachment(hash: hash, timeout: nil, askingOtherProcesses: false)
                    } catch {
                        self.logger.debug(
                            "could not fetch attachment \(hash) for another process of this node: \(error)",
                            metadata: ["shoal.attachment": "\(hash)"])
                    }
                }
            }
            group.cancelAll()
        }
    }

    /// Fetches `hash` from the connected peers not on `via`, one after the other,
    /// sending requests that name `via` (this node last). The caller runs the hash's fetch
    /// (`beginFetch`); relays of the hash follow what it asks and stores (`note`).
    private func fetch(
        _ hash: String, via: [SiteID], timeout: Duration, askingOtherProcesses: Bool,
        progress: @Sendable (Int, Int) -> Void = { _, _ in }
    ) async throws(ShoalError) -> Int {
        var writer = try await store.attachmentWriter(fetching: hash)
        if writer.received > 0 {
            logger.info(
                "resuming the fetch of attachment \(hash) at byte \(writer.received)",
                metadata: ["shoal.attachment": "\(hash)", "shoal.attachment.offset": "\(writer.received)"])
        }
        var tried: [String] = []
        for peer in registry.connectedSenders() where !via.contains(peer.site) {
            if Task.isCancelled { break }
            tried.append(peer.site.description)
            note(hash) { $0.asking = peer.site }
            var expected: Int?
            while true {
                guard
                    let chunk = await requestChunk(
                        hash: hash, offset: writer.received, via: via, send: peer.send, timeout: timeout),
                    chunk.found, chunk.offset == UInt64(writer.received),
                    chunk.data.count <= Int(Self.attachmentChunkSize),
                    let total = Int(exactly: chunk.totalLength), total <= Self.maximumAttachmentSize,
                    expected == nil || expected == total, writer.received + chunk.data.count <= total
                else { break }  // a peer that does not hold it, or answers out of line: try the next
                expected = total
                do {
                    try await writer.append(chunk.data)
                } catch {
                    // Another process of this node (a hub; they share one staging entry per
                    // hash) stored bytes of the same fetch meanwhile: go on from where it got.
                    if let length = try await store.attachmentLength(hash: hash) {
                        progress(length, length)
                        return length
                    }
                    let reopened = try await store.attachmentWriter(fetching: hash)
                    guard reopened.blob == writer.blob, reopened.received > writer.received else { throw error }
                    writer = reopened
                    continue
                }
                note(hash) { $0.staged = StagedBytes(blob: writer.blob, received: writer.received, total: total) }
                progress(writer.received, total)
                if writer.received >= total {
                    do {
                        _ = try await writer.finish()
                        return total
                    } catch {
                        // This peer sent bytes that do not match the hash (they are dropped): try the next one.
                        writer = try await store.attachmentWriter(fetching: hash)
                        note(hash) { $0.staged = nil }
                        break
                    }
                }
                if chunk.data.isEmpty { break }
            }
        }
        if askingOtherProcesses, store.hasOtherProcesses, !Task.isCancelled {
            note(hash) { $0.asking = nil }
            if let length = try await store.fetchThroughOtherProcesses(hash: hash, blob: writer.blob, step: timeout) {
                progress(length, length)
                return length
            }
            tried.append("the node's other processes")
        }
        throw ShoalError(
            .invalidDocument,
            tried.isEmpty
                ? "attachment \(hash) is not held here and no peer is connected to fetch it from"
                : "attachment \(hash) is not held here, and none of the connected peers (\(tried.joined(separator: ", "))) could send it")
    }

    /// Waits until no other fetch of `hash` runs on this node, then marks this one
    /// running; false if the task was cancelled first.
    private func beginFetch(_ hash: String) async -> Bool {
        while !Task.isCancelled {
            let (changed, continuation) = AsyncStream.makeStream(of: Void.self)
            let began = attachmentRequests.withLock { state -> Bool in
                guard state.fetching[hash] != nil else {
                    state.begin(hash)
                    return true
                }
                state.fetching[hash]!.watchers.append(continuation)
                return false
            }
            if began { return true }
            for await _ in changed {}
        }
        return false
    }

    /// Ends this fetch of `hash` and wakes those waiting on it.
    private func endFetch(_ hash: String) {
        let watchers = attachmentRequests.withLock { $0.fetching.removeValue(forKey: hash) }?.watchers ?? []
        for watcher in watchers { watcher.finish() }
    }

    /// Records what the fetch of `hash` does now (the peer it asks, how far it has
    /// stored the bytes), and wakes those waiting on it.
    private func note(_ hash: String, _ change: (inout AttachmentFetch) -> Void) {
        let watchers = attachmentRequests.withLock { state -> [AsyncStream<Void>.Continuation] in
            guard var fetch = state.fetching[hash] else { return [] }
            change(&fetch)
            let watchers = fetch.watchers
            fetch.watchers = []
            state.fetching[hash] = fetch
            return watchers
        }
        for watcher in watchers { watcher.finish() }
    }

    // MARK: Answering

    /// The answer to an AttachmentRequest from this node's store: the bytes asked
    /// for, at most `limit` of them, or "not found".
    func answer(_ request: SessionMessage.AttachmentRequest, limit: Int) async throws(ShoalError) -> SessionMessage.AttachmentChunk {
        guard let offset = Int(exactly: request.offset),
            let held = try await store.attachmentChunk(hash: request.hash, offset: offset, maximum: limit)
        else { return .notFound(request) }
        return .found(request, total: held.total, bytes: held.bytes)
    }

    /// Answers the AttachmentRequests a session hands over (`AttachmentRelays`), each
    /// as `relay` does, until the session ends.
    func serveRelays(
        _ relays: AttachmentRelays, asker: SiteID, send: @escaping @Sendable (SessionMessage.AttachmentChunk) async throws -> Void
    ) async {
        await withTaskGroup(of: Void.self) { group in
            for await request in relays.requests {
                group.addTask {
                    defer { relays.finished() }
                    await self.relay(request.message, from: asker, limit: request.limit, answer: send)
                }
            }
        }
    }

    /// Answers an AttachmentRequest for bytes this node does not hold, by fetching them
    /// from its own peers off the request's path (`AttachmentRoute`), storing them as
    /// its own fetches do, and answering as soon as the bytes asked for are stored.
    ///
    /// One fetch of a hash runs at a time however many ask: a request that finds one
    /// running (this node's own, or another relay's) waits for it rather than starting
    /// another. Whatever happens upstream, `answer` is called once within
    /// `attachmentRelayWait`: with the bytes, or "not found" when the fetch ended
    /// without them, the wait ran out, or the request may not go further. A fetch this
    /// call started runs on to its end, so the node then holds what it carried.
    func relay(
        _ request: SessionMessage.AttachmentRequest, from asker: SiteID, limit: Int,
        answer: @Sendable (SessionMessage.AttachmentChunk) async throws -> Void
    ) async {
        let hash = request.hash
        let deadline = ContinuousClock.now + configuration.attachmentRelayWait
        let route = AttachmentRoute(via: request.via, asker: asker)
        let decision = route.decide(
            local: siteID, connected: registry.connectedSenders().map(\.site), maximumPath: Self.attachmentRelayPath)
        guard AttachmentToken.isHash(hash), Int(exactly: request.offset) != nil, decision != .cycle else {
            try? await answer(.notFound(request))
            return
        }
        // Follow the fetch running, or start one if the request may go further: to peers
        // off its path, or, with none, to the node's other processes (hubs), which
        // reach other peers.
        let via: [SiteID]? =
            switch decision {
            case .relay(let via, _): via
            case .stop where store.hasOtherProcesses: route.path + [siteID]
            case .stop, .cycle: nil
            }
        let (serial, began) = attachmentRequests.withLock { state -> (UInt64?, Bool) in
            if let running = state.fetching[hash] { return (running.serial, false) }
            guard via != nil else { return (nil, false) }
            return (state.begin(hash), true)
        }
        await withTaskGroup(of: Void.self) { group in
            if began, let via {
                logger.debug(
                    "fetching attachment \(hash) for a peer that asked for it",
                    metadata: ["shoal.attachment": "\(hash)", "shoal.peer.site": "\(asker)"])
                group.addTask {
                    defer { self.endFetch(hash) }
                    do {
                        _ = try await self.fetch(
                            hash, via: via, timeout: self.configuration.attachmentChunkWait, askingOtherProcesses: true)
                    } catch {
                        self.logger.debug(
                            "could not fetch attachment \(hash) for a peer: \(error)",
                            metadata: ["shoal.attachment": "\(hash)", "shoal.peer.site": "\(asker)"])
                    }
                }
            }
            let chunk = await relayedChunk(request, limit: limit, following: serial, path: route.path, until: deadline)
            try? await answer(chunk)
        }
    }

    /// The answer to `request` once the node holds the bytes it asks for, or those the
    /// fetch `serial` of its hash has stored cover its offset; "not found" once that
    /// fetch ended without them (at once when there is none) or at `deadline`, and
    /// at once while it asks a node on the request's `path`: that node waits on this
    /// answer, so the two would only wait on each other (two nodes fetching the same
    /// bytes, each through the other).
    private func relayedChunk(
        _ request: SessionMessage.AttachmentRequest, limit: Int, following serial: UInt64?, path: [SiteID],
        until deadline: ContinuousClock.Instant
    ) async -> SessionMessage.AttachmentChunk {
        let hash = request.hash
        let offset = Int(request.offset)
        while true {
            // Watch before looking, so that no change between the two goes unseen.
            let (changed, continuation) = AsyncStream.makeStream(of: Void.self)
            let running = attachmentRequests.withLock { state -> AttachmentFetch? in
                guard let serial, let fetch = state.fetching[hash], fetch.serial == serial else { return nil }
                state.fetching[hash]!.watchers.append(continuation)
                return fetch
            }
            if let held = try? await answer(request, limit: limit), held.found { return held }
            guard let running, !path.contains(where: { $0 == running.asking }) else { return .notFound(request) }
            if let staged = running.staged, offset < staged.received {
                let count = min(limit, staged.received - offset)
                if let bytes = try? await store.stagedAttachmentBytes(blob: staged.blob, from: offset, count: count),
                    bytes.count == count
                {
                    return .found(request, total: staged.total, bytes: bytes)
                }
            }
            guard ContinuousClock.now < deadline, !Task.isCancelled else { return .notFound(request) }
            await withTaskGroup(of: Void.self) { group in
                group.addTask { for await _ in changed {} }
                group.addTask { try? await Task.sleep(until: deadline) }
                await group.next()
                group.cancelAll()
            }
        }
    }

    // MARK: Requests

    private func requestChunk(
        hash: String, offset: Int, via: [SiteID], send: @Sendable (SessionMessage) async throws -> Void, timeout: Duration
    ) async -> SessionMessage.AttachmentChunk? {
        let (stream, continuation) = AsyncStream.makeStream(of: SessionMessage.AttachmentChunk.self)
        let id = attachmentRequests.withLock { state -> UInt64 in
            state.next += 1
            state.waiting[state.next] = continuation
            return state.next
        }
        defer { _ = attachmentRequests.withLock { $0.waiting.removeValue(forKey: id) } }
        let request = SessionMessage.AttachmentRequest(
            requestID: id, hash: hash, offset: UInt64(offset),
            maxLength: Self.chunkSize(frameLimit: min(configuration.limits.maximumFrameSize, configuration.limits.maximumInflatedSize)),
            via: via)
        do {
            try await send(.attachmentRequest(request))
        } catch {
            return nil
        }
        return await withTaskGroup(of: SessionMessage.AttachmentChunk?.self) { group in
            group.addTask {
                for await chunk in stream { return chunk }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
    }

    /// Hands a received chunk to the fetch waiting for it.
    func deliver(_ chunk: SessionMessage.AttachmentChunk) {
        let waiter = attachmentRequests.withLock { $0.waiting.removeValue(forKey: chunk.requestID) }
        waiter?.yield(chunk)
        waiter?.finish()
    }
}

/// Attachment fetches waiting for their chunk, by request ID, and the fetch running
/// of each hash.
struct AttachmentRequests: Sendable {
    var next: UInt64 = 0
    var waiting: [UInt64: AsyncStream<SessionMessage.AttachmentChunk>.Continuation] = [:]
    var fetching: [String: AttachmentFetch] = [:]
    /// The serial of the last fetch begun, so a relay knows the one it follows ended.
    var lastFetch: UInt64 = 0

    /// Marks a fetch of `hash` running; returns its serial.
    @discardableResult
    mutating func begin(_ hash: String) -> UInt64 {
        lastFetch += 1
        fetching[hash] = AttachmentFetch(serial: lastFetch)
        return lastFetch
    }
}

/// A fetch under way: how far it has stored the bytes, and who waits on it.
struct AttachmentFetch: Sendable {
    let serial: UInt64
    /// Known once a peer sent a chunk.
    var staged: StagedBytes?
    /// The peer it asks now.
    var asking: SiteID?
    /// Woken (finished) when the fetch stores more or ends: fetches of the same hash
    /// waiting for their turn, and relays waiting for bytes.
    var watchers: [AsyncStream<Void>.Continuation] = []
}

/// The staging entry a fetch writes, the bytes it holds and the total the peer announced.
struct StagedBytes: Sendable {
    var blob: Int64
    var received: Int
    var total: Int
}

import ShoalCRDT
public import ShoalStore
import Logging
import ShoalWire
import Synchronization

extension SyncEngine {
    /// The most bytes one AttachmentChunk carries (1 MiB).
    public static let attachmentChunkSize: UInt32 = 1 << 20

    /// The most bytes of an attachment one AttachmentChunk carries to a node whose
    /// frames hold at most `frameLimit` bytes: 1 MiB, or less to leave room for the
    /// chunk's other fields (its hash, offsets and tags, under 256 bytes).
    public static func chunkSize(frameLimit: Int) -> UInt32 {
        UInt32(clamping: max(1, min(Int(attachmentChunkSize), frameLimit - 256)))
    }
    /// The largest attachment a node fetches from a peer (256 MiB): a peer's claim
    /// of a larger total ends that peer's attempt.
    public static let maximumAttachmentSize = 256 << 20

    /// Makes sure the attachment is held locally, fetching it chunk by chunk from
    /// connected peers when it is not. `progress` sees (bytes so far, total).
    /// Returns the attachment's length.
    ///
    /// Each chunk is stored as it arrives (a staging entry, never the whole attachment
    /// in memory) and hashed on the way; the bytes become an attachment only once their
    /// SHA-256 is `hash`. A fetch that stops part way (no peer could finish it, the node
    /// stopped) leaves what it stored, and the next fetch of `hash` resumes from there.
    /// Fetches of one hash run one at a time on a node.
    public func fetchAttachment(
        hash: String, timeout: Duration = .seconds(10), progress: @Sendable (Int, Int) -> Void = { _, _ in }
    ) async throws(StoreError) -> Int {
        if let length = try await store.attachmentLength(hash: hash) {
            progress(length, length)
            return length
        }
        await beginFetch(hash)
        defer { endFetch(hash) }
        if let length = try await store.attachmentLength(hash: hash) {  // fetched while this one waited
            progress(length, length)
            return length
        }
        var writer = try await store.attachmentWriter(fetching: hash)
        if writer.received > 0 {
            logger.info(
                "resuming the fetch of attachment \(hash) at byte \(writer.received)",
                metadata: ["shoal.attachment": "\(hash)", "shoal.attachment.offset": "\(writer.received)"])
        }
        var tried: [String] = []
        for peer in registry.connectedSenders() {
            tried.append(peer.site.description)
            var expected: Int?
            while true {
                guard let chunk = await requestChunk(hash: hash, offset: writer.received, send: peer.send, timeout: timeout),
                    chunk.found, chunk.offset == UInt64(writer.received),
                    chunk.data.count <= Int(Self.attachmentChunkSize),
                    let total = Int(exactly: chunk.totalLength), total <= Self.maximumAttachmentSize,
                    expected == nil || expected == total, writer.received + chunk.data.count <= total
                else { break }  // a peer that does not hold it, or answers out of line: try the next
                expected = total
                try await writer.append(Array(chunk.data))
                progress(writer.received, total)
                if writer.received >= total {
                    do {
                        _ = try await writer.finish()
                        return total
                    } catch {
                        // This peer sent bytes that do not match the hash (they are dropped): try the next one.
                        writer = try await store.attachmentWriter(fetching: hash)
                        break
                    }
                }
                if chunk.data.isEmpty { break }
            }
        }
        throw StoreError(
            .invalidDocument,
            tried.isEmpty
                ? "attachment \(hash) is not held here and no peer is connected to fetch it from"
                : "attachment \(hash) is not held here, and none of the connected peers (\(tried.joined(separator: ", "))) could send it")
    }

    /// Waits until no other fetch of `hash` runs on this node, then marks this one running.
    private func beginFetch(_ hash: String) async {
        while true {
            let (wait, continuation) = AsyncStream.makeStream(of: Void.self)
            let running = attachmentRequests.withLock { state -> Bool in
                guard state.fetching[hash] != nil else {
                    state.fetching[hash] = []
                    return false
                }
                state.fetching[hash]!.append(continuation)
                return true
            }
            guard running else { return }
            for await _ in wait {}
        }
    }

    /// Ends this fetch of `hash` and wakes those waiting to run theirs.
    private func endFetch(_ hash: String) {
        let waiting = attachmentRequests.withLock { $0.fetching.removeValue(forKey: hash) } ?? []
        for waiter in waiting { waiter.finish() }
    }

    private func requestChunk(
        hash: String, offset: Int, send: @Sendable (WireMessage) async throws -> Void, timeout: Duration
    ) async -> Shoal_V1_AttachmentChunk? {
        let (stream, continuation) = AsyncStream.makeStream(of: Shoal_V1_AttachmentChunk.self)
        let id = attachmentRequests.withLock { state -> UInt64 in
            state.next += 1
            state.waiting[state.next] = continuation
            return state.next
        }
        defer { _ = attachmentRequests.withLock { $0.waiting.removeValue(forKey: id) } }
        var request = Shoal_V1_AttachmentRequest()
        request.requestID = id
        request.hash = hash
        request.offset = UInt64(offset)
        request.maxLength = Self.chunkSize(frameLimit: min(configuration.limits.maximumFrameSize, configuration.limits.maximumInflatedSize))
        do {
            try await send(.attachmentRequest(request))
        } catch {
            return nil
        }
        return await withTaskGroup(of: Shoal_V1_AttachmentChunk?.self) { group in
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
    func deliver(_ chunk: Shoal_V1_AttachmentChunk) {
        let waiter = attachmentRequests.withLock { $0.waiting.removeValue(forKey: chunk.requestID) }
        waiter?.yield(chunk)
        waiter?.finish()
    }
}

/// Attachment fetches waiting for their chunk, by request ID, and the hashes being
/// fetched, each with the fetches of the same hash waiting for it to end.
struct AttachmentRequests: Sendable {
    var next: UInt64 = 0
    var waiting: [UInt64: AsyncStream<Shoal_V1_AttachmentChunk>.Continuation] = [:]
    var fetching: [String: [AsyncStream<Void>.Continuation]] = [:]
}

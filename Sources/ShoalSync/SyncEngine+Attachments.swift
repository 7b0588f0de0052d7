import ShoalCRDT
public import ShoalStore
import ShoalWire
import Synchronization

extension SyncEngine {
    /// The most bytes one AttachmentChunk carries (1 MiB).
    public static let attachmentChunkSize: UInt32 = 1 << 20
    /// The largest attachment a node fetches from a peer (256 MiB): a peer's claim
    /// of a larger total ends that peer's attempt.
    public static let maximumAttachmentSize = 256 << 20

    /// Makes sure the attachment is held locally, fetching it chunk by chunk from
    /// connected peers when it is not. `progress` sees (bytes so far, total).
    /// Returns the attachment's length.
    public func fetchAttachment(
        hash: String, timeout: Duration = .seconds(10), progress: @Sendable (Int, Int) -> Void = { _, _ in }
    ) async throws(StoreError) -> Int {
        if let length = try await store.attachmentLength(hash: hash) {
            progress(length, length)
            return length
        }
        var tried: [String] = []
        for peer in registry.connectedSenders() {
            tried.append(peer.site.description)
            var bytes: [UInt8] = []
            var expected: Int?
            while true {
                guard let chunk = await requestChunk(hash: hash, offset: bytes.count, send: peer.send, timeout: timeout),
                    chunk.found, chunk.offset == UInt64(bytes.count),
                    chunk.data.count <= Int(Self.attachmentChunkSize),
                    let total = Int(exactly: chunk.totalLength), total <= Self.maximumAttachmentSize,
                    expected == nil || expected == total, bytes.count + chunk.data.count <= total
                else { break }  // a peer that does not hold it, or answers out of line: try the next
                expected = total
                bytes += chunk.data
                progress(bytes.count, total)
                if bytes.count >= total {
                    do {
                        try await store.storeAttachment(bytes, hash: hash)
                        return total
                    } catch {
                        break  // this peer sent bytes that do not match the hash: try the next one
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
        request.maxLength = Self.attachmentChunkSize
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

/// Attachment fetches waiting for their chunk, by request ID.
struct AttachmentRequests: Sendable {
    var next: UInt64 = 0
    var waiting: [UInt64: AsyncStream<Shoal_V1_AttachmentChunk>.Continuation] = [:]
}

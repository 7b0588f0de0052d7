import ShoalWire
import ShoalCRDT
public import ShoalSync
public import ShoalStorage
import NIOCore
import NIOPosix
import Foundation

/// A connection to a node's admin endpoint: what the CLI uses.
///
/// It speaks the peer protocol's handshake with role ADMIN (and the mesh key,
/// when the node has one), then sends requests one at a time.
///
/// A one-response request (`exec`, `status`, `subscribe`, …) carries `timeout` as its
/// budget (PROTOCOL.md §10.2): the node starts and commits no write after it and
/// answers that nothing was written. The client waits `grace` longer for that
/// answer; if none comes, it cannot know what happened and says so (`ShoalError.Code.timedOut`).
/// A node that cannot tell either (a hub whose COMMIT answer its database connection
/// lost) answers `OUTCOME_UNKNOWN`, reported the same way.
///
/// ```
///  connect, handshake ──► send (budget T) ─────────────── T ─────── T + grace
///  (within T, or fail:     node: reads it, may commit      │  node    │ client: no answer,
///   nothing was sent)      until T after reading it ───────┘  answers │ "outcome unknown"
/// ```
public struct AdminClient: Sendable {
    public var node: HostAndPort
    public var meshKey: [UInt8]?
    public var timeout: Duration
    /// The client's certificate, key and the mesh's CA, for a node whose links are TLS.
    public var tls: TLSFiles?

    /// How much longer than `timeout` the client waits for the answer: time for the
    /// request to reach the node and the node's answer (a refusal past its budget
    /// included) to come back. `defaultGrace` unless a caller on a slow or loaded link
    /// wants more.
    public var grace: Duration = Self.defaultGrace
    public static let defaultGrace: Duration = .seconds(2)

    /// A request error the node answered, as the client reports it: `.timedOut` when the
    /// node says the outcome is unknown (so that a caller does not retry what may have
    /// been applied), `.requestFailed` otherwise.
    static func refusal(_ code: SyncError.Code, _ message: String) -> ShoalError {
        ShoalError(code == .outcomeUnknown ? .timedOut : .requestFailed, message)
    }

    public init(node: HostAndPort, meshKey: [UInt8]? = nil, timeout: Duration = .seconds(30), tls: TLSFiles? = nil) {
        self.node = node
        self.meshKey = meshKey
        self.timeout = timeout
        self.tls = tls
    }

    /// Runs statements on the node in one transaction, read-only if asked, named by
    /// `hint` in the node's log should it stay open long.
    public func exec(
        _ statements: String, argumentsJSON: String = "", hint: String? = nil, readOnly: Bool = false
    ) async throws(ShoalError) -> ExecResult {
        let request = AdminRequest.exec(statements: statements, argumentsJSON: argumentsJSON, hint: hint, readOnly: readOnly)
        guard case .exec(let result) = try await send(request) else {
            throw ShoalError(.protocolError, "the node answered exec with something else")
        }
        return result
    }

    /// The node's status; with `digests`, each collection's digest too (it reads every document).
    public func status(digests: Bool = false) async throws(ShoalError) -> NodeStatus {
        guard case .status(let status) = try await send(.status(digests: digests)) else {
            throw ShoalError(.protocolError, "the node answered status with something else")
        }
        return status
    }

    /// Adds a saved subscription on the node.
    public func subscribe(_ query: String, argumentsJSON: String = "") async throws(ShoalError) -> SubscriptionInfo {
        guard case .subscription(let info) = try await send(.subscribe(query: query, argumentsJSON: argumentsJSON)) else {
            throw ShoalError(.protocolError, "the node answered subscribe with something else")
        }
        return info
    }

    /// Removes a saved subscription, by ID or exact query text.
    public func unsubscribe(_ idOrQuery: String) async throws(ShoalError) -> SubscriptionInfo {
        guard case .subscription(let info) = try await send(.unsubscribe(idOrQuery: idOrQuery)) else {
            throw ShoalError(.protocolError, "the node answered unsubscribe with something else")
        }
        return info
    }

    /// The ID an attachment of these bytes has: their SHA-256 in hex.
    public static func attachmentHash(of bytes: [UInt8]) -> String { AttachmentToken.hash(of: bytes) }

    /// Stores bytes on the node as an attachment, in one request (they must fit a
    /// frame); returns the token as canonical JSON.
    public func putAttachment(_ data: [UInt8], metadataJSON: String = "") async throws(ShoalError) -> String {
        guard case .attachment(let token) = try await send(.attachmentPut(AttachmentPutPart(data: data, metadataJSON: metadataJSON)))
        else {
            throw ShoalError(.protocolError, "the node answered attachment put with something else")
        }
        return token
    }

    /// Stores a file of any size on the node as an attachment, streaming it in parts
    /// of `partSize` bytes on one connection; returns the token as canonical JSON.
    /// `progress` sees (bytes sent, file size) after each part.
    public func putAttachment(
        file path: String, metadataJSON: String = "", partSize: Int = Int(SyncEngine.attachmentChunkSize),
        progress: @escaping @Sendable (Int, Int) -> Void = { _, _ in }
    ) async throws(ShoalError) -> String {
        try await failing("attachment put to \(node)") {
            try await withSession { session in
                try await session.putAttachment(file: path, metadataJSON: metadataJSON, partSize: partSize, progress: progress)
            }
        }
    }

    /// Fetches an attachment through the node (which asks its peers when it does
    /// not hold it), handing each part to `handler` in order.
    /// From `offset` on, when a download resumes; a node older than that field sends
    /// from 0, which the first part's `offset` shows.
    public func getAttachment(
        hash: String, offset: UInt64 = 0, handler: @escaping @Sendable (AttachmentPart) throws -> Void
    ) async throws(ShoalError) {
        try await failing("attachment get from \(node)") {
            let last = try await exchange(.attachmentGet(hash: hash, offset: offset)) { response in
                switch response {
                case .chunk(let part):
                    try handler(part)
                    return part.isLast
                case .failure(let code, let message):
                    throw Self.refusal(code, message)
                default:
                    throw ShoalError(.protocolError, "the node answered attachment get with something else")
                }
            }
            if last == nil { throw ShoalError(.connectionFailed, "\(node) closed the connection before the whole attachment arrived") }
        }
    }

    /// Runs `body`, turning what it throws into a `ShoalError` (`nodeError`).
    private func failing<T>(_ what: String? = nil, _ body: () async throws -> T) async throws(ShoalError) -> T {
        do {
            return try await body()
        } catch {
            throw nodeError(error, what)
        }
    }

    /// What a failed request means to the caller: a `ShoalError` as it is, a refused
    /// handshake as such, anything else as `what` failed (or, without it, as the node
    /// out of reach).
    private func nodeError(_ error: any Error, _ what: String? = nil) -> ShoalError {
        if let error = error as? ShoalError { return error }
        if let error = error as? SyncError {
            return ShoalError(.connectionFailed, "\(node) refused the connection: \(error.description)")
        }
        if let tls = LinkTLS.explain(error, peer: "\(node)", own: nil) { return ShoalError(.connectionFailed, tls) }
        return ShoalError(.connectionFailed, what.map { "\($0) failed: \(error)" } ?? "cannot reach a Shoal node at \(node): \(error)")
    }

    /// Compacts the node's change log (and runs VACUUM when asked), handing each
    /// progress report to `handler`; returns the last one.
    public func compact(
        vacuum: Bool = false, handler: @escaping @Sendable (CompactionProgress) -> Void = { _ in }
    ) async throws(ShoalError) -> CompactionProgress {
        try await failing {
            let last = try await exchange(.compact(vacuum: vacuum)) { response in
                switch response {
                case .compaction(let progress):
                    handler(progress)
                    return progress.done
                case .failure(let code, let message):
                    throw Self.refusal(code, message)
                default:
                    throw ShoalError(.protocolError, "the node answered compact with something else")
                }
            }
            guard case .compaction(let progress)? = last else {
                throw ShoalError(.connectionFailed, "\(node) closed the connection before the compaction finished")
            }
            return progress
        }
    }

    /// Streams the states of a query's result to `handler` until the task is
    /// cancelled or the node goes away.
    public func observe(
        _ query: String, argumentsJSON: String = "", handler: @escaping @Sendable (ObservationUpdate) -> Void
    ) async throws(ShoalError) {
        do {
            _ = try await exchange(.observe(query: query, argumentsJSON: argumentsJSON)) { response in
                switch response {
                case .observation(let observation):
                    handler(observation)
                    return false
                case .failure(let code, let message):
                    throw Self.refusal(code, message)
                default:
                    throw ShoalError(.protocolError, "the node answered observe with something else")
                }
            }
            throw ShoalError(.connectionFailed, "\(node) closed the connection")
        } catch is CancellationError {
            return
        } catch {
            if Task.isCancelled, !(error is ShoalError) { return }
            throw nodeError(error)
        }
    }

    /// Whether a one-response request has gone out, decided once under a lock, so that
    /// the timer giving up on the connection and the task about to send cannot both win.
    private enum Sending {
        case notYet
        case sent(at: ContinuousClock.Instant)
        case abandoned
    }

    /// Sends a one-response request with `timeout` as its budget and waits for the
    /// answer: connecting and the handshake within `timeout` (or nothing is sent),
    /// then the answer within `timeout` and `grace` of sending it (or its outcome is unknown).
    func send(_ request: AdminRequest) async throws(ShoalError) -> AdminResponse {
        // Encoded before connecting, as `exchange` does.
        let frame = MessageCodec(limits: .default).encode(.adminRequest(request.wire(budget: timeout)))
        let sending = Locked(Sending.notYet)
        let start = ContinuousClock.now
        let notSent = ShoalError(
            .connectionFailed,
            "could not connect to \(node) and shake hands within \(Self.seconds(timeout)) s: the request was not sent")
        let response: AdminResponse
        do {
            response = try await withThrowingTaskGroup(of: AdminResponse.self) { group in
                group.addTask {
                    let response = try await self.withSession { session in
                        let go = sending.withLock { state -> Bool in
                            guard case .notYet = state else { return false }
                            state = .sent(at: .now)
                            return true
                        }
                        guard go else { throw notSent }  // the timer gave up first
                        do {
                            return try await session.exchange(frame, id: 0) { _ in true }
                        } catch let error as ShoalError {
                            throw error
                        } catch {
                            throw ShoalError(
                                .connectionFailed, "the connection to \(node) failed after the request was sent (\(error))\(Self.unknownOutcome)")
                        }
                    }
                    guard let response else {
                        throw ShoalError(.connectionFailed, "\(node) closed the connection before answering\(Self.unknownOutcome)")
                    }
                    return response
                }
                group.addTask {
                    try await Task.sleep(until: start + timeout)
                    let sentAt = sending.withLock { state -> ContinuousClock.Instant? in
                        guard case .sent(let at) = state else {
                            state = .abandoned
                            return nil
                        }
                        return at
                    }
                    guard let sentAt else { throw notSent }
                    try await Task.sleep(until: sentAt + timeout + grace)
                    throw ShoalError(
                        .timedOut,
                        "no answer from \(node) within \(Self.seconds(timeout + grace)) s (a timeout of \(Self.seconds(timeout)) s and \(Self.seconds(grace)) s of grace)\(Self.unknownOutcome)")
                }
                defer { group.cancelAll() }
                return try await group.next()!
            }
        } catch {
            throw nodeError(error)
        }
        if case .failure(let code, let message) = response {
            throw Self.refusal(code, message)
        }
        return response
    }

    /// What a client that sent a request and got no answer can say of it.
    static let unknownOutcome = "; the request may or may not have been applied: check before retrying"

    /// "2", "2.5": a duration in seconds, for messages.
    static func seconds(_ duration: Duration) -> String {
        let (whole, fraction) = duration.components
        guard fraction != 0 else { return "\(whole)" }
        return String(format: "%.1f", Double(whole) + Double(fraction) / 1e18)
    }

    /// Connects, shakes hands as an admin client, sends `request`, and hands each
    /// response to `onResponse` until it returns true; returns that response, or
    /// nil when the node closed first.
    private func exchange(
        _ request: AdminRequest, onResponse: (AdminResponse) async throws -> Bool
    ) async throws -> AdminResponse? {
        // Encoded (and compressed) before connecting: a large request could otherwise
        // keep the connection silent past the node's idle timeout.
        let frame = MessageCodec(limits: .default).encode(.adminRequest(request.wire()))
        return try await withSession { session in
            try await session.exchange(frame, id: 0, onResponse: onResponse)
        }
    }

    /// Opens one admin connection and keeps it for as long as `body` runs, so that many
    /// requests (answered in order) pay for one connection and one handshake.
    public func withSession<T>(_ body: (AdminSession) async throws -> T) async throws -> T {
        let group = MultiThreadedEventLoopGroup.singleton
        let limits = WireLimits.default
        let tls = try self.tls.map { files throws(ShoalError) in try LinkTLS(files: files) }
        let timeout = self.timeout
        let connection = try await ClientBootstrap(group: group)
            .connectTimeout(.seconds(5))
            // Requests are small and each waits for its answer: never hold one back.
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: node.host, port: node.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try ShoalNode.wrap(channel, limits: limits, tls: tls, dialing: true, timeout: timeout)
                }
            }
        do {
            _ = try await connection.tlsPeer()
        } catch {
            try? await connection.frames.executeThenClose { _, _ in }
            throw error
        }
        let codec = MessageCodec(limits: limits)
        return try await connection.frames.executeThenClose { inbound, outbound in
            var iterator = inbound.makeAsyncIterator()
            var handshake = HandshakeStateMachine(
                configuration: .init(siteID: SiteID(0), nodeName: "shoal-cli", meshName: "", meshKey: meshKey, role: .admin))
            let outcome = try await handshake.run(
                send: { try await outbound.write(codec.encode($0)) },
                next: { try await iterator.next().map { try codec.decode($0) } },
                reject: { error in
                    if !error.fromPeer { try? await outbound.write(codec.encode(error.frame)) }
                })
            guard case .established = outcome else {
                throw ShoalError(.connectionFailed, "\(node) closed the connection during the handshake")
            }
            return try await body(AdminSession(node: node, iterator: iterator, outbound: outbound, codec: codec))
        }
    }
}

/// An admin connection after its handshake (`AdminClient.withSession`): requests go
/// out one after the other and each waits for its answer. Used by the task that
/// opened it, for as long as the `withSession` body runs.
public final class AdminSession {
    public let node: HostAndPort
    var iterator: NIOAsyncChannelInboundStream<Frame>.AsyncIterator
    let outbound: NIOAsyncChannelOutboundWriter<Frame>
    let codec: MessageCodec
    private var nextID: UInt64 = 1
    /// Why the node ended this session, once it has (an Error frame: a limit it refused
    /// the connection at, a frame it does not take from an admin client). The request
    /// that met it fails with the node's words; every request after fails at once saying
    /// so, without writing.
    public private(set) var endedByNode: String?

    init(
        node: HostAndPort, iterator: NIOAsyncChannelInboundStream<Frame>.AsyncIterator,
        outbound: NIOAsyncChannelOutboundWriter<Frame>, codec: MessageCodec
    ) {
        self.node = node
        self.iterator = iterator
        self.outbound = outbound
        self.codec = codec
    }

    /// Runs statements in one transaction, as `AdminClient.exec` does.
    public func exec(
        _ statements: String, argumentsJSON: String = "", hint: String? = nil, readOnly: Bool = false
    ) async throws(ShoalError) -> ExecResult {
        let request = AdminRequest.exec(statements: statements, argumentsJSON: argumentsJSON, hint: hint, readOnly: readOnly)
        guard case .exec(let result) = try await answer(request) else {
            throw ShoalError(.protocolError, "the node answered exec with something else")
        }
        return result
    }

    /// Up to `limit` documents `query` (one SELECT without ORDER BY, LIMIT, OFFSET or
    /// COUNT(*)) matches whose key sorts after `afterKey` ("" for the first page), in
    /// key order, read on one snapshot: the next page starts after `lastKey`.
    public func page(
        _ query: String, argumentsJSON: String = "", after afterKey: String, limit: Int
    ) async throws(ShoalError) -> PageResult {
        let response: AdminResponse
        do {
            response = try await answer(.page(query: query, argumentsJSON: argumentsJSON, afterKey: afterKey, limit: limit))
        } catch where error.code == .protocolError {
            throw ShoalError(
                .protocolError, "\(node) does not read pages by key, which export needs (it is older than this shoal: upgrade it): \(error.message)")
        }
        guard case .page(let result) = response else {
            throw ShoalError(.protocolError, "the node answered page with something else")
        }
        return result
    }

    /// Runs `count` exec requests on this connection, each in a transaction of its
    /// own, with up to `inFlight` sent ahead of their answers.
    ///
    /// The node answers a connection's requests in order and reads the next one as
    /// soon as it has answered one, so a request already sent starts at once instead of
    /// after a round trip to this client: a bulk load keeps the node's writer busy.
    /// `request(i)` builds the `i`-th when there is room for it; `answered(i, result)`
    /// sees each answer, in order. An `inFlight` below 1 counts as 1 (each request
    /// waits for the answer before it); a `count` of 0 or less sends nothing.
    ///
    /// When a request fails, no more are sent. The ones already sent still run, each
    /// in its own transaction: their answers are read (`answered` sees those that
    /// succeeded) before the first failure is thrown, naming its index, so the
    /// connection stays usable and the caller knows what committed. An error thrown by
    /// `request` or `answered` ends the call at once; the answers still on their way
    /// are passed over by the session's next requests.
    public func execPipelined(
        count: Int, inFlight: Int = 4, hint: String? = nil,
        request: (Int) throws -> (statements: String, argumentsJSON: String),
        answered: (Int, ExecResult) throws -> Void = { _, _ in }
    ) async throws {
        let window = max(1, inFlight)
        var ids: [UInt64] = []  // of the requests sent and not answered, oldest first
        var sent = 0
        var answeredCount = 0
        var failure: ShoalError?
        while answeredCount < sent || (failure == nil && sent < count) {
            while failure == nil && sent < count && ids.count < window {
                let (statements, arguments) = try request(sent)
                let id = nextID
                nextID += 1
                let exec = AdminRequest.exec(statements: statements, argumentsJSON: arguments, hint: hint, readOnly: false)
                let frame = codec.encode(.adminRequest(exec.wire(requestID: id)))
                try await connectionErrors { try await self.send(frame) }
                ids.append(id)
                sent += 1
            }
            let frame = try await connectionErrors { try await self.iterator.next() }
            guard let frame else {
                throw ShoalError(.connectionFailed, "\(node) closed the connection with \(sent - answeredCount) requests unanswered")
            }
            switch try await connectionErrors({ try self.codec.decode(frame) }) {
            case .adminResponse(let wire) where wire.requestID == ids.first:
                ids.removeFirst()
                let index = answeredCount
                answeredCount += 1
                switch AdminResponse(wire: wire) {
                case .exec(let result)?:
                    try answered(index, result)
                case .failure(let code, let message)?:
                    if failure == nil { failure = AdminClient.refusal(code, "request \(index) of \(count): \(message)") }
                default:
                    throw ShoalError(.protocolError, "the node answered exec request \(index) with something else")
                }
            case .error(let error): throw ended(error.message)
            default: continue
            }
        }
        if let failure { throw failure }
    }

    /// The node's status, as `AdminClient.status` gives it.
    public func status(digests: Bool = false) async throws(ShoalError) -> NodeStatus {
        guard case .status(let status) = try await answer(.status(digests: digests)) else {
            throw ShoalError(.protocolError, "the node answered status with something else")
        }
        return status
    }

    /// Opens a transaction that this connection holds until `commit`, `rollback`, or
    /// the connection closing (which rolls it back); `exec` runs in it meanwhile. A
    /// read-write one waits for the node's writer, then keeps other writers waiting.
    public func begin(hint: String? = nil, readOnly: Bool = false) async throws(ShoalError) -> SessionTransaction {
        try await transaction(.begin(hint: hint, readOnly: readOnly))
    }

    /// Commits the connection's transaction; `transactionID` names what it wrote.
    public func commit() async throws(ShoalError) -> SessionTransaction {
        try await transaction(.commit)
    }

    /// Rolls back the connection's transaction.
    public func rollback() async throws(ShoalError) -> SessionTransaction {
        try await transaction(.rollback)
    }

    private func transaction(_ request: AdminRequest) async throws(ShoalError) -> SessionTransaction {
        guard case .transaction(let transaction) = try await answer(request) else {
            throw ShoalError(.protocolError, "the node answered \(request.name) with something else")
        }
        return transaction
    }

    /// Sends a Ping and waits for its Pong: activity that keeps an idle connection open
    /// (the node closes admin connections silent for its idle timeout).
    public func ping() async throws(ShoalError) {
        var ping = Shoal_V1_Ping()
        ping.nonce = nextID
        nextID += 1
        do {
            try await send(codec.encode(.ping(ping)))
            while let frame = try await iterator.next() {
                switch try codec.decode(frame) {
                case .pong(let pong) where pong.nonce == ping.nonce: return
                case .error(let error): throw ended(error.message)
                default: continue
                }
            }
        } catch let error as ShoalError {
            throw error
        } catch {
            throw ShoalError(.connectionFailed, "the connection to \(node) failed: \(error)")
        }
        throw ShoalError(.connectionFailed, "\(node) closed the connection")
    }

    /// Streams a file to the node as an attachment, `partSize` bytes per request,
    /// as `AdminClient.putAttachment(file:)` does.
    public func putAttachment(
        file path: String, metadataJSON: String, partSize: Int, progress: @Sendable (Int, Int) -> Void
    ) async throws(ShoalError) -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw ShoalError(.file, "cannot read \(path)") }
        defer { try? handle.close() }
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        func read() throws(ShoalError) -> [UInt8] {
            do {
                return Array(try handle.read(upToCount: max(partSize, 1)) ?? Data())
            } catch {
                throw ShoalError(.file, "cannot read \(path): \(error.localizedDescription)")
            }
        }
        var uploadID: UInt64 = 0
        var offset: UInt64 = 0
        var data = try read()
        while true {
            // Read one part ahead, so each part knows whether more follow.
            let next = data.isEmpty ? [] : try read()
            let part = AttachmentPutPart(data: data, metadataJSON: metadataJSON, uploadID: uploadID, offset: offset, more: !next.isEmpty)
            let response = try await answer(.attachmentPut(part))
            offset += UInt64(data.count)
            progress(Int(offset), max(size, Int(offset)))
            switch response {
            case .attachment(let token) where next.isEmpty:
                return token
            case .uploaded(let id, let received) where received == offset:
                uploadID = id
            case .attachment:
                throw ShoalError(.protocolError, "\(node) does not take attachments in parts; it stored the first part alone")
            default:
                throw ShoalError(.protocolError, "the node answered a part of attachment put with something else")
            }
            data = next
        }
    }

    /// `body`, its failures other than `ShoalError` reported as the connection's.
    private func connectionErrors<T>(_ body: () async throws -> T) async throws(ShoalError) -> T {
        do {
            return try await body()
        } catch let error as ShoalError {
            throw error
        } catch {
            throw ShoalError(.connectionFailed, "the connection to \(node) failed: \(error)")
        }
    }

    /// Sends a one-response request under the next request ID and returns its answer.
    private func answer(_ request: AdminRequest) async throws(ShoalError) -> AdminResponse {
        let id = nextID
        nextID += 1
        let response: AdminResponse?
        do {
            response = try await exchange(codec.encode(.adminRequest(request.wire(requestID: id))), id: id) { _ in true }
        } catch let error as ShoalError {
            throw error
        } catch {
            throw ShoalError(.connectionFailed, "the connection to \(node) failed: \(error)")
        }
        guard let response else { throw ShoalError(.connectionFailed, "\(node) closed the connection before answering") }
        switch response {
        case .failure(.protocolViolation, let message): throw ShoalError(.protocolError, message)
        case .failure(let code, let message): throw AdminClient.refusal(code, message)
        default: return response
        }
    }

    /// Sends an encoded request and hands each response to it (by request ID) to
    /// `onResponse` until it returns true; returns that response, or nil when the
    /// node closed first.
    func exchange(
        _ request: Frame, id: UInt64, onResponse: (AdminResponse) async throws -> Bool
    ) async throws -> AdminResponse? {
        try await send(request)
        while let frame = try await iterator.next() {
            switch try codec.decode(frame) {
            case .adminResponse(let wire) where wire.requestID == id:
                guard let response = AdminResponse(wire: wire) else {
                    throw ShoalError(.protocolError, "\(node) sent an empty admin response")
                }
                if try await onResponse(response) { return response }
            case .error(let error): throw ended(error.message)
            default: continue
            }
        }
        return nil
    }

    /// Writes one frame. A node that refused this session (a limit) wrote why and
    /// closed, which can fail this write before the refusal is read: it is still among
    /// the frames, and it is what the caller should see.
    private func send(_ frame: Frame) async throws {
        if let endedByNode { throw ShoalError(.connectionFailed, "\(node) ended this session: \(endedByNode)") }
        do {
            try await outbound.write(frame)
        } catch {
            while let frame = try? await iterator.next() {
                if case .error(let refusal)? = try? codec.decode(frame) { throw ended(refusal.message) }
            }
            throw error
        }
    }

    /// The node's Error frame: the session is over (`endedByNode`).
    private func ended(_ message: String) -> ShoalError {
        endedByNode = message
        return ShoalError(.requestFailed, message)
    }
}

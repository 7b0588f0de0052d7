import ShoalCRDT
import ShoalStore
import ShoalWire
import Logging
import NIOCore
import Synchronization
import Foundation

/// One connection's life: handshake, then sync (or admin) until either side closes.
///
/// Concurrency, per sync session (one child task each, all ended together):
/// - the parent reads inbound frames and acts on them in order;
/// - `stream` sends the change log to the peer, batch by batch, as far as the
///   peer's subscriptions and the in-flight window allow, then waits for a wake-up;
/// - `forwardChanges` turns the store's change-log growth into wake-ups;
/// - `keepalive` pings and closes a connection that has gone silent.
struct PeerSession: Sendable {
    let engine: SyncEngine
    let recordID: Int
    let transport: any SessionTransport
    let direction: ConnectionDirection
    let remoteAddress: String
    let admin: (any AdminRequestHandler)?
    let shared = SessionShared()

    var codec: MessageCodec { MessageCodec(limits: engine.configuration.limits) }
    var logger: Logger { engine.logger }

    init(
        engine: SyncEngine, recordID: Int, transport: any SessionTransport, direction: ConnectionDirection,
        remoteAddress: String, admin: (any AdminRequestHandler)?
    ) {
        self.engine = engine
        self.recordID = recordID
        self.transport = transport
        self.direction = direction
        self.remoteAddress = remoteAddress
        self.admin = admin
    }

    func send(_ message: WireMessage) async throws {
        let frame = codec.encode(message)
        engine.registry.update(recordID) { $0.bytesOut += UInt64(frame.wireSize) }
        try await transport.write(frame)
    }

    /// Tells the peer why, then ends the session with that error.
    func reject(_ error: SyncError) async -> SyncError {
        if !error.fromPeer {
            try? await send(.fatal(error.code, error.message))
        }
        engine.registry.update(recordID) { $0.lastError = error.description }
        return error
    }

    func receive<I: AsyncIteratorProtocol>(_ iterator: inout I) async throws -> WireMessage? where I.Element == Frame {
        let frame: Frame?
        do {
            frame = try await iterator.next()
        } catch let error as WireError {
            throw await reject(SyncError(error.protocolCode, error.message))
        }
        guard let frame else { return nil }
        shared.touch()
        engine.registry.update(recordID) { $0.bytesIn += UInt64(frame.wireSize) }
        do {
            return try codec.decode(frame)
        } catch {
            throw await reject(SyncError(error.protocolCode, error.message))
        }
    }

    func run<Inbound: AsyncSequence & Sendable>(inbound: Inbound) async throws -> PeerIdentity?
    where Inbound.Element == Frame {
        var iterator = inbound.makeAsyncIterator()
        let configuration = engine.configuration
        var handshake = HandshakeStateMachine(
            configuration: .init(
                siteID: engine.siteID, nodeName: configuration.nodeName, meshName: configuration.meshName,
                meshKey: configuration.meshKey, role: .peer, listenAddress: configuration.listenAddress))
        let identity: PeerIdentity? = try await withThrowingTaskGroup(of: Void.self) { group in
            // The watchdog closes the connection if the handshake stalls, which ends the read below.
            group.addTask { [transport] in
                try await Task.sleep(for: configuration.handshakeTimeout)
                await transport.close()
            }
            defer { group.cancelAll() }
            var pending = handshake.start()
            while true {
                for action in pending {
                    switch action {
                    case .send(let message): try await send(message)
                    case .established(let identity): return identity
                    case .fail(let error): throw await reject(error)
                    }
                }
                guard let message = try await receive(&iterator) else { return nil }
                pending = handshake.receive(message)
            }
        }
        guard let identity else {
            logger.debug("connection closed during the handshake", metadata: ["shoal.peer.address": "\(remoteAddress)"])
            return nil
        }
        engine.registry.update(recordID) {
            $0.name = identity.name
            $0.siteID = identity.siteID
        }
        if identity.role == .admin {
            engine.registry.update(recordID) { $0.state = "admin" }
            try await serveAdmin(&iterator)
            return identity
        }
        let (keep, evict) = engine.registry.establish(recordID, site: identity.siteID, localSite: engine.siteID)
        guard keep else {
            throw await reject(
                SyncError(
                    .duplicateSession, "a session with site \(identity.siteID) already exists; keeping that one",
                    peer: identity.siteID))
        }
        if let evict { await evict() }
        engine.registry.setSender(recordID) { message in try await send(message) }
        logger.info(
            "peer connected",
            metadata: [
                "shoal.peer.site": "\(identity.siteID)", "shoal.peer.name": "\(identity.name)",
                "shoal.peer.address": "\(remoteAddress)", "shoal.peer.direction": "\(direction.rawValue)",
            ])
        defer {
            logger.info("peer disconnected", metadata: ["shoal.peer.site": "\(identity.siteID)"])
        }
        try await runSync(peer: identity, iterator: &iterator)
        return identity
    }

    // MARK: Admin

    /// Answers admin requests in order; an observe request runs alongside, until
    /// the client closes. An admin client that sends nothing for the idle timeout
    /// (while no request is running) is disconnected.
    func serveAdmin<I: AsyncIteratorProtocol>(_ iterator: inout I) async throws where I.Element == Frame {
        let idleTimeout = engine.configuration.idleTimeout
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [transport, shared] in
                while true {
                    try await Task.sleep(for: .seconds(1))
                    if shared.idle(longerThan: idleTimeout) && !shared.isBusy {
                        await transport.close()
                        return
                    }
                }
            }
            defer { group.cancelAll() }
            while let message = try await receive(&iterator) {
                switch message {
                case .adminRequest(let request):
                    guard let admin else {
                        throw await reject(SyncError(.protocolViolation, "this endpoint does not take admin requests"))
                    }
                    let respond: @Sendable (Shoal_V1_AdminResponse) async throws -> Void = { response in
                        try await send(.adminResponse(response))
                    }
                    if case .observe? = request.request {
                        shared.beginWork()  // an observing client may stay silent for as long as it likes
                        group.addTask { [shared] in
                            defer { shared.endWork() }
                            try await admin.handle(request, respond: respond)
                        }
                    } else {
                        shared.beginWork()
                        defer { shared.endWork() }
                        try await admin.handle(request, respond: respond)
                        shared.touch()
                    }
                case .ping(let ping):
                    try await send(.pong(ping))
                case .error(let error):
                    throw SyncError(error.code, error.message, fromPeer: true)
                default:
                    throw await reject(SyncError(.protocolViolation, "unexpected \(message.type) frame from an admin client"))
                }
            }
        }
    }

    // MARK: Sync

    func runSync<I: AsyncIteratorProtocol>(peer: PeerIdentity, iterator: inout I) async throws where I.Element == Frame {
        let (wake, wakeContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        // Listen for changes before the first Subscribe, so none falls in between.
        let subscriptionChanges = engine.subscriptionChanges.updates()
        let cursorResets = engine.store.cursorResets()
        try await sendSubscribe(peer: peer)

        try await withThrowingTaskGroup(of: Void.self) { group in
            defer {
                wakeContinuation.finish()
                group.cancelAll()
            }
            group.addTask { [engine] in
                for await _ in engine.store.changeLogUpdates() { wakeContinuation.yield() }
            }
            group.addTask {
                for await _ in subscriptionChanges { try await sendSubscribe(peer: peer) }
            }
            group.addTask {
                // After EVICT, ask for everything again, whatever a racing batch recorded.
                for await _ in cursorResets { try await sendSubscribe(peer: peer, fromStart: true) }
            }
            group.addTask { try await stream(wake: wake, peerSite: peer.siteID) }
            group.addTask { try await keepalive() }
            while let message = try await receive(&iterator) {
                switch message {
                case .subscribe(let request):
                    // Subscribes may cross on the wire: only a newer one replaces the current.
                    guard shared.acceptsSubscribe(generation: request.generation) else { continue }
                    var set = SubscriptionSet()
                    for s in request.subscriptions {
                        do {
                            let arguments: [String: Value]
                            if s.argumentsJson.isEmpty {
                                arguments = [:]
                            } else if case .object(let object) = try JSON.parse(s.argumentsJson) {
                                arguments = object
                            } else {
                                throw StoreError(.invalidQuery, "subscription arguments must be a JSON object")
                            }
                            try set.add(query: s.query, arguments: arguments)
                        } catch {
                            throw await reject(SyncError(.invalidQuery, "subscription '\(s.query)' rejected: \(error)"))
                        }
                    }
                    shared.resubscribe(set, resumeAfter: request.resumeAfter, generation: request.generation)
                    engine.registry.update(recordID) { $0.subscriptions = set.entries }
                    wakeContinuation.yield()
                case .deltaBatch(let batch):
                    let transactions: [RemoteTransaction]
                    do throws(SyncError) {
                        transactions = try Self.transactions(from: batch)
                    } catch {
                        throw await reject(error)
                    }
                    do {
                        let outcome = try await engine.store.applyRemote(
                            transactions, from: peer.siteID,
                            subscriptionKey: shared.subscriptionKey(forGeneration: batch.subscribeGeneration),
                            through: batch.throughSequence)
                        if outcome.applied > 0 {
                            logger.debug(
                                "applied batch",
                                metadata: [
                                    "shoal.peer.site": "\(peer.siteID)", "shoal.sync.applied": "\(outcome.applied)",
                                    "shoal.sync.through": "\(batch.throughSequence)",
                                ])
                        }
                    } catch {
                        throw await reject(SyncError(.executionFailed, "could not apply a batch: \(error)"))
                    }
                    var ack = Shoal_V1_Ack()
                    ack.throughSequence = batch.throughSequence
                    try await send(.ack(ack))
                case .ack(let ack):
                    shared.acknowledged(through: ack.throughSequence)
                    wakeContinuation.yield()
                case .ping(let ping):
                    try await send(.pong(ping))
                case .pong(let pong):
                    // Only a Pong that echoes one of our Pings gives a round trip; ignore others.
                    let now = shared.micros()
                    if pong.sentAtMicros <= now, shared.expectsPong(pong.nonce) {
                        engine.registry.update(recordID) { $0.rttMillis = Double(now - pong.sentAtMicros) / 1000 }
                    }
                case .attachmentRequest(let request):
                    var chunk = Shoal_V1_AttachmentChunk()
                    chunk.requestID = request.requestID
                    chunk.hash = request.hash
                    let limit = Int(min(request.maxLength, SyncEngine.attachmentChunkSize))
                    if let offset = Int(exactly: request.offset),
                        let held = try await engine.store.attachmentChunk(hash: request.hash, offset: offset, maximum: limit)
                    {
                        chunk.found = true
                        chunk.offset = request.offset
                        chunk.totalLength = UInt64(held.total)
                        chunk.data = Data(held.bytes)
                    }
                    try await send(.attachmentChunk(chunk))
                case .attachmentChunk(let chunk):
                    engine.deliver(chunk)
                case .error(let error):
                    throw SyncError(error.code, error.message, fromPeer: true)
                case .hello, .proof, .adminRequest, .adminResponse:
                    throw await reject(SyncError(.protocolViolation, "unexpected \(message.type) frame in an established session"))
                }
            }
        }
    }

    /// Tells the peer what this node wants now, under a new generation, resuming
    /// from the cursor stored for that exact set.
    func sendSubscribe(peer: PeerIdentity, fromStart: Bool = false) async throws {
        // One Subscribe at a time, so the highest generation always carries the newest set.
        try await shared.subscribing.run {
            let subscriptions = engine.subscriptions
            let resumeAfter = fromStart ? 0 : try await engine.store.cursor(peer: peer.siteID, subscriptionKey: subscriptions.key)
            var subscribe = Shoal_V1_Subscribe()
            subscribe.resumeAfter = resumeAfter
            subscribe.generation = shared.nextOwnGeneration(key: subscriptions.key)
        subscribe.subscriptions = subscriptions.entries.map { entry in
            var s = Shoal_V1_Subscription()
            s.id = entry.id
            s.query = entry.query
            s.argumentsJson = entry.arguments.isEmpty ? "" : Value.object(entry.arguments).canonicalJSON
            return s
        }
            try await send(.subscribe(subscribe))
        }
    }

    /// Checks a received batch and turns it into store transactions.
    static func transactions(from batch: Shoal_V1_DeltaBatch) throws(SyncError) -> [RemoteTransaction] {
        try batch.transactions.map { t throws(SyncError) in
            guard t.originSite != 0 else {
                throw SyncError(.protocolViolation, "DeltaBatch: a transaction has origin site 0")
            }
            let id = TransactionID(origin: SiteID(t.originSite), sequence: t.originSequence)
            let deltas = try t.deltas.map { d throws(SyncError) in
                guard d.index < t.deltaCount else {
                    throw SyncError(
                        .protocolViolation,
                        "DeltaBatch: transaction \(id) has delta index \(d.index) but only \(t.deltaCount) deltas")
                }
                guard let json = String(validating: d.valueJson, as: UTF8.self) else {
                    throw SyncError(.protocolViolation, "DeltaBatch: transaction \(id) has a value that is not UTF-8")
                }
                return Delta(
                    collection: d.collection, documentID: d.documentID, field: d.field, valueJSON: json,
                    timestamp: HybridTimestamp(rawValue: d.timestamp), transaction: id, index: d.index,
                    count: t.deltaCount)
            }
            return RemoteTransaction(id: id, count: t.deltaCount, deltas: deltas)
        }
    }

    /// Groups log entries into the batch message, one group per run of a transaction.
    static func batch(from page: ChangeLogPage) -> Shoal_V1_DeltaBatch {
        var batch = Shoal_V1_DeltaBatch()
        batch.throughSequence = page.through
        for entry in page.entries {
            let d = entry.delta
            if batch.transactions.last?.originSite != d.transaction.origin.rawValue
                || batch.transactions.last?.originSequence != d.transaction.sequence
            {
                var t = Shoal_V1_TransactionDeltas()
                t.originSite = d.transaction.origin.rawValue
                t.originSequence = d.transaction.sequence
                t.deltaCount = d.count
                batch.transactions.append(t)
            }
            var wire = Shoal_V1_Delta()
            wire.collection = d.collection
            wire.documentID = d.documentID
            wire.field = d.field
            wire.valueJson = Data(d.valueJSON.utf8)
            wire.timestamp = d.timestamp.rawValue
            wire.index = d.index
            batch.transactions[batch.transactions.count - 1].deltas.append(wire)
        }
        return batch
    }

    func stream(wake: AsyncStream<Void>, peerSite: SiteID) async throws {
        var wakeups = wake.makeAsyncIterator()
        let configuration = engine.configuration
        var generation = -1
        var sentThrough: UInt64 = 0
        while !Task.isCancelled {
            let now = shared.snapshot()
            if now.generation != generation {
                generation = now.generation
                sentThrough = now.resumeAfter
            }
            if let subscriptions = now.subscriptions, !subscriptions.isEmpty,
                now.unacknowledged.count < configuration.maximumBatchesInFlight
            {
                let page = try await engine.store.changes(
                    after: sentThrough, limit: configuration.batchSize, subscriptions: subscriptions,
                    excludingOrigin: now.resumeAfter > 0 ? peerSite : nil)
                if page.through > sentThrough {
                    guard shared.sent(through: page.through, generation: generation) else { continue }
                    var batch = Self.batch(from: page)
                    batch.subscribeGeneration = now.peerGeneration
                    try await send(.deltaBatch(batch))
                    sentThrough = page.through
                    continue
                }
            }
            guard await wakeups.next() != nil else { return }
        }
    }

    func keepalive() async throws {
        let configuration = engine.configuration
        var nonce: UInt64 = 0
        while true {
            try await Task.sleep(for: configuration.keepaliveInterval)
            if shared.idle(longerThan: configuration.idleTimeout) {
                logger.warning(
                    "closing a silent connection",
                    metadata: ["shoal.peer.address": "\(remoteAddress)", "shoal.sync.idle": "\(configuration.idleTimeout)"])
                engine.registry.update(recordID) { $0.lastError = "no frame for \(configuration.idleTimeout)" }
                await transport.close()
                return
            }
            nonce += 1
            shared.pinged(nonce)
            var ping = Shoal_V1_Ping()
            ping.nonce = nonce
            ping.sentAtMicros = shared.micros()
            try await send(.ping(ping))
        }
    }
}

/// State the tasks of one session share, behind a lock.
final class SessionShared: Sendable {
    struct Snapshot {
        var subscriptions: SubscriptionSet?
        var resumeAfter: UInt64
        /// Counts Subscribes accepted from the peer (a local notion).
        var generation: Int
        /// The generation number the peer gave its current Subscribe; batches echo it.
        var peerGeneration: UInt64
        /// `through_sequence` of each batch sent under this generation and not yet acknowledged.
        var unacknowledged: [UInt64]
    }

    private let state = Mutex(
        Snapshot(subscriptions: nil, resumeAfter: 0, generation: 0, peerGeneration: 0, unacknowledged: []))

    /// This side's own Subscribes: the latest generation sent and its subscription key.
    private let own = Mutex<(generation: UInt64, key: String)>((0, ""))

    func nextOwnGeneration(key: String) -> UInt64 {
        own.withLock { o in
            o.generation += 1
            o.key = key
            return o.generation
        }
    }

    /// The key to record a batch's cursor under: only batches read under our
    /// latest Subscribe advance the resume point.
    func subscriptionKey(forGeneration generation: UInt64) -> String? {
        own.withLock { $0.generation == generation ? $0.key : nil }
    }

    func acceptsSubscribe(generation: UInt64) -> Bool {
        state.withLock { generation == 0 || generation > $0.peerGeneration }
    }
    private let lastInbound = Mutex(ContinuousClock.now)
    private let start = ContinuousClock.now

    func snapshot() -> Snapshot { state.withLock { $0 } }

    func resubscribe(_ set: SubscriptionSet, resumeAfter: UInt64, generation: UInt64) {
        state.withLock { s in
            s.subscriptions = set
            s.resumeAfter = resumeAfter
            s.peerGeneration = generation
            s.generation += 1
            s.unacknowledged = []
        }
    }

    /// Records a batch about to be sent; false when the peer resubscribed since
    /// the batch was read, which makes it stale.
    func sent(through: UInt64, generation: Int) -> Bool {
        state.withLock { s in
            guard s.generation == generation else { return false }
            s.unacknowledged.append(through)
            return true
        }
    }

    /// An Ack covers every batch through its sequence.
    func acknowledged(through: UInt64) {
        state.withLock { $0.unacknowledged.removeAll { $0 <= through } }
    }

    func touch() { lastInbound.withLock { $0 = .now } }

    private let busyCount = Mutex(0)
    let subscribing = SerialGate()
    /// Requests running now; an admin session is idle only when there are none.
    func beginWork() { busyCount.withLock { $0 += 1 } }
    func endWork() { busyCount.withLock { $0 -= 1 } }
    var isBusy: Bool { busyCount.withLock { $0 > 0 } }

    private let lastPing = Mutex<UInt64>(0)
    func pinged(_ nonce: UInt64) { lastPing.withLock { $0 = nonce } }
    func expectsPong(_ nonce: UInt64) -> Bool { lastPing.withLock { nonce != 0 && $0 == nonce } }

    func idle(longerThan limit: Duration) -> Bool {
        lastInbound.withLock { ContinuousClock.now - $0 > limit }
    }

    func micros() -> UInt64 {
        let d = ContinuousClock.now - start
        return UInt64(d.components.seconds) * 1_000_000 + UInt64(d.components.attoseconds / 1_000_000_000_000)
    }
}

/// Runs async bodies one at a time, in arrival order.
final class SerialGate: Sendable {
    private let state = Mutex<(busy: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let proceed = state.withLock { s -> Bool in
                if s.busy {
                    s.waiters.append(continuation)
                    return false
                }
                s.busy = true
                return true
            }
            if proceed { continuation.resume() }
        }
        defer {
            let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
                if s.waiters.isEmpty {
                    s.busy = false
                    return nil
                }
                return s.waiters.removeFirst()
            }
            next?.resume()
        }
        return try await body()
    }
}

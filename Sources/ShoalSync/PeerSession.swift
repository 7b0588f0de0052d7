import ShoalCRDT
import ShoalStorage
import ShoalWire
import Logging
import NIOCore
import Foundation
import SwiftProtobuf

/// One connection's life: handshake, then sync (or admin) until either side closes.
///
/// Every decision of a sync session is `SessionStateMachine`'s; this type only
/// carries its actions out. Per sync session (child tasks ended together):
/// - the parent reads inbound frames and turns each into an event;
/// - a ticker, the change log's growth and this node's subscription changes become events too;
/// - AttachmentRequests for bytes the node lacks are relayed (`SyncEngine.relay`), so the
///   loop never waits on a fetch;
/// - one loop feeds the events to the machine, in order, and performs its actions
///   (send a frame, read a page of the log, hand a batch to the inbound pipeline,
///   answer a request), feeding their results back.
struct PeerSession: Sendable {
    let engine: SyncEngine
    let recordID: Int
    let transport: any SessionTransport
    let direction: ConnectionDirection
    let remoteAddress: String
    let admin: (any AdminRequestHandler)?
    /// Whether the other end is on loopback (or in memory): only such admin clients
    /// may skip proving a key to a node that has none.
    let remoteIsLoopback: Bool
    /// What the peer may do here (`AccessRules`), fixed for the session: new rules
    /// close the sessions they change (`SyncEngine.setAccessRules`).
    let rights: PeerRights
    /// Whether what the peer may read changed since it last synced (`SyncEngine.setAccessRules`).
    let resendFromStart: Bool
    /// Notes the peer's read rights as served, once it subscribed under them.
    let served: (@Sendable () -> Void)?
    /// When an admin session is idle: fed every frame received, its requests and a timer.
    let watchdog: SharedAdminWatchdog
    /// What this session hands the inbound pipeline commits in order, and none of it
    /// after a commit of it fails.
    let lane = InboundPipeline.Lane()
    /// AttachmentRequests for bytes the node does not hold, answered beside the event loop.
    let attachmentRelays = AttachmentRelays()

    var codec: MessageCodec { MessageCodec(limits: engine.configuration.limits) }
    var logger: Logger { engine.logger }

    init(
        engine: SyncEngine, recordID: Int, transport: any SessionTransport, direction: ConnectionDirection,
        remoteAddress: String, admin: (any AdminRequestHandler)?, remoteIsLoopback: Bool = true,
        rights: PeerRights = .everything, resendFromStart: Bool = false, served: (@Sendable () -> Void)? = nil
    ) {
        self.served = served
        self.rights = rights
        self.resendFromStart = resendFromStart
        self.engine = engine
        self.recordID = recordID
        self.transport = transport
        self.direction = direction
        self.remoteAddress = remoteAddress
        self.admin = admin
        self.remoteIsLoopback = remoteIsLoopback
        self.watchdog = SharedAdminWatchdog(idleTimeout: engine.configuration.idleTimeout)
    }

    /// Sends a message of the session's machine, in its wire form (`SessionCodec`).
    func send(_ message: SessionMessage) async throws {
        try await send(message.wire)
    }

    private func send(_ message: WireMessage) async throws {
        try await send(codec.encode(message), deltas: Self.deltaCount(message))
    }

    /// Sends a batch of pieces read for the peer, written straight into its frame.
    func send(_ batch: OutboundBatch) async throws {
        try await send(codec.encode(.deltaBatch, payload: batch.payload()), deltas: batch.deltaCount)
    }

    private func send(_ frame: Frame, deltas: UInt64?) async throws {
        engine.registry.update(recordID) { $0.bytesOut += UInt64(frame.wireSize) }
        if let deltas { engine.registry.countDeltas(recordID, out: deltas) }
        try await transport.write(frame)
    }

    /// Tells the peer why, then ends the session with that error.
    func reject(_ error: SyncError) async -> SyncError {
        if !error.fromPeer {
            try? await send(error.frame)
        }
        engine.registry.update(recordID) { $0.lastError = error.description }
        return error
    }

    func receive<I: AsyncIteratorProtocol>(_ iterator: inout I) async throws -> WireMessage? where I.Element == Frame {
        guard let frame = try await nextFrame(&iterator) else { return nil }
        let message: WireMessage
        do {
            message = try codec.decode(frame)
        } catch {
            throw await reject(SyncError(error))
        }
        if let deltas = Self.deltaCount(message) { engine.registry.countDeltas(recordID, in: deltas) }
        return message
    }

    /// The next frame as an event of the session's machine: a DeltaBatch as its
    /// payload, which the machine reads without building its messages (`DeltaBatchReader`),
    /// any other frame as its message in Shoal's terms (`SessionCodec`).
    func receiveEvent<I: AsyncIteratorProtocol>(_ iterator: inout I) async throws -> SessionStateMachine.Event?
    where I.Element == Frame {
        guard let frame = try await nextFrame(&iterator) else { return nil }
        do {
            let (type, payload) = try codec.payload(frame)
            if type == .deltaBatch { return .receivedDeltaBatch(Array(payload.readableBytesView)) }
            let message = try codec.decode(type, payload)
            if let deltas = Self.deltaCount(message) { engine.registry.countDeltas(recordID, in: deltas) }
            return SessionStateMachine.Event(received: message)
        } catch {
            throw await reject(SyncError(error))
        }
    }

    /// The next frame off the connection, counted.
    func nextFrame<I: AsyncIteratorProtocol>(_ iterator: inout I) async throws -> Frame? where I.Element == Frame {
        let frame: Frame?
        do {
            frame = try await iterator.next()
        } catch let error as WireError {
            throw await reject(SyncError(error))
        }
        guard let frame else { return nil }
        watchdog.handle(.frameReceived)
        engine.registry.update(recordID) {
            $0.bytesIn += UInt64(frame.wireSize)
            $0.lastHeard = .now
        }
        return frame
    }

    /// Where the peer can be reached: the address this node dialed, or the one its
    /// Hello announced, with the host it connected from when it announced a wildcard.
    static func dialable(_ announced: String, remote: String, direction: ConnectionDirection) -> String? {
        if direction == .outbound { return remote }
        guard let colon = announced.lastIndex(of: ":"), let port = Int(announced[announced.index(after: colon)...]), port > 0
        else { return nil }
        let host = String(announced[..<colon])
        guard ["0.0.0.0", "[::]", "::", ""].contains(host), let remoteColon = remote.lastIndex(of: ":") else { return announced }
        return "\(remote[..<remoteColon]):\(port)"
    }

    /// The deltas a frame carries, for the per-link counts in status.
    static func deltaCount(_ message: WireMessage) -> UInt64? {
        guard case .transactionPieces(let answer) = message, answer.hasPiece else { return nil }
        return answer.piece.documents.reduce(0) { $0 + UInt64($1.deltas.count) }
    }

    func run<Inbound: AsyncSequence & Sendable>(inbound: Inbound) async throws -> PeerIdentity?
    where Inbound.Element == Frame {
        var iterator = inbound.makeAsyncIterator()
        let configuration = engine.configuration
        var handshake = HandshakeStateMachine(
            configuration: .init(
                siteID: engine.siteID, nodeName: configuration.nodeName, meshName: configuration.meshName,
                meshKey: configuration.meshKey, role: .peer, listenAddress: engine.listenAddress,
                versions: configuration.protocolVersions, adminKey: configuration.adminKey,
                acceptsKeylessAdmin: remoteIsLoopback, freshness: engine.freshness.entries,
                holdsOthersWrites: await engine.holdsOthersWrites(), forgottenThrough: engine.freshness.forgottenThrough,
                limits: PeerLimits(
                    maximumFrameSize: min(configuration.limits.maximumFrameSize, configuration.limits.maximumInflatedSize),
                    documentSizeHardLimit: Int(clamping: engine.store.systemParameters.documentSizeHardLimitBytes))))
        let identity: PeerIdentity? = try await withThrowingTaskGroup(of: Void.self) { group in
            // The watchdog closes the connection if the handshake stalls, which ends the read below.
            group.addTask { [transport] in
                try await Task.sleep(for: configuration.handshakeTimeout)
                await transport.close()
            }
            defer { group.cancelAll() }
            let outcome = try await handshake.run(
                send: { try await send($0) },
                next: { try await receive(&iterator) },
                reject: { error in
                    logger.notice(
                        error.fromPeer ? "refused by a peer: \(error.message)" : "refusing a peer: \(error.message)",
                        metadata: [
                            "shoal.peer.address": "\(remoteAddress)", "shoal.peer.site": "\(error.peer.map { "\($0)" } ?? "-")",
                            "shoal.error.code": "\(error.code.name)",
                        ])
                    _ = await reject(error)
                })
            guard case .established(let identity) = outcome else { return nil }
            return identity
        }
        guard let identity else {
            logger.debug("connection closed during the handshake", metadata: ["shoal.peer.address": "\(remoteAddress)"])
            return nil
        }
        transport.established()

        engine.registry.update(recordID) {
            $0.name = identity.name
            $0.listenAddress = Self.dialable(identity.listenAddress, remote: remoteAddress, direction: direction)
            $0.siteID = identity.siteID
        }
        let admin = identity.role == .admin
        if let refused = engine.admitSession(admin: admin) {
            logger.warning(
                "refusing a session: \(refused.message)",
                metadata: ["shoal.peer.address": "\(remoteAddress)", "shoal.peer.site": "\(identity.siteID)"])
            throw await reject(refused)
        }
        defer { engine.releaseSession(admin: admin) }
        if admin {
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
            logger.info(
                "peer disconnected",
                metadata: ["shoal.peer.site": "\(identity.siteID)", "shoal.peer.address": "\(remoteAddress)"])
        }
        try await runSync(peer: identity, iterator: &iterator)
        return identity
    }

    // MARK: Admin

    /// Answers admin requests in order, through a connection of the node's admin
    /// endpoint that ends with this session (rolling back the transaction it holds).
    func serveAdmin<I: AsyncIteratorProtocol>(_ iterator: inout I) async throws where I.Element == Frame {
        guard let admin else { return try await serveAdmin(&iterator, connection: nil) }
        try await admin.serve(client: remoteAddress, role: rights.admin) { connection in
            try await serveAdmin(&iterator, connection: connection)
        }
    }

    /// Answers admin requests in order; an observe request runs alongside, until
    /// the client closes. An admin client that sends nothing for the idle timeout
    /// (no frame, nor 16 KiB of one, while no request is running) is disconnected.
    func serveAdmin<I: AsyncIteratorProtocol>(_ iterator: inout I, connection admin: (any AdminConnection)?) async throws
    where I.Element == Frame {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [transport, watchdog] in
                var progress = InboundProgress(bytes: transport.inboundBytes?.bytes ?? 0)
                while true {
                    try await Task.sleep(for: .seconds(1))
                    // A request still arriving (part of a large frame) is not idleness.
                    if let counter = transport.inboundBytes, progress.advanced(to: counter.bytes) {
                        watchdog.handle(.inboundProgress)
                    }
                    if watchdog.handle(.tick) == .close {
                        await transport.close()
                        return
                    }
                }
            }
            defer { group.cancelAll() }
            while let message = try await receive(&iterator) {
                switch message {
                case .adminRequest(let wire):
                    guard let admin else {
                        throw await reject(SyncError(.protocolViolation, "this endpoint does not take admin requests"))
                    }
                    let requestID = wire.requestID
                    // The budget counts from now, when the node reads the request.
                    let deadline = Deadline(budgetOf: wire)
                    let respond: @Sendable (AdminResponse) async throws -> Void = { response in
                        try await send(.adminResponse(response.wire(requestID: requestID)))
                    }
                    guard let request = AdminRequest(wire: wire) else {
                        try await respond(.failure(.protocolViolation, "empty admin request"))
                        watchdog.handle(.answerSent)
                        continue
                    }
                    watchdog.handle(.requestStarted)
                    if case .observe = request {
                        // An observing client may stay silent for as long as it likes.
                        group.addTask { [watchdog] in
                            defer { watchdog.handle(.requestEnded) }
                            try await admin.handle(request, deadline: deadline, respond: respond)
                        }
                    } else {
                        defer { watchdog.handle(.requestEnded) }
                        try await admin.handle(request, deadline: deadline, respond: respond)
                        watchdog.handle(.answerSent)
                    }
                case .ping(let ping):
                    try await send(.pong(ping))
                case .error(let error):
                    throw SyncError(received: error)
                default:
                    throw await reject(SyncError(.protocolViolation, "unexpected \(message.type) frame from an admin client"))
                }
            }
        }
    }

    // MARK: Sync

    /// The child tasks of a sync session: only the loop ends the session.
    enum SessionChild { case loop, other }

    /// What the session's event loop reacts to.
    enum Input: Sendable {
        case event(SessionStateMachine.Event)
        /// The inbound stream ended (the peer closed, or a read failed).
        case inboundEnded
        /// The store closed.
        case stopped
    }

    /// What a peer's refusal refused, in words: a piece for want of rights leaves the
    /// transaction to others; one the peer cannot hold is refused whole.
    static func refused(_ refusal: SessionMessage.Refusal) -> String {
        refusal.code == .permissionDenied ? "this node's piece of transaction \(refusal.id)" : "transaction \(refusal.id) whole"
    }

    /// Drives the session's state machine: the parent task reads frames, child tasks
    /// turn timers and local changes into events, and one loop feeds every event to
    /// the machine and carries out its actions in order.
    func runSync<I: AsyncIteratorProtocol>(peer: PeerIdentity, iterator: inout I) async throws where I.Element == Frame {
        let (inputs, input) = AsyncStream.makeStream(of: Input.self)
        // Listen before the first Subscribe, so no change falls in between.
        let subscriptionChanges = engine.subscriptionChanges.updates()
        let cursorResets = engine.store.cursorResets()
        // The committing task hands each new log end straight to the event loop, with
        // whether its transactions are all echoes to this peer (looked up now, as a page
        // read now would).
        let site = peer.siteID
        let logUpdates = engine.store.listenToChangeLog(
            { end in
                guard let appended = end.appended else {
                    input.yield(.event(.logAdvanced(end.sequence)))
                    return
                }
                let echoes = !appended.transactions.isEmpty && appended.transactions.allSatisfy { engine.isEcho($0, to: site) }
                input.yield(
                    .event(.logAppended(through: end.sequence, after: appended.after, collections: appended.collections, echoes: echoes)))
            }, closed: { input.yield(.stopped) })
        defer { logUpdates.cancel() }
        // A version 4 peer is asked for routes: its first Subscribe carries them.
        let routed =
            peer.version >= 4 ? engine.routing.open(peer.siteID) { event in input.yield(.event(event)) } : nil
        if let routed { input.yield(.event(.routesChanged(routed.0))) }
        // The refusals go before the first Subscribe, whose cursor the peer takes as this
        // node holding its log: an EVICT there in between would count on this node.
        await retellRefusals(to: peer, input: input)
        input.yield(.event(.upstreamChanged(engine.upstream(for: peer.siteID), fromStart: false)))
        // A commit of what this session handed the pipeline failed: the session ends,
        // whether or not a batch of it waits for an answer (pieces answering a question
        // do not). This is the one path that ends it: a failed item's completion adds nothing.
        lane.whenFailed { [logger, remoteAddress] error in
            logger.error(
                "could not apply a batch of this peer; the session ends",
                metadata: [
                    "shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)", "shoal.error": "\(error)",
                ])
            input.yield(.event(.batchFailed))
        }
        engine.pipeline.peerConnected(peer.siteID)
        do {
            try await serveSync(
                peer: peer, iterator: &iterator, inputs: inputs, input: input, subscriptionChanges: subscriptionChanges,
                cursorResets: cursorResets)
        } catch {
            if let routed {
                lane.stopRecordingCursors()
                await engine.routing.close(peer.siteID, token: routed.token, engine: engine)
            }
            throw error
        }
        if let routed {
            lane.stopRecordingCursors()
            await engine.routing.close(peer.siteID, token: routed.token, engine: engine)
        }
    }

    /// Tells `peer` again of its own transactions this node refused whole, the newest
    /// `Refusal.perAck` (PROTOCOL.md §8.8): the Ack that told one first may have been
    /// lost with its session, and one that came through another peer was told to that
    /// peer. The peer keeps them, so that its EVICT does not count on this node for what
    /// they wrote. A version 4 peer hears them at once, in a held_only Ack; a version 3
    /// one with the next Ack for a batch.
    private func retellRefusals(to peer: PeerIdentity, input: AsyncStream<Input>.Continuation) async {
        let refused: [(id: TransactionID, reason: String)]
        do {
            refused = try await engine.store.refusedTransactions(of: peer.siteID, limit: SessionMessage.Refusal.perAck)
        } catch {
            logger.warning(
                "could not read the transactions of this peer that this node refused, to tell it again: \(error.message)",
                metadata: ["shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)"])
            return
        }
        guard !refused.isEmpty else { return }
        var refusals = refused.reversed().map {
            SessionMessage.Refusal(id: $0.id, code: .limitExceeded, reason: "this node cannot hold it: \($0.reason)").fitted
        }
        guard peer.version >= 4 else {
            for refusal in refusals { engine.registry.noteRefusal(refusal, to: peer.siteID) }
            return
        }
        // Within half the peer's frame, as an Ack's refusals are.
        var used = 0
        refusals = Array(refusals.prefix { used += $0.reason.utf8.count + 32; return used <= peer.limits.framePayload / 2 })
        input.yield(.event(.retellRefusals(refusals)))
    }

    private func serveSync<I: AsyncIteratorProtocol>(
        peer: PeerIdentity, iterator: inout I, inputs: AsyncStream<Input>, input: AsyncStream<Input>.Continuation,
        subscriptionChanges: AsyncStream<Int>, cursorResets: AsyncStream<UInt64>
    ) async throws where I.Element == Frame {
        let configuration = engine.configuration

        var readError: (any Error)?
        try await withThrowingTaskGroup(of: SessionChild.self) { group in
            group.addTask {
                try await eventLoop(inputs, input: input, peer: peer)
                return .loop
            }
            group.addTask { [transport] in
                var progress = InboundProgress(bytes: transport.inboundBytes?.bytes ?? 0)
                while true {
                    try await Task.sleep(for: min(configuration.keepaliveInterval, .seconds(1)))
                    if let counter = transport.inboundBytes, progress.advanced(to: counter.bytes) {
                        input.yield(.event(.inboundProgress))
                    }
                    input.yield(.event(.tick))
                }
            }
            group.addTask { [engine] in
                for await _ in subscriptionChanges {
                    // Changes that come together (a mesh forming, statements arriving from
                    // every neighbour) make one Subscribe: the feed keeps the newest while
                    // this waits, and what to ask is read after.
                    try? await Task.sleep(for: SyncEngine.upstreamSettle)
                    input.yield(.event(.upstreamChanged(engine.upstream(for: peer.siteID), fromStart: false)))
                }
                return .other
            }
            group.addTask { [engine, attachmentRelays] in
                await engine.serveRelays(attachmentRelays, asker: peer.siteID) { chunk in try await send(.attachmentChunk(chunk)) }
                return .other
            }
            group.addTask { [engine] in
                // After EVICT, ask for everything again, whatever a racing batch recorded.
                for await _ in cursorResets {
                    input.yield(.event(.upstreamChanged(engine.upstream(for: peer.siteID), fromStart: true)))
                }
                return .other
            }
            do {
                while let event = try await receiveEvent(&iterator) { input.yield(.event(event)) }
            } catch {
                readError = error
            }
            // At once, not when the loop ends: a loop busy in a long step would otherwise
            // keep refusing the peer's redials as duplicates (the hub checker's seed
            // 4216585026285580600, 5 to 18 s).
            engine.registry.inboundEnded(recordID)
            input.yield(.inboundEnded)
            while let child = try await group.next() {
                if child == .loop { break }
            }
            group.cancelAll()
        }
        if let readError { throw readError }
    }

    private func eventLoop(_ inputs: AsyncStream<Input>, input: AsyncStream<Input>.Continuation, peer: PeerIdentity) async throws {
        let configuration = engine.configuration
        let start = ContinuousClock.now
        func now() -> UInt64 { SessionStateMachine.micros(ContinuousClock.now - start) }
        var sessionConfiguration = SessionStateMachine.Configuration(
            peer: peer.siteID, keepaliveInterval: configuration.keepaliveInterval, idleTimeout: configuration.idleTimeout,
            batchSize: configuration.batchSize, batchBytes: configuration.batchBytes,
            maximumBatchesInFlight: configuration.maximumBatchesInFlight,
            maximumSubscriptions: configuration.maximumSubscriptionsPerPeer,
            maximumQueryLength: configuration.maximumQueryLength,
            version: peer.version, peerLimits: peer.limits, rights: rights)
        sessionConfiguration.resendFromStart = resendFromStart
        var machine = SessionStateMachine(configuration: sessionConfiguration, now: now())
        for await next in inputs {
            let event: SessionStateMachine.Event
            switch next {
            case .event(let e): event = e
            case .inboundEnded, .stopped: return
            }
            if case .received(.subscribe(let subscribe)) = event {
                logger.debug(
                    "the peer subscribes: \(subscribe.summary)",
                    metadata: ["shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)"])
                noteResync(subscribe, peer: peer)
            }
            var pending: ArraySlice<SessionStateMachine.Action> = []
            if case .tick = event {
                // What a Ping vouches: the time, then the log's end, so the machine vouches
                // only if the peer has every commit made before that time.
                let vouchedAt = Freshness.now()
                pending += machine.handle(.logAdvanced(engine.store.lastCommittedSequence), now: now())
                machine.localFreshness = engine.freshness.vouching(now: vouchedAt)
                pending += machine.handle(.heldAdvanced(heldLimit: engine.routing.resumeLimit(for: peer.siteID)), now: now())
            }
            pending += machine.handle(event, now: now())
            while let action = pending.popFirst() {
                let followUps: [SessionStateMachine.Event]
                let began = ContinuousClock.now
                do {
                    followUps = try await perform(action, peer: peer, input: input)
                    noteSlow(action, since: began, peer: peer)
                } catch let error as ShoalError where !Task.isCancelled {
                    // The store failed the session (its database unreachable, a disk
                    // error): say so and close, so the peer dials again (elsewhere,
                    // perhaps) rather than wait on a session whose loop has stopped. The
                    // peer is told that much; what failed, which may name the database,
                    // goes to this node's log only.
                    logger.error(
                        "a store call failed in a session",
                        metadata: [
                            "shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)",
                            "shoal.error": "\(error)",
                        ])
                    _ = try? await perform(
                        .close(
                            SyncError(
                                .executionFailed, "this node's store failed, so the session ends (the node's log says why)",
                                peer: peer.siteID)),
                        peer: peer, input: input)
                    throw error
                }
                for followUp in followUps {
                    pending += machine.handle(followUp, now: now())
                }
            }
            let lag = machine.lag
            engine.registry.update(recordID) { $0.lagDeltas = lag }
            engine.positions.note(peer.siteID, through: machine.peerPosition)
            if let through = machine.peerPosition, let set = machine.peerSubscriptions {
                engine.store.notePeerHolding(peer.siteID, through: through, subscriptions: set)
            }
        }
    }

    /// How long one step of a session may take before it is logged (`noteSlow`).
    static let slowStep: Duration = .seconds(2)

    /// Logs a step of the session that took `slowStep` or more: while it runs the session
    /// sends nothing, Pings included, and reads no frame, so the peer may close it as
    /// silent (the idle timeout) and dial again.
    private func noteSlow(_ action: SessionStateMachine.Action, since began: ContinuousClock.Instant, peer: PeerIdentity) {
        let took = ContinuousClock.now - began
        guard took >= Self.slowStep else { return }
        logger.notice(
            "a session step took \(took.formatted(.units(allowed: [.seconds], fractionalPart: .show(length: 1)))): \(action.step)",
            metadata: ["shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)"])
    }

    /// A peer that resumes below this node's compaction point resyncs: it ends with
    /// every current value, but until it passes the point it may see a later
    /// transaction without an earlier one that the later one overwrote.
    private func noteResync(_ subscribe: SessionMessage.Subscribe, peer: PeerIdentity) {
        let point = engine.positions.compactedThrough
        guard !subscribe.subscriptions.isEmpty, subscribe.resumeAfter < point else { return }
        logger.notice(
            "peer resumes at \(subscribe.resumeAfter), below this node's compaction point \(point): it resyncs from the compacted log",
            metadata: ["shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)"])
    }

    /// Carries out one action; returns the events its result produces.
    private func perform(
        _ action: SessionStateMachine.Action, peer: PeerIdentity, input: AsyncStream<Input>.Continuation
    ) async throws -> [SessionStateMachine.Event] {
        switch action {
        case .send(let message):
            if case .subscribe(let subscribe) = message {
                logger.debug(
                    "subscribing: \(subscribe.summary)",
                    metadata: ["shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)"])
            }
            try await send(message)
        case .sendBatch(let batch):
            try await send(batch)
        case .readCursor(let set, let fromStart):
            // A stream asking for this node's own transactions back that stopped part way
            // resumes, asking still (PROTOCOL.md §8.2); otherwise the set's cursor.
            let store = engine.store
            let point = try await store.resumePoint(peer: peer.siteID, subscriptions: set)
            let refill = fromStart ? 0 : point.refill
            let cursor = fromStart ? 0 : refill > 0 ? refill : point.through
            let includeOwn = refill > 0 || (cursor == 0 && store.mayLackOwnTransactions)
            logger.info(
                cursor > 0
                    ? "resuming sync after the peer's sequence \(cursor)\(refill > 0 ? ", this node's own transactions included" : "")"
                    : "syncing from the start of the peer's log",
                metadata: [
                    "shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)",
                    "shoal.sync.subscriptions": "\(set.entries.count)",
                ])
            return [
                .cursorRead(
                    set, resumeAfter: cursor, includeOwn: includeOwn,
                    held: try await engine.store.history(of: peer.siteID), cursorEpoch: point.epoch)
            ]
        case .readPage(let request):
            // Not back to the peer every row of it came from (DeliveryLedger), unless the
            // peer asked for its own transactions (it evicted: it may lack what it sent).
            // Left out as the page is read, before any piece of them is built.
            let site = peer.siteID
            let echo: (@Sendable (TransactionID) -> Bool)? =
                request.excludingOrigin == nil ? nil : { @Sendable id in engine.isEcho(id, to: site) }
            let lazy: (@Sendable (SiteID) -> Bool)? = request.routes.map { routes in { @Sendable origin in !routes.isEager(origin) } }
            let page = try await engine.store.changes(
                after: request.after, limit: request.limit, byteLimit: request.byteLimit,
                subscriptions: request.subscriptions, excludingOrigin: request.excludingOrigin, skipping: echo,
                continuing: request.continuing, resuming: request.resuming, isLazy: lazy, offersOpen: request.offersOpen)
            return [.pageRead(page, ticket: request.ticket)]
        case .submit(let batch):
            engine.registry.countDeltas(recordID, in: batch.pieces.reduce(0) { $0 + UInt64($1.deltas.count) })
            engine.noteDelivered(batch.pieces, by: peer.siteID)
            engine.pipeline.enqueue(
                InboundPipeline.Item(
                    source: peer.siteID, pieces: batch.pieces, cursor: batch.cursorKey.map { ($0, batch.through, batch.cursorEpoch) }, lane: lane,
                    offered: batch.offered, mayWrite: rights.write,
                    done: { [engine] result in
                        // A failure failed the lane too, whose hook ends the session.
                        guard case .success = result else { return }
                        input.yield(
                            .event(
                                .batchDurable(
                                    heldLimit: engine.routing.resumeLimit(for: peer.siteID),
                                    refused: engine.registry.takeRefusals(for: peer.siteID, fitting: peer.limits.framePayload / 2))))
                    }))
        case .deliver(let pieces):
            engine.noteDelivered(pieces, by: peer.siteID)
            engine.pipeline.enqueue(InboundPipeline.Item(source: peer.siteID, pieces: pieces, lane: lane, mayWrite: rights.write))
        case .answerTransactionRequest(let request, let subscriptions):
            try await answer(
                request, subscriptions: subscriptions, encoding: PieceCodec.DeltaEncoding(version: peer.version), limits: peer.limits)
        case .answerAttachmentRequest(let request):
            let limit = Int(min(request.maxLength, SyncEngine.chunkSize(frameLimit: peer.limits.framePayload)))
            let chunk = try await engine.answer(request, limit: limit)
            // Bytes the node lacks are fetched beside this loop; "not found" when too many are.
            if chunk.found || !attachmentRelays.submit(.init(message: request, limit: limit)) {
                try await send(.attachmentChunk(chunk))
            }
        case .deliverAttachmentChunk(let chunk):
            engine.deliver(chunk)
        case .checkLogEnd(let resumeAfter):
            _ = try await engine.store.raiseLog(above: resumeAfter, peer: peer.siteID)
        case .checkHistory(let held):
            _ = try await engine.store.reconcileOwnHistory(with: held, peer: peer.siteID)
        case .peerSubscribed(let set, let interests):
            engine.registry.update(recordID) { $0.subscriptions = set.entries }
            served?()
            let changed = engine.noteInterest(of: peer.siteID, subscriptions: set, interests: interests)
            try await engine.store.saveInterest(changed, forgetting: [])
        case .peerRouted(let routes):
            engine.registry.update(recordID) { $0.routesGiven = routes?.description }
        case .measuredRoundTrip(let micros):
            engine.registry.update(recordID) { $0.rttMillis = Double(micros) / 1000 }
        case .caughtUp(let peerFreshness):
            // Saved by the node now and then (`ShoalNode`), not here: a session never waits on a write for it.
            engine.freshness.caughtUp(with: peerFreshness)
            engine.routing.caughtUp(peer.siteID)
        case .ownTransactionsBack(let key):
            try await engine.store.ownTransactionsBack(peer: peer.siteID, subscriptionKey: key)
            logger.info(
                "the peer's log, this node's own transactions included, is all here: later sessions leave them out again",
                metadata: ["shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)"])
        case .warn(let message):
            logger.warning(
                "\(message)", metadata: ["shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)"])
        case .answeredNothing(let requestID):
            engine.answeredNothing(requestID, by: peer.siteID)
        case .peerRefused(let told, _):
            // Kept before anything else: the peer acknowledged past them, and an EVICT
            // must not count on it for what they wrote.
            let new = try await engine.store.notePeerRefused(peer.siteID, transactions: told.map(\.id))
            // This node's own that it knew the peer refused were logged when first told:
            // the peer tells them again at each session (a version 3 peer in an Ack for a
            // batch, so `retold` cannot tell them apart). A hub keeps none: it logs each time.
            let refusals = told.filter { $0.id.origin != engine.siteID || new.contains($0.id) }
            for refusal in refusals {
                logger.warning(
                    "peer \(peer.name) refused \(Self.refused(refusal)): \(refusal.reason) (\(refusal.code.name))",
                    metadata: [
                        "shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)", "shoal.txn": "\(refusal.id)",
                    ])
            }
            if let last = refusals.last {
                let more = refusals.count > 1 ? " (and \(refusals.count - 1) more, in the log)" : ""
                engine.registry.update(recordID) {
                    $0.lastError = "it refused \(Self.refused(last)): \(last.reason) (\(last.code.name))\(more)"
                }
            }
        case .close(let error):
            guard let error else {
                logger.warning(
                    "closing a silent connection",
                    metadata: ["shoal.peer.address": "\(remoteAddress)", "shoal.sync.idle": "\(engine.configuration.idleTimeout)"])
                engine.registry.update(recordID) { $0.lastError = "no frame for \(engine.configuration.idleTimeout)" }
                await transport.close()
                return []
            }
            if !error.fromPeer {
                logger.warning(
                    "closing a session: \(error.message)",
                    metadata: ["shoal.peer.site": "\(peer.siteID)", "shoal.peer.address": "\(remoteAddress)"])
            }
            let rejected = await reject(error)
            await transport.close()
            throw rejected
        }
        return []
    }

    /// Answers a TransactionRequest with what this node holds of the transaction, as it
    /// would stream it to this peer: a piece a frame, each cut to fit what the asker
    /// takes (`BatchFitter`), what it cannot take withheld with an `overLimit` verdict.
    private func answer(
        _ request: SessionMessage.TransactionRequest, subscriptions: SubscriptionSet, encoding: PieceCodec.DeltaEncoding,
        limits: PeerLimits
    ) async throws {
        var fitter = BatchFitter(limits: limits)
        let pieces = try await engine.store.transactionPieces(
            request.transaction, subscriptions: subscriptions, collections: Set(request.collections),
            byteLimit: min(engine.configuration.batchBytes, fitter.limit))
        guard !pieces.isEmpty else {
            try await send(.transactionPieces(SessionMessage.TransactionPieces(requestID: request.requestID, encoded: nil)))
            return
        }
        func answer(_ piece: TransactionPiece) -> SessionMessage.TransactionPieces {
            SessionMessage.TransactionPieces(requestID: request.requestID, piece: piece, receiver: subscriptions.filter, encoding: encoding)
        }
        for piece in pieces {
            // One piece in, so every group out is one piece.
            let groups = fitter.fit([piece]) { group in answer(group[0]).encodedSize }
            for group in groups { try await send(.transactionPieces(answer(group[0]))) }
        }
    }
}

/// An admin session's watchdog, which its request loop and its timer task share:
/// the decisions are `AdminWatchdog`'s, under a lock, on the session's clock.
final class SharedAdminWatchdog: Sendable {
    private let start = ContinuousClock.now
    private let machine: Locked<AdminWatchdog>

    init(idleTimeout: Duration) {
        machine = Locked(AdminWatchdog(idleTimeout: idleTimeout, now: 0))
    }

    @discardableResult
    func handle(_ event: AdminWatchdog.Event) -> AdminWatchdog.Action? {
        // The clock is read under the lock, so that times reach the machine in order.
        machine.withLock { $0.handle(event, now: SessionStateMachine.micros(ContinuousClock.now - start)) }
    }
}

extension SessionStateMachine.Action {
    /// What the step does, in a few words, for the log (`PeerSession.noteSlow`).
    var step: String {
        switch self {
        case .send(let message):
            switch message {
            case .subscribe: "sending a Subscribe"
            case .ack: "sending an Ack"
            case .ping: "sending a Ping"
            case .pong: "sending a Pong"
            case .routeUpdate: "sending a RouteUpdate"
            case .transactionRequest: "sending a TransactionRequest"
            case .transactionPieces: "sending TransactionPieces"
            case .attachmentRequest: "sending an AttachmentRequest"
            case .attachmentChunk: "sending an AttachmentChunk"
            case .error: "sending an Error"
            }
        case .sendBatch(let batch): "sending a batch of \(batch.pieces.count) pieces"
        case .readCursor: "reading the peer's cursor and history"
        case .readPage(let request): "reading a page of the log after \(request.after)"
        case .submit(let batch): "handing a received batch of \(batch.pieces.count) pieces to the pipeline"
        case .deliver(let pieces): "handing \(pieces.count) requested pieces to the pipeline"
        case .peerRouted: "noting the peer's routes"
        case .answerTransactionRequest: "answering a request for transactions"
        case .answerAttachmentRequest: "answering a request for an attachment"
        case .deliverAttachmentChunk: "storing an attachment chunk"
        case .peerSubscribed: "saving the peer's subscriptions and interests"
        case .checkHistory: "checking the peer's history of this node"
        case .checkLogEnd: "checking the log's end"
        case .measuredRoundTrip: "noting the round trip"
        case .caughtUp: "noting that the peer caught up"
        case .ownTransactionsBack: "noting this node's own transactions back"
        case .warn: "logging a warning"
        case .peerRefused(_, let retold): retold ? "noting the refusals the peer told again" : "noting the peer's refusals"
        case .answeredNothing: "noting an answer of nothing"
        case .close: "closing"
        }
    }
}

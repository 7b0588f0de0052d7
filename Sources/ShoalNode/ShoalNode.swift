public import ShoalCRDT
public import ShoalStorage
public import ShoalSync
import ShoalWire
public import Logging
public import ServiceLifecycle
import NIOCore
import NIOPosix
import Foundation

/// A Shoal node: an embedded store, a TCP listener, dialers for its peers, and
/// the admin endpoint the CLI talks to — all on one port, one protocol.
///
/// Apps embed it (`ShoalNode(configuration:)`, from `import Shoal`, opens it on the
/// SQLite store; then `run()` inside a task or a `ServiceGroup`) and query `store`;
/// `shoal run` does the same.
public final class ShoalNode: Service, Sendable {
    public let configuration: NodeConfiguration
    /// The store an app queries: DQL, transactions, live queries, attachments.
    public var store: any DocumentDatabase { storage }
    /// The same store, with what sync and the node's upkeep ask of it.
    package let storage: any NodeStore
    public let sync: SyncEngine
    /// This node's own metrics registry; `--metrics` serves it over HTTP.
    package let metrics: NodeMetrics
    let logger: Logger
    let group: MultiThreadedEventLoopGroup
    /// LAN discovery, unless it is off.
    let discovery: LANDiscovery?
    /// TLS on every link, loaded at `init` and again by `reloadTLS()`; nil: plaintext links.
    private let tlsState: Locked<LinkTLS?>
    /// What a new connection uses now.
    var tls: LinkTLS? { tlsState.withLock { $0 } }
    /// When each refusal of a connection during TLS was last logged, so a peer
    /// redialing with a bad certificate logs a line a minute.
    private let tlsNotices = Locked<[String: ContinuousClock.Instant]>([:])
    /// The TLS links being served, by channel: what `reloadTLS` closes when their
    /// certificates are revoked.
    private let tlsLinks = Locked<[ObjectIdentifier: (peer: LinkTLS.Peer, channel: any Channel)]>([:])

    /// Notes `peer`'s link on `channel` as served until the returned closure is called.
    /// A link whose handshake checked the revocation list `reloadTLS` has since replaced
    /// is checked again here, after it is noted: the reload either closes it or left
    /// the new list for this check.
    private func serving(_ peer: LinkTLS.Peer?, on channel: any Channel) -> @Sendable () -> Void {
        guard let peer else { return {} }
        let key = ObjectIdentifier(channel)
        tlsLinks.withLock { $0[key] = (peer, channel) }
        if let revoked = tls?.revoked, revoked.contains(peer.serial) {
            logger.warning("closing the link of \(peer.name): its certificate (serial \(peer.serial)) is revoked (tls-revoked)")
            channel.close(promise: nil)
        }
        let links = tlsLinks
        return { links.withLock { _ = $0.removeValue(forKey: key) } }
    }
    /// Held from `init` until `run()` has closed the store (or the node is released).
    let dataLock: DataDirectoryLock
    /// Accepted connections still in their handshake (`--max-handshakes`).
    let handshakes: HandshakeGate
    /// When the last "pushed out" notice was logged, so a flood logs a line a minute.
    private let handshakeNotice = Locked<(last: ContinuousClock.Instant?, since: UInt64)>((nil, 0))
    private let readiness = Readiness()
    /// Whether `run()` was called: a node runs once.
    private let hasRun = Locked(false)

    /// A logger that drops everything: an embedded node's default.
    public static let silentLogger = Logger(label: "shoal", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Opens the node's store with `openStore`; `run()` starts the node. The `Shoal`
    /// module's `init(configuration:logger:)` opens the SQLite store in the data directory.
    ///
    /// - Parameter logger: where the node logs (swift-log). An app passes its own
    ///   `Logger` to hear the node, `shoal run` passes one that writes to standard error.
    package init(configuration: NodeConfiguration, logger: Logger, openStore: StoreOpener) throws(ShoalError) {
        self.configuration = configuration
        self.logger = logger
        if let problem = SystemParameters.sizeLimitsProblem(
            soft: Int64(configuration.resources.documentSizeSoftLimit), hard: Int64(configuration.resources.documentSizeHardLimit))
        {
            throw ShoalError(.invalidConfiguration, problem)
        }
        self.tlsState = Locked(try configuration.tls.map { files throws(ShoalError) in try LinkTLS(files: files) })
        // Before the database opens: a second node on the same directory stops here.
        self.dataLock = try DataDirectoryLock(directory: configuration.dataDirectory)
        let resources = configuration.resources
        let metrics = NodeMetrics()
        self.metrics = metrics
        let store = try openStore(
            StoreOpening(
                configuration: configuration, logger: logger,
                parameters: configuration.storeParameters,
                commitDuration: metrics.commitDuration))
        self.storage = store
        let name = configuration.name ?? "shoal-\(String(storage.siteID.description.prefix(6)))"
        var syncConfiguration = SyncConfiguration(
            nodeName: name, meshName: configuration.meshName, meshKey: configuration.meshKey,
            listenAddress: configuration.listen.description, limits: configuration.limits,
            keepaliveInterval: configuration.keepaliveInterval, idleTimeout: configuration.idleTimeout,
            handshakeTimeout: resources.handshakeTimeout,
            inbound: InboundPipeline.Configuration(
                coverage: .init(
                    maximumWait: configuration.coverageWait, maximumTransactions: configuration.maximumWaitingTransactions,
                    maximumBytes: configuration.maximumWaitingBytes)),
            relayForNeighbours: configuration.relay,
            adminKey: configuration.adminKey, maximumPeers: resources.maximumPeers,
            maximumAdminSessions: resources.maximumAdminConnections,
            maximumSubscriptionsPerPeer: resources.maximumSubscriptionsPerPeer,
            maximumQueryLength: resources.maximumQueryLength)
        syncConfiguration.routes = configuration.routes
        if configuration.tls != nil {
            syncConfiguration.servedReadsFile = (configuration.dataDirectory as NSString).appendingPathComponent("served-reads.json")
        }
        if let permissions = configuration.permissions {
            guard configuration.tls != nil else {
                throw ShoalError(
                    .invalidConfiguration,
                    "the permissions file \(permissions) names peers by their certificates: it needs TLS (tls-cert, tls-key and tls-ca)")
            }
            syncConfiguration.accessRules = try AccessRulesFile.load(permissions)
        }
        self.sync = SyncEngine(
            store: store, configuration: syncConfiguration, logger: logger, applyDuration: metrics.remoteApplyDuration)
        let saved = try storage.savedFreshness()
        sync.freshness.load(entries: saved.entries, forgottenThrough: saved.forgottenThrough)
        for query in configuration.subscriptions {
            try sync.subscribe(query)
        }
        self.discovery = configuration.discovery
            ? LANDiscovery(interfaces: try LANDiscovery.interfaces(configuration.discoveryInterface), ownSite: storage.siteID)
            : nil
        self.group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.handshakes = HandshakeGate(capacity: resources.maximumHandshakes)
    }

    /// Logs, at most once a minute, that connections in their handshake were closed to
    /// make room for new ones: a flood of connections that never prove themselves.
    private func noteHandshakesPushedOut() {
        let now = ContinuousClock.now
        let report: UInt64? = handshakeNotice.withLock { notice in
            notice.since += 1
            if let last = notice.last, now - last < .seconds(60) { return nil }
            defer { notice = (now, 0) }
            return notice.since
        }
        guard let report else { return }
        logger.warning(
            "\(handshakes.capacity) connections were still in their handshake; closed the longest waiting (\(report) since the last notice, \(handshakes.pushedOut) in all). A flood of connections that never finish a handshake? Raise --max-handshakes if these are real peers")
    }

    /// Re-adds the subscriptions saved by `shoal subscribe` on earlier runs.
    private func restoreSavedSubscriptions() async throws {
        for saved in try await storage.savedSubscriptions() {
            do {
                try sync.subscribe(saved.query, arguments: saved.arguments)
            } catch {
                logger.warning(
                    "a saved subscription no longer parses; skipping it (remove it with shoal unsubscribe \(saved.id))",
                    metadata: ["shoal.subscription": "\(saved.query)", "shoal.error": "\(error)"])
            }
        }
    }


    public var name: String { sync.configuration.nodeName }

    /// What an operator must know about who can reach this node: empty when it
    /// listens on loopback only or has a mesh key. Logged at start and shown by status.
    public var securityWarnings: [String] { Self.securityWarnings(configuration) }

    /// The warnings a node with this configuration gives.
    package static func securityWarnings(_ configuration: NodeConfiguration) -> [String] {
        guard !configuration.listen.isLoopback, configuration.meshKey == nil else { return [] }
        let admin =
            configuration.adminKey == nil
            ? "admin requests (exec, status, ...) are taken from loopback only, since there is no key to prove"
            : "admin requests must prove the --admin-key-file key"
        return [
            "this node listens on \(configuration.listen), beyond loopback, without a mesh key: any host that can reach the port can sync with it, reading what it holds and writing into it; \(admin). Set --mesh-key-file on every node (shoal keygen FILE makes a key), or listen on 127.0.0.1"
        ]
    }

    public var siteID: SiteID { storage.siteID }

    /// How this node's links are carried: `tls` or `plaintext`.
    public var linkSecurity: String { tls == nil ? "plaintext" : "tls" }

    /// This node's name on TLS links, its certificate's subject common name; nil without TLS.
    public var tlsIdentity: String? { tls?.identity }

    /// Reads the TLS files again, as `shoal run` does on SIGHUP: connections opened
    /// from now on use them, live sessions keep going on theirs, except those of peers
    /// whose certificates the new revocation list names, which are closed. Returns this
    /// node's new name; throws, keeping the files in use, when the new ones do not load.
    /// Nil (and nothing read) when the node has no TLS.
    @discardableResult
    public func reloadTLS() throws(ShoalError) -> String? {
        guard let files = configuration.tls else { return nil }
        let fresh = try LinkTLS(files: files)
        tlsState.withLock { $0 = fresh }
        logger.notice(
            "reloaded the TLS files: new connections present \(fresh.identity) and check peers against \(files.authority); live sessions go on, but for those of revoked certificates")
        let revoked = tlsLinks.withLock { $0.values.filter { fresh.revoked.contains($0.peer.serial) } }
        for link in revoked {
            logger.warning(
                "closing the link of \(link.peer.name): its certificate (serial \(link.peer.serial)) is now revoked (tls-revoked)",
                metadata: ["shoal.peer.address": "\(link.channel.remoteAddress.map { "\($0)" } ?? "?")"])
            link.channel.close(promise: nil)
        }
        if let problem = fresh.ownValidityProblem() { logger.warning("\(problem): peers will refuse it until it is replaced") }
        return fresh.identity
    }

    /// Reads the permissions file again, as `shoal run` does on SIGHUP, and puts its
    /// rules in force: a live session whose peer they give other rights is closed, to
    /// start again under them. Returns the number of rules; throws, keeping the rules in
    /// force, when the file does not load. Nil (and nothing read) when the node has none.
    @discardableResult
    public func reloadPermissions() async throws(ShoalError) -> Int? {
        guard let path = configuration.permissions else { return nil }
        let rules = try AccessRulesFile.load(path)
        let closed = await sync.setAccessRules(rules)
        logger.notice(
            "reloaded the permissions in \(path): \(rules.rules.count) rules; \(closed) sessions whose peers they change were closed, to start again under them")
        return rules.rules.count
    }

    /// The start log's words for `linkSecurity`.
    var linkSecurityDescription: String {
        guard let tls else {
            return "links are plaintext (no --tls-cert): anyone who can see the traffic reads the documents that cross it"
        }
        return "links are TLS 1.3, this node is \(tls.identity), peers must present a certificate from the CA in \(tls.files.authority)"
    }

    /// The address the listener is bound to (the real port when 0 was asked for).
    public var listenAddress: HostAndPort? { readiness.address }

    /// Waits until the listener accepts connections and returns its address.
    ///
    /// Throws what ended `run()` before it listened (a port taken, a store that could not
    /// open: the error `run()` throws), `.stopped` once the node has stopped, and
    /// `.cancelled` when the waiting task is cancelled.
    public func ready() async throws(ShoalError) -> HostAndPort {
        try await readiness.wait()
    }

    /// Serves until the task is cancelled or graceful shutdown begins, then waits
    /// for the store's running transactions and closes it.
    ///
    /// The store's long-transaction monitor runs alongside for the whole time,
    /// shutdown included, so a transaction that holds shutdown up is logged; so do
    /// the store's checkpoints (`NodeStore.maintain`).
    ///
    /// Returns when it was cancelled or shut down gracefully; throws a `ShoalError`
    /// when it could not start (a port taken: `.invalidConfiguration`, a data
    /// directory another node holds: `.dataDirectoryInUse`, ...) or stopped on an
    /// error, and `.stopped` when called a second time.
    public func run() async throws(ShoalError) {
        guard hasRun.withLock({ ran in defer { ran = true }; return !ran }) else {
            throw ShoalError(
                .stopped,
                "this node has run already, and its store closed when run() returned: create a new ShoalNode on the same data directory to run again (stopSync() and startSync() pause sync without stopping the node)")
        }
        let result = await withTaskGroup(of: Void.self) { monitor -> Result<Void, any Error> in
            monitor.addTask { await self.storage.monitorTransactions() }
            monitor.addTask { await self.storage.maintain() }
            let result: Result<Void, any Error>
            do {
                try await cancelWhenGracefulShutdown {
                    try await self.serve()
                }
                result = .success(())
            } catch {
                result = .failure(error)
            }
            await saveFreshness()
            await storage.shutdown()
            monitor.cancelAll()
            return result
        }
        let failure: ShoalError? =
            switch result {
            case .failure(let error as ShoalError): error
            case .failure(is CancellationError), .success: nil
            case .failure(let error): ShoalError(.stopped, "the node stopped on an error: \(error)", underlyingError: error)
            }
        readiness.end(failure ?? ShoalError(.stopped, "the node has stopped"))
        dataLock.release()
        try? await group.shutdownGracefully()
        logger.info("stopped", metadata: ["shoal.site": "\(siteID)"])
        if let failure { throw failure }
    }

    private func serve() async throws {
        try await restoreSavedSubscriptions()
        // A peer resuming below the point compaction reached is told it resyncs.
        sync.positions.compactedThrough = try await storage.storageStatus().compactedThrough
        let limits = configuration.limits
        let pending = Self.writeBufferWaterMark(configuration.resources)
        let handshakeTimeout = configuration.resources.handshakeTimeout
        let server: NIOAsyncChannel<AcceptedConnection, Never>
        do {
            server = try await ServerBootstrap(group: group)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                // A peer that stops sending mid-frame can still be told why (PROTOCOL.md §2.1).
                .childChannelOption(.allowRemoteHalfClosure, value: true)
                .childChannelOption(.writeBufferWaterMark, value: pending)
                .bind(host: configuration.listen.host, port: configuration.listen.port) { [self] channel in
                    channel.eventLoop.makeCompletedFuture {
                        AcceptedConnection(
                            try Self.wrap(channel, limits: limits, tls: self.tls, dialing: false, timeout: handshakeTimeout))
                    }
                }
        } catch {
            throw ShoalError(.invalidConfiguration, "cannot listen on \(configuration.listen): \(ShoalError.describe(error))")
        }
        let address = HostAndPort(
            host: configuration.listen.host, port: server.channel.localAddress?.port ?? configuration.listen.port)
        var metricsServer: MetricsServer?
        if let asked = configuration.metrics {
            do {
                metricsServer = try await MetricsServer.bind(asked, group: group)
            } catch {
                try? await server.channel.close()
                throw error
            }
            let served = metricsServer!.boundAddress(asked: asked)
            logger.info("serving metrics on http://\(served)/metrics", metadata: ["shoal.metrics.listen": "\(served)"])
            if !served.isLoopback {
                logger.warning(
                    "the metrics endpoint \(served) is beyond loopback and has no authentication: anyone who can reach it reads peer sites, traffic and store sizes. Serve it on 127.0.0.1 or a trusted network only",
                    metadata: ["shoal.metrics.listen": "\(served)"])
            }
        }
        sync.listenAddress = address.description
        readiness.listening(at: address)
        logger.info(
            "ready to accept connections on \(address) (\(linkSecurityDescription))",
            metadata: [
                "shoal.site": "\(siteID)", "shoal.name": "\(name)", "shoal.mesh": "\(configuration.meshName)",
                "shoal.links": "\(linkSecurity)",
            ])
        if let problem = tls?.ownValidityProblem() {
            logger.warning("\(problem): peers will refuse it until it is replaced")
        }
        for warning in securityWarnings {
            logger.warning("\(warning)", metadata: ["shoal.listen": "\(address)"])
        }
        let admin = AdminService(node: self)
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { await self.sync.run() }
            group.addTask { await self.compactPeriodically() }
            group.addTask { await self.saveFreshnessPeriodically() }
            if let horizon = configuration.attachmentHorizon {
                group.addTask { await self.collectAttachments(horizon: horizon) }
            }
            for peer in configuration.peers {
                group.addTask { await self.dial(peer) }
            }
            if let discovery {
                group.addTask { await self.discover(with: discovery, listening: address) }
            }
            if let metricsServer {
                group.addTask {
                    try await metricsServer.run(logger: self.logger, idleTimeout: self.configuration.idleTimeout) {
                        try await self.renderMetrics()
                    }
                }
            }
            try await server.executeThenClose { connections in
                for try await connection in connections {
                    group.addTask { await self.accept(connection, admin: admin) }
                }
            }
        }
    }

    /// Sweeps attachments no live document names until cancelled: each sweep deletes
    /// those unnamed for `horizon` (`NodeStore.collectAttachments`). It sweeps a few
    /// times per horizon, at most every ten minutes and at least every half second.
    func collectAttachments(horizon: Duration) async {
        let interval = max(min(horizon / 4, .seconds(600)), .milliseconds(500))
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
            do {
                let swept = try await storage.collectAttachments(horizon: horizon, now: Date())
                if !swept.deleted.isEmpty || swept.abandonedStagings > 0 {
                    logger.info(
                        "collected \(swept.deleted.count) attachments no document names (\(swept.deletedBytes) bytes) and \(swept.abandonedStagings) unfinished puts or fetches",
                        metadata: ["shoal.attachment.deleted": "\(swept.deleted.joined(separator: ","))"])
                }
            } catch {
                if error.code == .closed || error.code == .cancelled { return }
                logger.warning("attachment collection failed: \(error.message)")
            }
        }
    }

    /// Whether a connection comes from this machine (a Unix socket or a loopback address).
    static func isLoopback(_ address: SocketAddress?) -> Bool {
        switch address {
        case .unixDomainSocket?: return true
        case let address?: return address.ipAddress.map(HostAndPort.isLoopback(host:)) ?? false
        case nil: return false
        }
    }

    /// Writers wait once this many bytes are queued for a connection (the high mark).
    static func writeBufferWaterMark(_ resources: ResourceLimits) -> ChannelOptions.Types.WriteBufferWaterMark {
        let high = max(resources.maximumPendingOutboundBytes, 2)
        return .init(low: high / 2, high: high)
    }

    /// Closes a connection whose peer has taken none of the bytes queued for it
    /// (over `maximumPendingOutboundBytes`) for the idle timeout: the session's
    /// writes would wait forever, and its idle check with them. Returns when
    /// cancelled or when it closed the connection.
    func closeWhenStalled(_ channel: any Channel, remote: String) async {
        let limit = configuration.idleTimeout
        var stalledSince: ContinuousClock.Instant?
        while true {
            do {
                try await Task.sleep(for: .seconds(1))
            } catch {
                return
            }
            guard !channel.isWritable else {
                stalledSince = nil
                continue
            }
            let now = ContinuousClock.now
            guard let since = stalledSince else {
                stalledSince = now
                continue
            }
            if now - since > limit {
                logger.warning(
                    "closing a connection whose peer has read nothing for \(limit) while more than \(configuration.resources.maximumPendingOutboundBytes) bytes wait for it (--max-pending-outbound-bytes)",
                    metadata: ["shoal.peer.address": "\(remote)"])
                try? await channel.close()
                return
            }
        }
    }

    /// A connection framed for sessions, with the count of bytes it received.
    struct FramedConnection: Sendable {
        let frames: NIOAsyncChannel<Frame, Frame>
        let inboundBytes: InboundByteCounter
        /// On a TLS link: the peer's identity once the TLS handshake is over, which
        /// comes before any Shoal frame.
        let tlsHandshake: EventLoopFuture<LinkTLS.Peer>?

        var channel: any Channel { frames.channel }

        /// Waits for the TLS handshake, when there is one: the peer's certificate, or nil on a plaintext link.
        func tlsPeer() async throws -> LinkTLS.Peer? {
            try await tlsHandshake?.get()
        }
    }

    /// Frames a new connection, behind TLS when `tls` is given (`dialing` says which
    /// side of the TLS handshake this is; `timeout` bounds it).
    static func wrap(
        _ channel: any Channel, limits: WireLimits, tls: LinkTLS? = nil, dialing: Bool = true, timeout: Duration = .seconds(10)
    ) throws -> FramedConnection {
        let handshake = try tls?.secure(channel, dialing: dialing, timeout: timeout)
        let counter = InboundByteCounter()
        let limit = limits.connectionLimit()
        try channel.pipeline.syncOperations.addHandler(InboundByteCountingHandler(counter: counter))
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameByteDecoder(limit: limit)))
        try channel.pipeline.syncOperations.addHandler(MessageToByteHandler(FrameByteEncoder()))
        return FramedConnection(
            frames: try NIOAsyncChannel<Frame, Frame>(wrappingChannelSynchronously: channel), inboundBytes: counter,
            tlsHandshake: handshake)
    }

    /// Logs a connection refused during TLS, each reason at most once a minute.
    private func noteTLSRefusal(_ message: String, remote: String) {
        let now = ContinuousClock.now
        let log = tlsNotices.withLock { notices in
            if let last = notices[message], now - last < .seconds(60) { return false }
            if notices.count > 256 { notices.removeAll() }
            notices[message] = now
            return true
        }
        if log { logger.warning("\(message)", metadata: ["shoal.peer.address": "\(remote)"]) }
    }

    /// A connection the listener accepted, until `accept` takes it to serve it.
    ///
    /// When a node stops, the connections accepted and not yet taken from the
    /// listener's stream are dropped with it, and a `NIOAsyncChannel` dropped without
    /// running traps ("Deinited NIOAsyncWriter without calling finish()"): a node stopped
    /// while connections arrived crashed so (found by shoal-check; 10 of 15 stops
    /// under a stream of connections). One never taken closes its channel instead, in a
    /// task of its own since closing is asynchronous: the one unstructured task here,
    /// for a connection no structured task owns any more.
    final class AcceptedConnection: Sendable {
        private let connection: FramedConnection
        private let taken = Locked(false)

        init(_ connection: FramedConnection) { self.connection = connection }

        func take() -> FramedConnection {
            taken.withLock { $0 = true }
            return connection
        }

        deinit {
            guard !taken.withLock({ $0 }) else { return }
            let frames = connection.frames
            Task { try? await frames.executeThenClose { _, _ in } }
        }
    }

    private func accept(_ accepted: AcceptedConnection, admin: AdminService) async {
        let connection = accepted.take()
        let remote = connection.channel.remoteAddress.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" } ?? "unknown"
        let loopback = Self.isLoopback(connection.channel.remoteAddress)
        let channel = connection.channel
        let (ticket, pushedOut) = handshakes.enter { channel.close(promise: nil) }
        if let pushedOut {
            pushedOut()
            noteHandshakesPushedOut()
        }
        defer { handshakes.leave(ticket) }
        let tlsPeer: LinkTLS.Peer?
        do {
            tlsPeer = try await connection.tlsPeer()
        } catch {
            noteTLSRefusal("TLS: \((error as? ShoalError)?.message ?? "\(error)")", remote: remote)
            // Through the async channel, so that its writer is finished, not dropped (which traps).
            try? await connection.frames.executeThenClose { _, _ in }
            return
        }
        let served = serving(tlsPeer, on: connection.channel)
        defer { served() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.closeWhenStalled(connection.channel, remote: remote) }
            do {
                try await connection.frames.executeThenClose { inbound, outbound in
                    let transport = ChannelTransport(
                        writer: outbound, channel: connection.channel, inboundBytes: connection.inboundBytes,
                        onEstablished: { self.handshakes.leave(ticket) })
                    try await sync.serve(
                        inbound: inbound, transport: transport, direction: .inbound, remoteAddress: remote, admin: admin,
                        remoteIsLoopback: loopback, tlsIdentity: tlsPeer?.name)
                }
            } catch {
                logger.info("inbound session ended: \(error)", metadata: ["shoal.peer.address": "\(remote)"])
            }
            group.cancelAll()
        }
    }

    /// Runs LAN discovery until the node stops: announces `listening` and dials
    /// the nodes of this mesh it hears. A failure to start it is logged, and the
    /// node goes on with its `--peer` addresses.
    private func discover(with discovery: LANDiscovery, listening: HostAndPort) async {
        let wildcard = ["0.0.0.0", "::", ""].contains(listening.host)
        let mesh = configuration.meshName, site = siteID, name = self.name
        let silent = discovery.interfaces.filter { !wildcard && $0.host != listening.host }
        if !silent.isEmpty {
            // Nobody there could connect to the listen address: listen, but do not announce.
            logger.notice(
                "listening on \(listening.host) only: discovery does not announce this node on \(silent.map(\.name).joined(separator: ", ")), and still dials the nodes it hears there")
        }
        do {
            try await discovery.run(
                group: group,
                announcement: { interface, sequence in
                    guard wildcard || interface.host == listening.host else { return nil }
                    let host = wildcard ? interface.host : listening.host
                    return Announcement(
                        meshName: mesh, siteID: site, nodeName: name,
                        listenAddresses: [HostAndPort(host: host, port: listening.port).description], sequence: sequence)
                },
                key: configuration.meshKey, meshName: mesh, logger: logger,
                dial: { site, _ in await self.dial(discovered: site, by: discovery) })
        } catch {
            if Task.isCancelled { return }
            logger.error("LAN discovery stopped: \(error); dialing --peer addresses only")
        }
    }

    /// The pause before the next attempt: `backoff`, less up to half of it at
    /// random, so nodes that lost each other at once do not redial in step.
    static func jittered(_ backoff: Duration) -> Duration {
        backoff * (0.5 + Double.random(in: 0...0.5))
    }

    /// Keeps a session with `peer` open: dials, serves, and redials after a pause
    /// that grows from 0.2 s to 5 s (with jitter) while attempts keep failing.
    private func dial(_ peer: HostAndPort) async {
        var backoff: Duration = .milliseconds(200)
        var knownSite: SiteID?
        while !Task.isCancelled {
            if sync.isSyncStopped {
                try? await Task.sleep(for: .milliseconds(250))
                continue
            }
            if let site = knownSite, sync.isConnected(to: site) {
                // The peer is already connected through its own dial to us; status shows that session.
                sync.forgetDialTarget(peer.description)
                try? await Task.sleep(for: .seconds(1))
                continue
            }
            switch await connect(peer, discovered: false) {
            case .served(let site):
                knownSite = site ?? knownSite
                if site != nil { backoff = .milliseconds(200) }
            case .refused(let site):
                knownSite = site ?? knownSite
            case .stale:
                // Nothing changes until an operator starts the stale node again from an
                // empty data directory: ask again rarely.
                try? await Task.sleep(for: .seconds(60))
                continue
            case .itself:
                logger.warning("--peer \(peer) is this node itself; not dialing it again")
                return
            case .failed:
                break
            }
            try? await Task.sleep(for: Self.jittered(backoff))
            backoff = min(backoff * 2, .seconds(5))
        }
    }

    /// Keeps a session with a site heard on the LAN while it is heard: dials the
    /// address it announces (when `DiscoveryTable.shouldDial` says so), and stops
    /// once it is no longer heard and no session with it is up.
    private func dial(discovered site: SiteID, by discovery: LANDiscovery) async {
        var backoff: Duration = .milliseconds(200)
        var lastAddress: String?
        defer { if let lastAddress { sync.forgetDialTarget(lastAddress) } }
        while !Task.isCancelled {
            if sync.isSyncStopped {
                try? await Task.sleep(for: .milliseconds(250))
                continue
            }
            let (fresh, should, address) = discovery.table.withLock { table in
                (table.isFresh(site, at: .now), table.shouldDial(site, at: .now), table.entries[site]?.address)
            }
            if sync.isConnected(to: site) {
                if let lastAddress { sync.forgetDialTarget(lastAddress) }
                backoff = .milliseconds(200)
                try? await Task.sleep(for: .seconds(1))
                continue
            }
            guard fresh, let address, let target = try? HostAndPort(parsing: address) else {
                logger.info("no longer dialing a peer that left the LAN", metadata: ["shoal.peer.site": "\(site)"])
                return
            }
            if let lastAddress, lastAddress != address { sync.forgetDialTarget(lastAddress) }
            lastAddress = address
            guard should else {
                // The other node has the smaller site ID and dials first; give it the grace period.
                sync.noteDialTarget(address, state: "waiting", discovered: true)
                try? await Task.sleep(for: .milliseconds(250))
                continue
            }
            switch await connect(target, discovered: true) {
            case .served(let peer) where peer != nil: backoff = .milliseconds(200)
            case .itself: return
            case .stale: backoff = .seconds(60)
            default: break
            }
            try? await Task.sleep(for: Self.jittered(backoff))
            backoff = min(backoff * 2, max(backoff, .seconds(5)))
        }
    }

    enum DialOutcome {
        /// A session ran and ended (with the peer's site when the handshake finished).
        case served(SiteID?)
        /// The peer or this node refused the session (a duplicate of one that is up, with its site).
        case refused(SiteID?)
        /// The address is this node.
        case itself
        /// No connection.
        case failed
        /// Refused as a stale replica (STALE_REPLICA): this node may hold documents the
        /// peer deleted and forgot.
        case stale
    }

    /// One dial: connects, serves the session to its end, and records the outcome for status.
    private func connect(_ peer: HostAndPort, discovered: Bool) async -> DialOutcome {
        let limits = configuration.limits
        let pending = Self.writeBufferWaterMark(configuration.resources)
        let handshakeTimeout = configuration.resources.handshakeTimeout
        sync.noteDialTarget(peer.description, state: "connecting", discovered: discovered)
        do {
            let connection = try await ClientBootstrap(group: group)
                .connectTimeout(.seconds(5))
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelOption(.allowRemoteHalfClosure, value: true)
                .channelOption(.writeBufferWaterMark, value: pending)
                .connect(host: peer.host, port: peer.port) { [self] channel in
                    channel.eventLoop.makeCompletedFuture {
                        try Self.wrap(channel, limits: limits, tls: self.tls, dialing: true, timeout: handshakeTimeout)
                    }
                }
            let tlsPeer: LinkTLS.Peer?
            do {
                tlsPeer = try await connection.tlsPeer()
            } catch {
                try? await connection.frames.executeThenClose { _, _ in }
                throw error
            }
            let served = serving(tlsPeer, on: connection.channel)
            defer { served() }
            let identity = try await withThrowingTaskGroup(of: PeerIdentity?.self) { group in
                group.addTask {
                    await self.closeWhenStalled(connection.channel, remote: peer.description)
                    return nil
                }
                defer { group.cancelAll() }
                return try await connection.frames.executeThenClose { inbound, outbound in
                    let transport = ChannelTransport(
                        writer: outbound, channel: connection.channel, inboundBytes: connection.inboundBytes)
                    return try await sync.serve(
                        inbound: inbound, transport: transport, direction: .outbound, remoteAddress: peer.description,
                        discovered: discovered, tlsIdentity: tlsPeer?.name)
                }
            }
            sync.noteDialTarget(peer.description, state: "disconnected", discovered: discovered)
            return .served(identity?.siteID)
        } catch let error as SyncError where error.code == .duplicateSession {
            // Both ends agree which of two connections between them stays; this one lost.
            if error.peer == siteID {
                sync.noteDialTarget(peer.description, state: "disconnected", error: "this node itself", discovered: discovered)
                return .itself
            }
            sync.noteDialTarget(peer.description, state: "disconnected", error: error.description, discovered: discovered)
            return .refused(error.peer)
        } catch let error as SyncError where error.code == .staleReplica {
            if error.fromPeer {
                logger.error(
                    "\(peer) refuses this node as a stale replica; asking again every minute: \(error.message)",
                    metadata: ["shoal.peer.address": "\(peer)"])
            }
            sync.noteDialTarget(peer.description, state: "refused", error: error.description, discovered: discovered)
            return .stale
        } catch let error as SyncError {
            // The session logged the refusal with the peer's site; this is the dialer's view.
            logger.debug(
                "dial \(peer) ended: \(error)", metadata: ["shoal.peer.address": "\(peer)", "shoal.peer.site": "\(error.peer.map { "\($0)" } ?? "-")"])
            sync.noteDialTarget(peer.description, state: "disconnected", error: error.description, discovered: discovered)
            return .refused(error.peer)
        } catch {
            if !Task.isCancelled { logger.debug("dial \(peer) failed: \(error)") }
            let message = (error as? ShoalError)?.message ?? tls?.explain(error, peer: peer.description) ?? "\(error)"
            sync.noteDialTarget(peer.description, state: "disconnected", error: message, discovered: discovered)
            return .failed
        }
    }
}

/// The sync layer's view of a NIO channel.
struct ChannelTransport: SessionTransport {
    let writer: NIOAsyncChannelOutboundWriter<Frame>
    let channel: any Channel
    let inboundBytes: InboundByteCounter?
    var onEstablished: @Sendable () -> Void = {}

    func established() { onEstablished() }

    func write(_ frame: Frame) async throws {
        try await writer.write(frame)
    }

    func close() async {
        try? await channel.close()
    }
}

extension ShoalError {
    /// An error from a socket call in words: "Address already in use (errno 98)",
    /// without the call's name that NIO puts before it.
    static func describe(_ error: any Error) -> String {
        if let io = error as? IOError {
            return "\(String(cString: strerror(io.errnoCode))) (errno \(io.errnoCode))"
        }
        return "\(error)"
    }
}

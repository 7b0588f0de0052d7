public import ShoalCRDT
public import ShoalStorage
package import ShoalWire
package import Logging
package import Metrics

/// Runs a node's sessions: the handshake on every connection, then either the
/// sync protocol (peers) or admin requests (the CLI).
///
/// The engine knows nothing of sockets: a connection is an inbound sequence of
/// frames and a `SessionTransport`. The node hands it TCP connections; tests hand
/// it in-memory pairs.
public final class SyncEngine: Sendable {
    package let store: any SyncStore
    package let configuration: SyncConfiguration
    let logger: Logger
    let registry = PeerRegistry()
    /// This node's own subscriptions, and who holds each: `subscribe` (configured, or
    /// an operator's), or handles of `registerSubscription`, counted by entry ID.
    private let localSubscriptions = Locked(LocalSubscriptions())
    /// Set by `stopSync()`, cleared by `startSync()`.
    private let syncStopped = Locked(false)
    private struct LocalSubscriptions {
        var set = SubscriptionSet()
        var direct: Set<String> = []
        /// The live handles of each entry, by token: a handle of an entry removed since
        /// (by `unsubscribe`) holds none, so its cancel cannot take a newer handle's place.
        var handles: [String: Set<UInt64>] = [:]
        var nextToken: UInt64 = 0
        /// This node's clock when `set` last changed: the generation its Subscribes state
        /// it under (`InterestTable`); set at start, so a restart states it anew.
        var generation: UInt64 = 0
    }
    /// What the nodes this node relays for subscribe to, by origin, saved in the store
    /// and kept while they are away (see `noteInterest(of:subscriptions:interests:)`).
    private let interest: Locked<InterestTable>
    /// The compaction horizon (ms) of the last `forgetInterest`: a statement older than
    /// it, of an origin not heard from since, is not taken again from a neighbour.
    private let interestHorizon = Locked<UInt64?>(nil)
    /// `carriedSubscriptions` as last built, with the sets it was built from.
    private let carried = Locked<CarriedSubscriptions?>(nil)
    /// Which peer delivered each remote transaction, so none is echoed back to its only source.
    let deliveries = Locked(DeliveryLedger())

    /// Whether sending `id` to `site` would only echo it back: it is the peer's own, or
    /// every delta of it this node holds came from that peer (`DeliveryLedger`).
    /// Pages leave such transactions out, and sessions pass over commits of nothing else.
    ///
    /// Never this node's own: it wrote them, and holds all of each, while a peer that
    /// sent one back (this node asked for its own after an EVICT) holds only what its
    /// subscriptions took. Never by the ledger on a store other processes write (a hub):
    /// they may add deltas of a transaction this process received from one peer alone.
    func isEcho(_ id: TransactionID, to site: SiteID) -> Bool {
        if id.origin == site { return true }
        guard id.origin != store.siteID, !store.hasOtherProcesses else { return false }
        return deliveries.withLock { $0.soleSource(of: id) == site }
    }

    private let advertisedListen: Locked<String>
    let subscriptionChanges = ChangeFeed<Int>(bufferingPolicy: .bufferingNewest(1), replayLatest: false)
    let attachmentRequests = Locked(AttachmentRequests())
    /// Everything received goes through here to the store.
    package let pipeline: InboundPipeline
    private let requestIDs = Locked<UInt64>(0)
    /// The transaction each recent TransactionRequest asked for, by request ID: an
    /// answer names its request only, and one saying "not found" resolves an offer.
    private let askedFor = Locked(AskedFor())
    /// Whether the store was seen to hold another node's write (`holdsOthersWrites()`).
    private let heldOthersWrites = Locked(false)
    /// Established sessions by role, against `maximumPeers` and `maximumAdminSessions`.
    private let sessionCounts = Locked<(peers: Int, admins: Int)>((0, 0))
    /// How far each peer acknowledged this node's log, for compaction.
    package let positions = PeerPositions()
    /// Which links carry each origin in full and which only offer it (docs/ROUTES.md).
    let routing: Routing
    /// How far this node has caught up with each node, and the newest deletion it forgot.
    package let freshness: Freshness
    /// What each peer may do here; `setAccessRules` changes them.
    private let rules: Locked<AccessRules>
    /// What each peer, by certificate name, was last allowed to read by a session that
    /// served its subscriptions: a session under other read rights streams from the
    /// log's start.
    private let servedReads: ServedReads

    /// - Parameter applyDuration: records how long each commit of received
    ///   transactions took, one sample per SQLite transaction of the inbound pipeline.
    package init(
        store: any SyncStore, configuration: SyncConfiguration, logger: Logger = Logger(label: "shoal.sync"),
        applyDuration: Metrics.Timer? = nil
    ) {
        self.store = store
        self.configuration = configuration
        self.logger = logger
        self.pipeline = InboundPipeline(
            store: store, configuration: configuration.inbound, logger: logger, applyDuration: applyDuration)
        self.advertisedListen = Locked(configuration.listenAddress)
        self.freshness = Freshness(site: store.siteID)
        self.rules = Locked(configuration.accessRules)
        self.servedReads = ServedReads(file: configuration.servedReadsFile) { problem in
            logger.warning(
                "\(problem). A peer whose read rights changed while this node was stopped is not sent what it may newly read until it subscribes again")
        }
        self.routing = Routing(enabled: configuration.routes)
        var kept: [SiteID: InterestTable.Entry] = [:]
        // This node states its set anew at start, above any generation it stated before
        // (saved under its own site): a clock that went back must not date it lower.
        var stated = store.clock.tick().rawValue
        do {
            let saved = try store.savedInterest()
            if let before = saved[store.siteID]?.generation { stated = max(stated, before &+ 1) }
            for (site, saved) in saved where site != store.siteID {
                // A saved query this version no longer parses is left out, as a neighbour
                // asking for it now would be refused.
                var set = SubscriptionSet()
                for entry in saved.filter.entries {
                    guard let arguments = try? ArgumentsJSON.parse(entry.argumentsJSON) else { continue }
                    _ = try? set.add(query: entry.query, arguments: arguments)
                }
                kept[site] = InterestTable.Entry(subscriptions: set, generation: saved.generation, heardFrom: Set(saved.heardFrom))
            }
        } catch {
            logger.warning(
                "could not read what neighbours asked this node for before it restarted; relaying for them again as they subscribe",
                metadata: ["shoal.error": "\(error)"])
        }
        self.interest = Locked(InterestTable(local: store.siteID, entries: kept))
        localSubscriptions.withLock { $0.generation = stated }
        saveOwnStatement()
    }

    /// Saves the generation this node last stated its set under, so that a restart
    /// states it above (`neighbour_interest`, under its own site).
    private func saveOwnStatement() {
        let (set, generation) = localSubscriptions.withLock { ($0.set, $0.generation) }
        let own = SavedInterest(filter: set.filter, generation: generation, heardFrom: [])
        Task { [store, logger] in
            do {
                try await store.saveInterest([store.siteID: own], forgetting: [])
            } catch {
                logger.warning("could not save the generation of this node's subscriptions", metadata: ["shoal.error": "\(error)"])
            }
        }
    }

    /// Where this node accepts connections, as Hello tells peers: the configured
    /// address until the node has bound its listener, then the bound one.
    package var listenAddress: String {
        get { advertisedListen.withLock { $0 } }
        set { advertisedListen.withLock { $0 = newValue } }
    }

    /// Runs the node's inbound pipeline (applying what sessions receive, timing out
    /// transactions that wait for coverage) until the task is cancelled. A node runs
    /// it for as long as it serves; sessions hand it their batches and wait for it.
    /// Calls beside one that runs already wait to take over when it ends. Beside it, the
    /// node fetches what its other processes (hubs) ask for (`fetchForOtherProcesses`).
    package func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.fetchForOtherProcesses() }
            await pipeline.run(engine: self)
            group.cancelAll()
        }
    }

    /// Sends a TransactionRequest to the connected peers the question is for;
    /// returns the peers asked.
    func ask(_ question: InboundPipeline.Question) async -> [SiteID] {
        var asked: [SiteID] = []
        for (site, send) in registry.connectedSenders() where question.asks(site) {
            let requestID = requestIDs.withLock { id in
                id += 1
                return id
            }
            askedFor.withLock { $0.note(requestID, question.id, of: site) }
            let request = SessionMessage.TransactionRequest(requestID: requestID, transaction: question.id, collections: question.collections)
            do {
                try await send(.transactionRequest(request))
                asked.append(site)
            } catch {
                logger.debug("could not ask a peer for a transaction", metadata: ["shoal.peer.site": "\(site)", "shoal.txn": "\(question.id)"])
            }
        }
        return asked
    }

    /// `peer` answered request `requestID` with nothing: it does not hold the
    /// transaction (a log restored from before it). An offer of it by `peer` is
    /// resolved, as by its last piece (`RouteTable.allSent`): asked again, it would
    /// answer the same, every `graftAfter` for as long as the link stays open.
    func answeredNothing(_ requestID: UInt64, by peer: SiteID) {
        guard let id = askedFor.withLock({ $0.take(requestID, answeredBy: peer) }) else { return }
        logger.debug(
            "a peer holds nothing of a transaction it was asked for", metadata: ["shoal.peer.site": "\(peer)", "shoal.txn": "\(id)"])
        routing.allSent(id, by: peer)
    }

    /// The transactions of the latest requests, and the peers asked, by request ID
    /// (`maximum` of them).
    struct AskedFor {
        static let maximum = 4_096
        private var ids: [UInt64: (id: TransactionID, peer: SiteID)] = [:]
        private var order: [UInt64] = []
        private var start = 0

        mutating func note(_ requestID: UInt64, _ id: TransactionID, of peer: SiteID) {
            ids[requestID] = (id, peer)
            order.append(requestID)
            while order.count - start > Self.maximum {
                ids[order[start]] = nil
                start += 1
            }
            if start > Self.maximum {
                order.removeFirst(start)
                start = 0
            }
        }

        /// The transaction request `requestID` asked `peer` for; nil for a request of
        /// another peer, or one too old to be remembered.
        mutating func take(_ requestID: UInt64, answeredBy peer: SiteID) -> TransactionID? {
            guard let asked = ids[requestID], asked.peer == peer else { return nil }
            ids[requestID] = nil
            return asked.id
        }
    }

    public var siteID: SiteID { store.siteID }

    /// Whether this node's store holds another node's write, as Hello says (8.10): read
    /// from the store until it does, then true for ever (the store keeps a record of
    /// every transaction it took). When the store cannot be read (a hub whose database
    /// is away) it is taken as true, the careful answer: peers then judge this node's
    /// freshness as any other's, and the handshake goes on.
    func holdsOthersWrites() async -> Bool {
        if heldOthersWrites.withLock({ $0 }) { return true }
        do {
            guard try await store.holdsOthersWrites() else { return false }
        } catch {
            logger.debug("could not read whether the store holds others' writes; saying it does: \(error)")
            return true
        }
        heldOthersWrites.withLock { $0 = true }
        return true
    }

    /// Stops syncing: every sync session closes, and until `startSync()` no peer is
    /// admitted (a peer is told `SHUTTING_DOWN` and dials again later) and the node
    /// dials none. The store, its queries and observers, and admin clients go on.
    public func stopSync() async {
        syncStopped.withLock { $0 = true }
        for close in registry.syncSessionClosers() { await close() }
    }

    /// Syncs again after `stopSync()`: peers are admitted, and the node dials its own.
    public func startSync() {
        syncStopped.withLock { $0 = false }
    }

    /// Whether `stopSync()` stopped sync.
    public var isSyncStopped: Bool { syncStopped.withLock { $0 } }

    /// Counts one more established session of `role`, or says which limit refuses it.
    func admitSession(admin: Bool) -> SyncError? {
        if !admin, isSyncStopped {
            return SyncError(.shuttingDown, "sync is stopped on this node; dial again later")
        }
        return sessionCounts.withLock { counts in
            if admin {
                guard counts.admins < configuration.maximumAdminSessions else {
                    return SyncError(
                        .limitExceeded,
                        "this node serves at most \(configuration.maximumAdminSessions) admin connections at once (--max-admin-connections); try again later")
                }
                counts.admins += 1
            } else {
                guard counts.peers < configuration.maximumPeers else {
                    return SyncError(
                        .limitExceeded,
                        "this node syncs with at most \(configuration.maximumPeers) peers at once (--max-peers)")
                }
                counts.peers += 1
            }
            return nil
        }
    }

    /// Ends what `admitSession` counted.
    func releaseSession(admin: Bool) {
        sessionCounts.withLock { counts in
            if admin { counts.admins -= 1 } else { counts.peers -= 1 }
        }
    }

    /// Adds a sync subscription. Connected peers are told at once and send what
    /// it matches, including documents they wrote before it existed. It stays until
    /// `unsubscribe` removes it, whatever handles of `registerSubscription` do.
    @discardableResult
    public func subscribe(_ query: String, arguments: [String: Value] = [:]) throws(ShoalError) -> SubscriptionSet.Entry {
        try add(query, arguments: arguments, handle: false).entry
    }

    /// Adds the subscription, as held by `subscribe` or by one more handle, in one step
    /// so that two at once cannot lose one.
    private func add(
        _ query: String, arguments: [String: Value], handle: Bool
    ) throws(ShoalError) -> (entry: SubscriptionSet.Entry, token: UInt64) {
        var parsed = SubscriptionSet()
        let entry = try parsed.add(query: query, arguments: arguments)
        let stated = store.clock.tick().rawValue
        let (changed, token) = localSubscriptions.withLock { state -> (Bool, UInt64) in
            let before = state.set.key
            _ = try? state.set.add(query: query, arguments: arguments)
            if state.set.key != before { state.generation = max(state.generation + 1, stated) }
            state.nextToken += 1
            if handle { state.handles[entry.id, default: []].insert(state.nextToken) } else { state.direct.insert(entry.id) }
            return (state.set.key != before, state.nextToken)
        }
        if changed {
            saveOwnStatement()
            subscriptionChanges.publish(0)
        }
        return (entry, token)
    }

    /// Removes a subscription by ID or exact query text, however it was added and
    /// whatever handles hold it; peers are told at once. Returns what it removed;
    /// throws `.invalidQuery` when no subscription has that ID or query.
    @discardableResult
    public func unsubscribe(_ idOrQuery: String) throws(ShoalError) -> SubscriptionSet.Entry {
        let stated = store.clock.tick().rawValue
        let removed = localSubscriptions.withLock { state -> SubscriptionSet.Entry? in
            guard let removed = state.set.remove(idOrQuery: idOrQuery) else { return nil }
            state.generation = max(state.generation + 1, stated)
            state.direct.remove(removed.id)
            state.handles[removed.id] = nil
            return removed
        }
        guard let removed else {
            throw ShoalError(.invalidQuery, "no subscription has the ID or query '\(idOrQuery)' (subscriptions lists them)")
        }
        saveOwnStatement()
        subscriptionChanges.publish(0)
        return removed
    }

    /// Adds a subscription and returns a handle of its own: the subscription stays while
    /// any handle of it is not cancelled, or `subscribe` (a configured subscription)
    /// added it too. Two registrations of one query are two handles.
    public func registerSubscription(_ query: String, arguments: [String: Value] = [:]) throws(ShoalError) -> SyncSubscription {
        let (entry, token) = try add(query, arguments: arguments, handle: true)
        return SyncSubscription(engine: self, entry: entry, token: token)
    }

    /// A handle of `entry` let go: the subscription goes when no handle holds it and
    /// `subscribe` did not add it.
    func release(_ entry: SubscriptionSet.Entry, token: UInt64) {
        let stated = store.clock.tick().rawValue
        let removed = localSubscriptions.withLock { state -> Bool in
            guard var held = state.handles[entry.id], held.remove(token) != nil else { return false }
            if !held.isEmpty {
                state.handles[entry.id] = held
                return false
            }
            state.handles[entry.id] = nil
            guard !state.direct.contains(entry.id), state.set.remove(idOrQuery: entry.id) != nil else { return false }
            state.generation = max(state.generation + 1, stated)
            return true
        }
        if removed {
            saveOwnStatement()
            subscriptionChanges.publish(0)
        }
    }

    /// This node's own subscriptions.
    public var subscriptions: SubscriptionSet { localSubscriptions.withLock { $0.set } }

    /// What this node asks `peer` for: its own subscriptions and those of the nodes it
    /// relays for (`InterestTable`), so that it carries changes for a node whose
    /// subscriptions its own do not cover (A and C subscribed to cars sync through a
    /// B subscribed to boats); and the statements of those nodes, its own first, for the
    /// peer to pass on in its turn. Nodes do the same with theirs, so interest spreads
    /// along every path of the mesh; it never goes back to a peer that alone brought it.
    package func upstream(for peer: SiteID) -> InterestTable.Upstream {
        let (own, generation) = localSubscriptions.withLock { ($0.set, $0.generation) }
        let stated = InterestTable.Stated(origin: store.siteID, generation: generation, subscriptions: own)
        guard configuration.relayForNeighbours else { return InterestTable.Upstream(subscriptions: own, interests: [stated]) }
        return interest.withLock { table in
            InterestTable.Upstream(
                subscriptions: table.upstream(own: own, for: peer, limit: configuration.maximumSubscriptionsPerPeer),
                interests: table.stated(own: stated, for: peer))
        }
    }

    /// How long a session waits after a change of what it asks its peer for before it
    /// reads it, so that changes arriving together make one Subscribe.
    static let upstreamSettle: Duration = .milliseconds(50)

    /// The subscriptions of `upstream(for:)`.
    package func upstreamSubscriptions(for peer: SiteID) -> SubscriptionSet { upstream(for: peer).subscriptions }

    /// Everything this node carries, for itself and for the nodes it relays for (none
    /// with relaying off): what an applied transaction may leave out and what the rest
    /// it records is chosen for (PROTOCOL.md §8.8, "Rest"; §8.11, "Offers").
    ///
    /// Built again only when what it is built from changed (`carried`): adding a
    /// neighbour's queries parses them, and commits ask for it while sets seldom change.
    package var carriedSubscriptions: SubscriptionSet {
        let own = subscriptions
        guard configuration.relayForNeighbours else { return own }
        let theirs = interest.withLock { $0.carried }
        if let built = carried.withLock({ $0 }), built.own == own, built.theirs == theirs { return built.set }
        var set = own
        for neighbours in theirs {
            for entry in neighbours.entries { _ = try? set.add(query: entry.query, arguments: entry.arguments) }
        }
        carried.withLock { $0 = CarriedSubscriptions(own: own, theirs: theirs, set: set) }
        return set
    }

    /// What `carriedSubscriptions` was last built from, and what it built.
    private struct CarriedSubscriptions {
        var own: SubscriptionSet
        var theirs: [SubscriptionSet]
        var set: SubscriptionSet
    }

    /// Records which peer delivered the deltas of these pieces.
    func noteDelivered(_ pieces: [TransactionPiece], by site: SiteID) {
        deliveries.withLock { ledger in
            for piece in pieces where !piece.deltas.isEmpty { ledger.record(piece.id, from: site) }
        }
    }

    /// Records a Subscribe of the neighbour `site`: the statements it lists, or, from a
    /// neighbour that lists none, its whole set (`InterestTable.learn`). A newer statement
    /// of an origin replaces the older one, so a narrower set means nothing there wants
    /// the rest any more: the sets this node sends upstream narrow with it, and their
    /// streams go on from the wider sets' cursors (`SyncStore.resumePoint(peer:subscriptions:)`),
    /// with nothing sent again. A node that leaves is not forgotten then: its interest is
    /// kept, saved, across reconnects and this node's restarts, so the sets sent upstream
    /// (and the cursors keyed by them) stay the same, until it has not been heard of for
    /// longer than the compaction horizon (`forgetInterest`). Sessions resubscribe when
    /// what they send upstream changes. Returns the entries that changed, to save.
    func noteInterest(
        of site: SiteID, subscriptions set: SubscriptionSet, interests: [InterestTable.Stated]?
    ) -> [SiteID: SavedInterest] {
        let horizon = interestHorizon.withLock { $0 }
        let fresh = horizon == nil ? [:] : freshness.entries
        let now = HybridLogicalClock.systemMilliseconds()
        // A statement dated beyond the clock drift a write may have is not taken: it would
        // outrank every later statement of its origin, and never grow old.
        let latest = now &+ store.clock.maximumDrift
        let interests = interests?.filter { HybridTimestamp(rawValue: $0.generation).milliseconds <= latest }
        let (saved, shows) = interest.withLock { table -> ([SiteID: SavedInterest], Bool) in
            let (changed, shows) = table.learn(from: site, subscriptions: set, interests: interests) { origin, generation in
                guard let horizon else { return false }
                return Self.isStale(generation: generation, heard: fresh[origin], horizon: horizon, now: now)
            }
            var saved: [SiteID: SavedInterest] = [:]
            for origin in changed {
                guard let entry = table.entries[origin] else { continue }
                saved[origin] = SavedInterest(
                    filter: entry.subscriptions.filter, generation: entry.generation, heardFrom: entry.heardFrom.sorted())
            }
            return (saved, shows)
        }
        if shows { subscriptionChanges.publish(0) }
        return saved
    }

    /// Whether a statement of `generation` (an origin's clock) is older than the horizon,
    /// and nothing heard of its origin since (`heard`: this node's freshness for it, Unix ms).
    static func isStale(generation: UInt64, heard: UInt64?, horizon: UInt64, now: UInt64) -> Bool {
        generation != 0 && max(HybridTimestamp(rawValue: generation).milliseconds, heard ?? 0) &+ horizon < now
    }

    /// Forgets what these nodes asked for, here and in the store: those of `sites` (peers
    /// away longer than the compaction horizon: they resync when they return) unless
    /// connected, and every origin whose statement is older than `horizon` with nothing
    /// heard of it since (its freshness here, PROTOCOL.md §8.10) and not connected: it
    /// left the mesh, or its part of it, that long ago. Returns those it knew. Sessions
    /// resubscribe upstream with the narrower sets, from the wider sets' cursors.
    package func forgetInterest(of sites: [SiteID], horizon: Duration? = nil) async throws(ShoalError) -> [SiteID] {
        let away = Set(sites.filter { !registry.isConnected(site: $0) })
        let horizonMillis = horizon.map { UInt64($0.components.seconds) * 1000 + UInt64($0.components.attoseconds / 1_000_000_000_000_000) }
        if let horizonMillis { interestHorizon.withLock { $0 = horizonMillis } }
        let fresh = freshness.entries
        let now = HybridLogicalClock.systemMilliseconds()
        let forgotten = interest.withLock { table in
            table.forget { origin, entry in
                // A peer whose position expired: what it stated itself as a neighbour (or,
                // asked outright, whatever it stated). A statement of its own that came by
                // other nodes lives on while they speak of it (freshness, below).
                if away.contains(origin), entry.generation == 0 || horizonMillis == nil { return true }
                guard let horizonMillis, !registry.isConnected(site: origin) else { return false }
                return Self.isStale(generation: entry.generation, heard: fresh[origin], horizon: horizonMillis, now: now)
            }
        }
        guard !forgotten.isEmpty else { return [] }
        try await store.saveInterest([:], forgetting: forgotten)
        subscriptionChanges.publish(0)
        return forgotten
    }

    /// What the nodes this node relays for asked for, by origin, connected or away.
    package var relayedInterest: [SiteID: InterestTable.Entry] { interest.withLock { $0.entries } }

    /// What each node this node relays for asks it for, connected or away.
    package var neighbourInterests: [SiteID: SubscriptionSet] { interest.withLock { $0.entries.mapValues(\.subscriptions) } }

    /// Every session and dial target, for status.
    public func peers() -> [PeerSnapshot] {
        registry.snapshots().map { snapshot in
            guard let site = snapshot.siteID, snapshot.state == "connected" else { return snapshot }
            var snapshot = snapshot
            let routes = routing.status(of: site)
            snapshot.routesAsked = routes.routes?.description
            snapshot.offersReceived = routes.offers
            snapshot.grafts = routes.grafts
            return snapshot
        }
    }

    /// Bytes and deltas exchanged with each peer site since this node started, over
    /// every session with it, closed ones included.
    package func traffic() -> [SiteID: PeerTraffic] { registry.traffic() }

    /// Whether a session with `site` is established now.
    package func isConnected(to site: SiteID) -> Bool { registry.isConnected(site: site) }

    /// Records the state of an address the node dials, for status.
    package func noteDialTarget(_ address: String, state: String, error: String? = nil, discovered: Bool = false) {
        registry.setDialTarget(address, state: state, error: error, discovered: discovered)
    }

    package func forgetDialTarget(_ address: String) { registry.removeDialTarget(address) }

    /// Runs one connection to its end: handshake, then the session.
    ///
    /// Returns the peer's identity when the session ended normally (the peer
    /// closed); throws `SyncError` when either side rejected the other.
    /// `remoteIsLoopback` false (a TCP peer beyond loopback) refuses admin clients
    /// that prove no key when this node has none. `tlsIdentity` is the peer's
    /// certificate name on a TLS link, shown by status; its rights here are the
    /// `accessRules` give it.
    /// What each peer may do here now.
    package var accessRules: AccessRules { rules.withLock { $0 } }

    /// Puts `new` rules in force. A live session whose peer the change gives other
    /// rights is closed, to start again under them; the others go on. Returns how many
    /// were closed.
    @discardableResult
    package func setAccessRules(_ new: AccessRules) async -> Int {
        let old = rules.withLock { rules in
            defer { rules = new }
            return rules
        }
        let closers = registry.closers { identity in old.rights(of: identity) != new.rights(of: identity) }
        for close in closers { await close() }
        return closers.count
    }

    @discardableResult
    package func serve<Inbound: AsyncSequence & Sendable>(
        inbound: Inbound, transport: some SessionTransport, direction: ConnectionDirection, remoteAddress: String,
        admin: (any AdminRequestHandler)? = nil, discovered: Bool = false, remoteIsLoopback: Bool = true,
        tlsIdentity: String? = nil
    ) async throws -> PeerIdentity? where Inbound.Element == Frame {
        let id = registry.open(
            direction: direction, address: remoteAddress, discovered: discovered, tlsIdentity: tlsIdentity,
            close: { await transport.close() })
        defer { registry.remove(id) }
        let rights = accessRules.rights(of: tlsIdentity)
        // Noted as served once the peer subscribes under these rights: a session that
        // ends before, an admin one, or the loser of two crossing dials leaves the
        // resend owed to the next.
        var resend = false
        var served: (@Sendable () -> Void)?
        if let identity = tlsIdentity {
            let read = rights.read
            resend = servedReads.changed(identity, read)
            let reads = servedReads
            let logger = logger
            served = {
                do {
                    try reads.note(identity, read)
                } catch {
                    logger.error(
                        "could not note what \(identity) may read: \(error). Should its read rights change while this node is stopped, it is not sent what it may newly read")
                }
            }
        }
        let session = PeerSession(
            engine: self, recordID: id, transport: transport, direction: direction, remoteAddress: remoteAddress,
            admin: admin, remoteIsLoopback: remoteIsLoopback, rights: rights, resendFromStart: resend, served: served)
        // The session owns the connection: whatever ends it, the connection closes.
        do {
            let identity = try await session.run(inbound: inbound)
            await transport.close()
            return identity
        } catch {
            await transport.close()
            throw error
        }
    }
}

/// A subscription registered through `SyncEngine.registerSubscription`: one handle,
/// independent of the others of the same query.
public final class SyncSubscription: Sendable {
    let engine: SyncEngine
    public let entry: SubscriptionSet.Entry
    let token: UInt64
    private let cancelled = Locked(false)

    init(engine: SyncEngine, entry: SubscriptionSet.Entry, token: UInt64) {
        self.engine = engine
        self.entry = entry
        self.token = token
    }

    public var id: String { entry.id }
    public var query: String { entry.query }
    /// Whether `cancel()` was called on this handle.
    public var isCancelled: Bool { cancelled.withLock { $0 } }

    /// Lets go of this handle: the subscription stops when no other handle holds it and
    /// it was not configured (data already received stays). A second call does nothing.
    public func cancel() {
        guard cancelled.withLock({ was in defer { was = true }; return !was }) else { return }
        engine.release(entry, token: token)
    }
}

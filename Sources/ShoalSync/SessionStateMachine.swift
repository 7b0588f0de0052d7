public import ShoalCRDT
public import ShoalStore
public import ShoalWire

/// A sync session after the handshake, as a value type: it takes events (a message
/// received, a page of the log read, a commit done, a timer) and returns what to
/// do. `PeerSession` carries the actions out and feeds back their results. Messages
/// are Shoal's own (`SessionMessage`); their wire form is met only at `SessionCodec.swift`.
///
/// ```
///            ┌──────────── subscriber (what this node asks for) ─────────────┐
///  own set ──► readCursor ──cursorRead──► send Subscribe(gen n)              │
///  own set equal to the last one sent (a neighbour's interest changed) ──► nothing
///  DeltaBatch(gen ≤ n) ──check──► submit to the pipeline ──durable──► send Ack (in order)
///            └────────────────────────────────────────────────────────────────┘
///            ┌──────────── publisher (what the peer asks for) ───────────────┐
///  Subscribe(newer gen) ──► restart from resume_after, drop in-flight pages  │
///  log grew / Ack / pageRead ──► readPage while < window unacknowledged      │
///  pageRead(current gen, moved on) ──► send DeltaBatch (an empty one at the  │
///    log's end, after the first, waits for the next tick)                    │
///  Ack(through of a batch sent) ──► free the window        other Ack ──► close
///            └────────────────────────────────────────────────────────────────┘
///  tick ──► Ping every keepaliveInterval; no frame nor 16 KiB of one for idleTimeout ──► close
///  Error received ──► close (no reply)     a frame out of place ──► Error, close
/// ```
///
/// Times are microseconds on the session's own monotonic clock.
public struct SessionStateMachine: Sendable {
    public struct Configuration: Sendable, Hashable {
        public var peer: SiteID
        public var keepaliveInterval: Duration
        public var idleTimeout: Duration
        /// Deltas read per page, in whole log rows (PROTOCOL.md §8.3).
        public var batchSize: Int
        /// Bytes of values read per page (at least one row).
        public var batchBytes: Int
        /// Batches sent and not acknowledged before the publisher waits.
        public var maximumBatchesInFlight: Int
        /// Batches received and not yet durable before the peer is cut off.
        public var maximumBatchesPending: Int
        /// Subscriptions one Subscribe of the peer may carry.
        public var maximumSubscriptions: Int
        /// Bytes of one subscription query of the peer.
        public var maximumQueryLength: Int
        /// The protocol version the handshake agreed (2 or later: peers sync at 2).
        public var version: UInt32
        /// How deltas travel in this session: stepped from protocol version 3 on.
        public var deltaEncoding: PieceCodec.DeltaEncoding { PieceCodec.DeltaEncoding(version: version) }
        /// Whether the session speaks routes: lazy links, offers and `held_through` (version 4).
        public var hasRoutes: Bool { version >= 4 }
        /// What the peer said it can take: batches are cut to fit it (`BatchFitter`).
        public var peerLimits: PeerLimits

        public init(
            peer: SiteID, keepaliveInterval: Duration = .seconds(5), idleTimeout: Duration = .seconds(30),
            batchSize: Int = 2048, batchBytes: Int = 4 << 20, maximumBatchesInFlight: Int = 4, maximumBatchesPending: Int = 64,
            maximumSubscriptions: Int = 256, maximumQueryLength: Int = 64 << 10,
            version: UInt32 = HandshakeStateMachine.minimumPeerVersion, peerLimits: PeerLimits = .unknown
        ) {
            self.peerLimits = peerLimits
            self.peer = peer
            self.keepaliveInterval = keepaliveInterval
            self.idleTimeout = idleTimeout
            self.batchSize = batchSize
            self.batchBytes = batchBytes
            self.maximumBatchesInFlight = maximumBatchesInFlight
            self.maximumBatchesPending = maximumBatchesPending
            self.maximumSubscriptions = maximumSubscriptions
            self.maximumQueryLength = maximumQueryLength
            self.version = version
        }
    }

    public enum Event: Sendable {
        case received(SessionMessage)
        /// A DeltaBatch frame's payload, inflated: read without building its messages.
        case receivedDeltaBatch([UInt8])
        /// A frame that has no place in an established session (a Hello, a Proof, an
        /// admin message): `Event(received:)` makes it of those.
        case receivedOutOfPlace(MessageType)
        /// Part of a frame arrived (`InboundProgress`): the peer is alive, though
        /// nothing whole has come since.
        case inboundProgress
        case tick
        /// The local change log's last sequence is now this.
        case logAdvanced(UInt64)
        /// One commit appended the local log's rows after `after` through `through`, all
        /// of them in `collections`; `echoes`: each of its transactions is the peer's own
        /// or came from the peer alone (`DeliveryLedger`).
        case logAppended(through: UInt64, after: UInt64, collections: Set<String>, echoes: Bool)
        /// This node's subscriptions changed (`fromStart`: after EVICT, ask for everything again).
        case ownSubscriptionsChanged(SubscriptionSet, fromStart: Bool)
        /// The cursor this node holds for `subscriptions` on this peer's log.
        /// `includeOwn`: this node may lack some of its own transactions (it evicted, or
        /// its store went back), so the peer streams them too, from `resumeAfter` on: 0,
        /// or the cursor of such a stream that stopped part way (PROTOCOL.md §8.2).
        /// `held`: how far this node holds the peer's own transactions, which the peer
        /// checks its history against.
        case cursorRead(
            SubscriptionSet, resumeAfter: UInt64, includeOwn: Bool = false, held: OriginHistory = .none, cursorEpoch: UInt64 = 0)
        case pageRead(ChangeLogPage, ticket: Int)
        /// The oldest submitted batch is durable (committed or buffered). `heldLimit`:
        /// the highest sequence of the peer's log this node may say it holds through,
        /// below the first offer of the peer it has not resolved (`RouteTable.resumeLimit`).
        case batchDurable(heldLimit: UInt64? = nil)
        /// The routes this node asks the peer for changed (`RouteTable`): they go with
        /// the next Subscribe, or at once in a RouteUpdate once one was sent.
        case routesChanged(RouteTable.Routes)
        /// Subscribe again to the same set from its stored cursor (the routes overflowed
        /// their bound and this link now streams everything, `RouteTable`).
        case resubscribe
        /// An offer of the peer was resolved since the last Ack: report how far this node
        /// holds the peer's log now, if that rose (`Ack.held_only`).
        case heldAdvanced(heldLimit: UInt64?)
        case batchFailed(String)
    }

    /// What the publisher asks of the store: a page of the log for the peer.
    public struct PageRequest: Sendable, Hashable {
        public var after: UInt64
        public var limit: Int
        public var byteLimit: Int
        public var subscriptions: SubscriptionSet
        /// The subscriber, whose own transactions (and echoes of what it sent) are left
        /// out; nil when it asked for them back (PROTOCOL.md §8.3).
        public var excludingOrigin: SiteID?
        public var continuing: Set<TransactionID>
        /// The first page after a Subscribe: it may start inside a transaction sent before.
        public var resuming: Bool
        public var ticket: Int
        /// The routes the peer asked for; nil: every origin eager.
        public var routes: RouteTable.Routes? = nil
        /// Lazy transactions offered whose rows go on past the pages read (`ChangeLogPage.offersOpen`).
        public var offersOpen: Set<TransactionID> = []
    }

    /// What the subscriber hands to the inbound pipeline.
    public struct InboundBatch: Sendable, Hashable {
        public var pieces: [TransactionPiece]
        /// Where to record `through` for this peer: the key of the subscription set the
        /// batch answers, when it answers this node's latest Subscribe.
        public var cursorKey: String?
        public var through: UInt64
        /// The cursor epoch the Subscribe it answers was read at (`ResumePoint`).
        public var cursorEpoch: UInt64 = 0
        /// Transactions the peer offered instead of sending (version 4).
        public var offered: [RouteTable.Offer] = []
    }

    public enum Action: Sendable {
        case send(SessionMessage)
        /// Send a DeltaBatch, written straight from the pieces read (`OutboundBatch.payload`).
        case sendBatch(OutboundBatch)
        case readCursor(SubscriptionSet, fromStart: Bool)
        case readPage(PageRequest)
        case submit(InboundBatch)
        /// Pieces answering this node's TransactionRequest: to the pipeline, no cursor.
        case deliver([TransactionPiece])
        /// The peer's routes changed (its Subscribe or RouteUpdate), for status.
        case peerRouted(RouteTable.Routes?)
        case answerTransactionRequest(SessionMessage.TransactionRequest, SubscriptionSet)
        case answerAttachmentRequest(SessionMessage.AttachmentRequest)
        case deliverAttachmentChunk(SessionMessage.AttachmentChunk)
        /// The peer's subscriptions, for status.
        case peerSubscribed(SubscriptionSet)
        /// The peer says how far it holds this node's own transactions: check this
        /// node's history against it before anything is sent (PROTOCOL.md §8.2).
        case checkHistory(OriginHistory)
        /// The peer resumes after this sequence of this node's log: if the log ends
        /// below it, it went back; move it above before anything is read (PROTOCOL.md §8.2).
        case checkLogEnd(resumeAfter: UInt64)
        case measuredRoundTrip(micros: UInt64)
        /// The peer says this node has everything of its log it asked for, and vouches
        /// this freshness (its own entry at its clock now): this node's rises (`Freshness`).
        case caughtUp(peerFreshness: [SiteID: UInt64])
        /// The peer streamed all of its log with this node's own transactions in it, and
        /// this node applied it: the cursor kept for that stream (the set's
        /// `SubscriptionSet.refillKey`) becomes the set's own, and later Subscribes leave
        /// this node's transactions out again.
        case ownTransactionsBack(subscriptionKey: String)
        /// Something the operator should know, to log with the peer's address (the session goes on).
        case warn(String)
        /// Send the error unless it came from the peer (or is nil: a silent close), then close.
        case close(SyncError?)
    }

    public let configuration: Configuration

    // Subscriber side.
    private var ownGeneration: UInt64 = 0
    private var ownSets: [UInt64: (set: SubscriptionSet, key: String, epoch: UInt64)] = [:]
    /// The latest Subscribe asked for this node's own transactions: its generation, and
    /// whether a batch answering it arrived (a Ping after that one speaks of it).
    private var refill: (generation: UInt64, answered: Bool)?
    private var cursorReadPending = false
    private var resubscribe: (SubscriptionSet, fromStart: Bool)?
    private var pendingDurable: [UInt64] = []
    /// The routes this node asks the peer for (version 4); nil: none sent, every origin eager.
    private var ownRoutes: RouteTable.Routes?
    /// The `through_sequence` of the last batch of the latest Subscribe acknowledged,
    /// and the `held_through` sent with it or after it.
    private var lastAcknowledged: (through: UInt64, held: UInt64)?

    // Publisher side.
    private var peerSet: SubscriptionSet?
    private var peerCollections: Set<String> = []
    private var peerFilter = SubscriptionFilter([])
    private var peerGeneration: UInt64 = 0
    private var generation = 0
    private var sentThrough: UInt64 = 0
    private var resumeAfter: UInt64 = 0
    /// Whether the peer's Subscribe asked for its own transactions (it evicted).
    private var peerIncludesOwn = false
    private var firstPage = true
    private var logEnd: UInt64 = 0
    private var pageTicket = 0
    private var pageInFlight: Int?
    private var continuing: Set<TransactionID> = []
    /// The routes the peer asked for (version 4); nil: every origin eager.
    private var peerRoutes: RouteTable.Routes?
    /// Lazy transactions offered in this stream whose rows go on.
    private var offersOpen: Set<TransactionID> = []
    /// Where each offer sent under the current Subscribe begins in the log, in order,
    /// until the peer says it holds through it (`Ack.held_through`): the peer holds
    /// nothing from the first of them on, whatever it acknowledged.
    private var unresolvedOffers: [UInt64] = []
    /// `through_sequence` of each batch sent and not acknowledged: the current
    /// generation's first, then those of earlier generations.
    private var unacknowledged: [UInt64] = []
    private var earlierUnacknowledged: [UInt64] = []
    /// The highest sequence the peer acknowledged, or that needed no batch.
    private var acknowledged: UInt64 = 0
    /// Whether a batch went out under the peer's current Subscribe.
    private var sentUnderGeneration = false
    /// The log's end was passed with nothing for the peer since the last batch: an
    /// empty batch to move its cursor is owed, sent at the next tick.
    private var cursorMoveOwed = false
    /// Cuts pages into batches the peer can take.
    private var fitter: BatchFitter
    /// Batches of a page cut in several, waiting for room in the window.
    private var outbox: [OutboundBatch] = []

    // Keepalive.
    private var lastInbound: UInt64 = 0
    private var nextPing: UInt64
    private var pingNonce: UInt64 = 0
    private var closed = false
    /// What a Ping vouches while the peer is caught up with this node's log: this
    /// node's freshness with its own entry at now (`Freshness.vouching`); the session
    /// sets it before each tick.
    public var localFreshness: [SiteID: UInt64] = [:]

    public init(configuration: Configuration, now: UInt64 = 0) {
        self.configuration = configuration
        self.fitter = BatchFitter(limits: configuration.peerLimits)
        self.lastInbound = now
        self.nextPing = now &+ Self.micros(configuration.keepaliveInterval)
    }

    public var isClosed: Bool { closed }
    /// Batches sent under the current Subscribe and not acknowledged.
    public var inFlight: Int { unacknowledged.count }
    /// This node's latest Subscribe generation.
    public var latestGeneration: UInt64 { ownGeneration }
    /// Rows of the local log after the last one the peer acknowledged under its
    /// current Subscribe (or that the publisher passed over with nothing for it):
    /// how far behind the peer is, at most. 0 when it asks for nothing.
    public var lag: UInt64 {
        guard let peerSet, !peerSet.isEmpty else { return 0 }
        let held = heldByPeer
        return logEnd > held ? logEnd - held : 0
    }

    /// How far the peer holds this node's log under its current Subscribe: what it
    /// acknowledged, but below the first offer it has not said it resolved.
    private var heldByPeer: UInt64 {
        guard let first = unresolvedOffers.first else { return acknowledged }
        return min(acknowledged, first &- 1)
    }

    /// The peer's current subscriptions; nil before its first Subscribe.
    public var peerSubscriptions: SubscriptionSet? { peerSet }

    /// How far the peer has acknowledged this node's log under its current
    /// Subscribe: what compaction must not pass while the peer counts. nil while it
    /// asks for nothing.
    public var peerPosition: UInt64? {
        guard let peerSet, !peerSet.isEmpty else { return nil }
        return heldByPeer
    }

    /// The routes the peer asked for; nil: every origin eager (or a version 3 peer).
    public var routesOfPeer: RouteTable.Routes? { peerRoutes }
    /// The routes this node asks the peer for; nil: none sent.
    public var routesAsked: RouteTable.Routes? { ownRoutes }

    static func micros(_ d: Duration) -> UInt64 {
        UInt64(d.components.seconds) * 1_000_000 + UInt64(d.components.attoseconds / 1_000_000_000_000)
    }

    public mutating func handle(_ event: Event, now: UInt64) -> [Action] {
        guard !closed else { return [] }
        switch event {
        case .receivedDeltaBatch(let payload):
            lastInbound = now
            return receivedBatch(payload)
        case .received(let message):
            lastInbound = now
            return received(message, now: now)
        case .receivedOutOfPlace(let type):
            lastInbound = now
            return close(SyncError(.protocolViolation, "unexpected \(type) frame in an established session"))
        case .inboundProgress:
            lastInbound = now
            return []
        case .tick:
            if now > lastInbound, now - lastInbound > Self.micros(configuration.idleTimeout) {
                return close(nil)
            }
            let owed = sendOwedCursorMove()
            guard now >= nextPing else { return owed }
            nextPing = now &+ Self.micros(configuration.keepaliveInterval)
            pingNonce += 1
            let vouches = peerSet != nil && lag == 0 && inFlight == 0
            let ping = SessionMessage.Ping(nonce: pingNonce, sentAtMicros: now, freshness: vouches ? Freshness.list(localFreshness) : [])
            return owed + [.send(.ping(ping))]
        case .logAdvanced(let sequence):
            logEnd = max(logEnd, sequence)
            return readIfPossible()
        case .logAppended(let through, let after, let collections, let echoes):
            if passOver(through: through, after: after, collections: collections, echoes: echoes) { return [] }
            logEnd = max(logEnd, through)
            return readIfPossible()
        case .ownSubscriptionsChanged(let set, let fromStart):
            if cursorReadPending {
                // One Subscribe at a time: the highest generation always carries the newest set.
                let fromStart = fromStart || (resubscribe?.fromStart ?? false)
                resubscribe = (set, fromStart)
                return []
            }
            // A change elsewhere (a neighbour's interest) may leave this peer's set as it was.
            if !fromStart, let latest = ownSets[ownGeneration], latest.set.key == set.key { return [] }
            cursorReadPending = true
            return [.readCursor(set, fromStart: fromStart)]
        case .cursorRead(let set, let resumeAfter, let includeOwn, let held, let epoch):
            cursorReadPending = false
            ownGeneration += 1
            // A stream with this node's own transactions in it is recorded under a cursor
            // of its own, so that one stopped part way resumes asking for them still.
            ownSets[ownGeneration] = (set, includeOwn ? SubscriptionSet.refillKey(set.key) : set.key, epoch)
            refill = includeOwn ? (ownGeneration, false) : nil
            // A stream that brings this node's own transactions back (after EVICT, or a
            // store that went back) carries every origin in full: an offer of what this
            // node evicted would look held here (its transaction was applied), and the
            // link eager for an origin may not hold what this node evicted. The routes go
            // back once it is all here (`ownTransactionsBack`).
            let subscribe = SessionMessage.Subscribe(
                subscriptions: set.entries.map(SessionMessage.Subscription.init), resumeAfter: resumeAfter,
                generation: ownGeneration, includeOwnTransactions: includeOwn, originHistory: held,
                routes: includeOwn ? nil : ownRoutes)
            var actions: [Action] = [.send(.subscribe(subscribe))]
            if let (next, fromStart) = resubscribe {
                resubscribe = nil
                if fromStart || next.key != set.key {
                    cursorReadPending = true
                    actions.append(.readCursor(next, fromStart: fromStart))
                }
            }
            return actions
        case .pageRead(let page, let ticket):
            guard ticket == pageInFlight else { return readIfPossible() }  // read under an older Subscribe
            pageInFlight = nil
            firstPage = false
            guard page.through > sentThrough else { return readIfPossible() }
            let before = sentThrough
            sentThrough = page.through
            for piece in page.pieces {
                if piece.isLast { continuing.remove(piece.id) } else { continuing.insert(piece.id) }
            }
            offersOpen = page.offersOpen
            unresolvedOffers += page.offered.map(\.logSequence)
            let (receiver, encoding, generation) = (peerFilter, configuration.deltaEncoding, peerGeneration)
            var groups = fitter.fit(page.pieces) { pieces in
                OutboundBatch(
                    pieces: pieces, receiver: receiver, encoding: encoding, throughSequence: page.through,
                    subscribeGeneration: generation
                ).payload().count
            }
            // Offers go at once, with the page's last batch (about 20 bytes each, a few
            // thousand at most a page): a lazy link's subscriber grafts on what they name.
            if !page.offered.isEmpty, groups.isEmpty { groups = [[]] }
            // A page with nothing for the peer is worth a frame only to move its cursor at
            // the end of the log: at once for the first batch of a Subscribe, otherwise at
            // the next tick, so that commits the peer does not want cost it at most one
            // frame a tick (PROTOCOL.md §8.3).
            if groups.isEmpty, sentThrough < logEnd || sentUnderGeneration {
                if unacknowledged.isEmpty { acknowledged = max(acknowledged, sentThrough) }
                cursorMoveOwed = cursorMoveOwed || sentThrough >= logEnd
                return readIfPossible()
            }
            // A page cut in several batches: each but the last leaves the peer's cursor
            // where it was, so that it never resumes past what it holds.
            for (i, group) in (groups.isEmpty ? [[]] : groups).enumerated() {
                let last = i == max(groups.count, 1) - 1
                var next = batch(group, through: last ? page.through : before)
                if last { next.offered = page.offered }
                outbox.append(next)
            }
            return sendFromOutbox() + readIfPossible()
        case .batchDurable(let limit):
            guard !pendingDurable.isEmpty else { return [] }
            let through = pendingDurable.removeFirst()
            guard configuration.hasRoutes else { return [.send(.ack(.batch(through: through)))] }
            let held = min(through, limit ?? .max)
            lastAcknowledged = (through, held)
            return [.send(.ack(.batch(through: through, heldThrough: held)))]
        case .heldAdvanced(let limit):
            guard configuration.hasRoutes, let last = lastAcknowledged else { return [] }
            let held = min(last.through, limit ?? .max)
            guard held > last.held else { return [] }
            lastAcknowledged = (last.through, held)
            return [.send(.ack(.heldOnly(heldThrough: held)))]
        case .routesChanged(let routes):
            guard configuration.hasRoutes, routes != ownRoutes else { return [] }
            ownRoutes = routes
            // Before the first Subscribe, the routes go with it; while own transactions
            // come back, once they are all here.
            guard ownGeneration > 0, refill == nil else { return [] }
            return [.send(.routeUpdate(routes))]
        case .resubscribe:
            guard let latest = ownSets[ownGeneration]?.set else { return [] }
            if cursorReadPending {
                resubscribe = (resubscribe?.0 ?? latest, resubscribe?.fromStart ?? false)
                return []
            }
            cursorReadPending = true
            return [.readCursor(latest, fromStart: false)]
        case .batchFailed(let message):
            return close(SyncError(.executionFailed, "could not apply a batch: \(message)"))
        }
    }

    private mutating func close(_ error: SyncError?) -> [Action] {
        closed = true
        return [.close(error)]
    }

    private mutating func received(_ message: SessionMessage, now: UInt64) -> [Action] {
        switch message {
        case .subscribe(let request):
            // Subscribes may cross on the wire: only a newer one replaces the current.
            guard request.generation == 0 || request.generation > peerGeneration else { return [] }
            guard request.subscriptions.count <= configuration.maximumSubscriptions else {
                return close(
                    SyncError(
                        .limitExceeded,
                        "Subscribe carries \(request.subscriptions.count) subscriptions; this node serves at most \(configuration.maximumSubscriptions) per peer (--max-subscriptions-per-peer)"))
            }
            var set = SubscriptionSet()
            for s in request.subscriptions {
                guard s.query.utf8.count <= configuration.maximumQueryLength else {
                    return close(
                        SyncError(
                            .invalidQuery,
                            "subscription query of \(s.query.utf8.count) bytes refused: this node takes queries of at most \(configuration.maximumQueryLength) bytes (--max-query-length)"))
                }
                do {
                    try set.add(query: s.query, arguments: try s.arguments.get())
                } catch {
                    return close(SyncError(.invalidQuery, "subscription '\(s.query)' rejected: \(error)"))
                }
            }
            peerSet = set
            peerCollections = set.collections
            peerFilter = set.filter
            peerGeneration = request.generation
            generation += 1
            resumeAfter = request.resumeAfter
            peerIncludesOwn = request.includeOwnTransactions
            peerRoutes = configuration.hasRoutes ? request.routes : nil
            offersOpen = []
            unresolvedOffers = []
            sentThrough = request.resumeAfter
            acknowledged = request.resumeAfter
            firstPage = true
            sentUnderGeneration = false
            cursorMoveOwed = false
            continuing = []
            // Late Acks for batches of earlier Subscribes are still valid (and still expected).
            earlierUnacknowledged = Array((earlierUnacknowledged + unacknowledged).suffix(256))
            unacknowledged = []
            outbox = []
            pageInFlight = nil
            var history: [Action] = request.resumeAfter > 0 ? [.checkLogEnd(resumeAfter: request.resumeAfter)] : []
            if request.originHistory.through > 0 { history.append(.checkHistory(request.originHistory)) }
            return history + [.peerSubscribed(set), .peerRouted(peerRoutes)] + readIfPossible()
        case .ack(.heldOnly(let heldThrough)):
            guard configuration.hasRoutes else {
                return close(SyncError(.protocolViolation, "Ack with held_only in a version \(configuration.version) session"))
            }
            resolveOffers(heldThrough: heldThrough)
            return []
        case .ack(.batch(let through, let heldThrough)):
            if configuration.hasRoutes, unacknowledged.contains(through) {
                resolveOffers(heldThrough: heldThrough)
            }
            if let i = unacknowledged.firstIndex(of: through) {
                unacknowledged.removeSubrange(...i)
                // With nothing left in flight, every row through `sentThrough` was either
                // acknowledged or had nothing for the peer.
                acknowledged = max(acknowledged, unacknowledged.isEmpty && outbox.isEmpty ? sentThrough : through)
            } else if let i = earlierUnacknowledged.firstIndex(of: through) {
                earlierUnacknowledged.removeSubrange(...i)
            } else {
                return close(
                    SyncError(.protocolViolation, "Ack for sequence \(through), which no unacknowledged DeltaBatch carries"))
            }
            return sendFromOutbox() + readIfPossible()
        case .ping(let ping):
            let vouched = Freshness.entries(ping.freshness)
            guard !vouched.isEmpty else { return [.send(.pong(ping))] }
            var actions: [Action] = [.send(.pong(ping)), .caughtUp(peerFreshness: vouched)]
            // Caught up under the Subscribe that asked for this node's own transactions
            // (a batch answering it came first, so the Ping speaks of it): all are back.
            if let refill, refill.answered, refill.generation == ownGeneration, let latest = ownSets[ownGeneration] {
                self.refill = nil
                ownSets[ownGeneration] = (latest.set, latest.set.key, latest.epoch)
                actions.append(.ownTransactionsBack(subscriptionKey: latest.set.key))
                if let ownRoutes { actions.append(.send(.routeUpdate(ownRoutes))) }
            }
            return actions
        case .pong(let pong):
            // Only a Pong that echoes our latest Ping gives a round trip; ignore others.
            guard pong.nonce != 0, pong.nonce == pingNonce, pong.sentAtMicros <= now else { return [] }
            return [.measuredRoundTrip(micros: now - pong.sentAtMicros)]
        case .attachmentRequest(let request):
            return [.answerAttachmentRequest(request)]
        case .attachmentChunk(let chunk):
            return [.deliverAttachmentChunk(chunk)]
        case .transactionRequest(let request):
            return [.answerTransactionRequest(request, peerSet ?? SubscriptionSet())]
        case .routeUpdate(let routes):
            guard configuration.hasRoutes else {
                return close(SyncError(.protocolViolation, "RouteUpdate in a version \(configuration.version) session"))
            }
            // Read from the next page on; the stream and its cursor go on as they are.
            peerRoutes = routes
            return [.peerRouted(peerRoutes)]
        case .transactionPieces(let answer):
            let own = ownSets[ownGeneration]?.set ?? SubscriptionSet()
            do throws(SyncError) {
                let pieces = try answer.pieces(receiver: own.filter, collections: own.collections, encoding: configuration.deltaEncoding)
                return pieces.map { [.deliver($0)] } ?? []
            } catch {
                return close(error)
            }
        case .error(let error):
            return close(error)
        }
    }

    /// A DeltaBatch's payload: checked against the session (its Subscribe, the window)
    /// and read into pieces for the pipeline.
    private mutating func receivedBatch(_ payload: [UInt8]) -> [Action] {
        let batch: DeltaBatchReader
        do throws(SyncError) {
            batch = try DeltaBatchReader(payload: payload)
        } catch {
            return close(error)
        }
        let header = batch.header
        guard !header.hasVersion1Transactions else {
            return close(SyncError(.protocolViolation, "DeltaBatch: version 1 transactions in a version \(configuration.version) session"))
        }
        guard header.subscribeGeneration <= ownGeneration else {
            return close(
                SyncError(
                    .protocolViolation,
                    "DeltaBatch answers Subscribe generation \(header.subscribeGeneration), but the latest sent is \(ownGeneration)"))
        }
        guard pendingDurable.count < configuration.maximumBatchesPending else {
            return close(
                SyncError(
                    .protocolViolation,
                    "more than \(configuration.maximumBatchesPending) DeltaBatches sent without waiting for an Ack"))
        }
        if refill?.generation == header.subscribeGeneration { refill?.answered = true }
        let answered = header.subscribeGeneration == 0 ? ownSets[ownGeneration] : ownSets[header.subscribeGeneration]
        let own = answered?.set ?? SubscriptionSet()
        let pieces: [TransactionPiece]
        do throws(SyncError) {
            pieces = try batch.pieces(
                receiver: own.filter, collections: own.collections, encoding: configuration.deltaEncoding)
        } catch {
            return close(error)
        }
        guard header.offered.isEmpty || configuration.hasRoutes else {
            return close(SyncError(.protocolViolation, "DeltaBatch offers transactions in a version \(configuration.version) session"))
        }
        guard header.offered.allSatisfy({ $0.id.origin.rawValue != 0 }) else {
            return close(SyncError(.protocolViolation, "DeltaBatch offers a transaction of origin_site 0"))
        }
        // An offer begins at a row of the page the batch closes: after 0, at or before its end.
        if let wrong = header.offered.first(where: { $0.logSequence == 0 || $0.logSequence > header.throughSequence }) {
            return close(
                SyncError(
                    .protocolViolation,
                    "DeltaBatch offers \(wrong.id) at log sequence \(wrong.logSequence), outside 1…\(header.throughSequence), the batch's through_sequence"))
        }
        let key = header.subscribeGeneration == ownGeneration && ownGeneration > 0 ? answered?.key : nil
        pendingDurable.append(header.throughSequence)
        return [
            .submit(
                InboundBatch(
                    pieces: pieces, cursorKey: key, through: header.throughSequence, cursorEpoch: answered?.epoch ?? 0,
                    offered: header.offered))
        ]
    }

    /// Passes over a commit's rows without reading them when the page would be empty:
    /// they follow straight on everything read already, nothing is being read or is
    /// split across pages, and the peer wants none of them (no collection it subscribes
    /// to, or only its own transactions and echoes while it asks for neither). The empty
    /// batch that moves its cursor is then owed (`.tick`).
    private mutating func passOver(through: UInt64, after: UInt64, collections: Set<String>, echoes: Bool) -> Bool {
        guard let peerSet, !peerSet.isEmpty, !firstPage, pageInFlight == nil, outbox.isEmpty, continuing.isEmpty,
            after == logEnd, sentThrough == logEnd, through > after
        else { return false }
        guard collections.isDisjoint(with: peerCollections) || (echoes && excludesPeersOwn) else { return false }
        logEnd = through
        sentThrough = through
        if unacknowledged.isEmpty { acknowledged = max(acknowledged, sentThrough) }
        cursorMoveOwed = true
        return true
    }

    /// A batch through `through` (by default `sentThrough`) under the peer's current Subscribe.
    private mutating func batch(_ pieces: [TransactionPiece], through: UInt64? = nil) -> OutboundBatch {
        sentUnderGeneration = true
        cursorMoveOwed = false
        return OutboundBatch(
            pieces: pieces, receiver: peerFilter, encoding: configuration.deltaEncoding, throughSequence: through ?? sentThrough,
            subscribeGeneration: peerGeneration)
    }

    /// Sends the batches waiting in the outbox while the window has room, each counted
    /// as unacknowledged.
    private mutating func sendFromOutbox() -> [Action] {
        var actions: [Action] = []
        while !outbox.isEmpty, unacknowledged.count < configuration.maximumBatchesInFlight {
            let next = outbox.removeFirst()
            unacknowledged.append(next.throughSequence)
            actions.append(.sendBatch(next))
        }
        return actions
    }

    /// The empty batch owed to move the peer's cursor past rows it did not want, once
    /// no page is being read, nothing waits to be sent and the window has room.
    private mutating func sendOwedCursorMove() -> [Action] {
        guard cursorMoveOwed, peerSet != nil, pageInFlight == nil, outbox.isEmpty,
            unacknowledged.count < configuration.maximumBatchesInFlight
        else { return [] }
        outbox.append(batch([]))
        return sendFromOutbox()
    }

    /// Whether pages leave out the peer's own transactions and echoes of what it sent:
    /// unless it asked for them, from the start, after an EVICT (PROTOCOL.md §8.3).
    private var excludesPeersOwn: Bool { !peerIncludesOwn }

    /// Reads the next page when the peer wants something, the window has room, no
    /// page is being read, and the log has rows not yet sent.
    private mutating func readIfPossible() -> [Action] {
        guard let peerSet, !peerSet.isEmpty, pageInFlight == nil, outbox.isEmpty,
            unacknowledged.count < configuration.maximumBatchesInFlight, logEnd > sentThrough
        else { return [] }
        pageTicket += 1
        pageInFlight = pageTicket
        return [
            .readPage(
                PageRequest(
                    after: sentThrough, limit: configuration.batchSize,
                    // About a frame of the peer's values a page (at least a row).
                    byteLimit: min(configuration.batchBytes, fitter.limit),
                    subscriptions: peerSet,
                    excludingOrigin: excludesPeersOwn ? configuration.peer : nil,
                    continuing: continuing, resuming: firstPage && resumeAfter > 0, ticket: pageTicket,
                    routes: peerRoutes, offersOpen: offersOpen))
        ]
    }

    /// The peer holds through `heldThrough`: the offers it covers are resolved.
    private mutating func resolveOffers(heldThrough: UInt64) {
        let resolved = unresolvedOffers.prefix { $0 <= heldThrough }.count
        if resolved > 0 { unresolvedOffers.removeFirst(resolved) }
    }
}

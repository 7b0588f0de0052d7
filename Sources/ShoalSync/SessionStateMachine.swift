public import ShoalCRDT
public import ShoalStorage
public import ShoalWire

/// A sync session after the handshake, as a value type: it takes events (a message
/// received, a page of the log read, a commit done, a timer) and returns what to
/// do. `PeerSession` carries the actions out and feeds back their results.
///
/// Each side of a session plays two roles at once, kept apart: the subscriber (what
/// this node asks the peer for, `SessionStateMachine+Subscriber.swift`) and the
/// publisher (what the peer asks this node for, `SessionStateMachine+Publisher.swift`),
/// each a state whose phases are the cases of an enum carrying their own struct.
/// This file holds the events, the actions, the keepalive, and which role an event
/// goes to. Messages are Shoal's own (`SessionMessage`); their wire form is met only
/// at `SessionCodec.swift`.
///
/// ```
///            ┌──────────── subscriber (what this node asks for) ─────────────┐
///  idle ──own set──► awaitingCursor ──cursorRead──► subscribed: send Subscribe(gen n)
///  own set equal to the last one sent (a neighbour's interest changed) ──► nothing
///  own set changed while awaitingCursor ──► waits its turn (one Subscribe at a time)
///  DeltaBatch(gen ≤ n) ──check──► submit to the pipeline ──durable──► send Ack (in order)
///            └────────────────────────────────────────────────────────────────┘
///            ┌──────────── publisher (what the peer asks for) ───────────────┐
///  awaitingSubscribe ──Subscribe──► streaming                                 │
///  streaming ──Subscribe(newer gen)──► streaming from resume_after, in-flight pages dropped
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
        /// What this node lets the peer do (`AccessRules`): its subscriptions are cut
        /// down to what it may read before anything is read for it.
        public var rights: PeerRights
        /// Whether the peer's first Subscribe streams from the log's start, whatever
        /// cursor it resumes at: what it may read here changed since it last synced, and
        /// its cursor does not say what it lacks of what it may read now.
        public var resendFromStart = false

        public init(
            peer: SiteID, keepaliveInterval: Duration = .seconds(5), idleTimeout: Duration = .seconds(30),
            batchSize: Int = 2048, batchBytes: Int = 4 << 20, maximumBatchesInFlight: Int = 4, maximumBatchesPending: Int = 64,
            maximumSubscriptions: Int = 256, maximumQueryLength: Int = 64 << 10,
            version: UInt32 = HandshakeStateMachine.minimumPeerVersion, peerLimits: PeerLimits = .unknown,
            rights: PeerRights = .everything
        ) {
            self.rights = rights
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
        /// What this node asks the peer for changed: the set, or the statements of the
        /// nodes it is for (`InterestTable`) that go with it (`fromStart` as above).
        case upstreamChanged(InterestTable.Upstream, fromStart: Bool)
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
        /// `refused`: what this node refused whole of what the peer sent, for its Ack.
        case batchDurable(heldLimit: UInt64? = nil, refused: [SessionMessage.Refusal] = [])
        /// The peer's own transactions this node refused before, read at the session's
        /// start: told again (version 4, a held_only Ack; PROTOCOL.md §8.8).
        case retellRefusals([SessionMessage.Refusal])
        /// The routes this node asks the peer for changed (`RouteTable`): they go with
        /// the next Subscribe, or at once in a RouteUpdate once one was sent.
        case routesChanged(RouteTable.Routes)
        /// Subscribe again to the same set from its stored cursor (the routes overflowed
        /// their bound and this link now streams everything, `RouteTable`).
        case resubscribe
        /// An offer of the peer was resolved since the last Ack: report how far this node
        /// holds the peer's log now, if that rose (`Ack.held_only`).
        case heldAdvanced(heldLimit: UInt64?)
        /// A commit of what this session handed the pipeline failed: the session ends.
        /// What failed stays in this node's log (it may name the database); the peer is
        /// told only that the batch was not applied.
        case batchFailed
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
        /// batch answers, when it belongs to the stream this node's latest Subscribe
        /// serves (that Subscribe's, or one the latest only continues).
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
        /// The peer subscribed to `SubscriptionSet`, listing these statements (nil: none).
        case peerSubscribed(SubscriptionSet, interests: [InterestTable.Stated]?)
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
        /// The peer refused transactions this node sent it (its Ack said so): log them
        /// and show the last in the peer's status. `retold`: told again at the start of a
        /// session (a held_only Ack), most of them known here already.
        case peerRefused([SessionMessage.Refusal], retold: Bool)
        /// The peer answered a TransactionRequest of this node with nothing: it holds
        /// none of the transaction (`SyncEngine.answeredNothing`).
        case answeredNothing(requestID: UInt64)
        /// Send the error unless it came from the peer (or is nil: a silent close), then close.
        case close(SyncError?)
    }

    public let configuration: Configuration
    private var subscriber: Subscriber
    private var publisher: Publisher
    private var keepalive: Keepalive
    private var closed = false
    /// What a Ping vouches while the peer is caught up with this node's log: this
    /// node's freshness with its own entry at now (`Freshness.vouching`); the session
    /// sets it before each tick.
    public var localFreshness: [SiteID: UInt64] = [:]

    public init(configuration: Configuration, now: UInt64 = 0) {
        self.configuration = configuration
        self.subscriber = Subscriber(configuration: configuration)
        self.publisher = Publisher(configuration: configuration)
        self.keepalive = Keepalive(configuration: configuration, now: now)
    }

    public var isClosed: Bool { closed }
    /// Batches sent under the current Subscribe and not acknowledged.
    public var inFlight: Int { publisher.inFlight }
    /// This node's latest Subscribe generation.
    public var latestGeneration: UInt64 { subscriber.latestGeneration }
    /// Rows of the local log after the last one the peer acknowledged under its
    /// current Subscribe (or that the publisher passed over with nothing for it):
    /// how far behind the peer is, at most. 0 when it asks for nothing.
    public var lag: UInt64 { publisher.lag }
    /// The peer's current subscriptions; nil before its first Subscribe.
    public var peerSubscriptions: SubscriptionSet? { publisher.subscriptions }
    /// How far the peer has acknowledged this node's log under its current
    /// Subscribe: what compaction must not pass while the peer counts. nil while it
    /// asks for nothing.
    public var peerPosition: UInt64? { publisher.position }
    /// The routes the peer asked for; nil: every origin eager (or a version 3 peer).
    public var routesOfPeer: RouteTable.Routes? { publisher.routes }
    /// The routes this node asks the peer for; nil: none sent.
    public var routesAsked: RouteTable.Routes? { subscriber.routes }

    static func micros(_ d: Duration) -> UInt64 {
        UInt64(d.components.seconds) * 1_000_000 + UInt64(d.components.attoseconds / 1_000_000_000_000)
    }

    public mutating func handle(_ event: Event, now: UInt64) -> [Action] {
        guard !closed else { return [] }
        do throws(SyncError) {
            return try dispatch(event, now: now)
        } catch {
            return close(error)
        }
    }

    /// Hands the event to the role it concerns; an error thrown closes the session with it.
    private mutating func dispatch(_ event: Event, now: UInt64) throws(SyncError) -> [Action] {
        switch event {
        case .receivedDeltaBatch(let payload):
            keepalive.heard(at: now)
            return try subscriber.receivedBatch(payload)
        case .received(let message):
            keepalive.heard(at: now)
            return try received(message, now: now)
        case .receivedOutOfPlace(let type):
            keepalive.heard(at: now)
            throw SyncError(.protocolViolation, "unexpected \(type) frame in an established session")
        case .inboundProgress:
            keepalive.heard(at: now)
            return []
        case .tick:
            if keepalive.isSilent(at: now) { return close(nil) }
            let owed = publisher.sendOwedCursorMove()
            guard let nonce = keepalive.pingDue(at: now) else { return owed }
            let freshness = publisher.isCaughtUp ? Freshness.list(localFreshness) : []
            return owed + [.send(.ping(SessionMessage.Ping(nonce: nonce, sentAtMicros: now, freshness: freshness)))]
        case .logAdvanced(let sequence):
            return publisher.logAdvanced(to: sequence)
        case .logAppended(let through, let after, let collections, let echoes):
            return publisher.logAppended(through: through, after: after, collections: collections, echoes: echoes)
        case .ownSubscriptionsChanged(let set, let fromStart):
            return subscriber.subscriptionsChanged(to: set, fromStart: fromStart)
        case .upstreamChanged(let upstream, let fromStart):
            return subscriber.subscriptionsChanged(to: upstream.subscriptions, interests: upstream.interests, fromStart: fromStart)
        case .cursorRead(let set, let resumeAfter, let includeOwn, let held, let epoch):
            return subscriber.cursorRead(set, resumeAfter: resumeAfter, includeOwn: includeOwn, held: held, cursorEpoch: epoch)
        case .pageRead(let page, let ticket):
            return publisher.pageRead(page, ticket: ticket)
        case .batchDurable(let limit, let refused):
            return subscriber.batchDurable(heldLimit: limit, refused: refused)
        case .retellRefusals(let refused):
            return subscriber.retell(refused)
        case .heldAdvanced(let limit):
            return subscriber.heldAdvanced(heldLimit: limit)
        case .routesChanged(let routes):
            return subscriber.routesChanged(to: routes)
        case .resubscribe:
            return subscriber.resubscribe()
        case .batchFailed:
            throw SyncError(.executionFailed, "could not apply a batch: committing it failed on this node (the node's log says why)")
        }
    }

    private mutating func close(_ error: SyncError?) -> [Action] {
        closed = true
        return [.close(error)]
    }

    private mutating func received(_ message: SessionMessage, now: UInt64) throws(SyncError) -> [Action] {
        switch message {
        case .subscribe(let request):
            let actions = try publisher.subscribed(request)
            for case .peerSubscribed(_, let listed?) in actions { return actions + subscriber.peerListed(listed) }
            return actions
        case .ack(let ack):
            return try publisher.acknowledged(ack)
        case .ping(let ping):
            let vouched = Freshness.entries(ping.freshness)
            guard !vouched.isEmpty else { return [.send(.pong(ping))] }
            return [.send(.pong(ping)), .caughtUp(peerFreshness: vouched)] + subscriber.peerCaughtUp()
        case .pong(let pong):
            guard let roundTrip = keepalive.roundTrip(pong, now: now) else { return [] }
            return [.measuredRoundTrip(micros: roundTrip)]
        case .attachmentRequest(let request):
            return [.answerAttachmentRequest(request)]
        case .attachmentChunk(let chunk):
            return [.deliverAttachmentChunk(chunk)]
        case .transactionRequest(let request):
            return [.answerTransactionRequest(request, publisher.subscriptions ?? SubscriptionSet())]
        case .routeUpdate(let routes):
            return try publisher.routeUpdated(to: routes)
        case .transactionPieces(let answer):
            return try subscriber.received(answer)
        case .error(let error):
            throw error
        }
    }
}

extension SessionStateMachine {
    /// When the peer was last heard from, and when it is pinged next.
    struct Keepalive: Sendable {
        let interval: UInt64
        let idleTimeout: UInt64
        private var lastInbound: UInt64
        private var nextPing: UInt64
        /// The nonce of the latest Ping sent; 0: none yet.
        private var nonce: UInt64 = 0

        init(configuration: Configuration, now: UInt64) {
            interval = SessionStateMachine.micros(configuration.keepaliveInterval)
            idleTimeout = SessionStateMachine.micros(configuration.idleTimeout)
            lastInbound = now
            nextPing = now &+ interval
        }

        /// A frame, or part of one, arrived.
        mutating func heard(at now: UInt64) { lastInbound = now }

        /// Whether nothing arrived for longer than the idle timeout.
        func isSilent(at now: UInt64) -> Bool { now > lastInbound && now - lastInbound > idleTimeout }

        /// The nonce of a Ping due at `now`, counted as sent; nil when none is due.
        mutating func pingDue(at now: UInt64) -> UInt64? {
            guard now >= nextPing else { return nil }
            nextPing = now &+ interval
            nonce += 1
            return nonce
        }

        /// The round trip a Pong measures: only one that echoes the latest Ping, and
        /// not from the future.
        func roundTrip(_ pong: SessionMessage.Ping, now: UInt64) -> UInt64? {
            guard pong.nonce != 0, pong.nonce == nonce, pong.sentAtMicros <= now else { return nil }
            return now - pong.sentAtMicros
        }
    }
}

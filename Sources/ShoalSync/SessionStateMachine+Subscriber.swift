import ShoalCRDT
import ShoalStorage

extension SessionStateMachine {
    /// The subscriber's side of a session: what this node asks the peer for, and the
    /// batches the peer sends for it.
    ///
    /// ```
    ///  idle ──own set──► awaitingCursor ──cursorRead──► subscribed ──own set changed──► awaitingCursor …
    ///                     │ own set changed meanwhile: it waits as `next` (one Subscribe at a time)
    ///                     └ cursorRead with `next` waiting ──► Subscribe sent, awaitingCursor for `next`
    /// ```
    ///
    /// Batches are read in every phase against the set of the Subscribe they answer,
    /// and acknowledged in order once durable.
    struct Subscriber: Sendable {
        enum State: Sendable {
            /// Nothing asked for yet, and no cursor being read.
            case idle
            /// A cursor is being read for the next Subscribe.
            case awaitingCursor(AwaitingCursorState)
            /// The latest Subscribe is sent, and no cursor is being read.
            case subscribed(SubscribedState)
        }

        struct AwaitingCursorState: Sendable {
            /// The latest Subscribe sent, which batches still answer meanwhile; nil before the first.
            var latest: SubscribedState?
            /// A change of this node's set while the cursor is read, asked for once it is
            /// read: the newest set wins, and "from the start" sticks.
            var next: Request?
            /// The statements to send with the set whose cursor is being read.
            var interests: [InterestTable.Stated]?
            /// The stream is to start again from the cursor read (from the start, or a
            /// resubscribe), even for the set the peer serves now.
            var restart = false
        }

        struct Request: Sendable {
            var subscriptions: SubscriptionSet
            /// The statements of the nodes the set is for (`InterestTable`); nil: none sent.
            var interests: [InterestTable.Stated]?
            var fromStart: Bool
            /// A resubscribe: the stream starts again from the cursor, whatever the set.
            var restart = false
        }

        /// A Subscribe this node sent.
        struct SubscribedState: Sendable {
            var generation: UInt64
            var subscriptions: SubscriptionSet
            /// Where the pipeline records `through` for the batches answering it.
            var cursorKey: String
            /// The cursor epoch it was read at (`ResumePoint`).
            var cursorEpoch: UInt64
            var ownTransactions: OwnTransactions
            /// The statements it listed; nil: none.
            var interests: [InterestTable.Stated]? = nil
            /// The generation whose Subscribe began the stream this one belongs to: its
            /// own, or, for a Subscribe that `continues`, that of the one it continues.
            var stream: UInt64 = 0
        }

        /// The set of each origin this session last listed to the peer (its key): the
        /// peer keeps what it was told, so a statement is listed again only when its
        /// origin's set has changed since.
        private var told: [SiteID: String] = [:]

        /// Whether a Subscribe of `set` and `interests` would tell the peer nothing that
        /// `latest` and the statements listed before did not.
        private func tellsNothingNew(_ set: SubscriptionSet, _ interests: [InterestTable.Stated]?, after latest: SubscribedState) -> Bool {
            guard latest.subscriptions.key == set.key else { return false }
            guard let interests else { return latest.interests == nil }
            return latest.interests != nil && interests.allSatisfy { told[$0.origin] == $0.subscriptions.key }
        }

        /// The peer's Subscribe listed these statements: it holds at least them, so what
        /// this session remembers listing to it gives way to them. A statement of the
        /// peer's older than the one this node lists of that origin (it learned an older
        /// one elsewhere, or listed one back) is answered at once with this node's. One
        /// as new or newer is not: this node learns it from the same Subscribe, and
        /// answered with what it listed before, each side would answer the other's for
        /// ever (two nodes once sent each other some 90 Subscribes in 4 s so).
        mutating func peerListed(_ statements: [InterestTable.Stated]) -> [Action] {
            for stated in statements { told[stated.origin] = stated.subscriptions.key }
            guard case .subscribed(let latest) = state, let listed = latest.interests else { return [] }
            let newer = statements.contains { theirs in
                listed.contains { $0.origin == theirs.origin && $0.generation > theirs.generation }
            }
            guard newer, !tellsNothingNew(latest.subscriptions, latest.interests, after: latest) else { return [] }
            return subscriptionsChanged(to: latest.subscriptions, interests: latest.interests, fromStart: false)
        }

        /// What a Subscribe lists of `interests`: this node's own statement (the first),
        /// then those not listed to the peer before in this session.
        private mutating func unsaid(_ interests: [InterestTable.Stated]?) -> [InterestTable.Stated]? {
            guard let interests else { return nil }
            let list = interests.enumerated().filter { $0.offset == 0 || told[$0.element.origin] != $0.element.subscriptions.key }
                .map(\.element)
            for stated in list { told[stated.origin] = stated.subscriptions.key }
            return list
        }

        /// Whether a Subscribe asks for this node's own transactions back, and how far that got.
        enum OwnTransactions: Sendable, Hashable {
            /// The peer leaves them out: this node holds them.
            case leftOut
            /// Asked for (`include_own_transactions`); no batch answering the Subscribe yet.
            case askedBack
            /// A batch answering it came, so a Ping that vouches now speaks of this stream:
            /// at the next one, they are all back.
            case comingBack
        }

        let configuration: Configuration
        private(set) var state: State = .idle
        /// The Subscribes sent before the latest, by generation: a batch is read against
        /// the set of the one it answers.
        private var earlier: [UInt64: SubscribedState] = [:]
        /// `through_sequence` of each batch handed to the pipeline and not yet durable, oldest first.
        private var pendingDurable: [UInt64] = []
        /// The routes this node asks the peer for (version 4); nil: none sent, every origin eager.
        private(set) var routes: RouteTable.Routes?
        /// The `through_sequence` of the last batch acknowledged, and the `held_through`
        /// sent with it or after it.
        private var lastAcknowledged: (through: UInt64, held: UInt64)?

        init(configuration: Configuration) {
            self.configuration = configuration
        }

        /// The latest Subscribe sent; nil before the first.
        var latest: SubscribedState? {
            switch state {
            case .idle: nil
            case .awaitingCursor(let waiting): waiting.latest
            case .subscribed(let latest): latest
            }
        }

        var latestGeneration: UInt64 { latest?.generation ?? 0 }

        private mutating func updateLatest(_ body: (inout SubscribedState) -> Void) {
            switch state {
            case .idle: break
            case .awaitingCursor(var waiting):
                guard var latest = waiting.latest else { break }
                body(&latest)
                waiting.latest = latest
                state = .awaitingCursor(waiting)
            case .subscribed(var latest):
                body(&latest)
                state = .subscribed(latest)
            }
        }

        mutating func subscriptionsChanged(
            to set: SubscriptionSet, interests: [InterestTable.Stated]? = nil, fromStart: Bool
        ) -> [Action] {
            // A version 3 peer takes no statements: only the set tells it anything.
            let interests = configuration.hasRoutes ? interests : nil
            if case .awaitingCursor(var waiting) = state {
                // One Subscribe at a time: the highest generation always carries the newest set.
                waiting.next = Request(
                    subscriptions: set, interests: interests, fromStart: fromStart || (waiting.next?.fromStart ?? false),
                    restart: waiting.next?.restart ?? false)
                state = .awaitingCursor(waiting)
                return []
            }
            // A change elsewhere (a neighbour's interest) may leave what this peer is told as it was.
            if !fromStart, let latest, tellsNothingNew(set, interests, after: latest) {
                // Yet these are what this node lists now: a peer that lists an origin
                // otherwise is answered with them (`peerListed`), not with a statement
                // since replaced, which the peer would answer with its own, for ever.
                updateLatest { $0.interests = interests }
                return []
            }
            state = .awaitingCursor(AwaitingCursorState(latest: latest, interests: interests, restart: fromStart))
            return [.readCursor(set, fromStart: fromStart)]
        }

        /// Subscribe again to the latest set from its stored cursor.
        mutating func resubscribe() -> [Action] {
            guard let latest else { return [] }
            if case .awaitingCursor(var waiting) = state {
                // The Subscribe whose cursor is being read, or the one waiting after it,
                // starts the stream again: not `latest`, which they replace.
                if waiting.next != nil { waiting.next!.restart = true } else { waiting.restart = true }
                state = .awaitingCursor(waiting)
                return []
            }
            state = .awaitingCursor(AwaitingCursorState(latest: latest, interests: latest.interests, restart: true))
            return [.readCursor(latest.subscriptions, fromStart: false)]
        }

        /// The cursor for `set` is read: the Subscribe goes out, and a change that waited
        /// meanwhile has its cursor read next.
        mutating func cursorRead(
            _ set: SubscriptionSet, resumeAfter: UInt64, includeOwn: Bool, held: OriginHistory, cursorEpoch: UInt64
        ) -> [Action] {
            let next: Request? = if case .awaitingCursor(let waiting) = state { waiting.next } else { nil }
            let interests: [InterestTable.Stated]? = if case .awaitingCursor(let waiting) = state { waiting.interests } else { nil }
            let restart = if case .awaitingCursor(let waiting) = state { waiting.restart } else { true }
            let previous = latest
            // Only what it says of others changed: the peer's stream may go on, nothing sent
            // again. So may one bringing this node's own transactions back, when the one
            // before asked for them too: restarted at every change of another node's
            // interest, a long one never reached its end (the hub checker's finding of a
            // restored device that never caught up).
            let continues =
                configuration.hasRoutes && !restart && previous?.subscriptions.key == set.key
                && (previous?.ownTransactions == .leftOut) == !includeOwn
            if let previous { earlier[previous.generation] = previous }
            // A stream with this node's own transactions in it is recorded under a cursor
            // of its own, so that one stopped part way resumes asking for them still.
            let generation = (previous?.generation ?? 0) + 1
            let sent = SubscribedState(
                generation: generation, subscriptions: set,
                cursorKey: includeOwn ? SubscriptionSet.refillKey(set.key) : set.key, cursorEpoch: cursorEpoch,
                // Continued, the stream is the one whose batches came: a Ping still speaks of it.
                ownTransactions: includeOwn ? (continues && previous?.ownTransactions == .comingBack ? .comingBack : .askedBack) : .leftOut,
                interests: interests,
                stream: continues ? (previous?.stream ?? generation) : generation)
            state = .subscribed(sent)
            // A stream that brings this node's own transactions back (after EVICT, or a
            // store that went back) carries every origin in full: an offer of what this
            // node evicted would look held here (its transaction was applied), and the
            // link eager for an origin may not hold what this node evicted. The routes go
            // back once it is all here (`peerCaughtUp`).
            let subscribe = SessionMessage.Subscribe(
                subscriptions: set.entries.map(SessionMessage.Subscription.init), resumeAfter: resumeAfter,
                generation: sent.generation, includeOwnTransactions: includeOwn, originHistory: held,
                routes: includeOwn ? nil : routes, interests: configuration.hasRoutes ? unsaid(interests) : nil, continues: continues)
            var actions: [Action] = [.send(.subscribe(subscribe))]
            if let waiting = next, waiting.fromStart || waiting.restart || !tellsNothingNew(waiting.subscriptions, waiting.interests, after: sent) {
                state = .awaitingCursor(
                    AwaitingCursorState(latest: sent, interests: waiting.interests, restart: waiting.fromStart || waiting.restart))
                actions.append(.readCursor(waiting.subscriptions, fromStart: waiting.fromStart))
            } else if let waiting = next {
                // Nothing new to tell, but what this node lists now (as above).
                updateLatest { $0.interests = waiting.interests }
            }
            return actions
        }

        /// A DeltaBatch's payload: checked against the session (its Subscribe, the
        /// batches pending) and read into pieces for the pipeline.
        mutating func receivedBatch(_ payload: [UInt8]) throws(SyncError) -> [Action] {
            let batch = try DeltaBatchReader(payload: payload)
            let header = batch.header
            guard !header.hasVersion1Transactions else {
                throw SyncError(
                    .protocolViolation, "DeltaBatch: version 1 transactions in a version \(configuration.version) session")
            }
            let current = latestGeneration
            guard header.subscribeGeneration <= current else {
                throw SyncError(
                    .protocolViolation,
                    "DeltaBatch answers Subscribe generation \(header.subscribeGeneration), but the latest sent is \(current)")
            }
            guard pendingDurable.count < configuration.maximumBatchesPending else {
                throw SyncError(
                    .protocolViolation,
                    "more than \(configuration.maximumBatchesPending) DeltaBatches sent without waiting for an Ack")
            }
            if header.subscribeGeneration == current {
                updateLatest { if $0.ownTransactions == .askedBack { $0.ownTransactions = .comingBack } }
            }
            let answers = header.subscribeGeneration
            let answered = answers == 0 || answers == current ? latest : earlier[answers]
            // Generations only rise along the stream: no batch answers an older Subscribe now.
            if answers > 0, earlier.keys.contains(where: { $0 < answers }) { earlier = earlier.filter { $0.key >= answers } }
            let own = answered?.subscriptions ?? SubscriptionSet()
            let pieces = try batch.pieces(receiver: own.filter, collections: own.collections, encoding: configuration.deltaEncoding)
            guard header.offered.isEmpty || configuration.hasRoutes else {
                throw SyncError(
                    .protocolViolation, "DeltaBatch offers transactions in a version \(configuration.version) session")
            }
            guard header.offered.allSatisfy({ $0.id.origin.rawValue != 0 }) else {
                throw SyncError(.protocolViolation, "DeltaBatch offers a transaction of origin_site 0")
            }
            // Stores keep sequences in signed 64 bits: a number above is no transaction and
            // no log's (a node that took one trapped converting it).
            if let wrong = header.offered.first(where: { $0.id.sequence > TransactionID.maximumSequence }) {
                throw SyncError(.protocolViolation, "DeltaBatch offers transaction \(wrong.id), above 2^63 - 1")
            }
            guard header.throughSequence <= TransactionID.maximumSequence else {
                throw SyncError(.protocolViolation, "DeltaBatch runs through sequence \(header.throughSequence), above 2^63 - 1")
            }
            // An offer begins at a row of the page the batch closes: after 0, at or before its end.
            if let wrong = header.offered.first(where: { $0.logSequence == 0 || $0.logSequence > header.throughSequence }) {
                throw SyncError(
                    .protocolViolation,
                    "DeltaBatch offers \(wrong.id) at log sequence \(wrong.logSequence), outside 1…\(header.throughSequence), the batch's through_sequence"
                )
            }
            // Filed when the batch belongs to the stream the latest Subscribe serves: its
            // own, or one the latest only `continues` (same set, nothing sent again), whose
            // batches run on from where that stream began. Filing nothing for those left the
            // cursor behind what was applied once the stream went quiet. A batch of a stream
            // a later Subscribe restarted files nothing: the restart read the cursor before
            // it, and may have forgotten offers that held the cursor back (routes overflow).
            let key = answers > 0 && answered?.stream == latest?.stream ? answered?.cursorKey : nil
            pendingDurable.append(header.throughSequence)
            return [
                .submit(
                    InboundBatch(
                        pieces: pieces, cursorKey: key, through: header.throughSequence, cursorEpoch: answered?.cursorEpoch ?? 0,
                        offered: header.offered))
            ]
        }

        /// Pieces answering this node's TransactionRequest, read against its latest set.
        func received(_ answer: SessionMessage.TransactionPieces) throws(SyncError) -> [Action] {
            let own = latest?.subscriptions ?? SubscriptionSet()
            guard let pieces = try answer.pieces(receiver: own.filter, collections: own.collections, encoding: configuration.deltaEncoding)
            else { return [.answeredNothing(requestID: answer.requestID)] }
            return [.deliver(pieces)]
        }

        /// The oldest batch submitted is durable: its Ack goes out.
        mutating func batchDurable(heldLimit: UInt64?, refused: [SessionMessage.Refusal] = []) -> [Action] {
            guard !pendingDurable.isEmpty else { return [] }
            let through = pendingDurable.removeFirst()
            let refused = Array(refused.prefix(SessionMessage.Refusal.perAck))
            guard configuration.hasRoutes else { return [.send(.ack(.batch(through: through, refused: refused)))] }
            let held = min(through, heldLimit ?? .max)
            lastAcknowledged = (through, held)
            return [.send(.ack(.batch(through: through, heldThrough: held, refused: refused)))]
        }

        /// An offer was resolved: a held_only Ack says so, if this node holds further now.
        mutating func heldAdvanced(heldLimit: UInt64?) -> [Action] {
            guard configuration.hasRoutes, let last = lastAcknowledged else { return [] }
            let held = min(last.through, heldLimit ?? .max)
            guard held > last.held else { return [] }
            lastAcknowledged = (last.through, held)
            return [.send(.ack(.heldOnly(heldThrough: held)))]
        }

        /// The peer's own transactions this node refused, told again at the start of the
        /// session in a held_only Ack (version 4; PROTOCOL.md §8.8): the Ack that told one
        /// first may have been lost with its session. It says no more than the last Ack
        /// of this session said it holds, none before the first.
        mutating func retell(_ refused: [SessionMessage.Refusal]) -> [Action] {
            guard configuration.hasRoutes, !refused.isEmpty else { return [] }
            let held = lastAcknowledged?.held ?? 0
            return [.send(.ack(.heldOnly(heldThrough: held, refused: Array(refused.prefix(SessionMessage.Refusal.perAck)))))]
        }

        mutating func routesChanged(to routes: RouteTable.Routes) -> [Action] {
            guard configuration.hasRoutes, routes != self.routes else { return [] }
            self.routes = routes
            // Before the first Subscribe, the routes go with it; while own transactions
            // come back, once they are all here.
            guard let latest, latest.ownTransactions == .leftOut else { return [] }
            return [.send(.routeUpdate(routes))]
        }

        /// The peer vouched that this node has all it asked for. Under the Subscribe that
        /// asked for this node's own transactions, once a batch answering it came first
        /// (so that the Ping speaks of it): all are back.
        mutating func peerCaughtUp() -> [Action] {
            guard let latest, latest.ownTransactions == .comingBack else { return [] }
            updateLatest { latest in
                latest.cursorKey = latest.subscriptions.key
                latest.ownTransactions = .leftOut
            }
            var actions: [Action] = [.ownTransactionsBack(subscriptionKey: latest.subscriptions.key)]
            if let routes { actions.append(.send(.routeUpdate(routes))) }
            return actions
        }
    }
}

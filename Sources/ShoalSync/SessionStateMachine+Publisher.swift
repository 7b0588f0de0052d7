import ShoalCRDT
import ShoalStorage

extension SessionStateMachine {
    /// The publisher's side of a session: what the peer asks this node for, and the
    /// batches of this node's log streamed to it.
    ///
    /// ```
    ///  awaitingSubscribe ──Subscribe──► streaming ──newer Subscribe──► streaming, from its resume_after
    ///
    ///  streaming:   firstPage ──page read──► nothingSent ──batch sent──► sent
    ///  (a Subscribe's first page may start inside a transaction sent before, and its first
    ///   batch goes at once even if empty; after a batch, an empty page at the log's end
    ///   waits for the next tick)
    /// ```
    struct Publisher: Sendable {
        enum State: Sendable {
            /// The peer has not subscribed yet: only the log's end is followed.
            case awaitingSubscribe(AwaitingSubscribeState)
            /// Pages of the log are read and sent under the peer's latest Subscribe.
            case streaming(StreamingState)
            /// Only while a method changes the state it took out, so that nothing is copied.
            case _modifying
        }

        struct AwaitingSubscribeState: Sendable {
            var logEnd: UInt64 = 0
            /// Routes of a RouteUpdate before any Subscribe; the Subscribe's replace them.
            var routes: RouteTable.Routes?
        }

        /// How far the stream of the peer's current Subscribe got.
        enum Progress: Sendable, Hashable {
            /// No page read yet: the first may start inside a transaction sent before
            /// (`PageRequest.resuming`), and no commit is passed over unread.
            case firstPage
            /// Pages read, no batch sent: an empty page at the log's end goes out at
            /// once, to move the peer's cursor there.
            case nothingSent
            /// A batch went out: an empty page at the log's end waits for the next tick.
            case sent
        }

        let configuration: Configuration
        private(set) var state: State = .awaitingSubscribe(AwaitingSubscribeState())
        /// Whether the peer's first Subscribe with subscriptions streams from the log's
        /// start whatever cursor it resumes at (`Configuration.resendFromStart`).
        private var resendPending: Bool

        init(configuration: Configuration) {
            self.configuration = configuration
            self.resendPending = configuration.resendFromStart
        }

        private var stream: StreamingState? {
            if case .streaming(let stream) = state { stream } else { nil }
        }

        /// The peer's current subscriptions; nil before its first Subscribe.
        var subscriptions: SubscriptionSet? { stream?.subscriptions }

        /// Batches sent under the current Subscribe and not acknowledged.
        var inFlight: Int { stream?.unacknowledged.count ?? 0 }

        /// How far behind the peer is, at most; 0 when it asks for nothing.
        var lag: UInt64 {
            guard let stream, !stream.subscriptions.isEmpty else { return 0 }
            let held = stream.heldByPeer
            return stream.logEnd > held ? stream.logEnd - held : 0
        }

        /// How far the peer holds this node's log; nil while it asks for nothing.
        var position: UInt64? {
            guard let stream, !stream.subscriptions.isEmpty else { return nil }
            return stream.heldByPeer
        }

        /// Whether the peer subscribed and holds everything it asked for: a Ping vouches then.
        var isCaughtUp: Bool { stream != nil && lag == 0 && inFlight == 0 }

        /// The routes the peer asked for; nil: every origin eager.
        var routes: RouteTable.Routes? {
            switch state {
            case .awaitingSubscribe(let waiting): waiting.routes
            case .streaming(let stream): stream.routes
            case ._modifying: preconditionFailure("publisher state read while it changes")
            }
        }

        /// Runs `body` on the streaming state in place; nil before the peer subscribed.
        private mutating func streaming<R, E: Error>(_ body: (inout StreamingState) throws(E) -> R) throws(E) -> R? {
            guard case .streaming(var stream) = state else { return nil }
            state = ._modifying
            defer { state = .streaming(stream) }
            return try body(&stream)
        }

        mutating func logAdvanced(to end: UInt64) -> [Action] {
            if case .awaitingSubscribe(var waiting) = state {
                waiting.logEnd = max(waiting.logEnd, end)
                state = .awaitingSubscribe(waiting)
                return []
            }
            return streaming { stream in
                stream.logEnd = max(stream.logEnd, end)
                return stream.readIfPossible()
            } ?? []
        }

        mutating func logAppended(through: UInt64, after: UInt64, collections: Set<String>, echoes: Bool) -> [Action] {
            let read = streaming { stream in
                if stream.passOver(through: through, after: after, collections: collections, echoes: echoes) { return [Action]() }
                stream.logEnd = max(stream.logEnd, through)
                return stream.readIfPossible()
            }
            return read ?? logAdvanced(to: through)
        }

        mutating func pageRead(_ page: ChangeLogPage, ticket: Int) -> [Action] {
            streaming { $0.pageRead(page, ticket: ticket) } ?? []
        }

        /// The empty batch owed to move the peer's cursor, if it can go now.
        mutating func sendOwedCursorMove() -> [Action] {
            streaming { $0.sendOwedCursorMove() } ?? []
        }

        /// The peer's Subscribe: a newer one (or one of generation 0) restarts the
        /// stream from its `resume_after`; pages being read for the one before are dropped.
        mutating func subscribed(_ request: SessionMessage.Subscribe) throws(SyncError) -> [Action] {
            // Subscribes may cross on the wire: only a newer one replaces the current.
            guard request.generation == 0 || request.generation > (stream?.generation ?? 0) else { return [] }
            var request = request
            if resendPending, !request.subscriptions.isEmpty {
                // What the peer may read changed since its cursor: all of it again.
                resendPending = false
                request.resumeAfter = 0
                request.continues = false
            }
            guard request.subscriptions.count <= configuration.maximumSubscriptions else {
                throw SyncError(
                    .limitExceeded,
                    "Subscribe carries \(request.subscriptions.count) subscriptions; this node serves at most \(configuration.maximumSubscriptions) per peer (--max-subscriptions-per-peer)"
                )
            }
            // No log of this node reaches so far (stores number in signed 64 bits, and a
            // log that went back moves above the cursor and a margin): a node that took
            // one would fail to number past it, or trap converting it. What the peer holds
            // of this node's transactions is not a violation at any number: a third node
            // may have forged one, and refusing every peer that holds it would split them.
            guard request.resumeAfter <= OriginHistory.maximumSequence else {
                throw SyncError(
                    .protocolViolation,
                    "Subscribe resumes after sequence \(request.resumeAfter) of this node's log, above 2^62 (PROTOCOL.md §8.2)")
            }
            // Cut down to what the peer may read here; the interest it states for other
            // nodes is theirs, kept as stated (their own links cut it).
            let set = configuration.rights.cut(try subscriptionSet(request.subscriptions))
            var stated: [InterestTable.Stated]?
            // Version 4 lists them; a version 3 session ignores them, as it does routes.
            if let interests = request.interests, configuration.hasRoutes {
                guard interests.count <= InterestTable.maximumOrigins else {
                    throw SyncError(
                        .limitExceeded,
                        "Subscribe lists the interest of \(interests.count) nodes; this node keeps at most \(InterestTable.maximumOrigins)")
                }
                stated = []
                for interest in interests {
                    guard interest.origin.rawValue != 0 else {
                        throw SyncError(.protocolViolation, "Subscribe lists an interest of origin 0")
                    }
                    guard interest.subscriptions.count <= configuration.maximumSubscriptions else {
                        throw SyncError(
                            .limitExceeded,
                            "Subscribe lists \(interest.subscriptions.count) subscriptions of node \(interest.origin); this node serves at most \(configuration.maximumSubscriptions) per peer (--max-subscriptions-per-peer)"
                        )
                    }
                    stated?.append(
                        InterestTable.Stated(
                            origin: interest.origin, generation: interest.generation,
                            subscriptions: try subscriptionSet(interest.subscriptions)))
                }
            }
            let routes = configuration.hasRoutes ? request.routes : nil
            if let routes { try Self.check(routes) }
            // Numbers past what this node numbers without being told to are not believed
            // (`OriginHistory.believable`): acted on, they would move it past what its
            // peers may name, and split it from them.
            var history: [Action] = []
            if request.resumeAfter > OriginHistory.believable {
                history.append(
                    .warn(
                        "the peer resumes after sequence \(request.resumeAfter) of this node's log, past any this node numbers (2^62 - 2^40): not believed, the log is not moved above it"
                    ))
            } else if request.resumeAfter > 0 {
                history.append(.checkLogEnd(resumeAfter: request.resumeAfter))
            }
            if request.originHistory.through > OriginHistory.believable {
                history.append(
                    .warn(
                        "the peer holds this node's transactions through \(request.originHistory.through), past any this node numbers (2^62 - 2^40): not believed, this node's history is not checked against it"
                    ))
            } else if request.originHistory.through > 0 {
                history.append(.checkHistory(request.originHistory))
            }
            // The same set, and the peer wants nothing again (it only says more of others,
            // or asks for other routes): the stream goes on, its next batches answering this
            // one. One with the peer's own transactions in it goes on only as such.
            if request.continues, configuration.hasRoutes, case .streaming(var current) = state,
                current.subscriptions.key == set.key, current.includesOwn == request.includeOwnTransactions
            {
                current.generation = request.generation
                current.routes = routes
                state = .streaming(current)
                return history + [.peerSubscribed(set, interests: stated), .peerRouted(routes)] + (streaming { $0.readIfPossible() } ?? [])
            }
            let next: StreamingState
            switch state {
            case .awaitingSubscribe(let waiting):
                next = StreamingState(
                    request, subscriptions: set, routes: routes, logEnd: waiting.logEnd, pageTicket: 0, earlierUnacknowledged: [],
                    fitter: BatchFitter(limits: configuration.peerLimits), configuration: configuration)
            case .streaming(let previous):
                // Late Acks for batches of earlier Subscribes are still valid (and still expected).
                next = StreamingState(
                    request, subscriptions: set, routes: routes, logEnd: previous.logEnd, pageTicket: previous.pageTicket,
                    earlierUnacknowledged: Array((previous.earlierUnacknowledged + previous.unacknowledged).suffix(256)),
                    fitter: previous.fitter, configuration: configuration)
            case ._modifying:
                preconditionFailure("publisher state read while it changes")
            }
            state = .streaming(next)
            return history + [.peerSubscribed(set, interests: stated), .peerRouted(routes)] + (streaming { $0.readIfPossible() } ?? [])
        }

        /// Origins named as exceptions in one Routes at most (PROTOCOL.md §8.11, Bounds).
        static let maximumRouteExceptions = 65_536

        static func check(_ routes: RouteTable.Routes) throws(SyncError) {
            guard routes.exceptions.count <= maximumRouteExceptions else {
                throw SyncError(
                    .limitExceeded,
                    "Routes name \(routes.exceptions.count) origins as exceptions; this node takes at most \(maximumRouteExceptions)")
            }
        }

        /// The subscriptions of a Subscribe, checked as this node serves them.
        private func subscriptionSet(_ subscriptions: [SessionMessage.Subscription]) throws(SyncError) -> SubscriptionSet {
            var set = SubscriptionSet()
            for s in subscriptions {
                guard s.query.utf8.count <= configuration.maximumQueryLength else {
                    throw SyncError(
                        .invalidQuery,
                        "subscription query of \(s.query.utf8.count) bytes refused: this node takes queries of at most \(configuration.maximumQueryLength) bytes (--max-query-length)"
                    )
                }
                do {
                    try set.add(query: s.query, arguments: try s.arguments.get())
                } catch {
                    throw SyncError(.invalidQuery, "subscription '\(s.query)' rejected: \(error)")
                }
            }
            return set
        }

        mutating func acknowledged(_ ack: SessionMessage.Ack) throws(SyncError) -> [Action] {
            switch ack {
            case .heldOnly(let held, let refused):
                guard configuration.hasRoutes else {
                    throw SyncError(.protocolViolation, "Ack with held_only in a version \(configuration.version) session")
                }
                guard refused.count <= SessionMessage.Refusal.perAck else {
                    throw SyncError(
                        .protocolViolation, "Ack refuses \(refused.count) transactions; an Ack refuses at most \(SessionMessage.Refusal.perAck)")
                }
                streaming { $0.resolveOffers(heldThrough: held) }
                return refused.isEmpty ? [] : [.peerRefused(refused, retold: true)]
            case .batch(let through, let held, let refused):
                guard refused.count <= SessionMessage.Refusal.perAck else {
                    throw SyncError(
                        .protocolViolation, "Ack refuses \(refused.count) transactions; an Ack refuses at most \(SessionMessage.Refusal.perAck)")
                }
                let actions = try streaming { stream throws(SyncError) in try stream.acknowledged(through: through, heldThrough: held) }
                guard let actions else { throw SyncError.unexpectedAck(through) }
                return refused.isEmpty ? actions : actions + [.peerRefused(refused, retold: false)]
            }
        }

        /// The peer's RouteUpdate: pages read from the next on follow it; the stream
        /// and its cursor go on as they are.
        mutating func routeUpdated(to routes: RouteTable.Routes) throws(SyncError) -> [Action] {
            guard configuration.hasRoutes else {
                throw SyncError(.protocolViolation, "RouteUpdate in a version \(configuration.version) session")
            }
            try Self.check(routes)
            if case .awaitingSubscribe(var waiting) = state {
                waiting.routes = routes
                state = .awaitingSubscribe(waiting)
            } else {
                streaming { $0.routes = routes }
            }
            return [.peerRouted(routes)]
        }
    }
}

extension SessionStateMachine.Publisher {
    typealias Action = SessionStateMachine.Action

    /// The stream of the peer's current Subscribe, and what outlives it in the
    /// session (the log's end, page tickets, the fitter, Acks still owed).
    struct StreamingState: Sendable {
        let configuration: SessionStateMachine.Configuration
        // The peer's Subscribe.
        let subscriptions: SubscriptionSet
        let collections: Set<String>
        let filter: SubscriptionFilter
        /// The generation of the Subscribe the stream answers (one that continued it, the latest).
        var generation: UInt64
        let resumeAfter: UInt64
        /// Whether the Subscribe asked for the peer's own transactions (it evicted):
        /// otherwise pages leave them out, and echoes of what it sent (PROTOCOL.md §8.3).
        let includesOwn: Bool
        /// The routes the peer asked for (version 4); nil: every origin eager.
        var routes: RouteTable.Routes?

        var progress = SessionStateMachine.Publisher.Progress.firstPage
        var logEnd: UInt64
        var sentThrough: UInt64
        /// The highest sequence the peer acknowledged, or that needed no batch.
        var acknowledged: UInt64
        var pageTicket: Int
        /// The ticket of the page being read; nil: none is.
        var pageInFlight: Int?
        /// The log's end when that page was asked for: every row through it was committed
        /// before the read began, so a page that finds no row after `sentThrough` says
        /// the log holds none through there (a log whose end has no row: a hub's log
        /// moved above what a device may hold while it was empty).
        var pageInFlightEnd: UInt64 = 0
        var continuing: Set<TransactionID> = []
        /// Lazy transactions offered in this stream whose rows go on.
        var offersOpen: Set<TransactionID> = []
        /// Where each offer sent under this Subscribe begins in the log, in order, until
        /// the peer says it holds through it (`Ack.held_through`): the peer holds nothing
        /// from the first of them on, whatever it acknowledged.
        var unresolvedOffers: [UInt64] = []
        /// `through_sequence` of each batch sent under this Subscribe and not acknowledged.
        var unacknowledged: [UInt64] = []
        /// The same, of batches of earlier Subscribes.
        var earlierUnacknowledged: [UInt64]
        /// The log's end was passed with nothing for the peer since the last batch: an
        /// empty batch to move its cursor is owed, sent at the next tick.
        var cursorMoveOwed = false
        /// Cuts pages into batches the peer can take.
        var fitter: BatchFitter
        /// Batches of a page cut in several, waiting for room in the window.
        var outbox: [OutboundBatch] = []

        init(
            _ request: SessionMessage.Subscribe, subscriptions: SubscriptionSet, routes: RouteTable.Routes?, logEnd: UInt64,
            pageTicket: Int, earlierUnacknowledged: [UInt64], fitter: BatchFitter, configuration: SessionStateMachine.Configuration
        ) {
            self.configuration = configuration
            self.subscriptions = subscriptions
            self.collections = subscriptions.collections
            self.filter = subscriptions.filter
            self.generation = request.generation
            self.resumeAfter = request.resumeAfter
            self.includesOwn = request.includeOwnTransactions
            self.routes = routes
            self.logEnd = logEnd
            self.sentThrough = request.resumeAfter
            self.acknowledged = request.resumeAfter
            self.pageTicket = pageTicket
            self.earlierUnacknowledged = earlierUnacknowledged
            self.fitter = fitter
        }

        /// How far the peer holds this node's log under its current Subscribe: what it
        /// acknowledged, but below the first offer it has not said it resolved.
        var heldByPeer: UInt64 {
            guard let first = unresolvedOffers.first else { return acknowledged }
            return min(acknowledged, first &- 1)
        }

        /// Reads the next page when the peer wants something, the window has room, no
        /// page is being read, and the log has rows not yet sent.
        mutating func readIfPossible() -> [Action] {
            guard !subscriptions.isEmpty, pageInFlight == nil, outbox.isEmpty,
                unacknowledged.count < configuration.maximumBatchesInFlight, logEnd > sentThrough
            else { return [] }
            pageTicket += 1
            pageInFlight = pageTicket
            pageInFlightEnd = logEnd
            return [
                .readPage(
                    SessionStateMachine.PageRequest(
                        after: sentThrough, limit: configuration.batchSize,
                        // About a frame of the peer's values a page (at least a row).
                        byteLimit: min(configuration.batchBytes, fitter.limit),
                        subscriptions: subscriptions,
                        excludingOrigin: includesOwn ? nil : configuration.peer,
                        continuing: continuing, resuming: progress == .firstPage && resumeAfter > 0, ticket: pageTicket,
                        routes: routes, offersOpen: offersOpen))
            ]
        }

        mutating func pageRead(_ page: ChangeLogPage, ticket: Int) -> [Action] {
            guard ticket == pageInFlight else { return readIfPossible() }  // read under an older Subscribe
            pageInFlight = nil
            if progress == .firstPage { progress = .nothingSent }
            var page = page
            if page.pieces.isEmpty, page.offered.isEmpty, page.through <= sentThrough, pageInFlightEnd > sentThrough {
                // No row after the cursor through the end known when the read began: passed
                // with nothing for the peer, rather than read again for ever.
                page.through = pageInFlightEnd
            }
            guard page.through > sentThrough else { return readIfPossible() }
            let before = sentThrough
            sentThrough = page.through
            for piece in page.pieces {
                if piece.isLast { continuing.remove(piece.id) } else { continuing.insert(piece.id) }
            }
            offersOpen = page.offersOpen
            unresolvedOffers += page.offered.map(\.logSequence)
            let (receiver, encoding, generation) = (filter, configuration.deltaEncoding, generation)
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
            if groups.isEmpty, sentThrough < logEnd || progress == .sent {
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
        }

        /// Passes over a commit's rows without reading them when the page would be empty:
        /// they follow straight on everything read already, nothing is being read or is
        /// split across pages, and the peer wants none of them (no collection it subscribes
        /// to, or only its own transactions and echoes while it asks for neither). The empty
        /// batch that moves its cursor is then owed (`.tick`).
        mutating func passOver(through: UInt64, after: UInt64, collections: Set<String>, echoes: Bool) -> Bool {
            guard !subscriptions.isEmpty, progress != .firstPage, pageInFlight == nil, outbox.isEmpty, continuing.isEmpty,
                after == logEnd, sentThrough == logEnd, through > after
            else { return false }
            guard collections.isDisjoint(with: self.collections) || (echoes && !includesOwn) else { return false }
            logEnd = through
            sentThrough = through
            if unacknowledged.isEmpty { acknowledged = max(acknowledged, sentThrough) }
            cursorMoveOwed = true
            return true
        }

        /// The peer acknowledged the batch through `through`: the window frees up to it.
        ///
        /// The peer acknowledges batches in the order they were sent, so while batches of
        /// earlier Subscribes wait for theirs, an Ack is theirs: a restarted stream may send
        /// a batch through the same sequence as an earlier one, and taking the earlier's Ack
        /// for it would count the new batch durable before it is, then refuse its own Ack.
        mutating func acknowledged(through: UInt64, heldThrough: UInt64) throws(SyncError) -> [Action] {
            if let i = earlierUnacknowledged.firstIndex(of: through) {
                earlierUnacknowledged.removeSubrange(...i)
            } else if let i = unacknowledged.firstIndex(of: through) {
                earlierUnacknowledged.removeAll()
                if configuration.hasRoutes { resolveOffers(heldThrough: heldThrough) }
                unacknowledged.removeSubrange(...i)
                // With nothing left in flight, every row through `sentThrough` was either
                // acknowledged or had nothing for the peer.
                acknowledged = max(acknowledged, unacknowledged.isEmpty && outbox.isEmpty ? sentThrough : through)
            } else {
                throw SyncError.unexpectedAck(through)
            }
            return sendFromOutbox() + readIfPossible()
        }

        /// A batch through `through` (by default `sentThrough`) under the peer's current Subscribe.
        private mutating func batch(_ pieces: [TransactionPiece], through: UInt64? = nil) -> OutboundBatch {
            progress = .sent
            cursorMoveOwed = false
            return OutboundBatch(
                pieces: pieces, receiver: filter, encoding: configuration.deltaEncoding, throughSequence: through ?? sentThrough,
                subscribeGeneration: generation)
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
        mutating func sendOwedCursorMove() -> [Action] {
            guard cursorMoveOwed, pageInFlight == nil, outbox.isEmpty,
                unacknowledged.count < configuration.maximumBatchesInFlight
            else { return [] }
            outbox.append(batch([]))
            return sendFromOutbox()
        }

        /// The peer holds through `heldThrough`: the offers it covers are resolved.
        mutating func resolveOffers(heldThrough: UInt64) {
            let resolved = unresolvedOffers.prefix { $0 <= heldThrough }.count
            if resolved > 0 { unresolvedOffers.removeFirst(resolved) }
        }
    }
}

extension SyncError {
    /// An Ack that matches no batch sent and not acknowledged.
    static func unexpectedAck(_ through: UInt64) -> SyncError {
        SyncError(.protocolViolation, "Ack for sequence \(through), which no unacknowledged DeltaBatch carries")
    }
}

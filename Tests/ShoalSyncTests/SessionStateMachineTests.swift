import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalWire
import Testing

/// The sync session state machine with no transport: events in, actions out.
@Suite struct SessionStateMachineTests {
    static let peer = SiteID(0xB)
    static let origin = SiteID(0xA)

    static func machine(window: Int = 2) -> SessionStateMachine {
        SessionStateMachine(
            configuration: .init(
                peer: peer, keepaliveInterval: .seconds(5), idleTimeout: .seconds(30), batchSize: 100,
                maximumBatchesInFlight: window, maximumBatchesPending: 3))
    }

    static func set(_ queries: String...) -> SubscriptionSet {
        var s = SubscriptionSet()
        for q in queries { try! s.add(query: q) }
        return s
    }

    static let cars = set("SELECT * FROM cars")

    static func subscribe(_ set: SubscriptionSet, generation: UInt64, resumeAfter: UInt64 = 0, includeOwn: Bool = false)
        -> SessionMessage
    {
        .subscribe(
            SessionMessage.Subscribe(
                subscriptions: set.entries.map { SessionMessage.Subscription(id: "", query: $0.query) }, resumeAfter: resumeAfter,
                generation: generation, includeOwnTransactions: includeOwn))
    }

    static func piece(_ seq: UInt64, collection: String = "cars") -> TransactionPiece {
        let id = TransactionID(origin: origin, sequence: seq)
        return TransactionPiece(
            id: id, deltaCount: 1, documentCount: 1, collections: [CollectionCount(collection: collection, documents: 1, deltas: 1)],
            deltas: [
                Delta(
                    collection: collection, documentID: "\"d\(seq)\"", field: "f", valueJSON: "1",
                    timestamp: HybridTimestamp(rawValue: seq), transaction: id, index: 0, count: 1)
            ], documentDeltaCounts: [DocumentRef(collection: collection, id: "\"d\(seq)\""): 1], isLast: true)
    }

    /// A DeltaBatch received, as the session reads it: its payload.
    static func batch(_ pieces: [TransactionPiece], through: UInt64, generation: UInt64, for receiver: SubscriptionSet = cars)
        -> SessionStateMachine.Event
    {
        let (wire, filters) = PieceCodec.encode(pieces, receiver: receiver.filter)
        var b = Shoal_V1_DeltaBatch()
        b.pieces = wire
        b.filters = filters
        b.throughSequence = through
        b.subscribeGeneration = generation
        return SessionStateMachine.Event(received: .deltaBatch(b))
    }

    static func ack(_ through: UInt64) -> SessionMessage { .ack(.batch(through: through)) }

    /// What the actions send, in its wire form.
    static func sent(_ actions: [SessionStateMachine.Action]) -> [WireMessage] {
        actions.compactMap {
            switch $0 {
            case .send(let m): return m.wire
            case .sendBatch(let batch): return .deltaBatch(batch.message)
            default: return nil
            }
        }
    }

    static func closed(_ actions: [SessionStateMachine.Action]) -> SyncError?? {
        for case .close(let e) in actions { return .some(e) }
        return nil
    }

    static func pageRequest(_ actions: [SessionStateMachine.Action]) -> SessionStateMachine.PageRequest? {
        for case .readPage(let r) in actions { return r }
        return nil
    }

    // MARK: Subscriber

    @Test func subscribesOneAtATimeWithRisingGenerations() {
        var m = Self.machine()
        let first = m.handle(.ownSubscriptionsChanged(Self.cars, fromStart: false), now: 0)
        guard case .readCursor(let set, false)? = first.first else {
            Issue.record("expected a cursor read, got \(first)")
            return
        }
        #expect(set == Self.cars)
        // Another change while the cursor is read: it waits its turn, and carries "from start" along.
        let wider = Self.set("SELECT * FROM cars", "SELECT * FROM boats")
        #expect(m.handle(.ownSubscriptionsChanged(wider, fromStart: true), now: 1).isEmpty)
        let actions = m.handle(.cursorRead(Self.cars, resumeAfter: 7), now: 2)
        guard case .send(.subscribe(let s))? = actions.first, case .readCursor(let next, true)? = actions.last else {
            Issue.record("expected Subscribe then the next cursor read, got \(actions)")
            return
        }
        #expect(s.generation == 1 && s.resumeAfter == 7 && s.subscriptions.map(\.query) == ["SELECT * FROM cars"])
        #expect(next == wider)
        guard case .send(.subscribe(let s2))? = m.handle(.cursorRead(wider, resumeAfter: 0), now: 3).first else {
            Issue.record("expected the second Subscribe")
            return
        }
        #expect(s2.generation == 2 && s2.subscriptions.count == 2)
        #expect(m.latestGeneration == 2)
    }

    /// A neighbour's interest changes what a node asks of some peers only: a set equal
    /// to the one last sent sends nothing, so cursors and streams stay where they are.
    @Test func anUnchangedSetSendsNoSubscribe() {
        var m = Self.machine()
        _ = m.handle(.ownSubscriptionsChanged(Self.cars, fromStart: false), now: 0)
        _ = m.handle(.cursorRead(Self.cars, resumeAfter: 3), now: 0)
        #expect(m.handle(.ownSubscriptionsChanged(Self.cars, fromStart: false), now: 1).isEmpty)
        #expect(m.latestGeneration == 1)
        // The same set queued behind a cursor read of itself is dropped too.
        let wider = Self.set("SELECT * FROM cars", "SELECT * FROM boats")
        guard case .readCursor? = m.handle(.ownSubscriptionsChanged(wider, fromStart: false), now: 2).first else {
            Issue.record("a wider set reads its cursor")
            return
        }
        #expect(m.handle(.ownSubscriptionsChanged(wider, fromStart: false), now: 2).isEmpty)
        let sent = m.handle(.cursorRead(wider, resumeAfter: 0), now: 3)
        #expect(sent.count == 1 && Self.sent(sent).count == 1, "one Subscribe, no second cursor read: \(sent)")
        // After EVICT the same set is asked for again from the start.
        guard case .readCursor(_, true)? = m.handle(.ownSubscriptionsChanged(wider, fromStart: true), now: 4).first else {
            Issue.record("EVICT resubscribes whatever the set")
            return
        }
    }

    @Test func batchesAreSubmittedAndAcknowledgedInOrderOnceDurable() {
        var m = Self.machine()
        _ = m.handle(.ownSubscriptionsChanged(Self.cars, fromStart: false), now: 0)
        _ = m.handle(.cursorRead(Self.cars, resumeAfter: 0), now: 0)
        let one = m.handle(Self.batch([Self.piece(1)], through: 10, generation: 1), now: 1)
        guard case .submit(let b1)? = one.first else {
            Issue.record("expected a submit, got \(one)")
            return
        }
        #expect(b1.cursorKey == Self.cars.key && b1.through == 10 && b1.pieces == [Self.piece(1)])
        let two = m.handle(Self.batch([], through: 20, generation: 1), now: 2)
        guard case .submit(let b2)? = two.first else {
            Issue.record("expected a submit")
            return
        }
        #expect(b2.pieces.isEmpty && b2.through == 20)
        // Nothing is acknowledged before it is durable, then each in order.
        #expect(Self.sent(m.handle(.batchDurable(), now: 3)) == [Self.ack(10).wire])
        #expect(Self.sent(m.handle(.batchDurable(), now: 4)) == [Self.ack(20).wire])
        #expect(m.handle(.batchDurable(), now: 5).isEmpty, "a spurious completion acknowledges nothing")
    }

    /// A batch of a Subscribe that a new set replaced is applied but files no cursor:
    /// the new set's stream began at the cursor read for it, and the old set's batches
    /// are not that set's progress. (A Subscribe that only `continues` the stream is
    /// another matter: `SessionInterestTests.aContinuedStreamFilesItsEarlierBatchesAndARestartedOneDoesNot`.)
    @Test func aBatchOfAnEarlierSubscribeRecordsNoCursor() {
        var m = Self.machine()
        _ = m.handle(.cursorRead(Self.cars, resumeAfter: 0), now: 0)
        let wider = Self.set("SELECT * FROM cars", "SELECT * FROM boats")
        _ = m.handle(.cursorRead(wider, resumeAfter: 0), now: 0)
        let old = m.handle(Self.batch([Self.piece(1)], through: 5, generation: 1), now: 1)
        guard case .submit(let b)? = old.first else {
            Issue.record("expected a submit")
            return
        }
        #expect(b.cursorKey == nil, "applied, but filed under no set")
        let new = m.handle(Self.batch([Self.piece(2, collection: "boats")], through: 7, generation: 2), now: 2)
        guard case .submit(let n)? = new.first else {
            Issue.record("expected a submit")
            return
        }
        #expect(n.cursorKey == wider.key)
    }

    /// Boats were not part of generation 1: a batch of it carrying boats breaks the protocol.
    @Test func aBatchOfAnEarlierSubscribeIsReadAgainstItsOwnSet() {
        var m = Self.machine()
        _ = m.handle(.cursorRead(Self.cars, resumeAfter: 0), now: 0)
        _ = m.handle(.cursorRead(Self.set("SELECT * FROM cars", "SELECT * FROM boats"), resumeAfter: 0), now: 0)
        let wrong = m.handle(Self.batch([Self.piece(2, collection: "boats")], through: 6, generation: 1), now: 2)
        #expect(Self.closed(wrong)??.code == .protocolViolation)
    }

    @Test func brokenBatchesCloseTheSession() {
        func fresh() -> SessionStateMachine {
            var m = Self.machine()
            _ = m.handle(.cursorRead(Self.cars, resumeAfter: 0), now: 0)
            return m
        }
        var m = fresh()
        let future = m.handle(Self.batch([], through: 1, generation: 2), now: 1)
        #expect(Self.closed(future)??.message == "DeltaBatch answers Subscribe generation 2, but the latest sent is 1")
        m = fresh()
        let boats = m.handle(Self.batch([Self.piece(1, collection: "boats")], through: 1, generation: 1), now: 1)
        #expect(
            Self.closed(boats)??.message
                == "DeltaBatch: transaction 000000000000000a:1 carries collection 'boats', which this node did not subscribe to")
        // Version 1's flat transactions, refused at every later version, which the message names.
        var v1 = Shoal_V1_DeltaBatch()
        v1.transactions = [Shoal_V1_TransactionDeltas()]
        for version: UInt32 in [2, 3] {
            var old = SessionStateMachine(configuration: .init(peer: Self.peer, version: version))
            _ = old.handle(.cursorRead(Self.cars, resumeAfter: 0), now: 0)
            let refused = Self.closed(old.handle(SessionStateMachine.Event(received: .deltaBatch(v1)), now: 1))
            #expect(refused??.code == .protocolViolation)
            #expect(refused??.message == "DeltaBatch: version 1 transactions in a version \(version) session")
        }
        m = fresh()
        var bad = Self.piece(1)
        bad.deltas[0].valueJSON = "{not json"
        #expect(Self.closed(m.handle(Self.batch([bad], through: 1, generation: 1), now: 1))??.code == .executionFailed)
        // A peer that floods batches without waiting for Acks is cut off.
        m = fresh()
        for i in 1...3 { _ = m.handle(Self.batch([], through: UInt64(i), generation: 1), now: 1) }
        let flood = m.handle(Self.batch([], through: 4, generation: 1), now: 1)
        #expect(Self.closed(flood)??.message == "more than 3 DeltaBatches sent without waiting for an Ack")
        #expect(m.isClosed && m.handle(.tick, now: 99_000_000).isEmpty, "a closed machine does nothing more")
    }

    // MARK: Publisher

    /// A Subscribe that resumes, or says it holds this node's transactions, past 2^62
    /// (PROTOCOL.md §8.2): no log reaches so far, and the node, moving its log above it
    /// and a margin, trapped converting it to its stores' signed 64 bits, so one peer's
    /// frame ended the whole node. The session ends with a protocol violation instead,
    /// asking the store nothing; 2^62 itself is a cursor like any other.
    @Test func aSubscribeResumingPastWhatAnyLogReachesEndsTheSession() {
        for resumeAfter in [UInt64.max, OriginHistory.maximumSequence + 1] {
            var m = Self.machine()
            let actions = m.handle(.received(Self.subscribe(Self.cars, generation: 1, resumeAfter: resumeAfter)), now: 1)
            #expect(Self.closed(actions)??.code == .protocolViolation, "\(resumeAfter): \(actions)")
            #expect(!actions.contains { if case .checkLogEnd = $0 { true } else if case .checkHistory = $0 { true } else { false } })
        }
    }

    /// Numbers past any the node gives without being told to (`OriginHistory.believable`)
    /// are served on but not acted on: moving the log above them would move it past what
    /// a Subscribe may carry, and a peer holding this node's transactions through any
    /// number (a third node may have forged one) is no violation.
    @Test func numbersPastWhatANodeGivesAreNotActedOn() {
        func checks(_ actions: [SessionStateMachine.Action]) -> (log: UInt64?, history: UInt64?, warnings: Int) {
            var found: (log: UInt64?, history: UInt64?, warnings: Int) = (nil, nil, 0)
            for action in actions {
                switch action {
                case .checkLogEnd(let after): found.log = after
                case .checkHistory(let held): found.history = held.through
                case .warn: found.warnings += 1
                default: break
                }
            }
            return found
        }
        for (resumeAfter, through) in [
            (OriginHistory.maximumSequence, UInt64.max), (OriginHistory.believable + 1, OriginHistory.believable + 1),
        ] {
            var m = Self.machine()
            var subscribe = SessionMessage.Subscribe(
                subscriptions: [SessionMessage.Subscription(id: "", query: "SELECT * FROM cars")], resumeAfter: resumeAfter, generation: 1)
            subscribe.originHistory = OriginHistory(through: through, index: 0, timestamp: 1)
            let actions = m.handle(.received(.subscribe(subscribe)), now: 1)
            #expect(Self.closed(actions) == nil, "\(resumeAfter), \(through): \(actions)")
            let found = checks(actions)
            #expect(found.log == nil && found.history == nil && found.warnings == 2, "\(resumeAfter), \(through): \(actions)")
        }
        var m = Self.machine()
        var edge = SessionMessage.Subscribe(
            subscriptions: [SessionMessage.Subscription(id: "", query: "SELECT * FROM cars")], resumeAfter: OriginHistory.believable,
            generation: 1)
        edge.originHistory = OriginHistory(through: OriginHistory.believable, index: 0, timestamp: 1)
        let actions = m.handle(.received(.subscribe(edge)), now: 1)
        let found = checks(actions)
        #expect(Self.closed(actions) == nil && found.warnings == 0)
        #expect(found.log == OriginHistory.believable && found.history == OriginHistory.believable, "\(actions)")
    }

    /// A DeltaBatch naming a number stores cannot hold (above 2^63 - 1) as its log's
    /// end or as an offer ends the session: a SQLite node trapped converting either as
    /// it recorded the cursor or read the offer's state.
    @Test func aBatchThroughOrOfferingPastWhatStoresHoldEndsTheSession() {
        var m = Self.machine()
        _ = m.handle(.ownSubscriptionsChanged(Self.cars, fromStart: false), now: 0)
        _ = m.handle(.cursorRead(Self.cars, resumeAfter: 0), now: 1)
        let through = m.handle(Self.batch([], through: UInt64.max, generation: 1), now: 2)
        #expect(Self.closed(through)??.message.contains("above 2^63 - 1") == true, "\(through)")
        var offer = Shoal_V1_Offer()
        offer.originSite = 1
        offer.originSequence = TransactionID.maximumSequence + 1
        offer.logSequence = 1
        var batch = Shoal_V1_DeltaBatch()
        batch.throughSequence = 1
        batch.offered = [offer]
        func version4() -> SessionStateMachine {
            SessionStateMachine(
                configuration: .init(
                    peer: Self.peer, keepaliveInterval: .seconds(5), idleTimeout: .seconds(30), batchSize: 100, maximumBatchesInFlight: 2,
                    maximumBatchesPending: 3, version: 4))
        }
        var n = version4()
        let offered = n.handle(SessionStateMachine.Event(received: .deltaBatch(batch)), now: 1)
        #expect(Self.closed(offered)??.message.contains("above 2^63 - 1") == true, "\(offered)")
        offer.originSequence = TransactionID.maximumSequence
        batch.offered = [offer]
        var o = version4()
        #expect(Self.closed(o.handle(SessionStateMachine.Event(received: .deltaBatch(batch)), now: 1)) == nil, "the largest is taken")
    }

    @Test func thePublisherReadsPagesWithinTheWindow() {
        var m = Self.machine(window: 2)
        #expect(m.handle(.logAdvanced(50), now: 0).isEmpty, "nothing asked for yet")
        let subscribed = m.handle(.received(Self.subscribe(Self.cars, generation: 1)), now: 1)
        guard case .peerSubscribed(let set, nil)? = subscribed.first, let r1 = Self.pageRequest(subscribed) else {
            Issue.record("expected peerSubscribed and a page read, got \(subscribed)")
            return
        }
        #expect(set == Self.cars && r1.after == 0 && r1.excludingOrigin == Self.peer && !r1.resuming, "not even from 0")
        #expect(Self.pageRequest(m.handle(.logAdvanced(60), now: 2)) == nil, "one page read at a time")
        let page1 = ChangeLogPage(pieces: [Self.piece(1)], through: 20)
        let after1 = m.handle(.pageRead(page1, ticket: r1.ticket), now: 3)
        guard case .deltaBatch(let b1)? = Self.sent(after1).first, let r2 = Self.pageRequest(after1) else {
            Issue.record("expected a batch and the next read, got \(after1)")
            return
        }
        #expect(b1.throughSequence == 20 && b1.subscribeGeneration == 1 && b1.pieces.count == 1 && r2.after == 20)
        let after2 = m.handle(.pageRead(ChangeLogPage(pieces: [Self.piece(2)], through: 40), ticket: r2.ticket), now: 4)
        #expect(Self.sent(after2).count == 1 && Self.pageRequest(after2) == nil, "the window of 2 is full")
        #expect(m.inFlight == 2)
        let acked = m.handle(.received(Self.ack(20)), now: 5)
        #expect(Self.pageRequest(acked)?.after == 40)
        // An Ack for a batch never sent breaks the protocol.
        let bogus = m.handle(.received(Self.ack(33)), now: 6)
        #expect(Self.closed(bogus)??.message == "Ack for sequence 33, which no unacknowledged DeltaBatch carries")
    }

    /// A subscriber's own transactions go back to it when it asks, from 0 or from the
    /// cursor of such a stream that stopped part way (it evicted, or its store went back).
    @Test func ownTransactionsGoBackWhenAskedForFromAnyCursor() {
        var m = Self.machine()
        _ = m.handle(.logAdvanced(50), now: 0)
        let asked = Self.pageRequest(m.handle(.received(Self.subscribe(Self.cars, generation: 1, includeOwn: true)), now: 1))
        #expect(asked?.excludingOrigin == nil)
        let resumed = Self.pageRequest(
            m.handle(.received(Self.subscribe(Self.cars, generation: 2, resumeAfter: 5, includeOwn: true)), now: 2))
        #expect(resumed?.excludingOrigin == nil, "a stream that stopped part way resumes with them")
        let plain = Self.pageRequest(m.handle(.received(Self.subscribe(Self.cars, generation: 3, resumeAfter: 5)), now: 3))
        #expect(plain?.excludingOrigin == Self.peer, "not asked for: it holds them")
    }

    /// The subscriber keeps the cursor of a stream with its own transactions apart, and
    /// once the peer vouches it caught up under that Subscribe (a Ping with freshness
    /// after a batch answering it), the cursor becomes the set's and asking stops.
    @Test func aStreamWithTheSubscribersOwnTransactionsIsKeptApartUntilCaughtUp() {
        var s = Self.machine()
        _ = s.handle(.ownSubscriptionsChanged(Self.cars, fromStart: true), now: 0)
        guard case .send(.subscribe(let resumed))? = s.handle(.cursorRead(Self.cars, resumeAfter: 7, includeOwn: true), now: 1).first
        else {
            Issue.record("expected a Subscribe")
            return
        }
        #expect(resumed.includeOwnTransactions && resumed.resumeAfter == 7)
        var ping = SessionMessage.Ping(nonce: 1, sentAtMicros: 0, freshness: [Freshness.Entry(site: Self.peer, throughMillis: 1_000)])
        let early = s.handle(.received(.ping(ping)), now: 2)
        #expect(!early.contains { if case .ownTransactionsBack = $0 { true } else { false } }, "no batch of that Subscribe yet")
        let submitted = s.handle(Self.batch([Self.piece(8)], through: 8, generation: 1), now: 3)
        guard case .submit(let inbound)? = submitted.first else {
            Issue.record("expected the batch submitted")
            return
        }
        #expect(inbound.cursorKey == SubscriptionSet.refillKey(Self.cars.key))
        _ = s.handle(.batchDurable(), now: 4)
        ping.nonce = 2
        let caughtUp = s.handle(.received(.ping(ping)), now: 5)
        let back = caughtUp.compactMap { if case .ownTransactionsBack(let key) = $0 { key } else { nil } }
        #expect(back == [Self.cars.key])
        let next = s.handle(Self.batch([Self.piece(9)], through: 9, generation: 1), now: 6)
        guard case .submit(let later)? = next.first else {
            Issue.record("expected the batch submitted")
            return
        }
        #expect(later.cursorKey == Self.cars.key, "recorded under the set's own cursor from then on")
        #expect(s.handle(.received(.ping(ping)), now: 7).allSatisfy { if case .ownTransactionsBack = $0 { false } else { true } })
        // A set with no refill cursor, resumed above 0, does not ask.
        _ = s.handle(.ownSubscriptionsChanged(Self.set("SELECT * FROM boats"), fromStart: false), now: 8)
        guard
            case .send(.subscribe(let plain))? = s.handle(
                .cursorRead(Self.set("SELECT * FROM boats"), resumeAfter: 9, includeOwn: false), now: 9
            ).first
        else {
            Issue.record("expected a second Subscribe")
            return
        }
        #expect(!plain.includeOwnTransactions)
    }

    @Test func aNewerSubscribeRestartsAndDropsPagesReadBefore() {
        var m = Self.machine(window: 4)
        _ = m.handle(.logAdvanced(100), now: 0)
        let r1 = Self.pageRequest(m.handle(.received(Self.subscribe(Self.cars, generation: 1)), now: 0))!
        let first = m.handle(.pageRead(ChangeLogPage(pieces: [Self.piece(1)], through: 30), ticket: r1.ticket), now: 1)
        let r2 = Self.pageRequest(first)!
        // A crossing, older Subscribe is ignored; a newer one restarts from its resume point.
        #expect(m.handle(.received(Self.subscribe(Self.cars, generation: 1)), now: 2).isEmpty)
        let wider = Self.set("SELECT * FROM cars", "SELECT * FROM boats")
        let restarted = m.handle(.received(Self.subscribe(wider, generation: 2, resumeAfter: 10)), now: 3)
        let r3 = Self.pageRequest(restarted)!
        #expect(r3.after == 10 && r3.subscriptions == wider && r3.excludingOrigin == Self.peer && r3.resuming)
        // The page read under generation 1 is dropped.
        #expect(m.handle(.pageRead(ChangeLogPage(pieces: [Self.piece(2)], through: 60), ticket: r2.ticket), now: 4).isEmpty)
        let sent = m.handle(.pageRead(ChangeLogPage(pieces: [], through: 100), ticket: r3.ticket), now: 5)
        guard case .deltaBatch(let b)? = Self.sent(sent).first else {
            Issue.record("expected a batch, got \(sent)")
            return
        }
        #expect(b.subscribeGeneration == 2 && b.throughSequence == 100 && b.pieces.isEmpty, "an empty batch still moves the cursor")
        // A late Ack for the generation-1 batch is still valid.
        #expect(Self.closed(m.handle(.received(Self.ack(30)), now: 6)) == nil)
        #expect(Self.closed(m.handle(.received(Self.ack(100)), now: 7)) == nil)
    }

    @Test func piecesThatContinueAcrossPagesAreRemembered() {
        var m = Self.machine(window: 4)
        _ = m.handle(.logAdvanced(100), now: 0)
        let r1 = Self.pageRequest(m.handle(.received(Self.subscribe(Self.cars, generation: 1)), now: 0))!
        var open = Self.piece(1)
        open.isLast = false
        let r2 = Self.pageRequest(m.handle(.pageRead(ChangeLogPage(pieces: [open], through: 50), ticket: r1.ticket), now: 1))!
        #expect(r2.continuing == [open.id])
        let r3 = Self.pageRequest(m.handle(.pageRead(ChangeLogPage(pieces: [Self.piece(1)], through: 60), ticket: r2.ticket), now: 2))!
        #expect(r3.continuing.isEmpty)
        // A page with nothing for the peer, before the end of the log, is not worth a frame.
        let skipped = m.handle(.pageRead(ChangeLogPage(pieces: [], through: 80), ticket: r3.ticket), now: 3)
        #expect(Self.sent(skipped).isEmpty && Self.pageRequest(skipped)?.after == 80)
    }

    @Test func anEmptyPageAtTheLogEndMovesTheCursorAtTheNextTick() {
        var m = Self.machine(window: 4)
        _ = m.handle(.logAdvanced(10), now: 0)
        let r1 = Self.pageRequest(m.handle(.received(Self.subscribe(Self.cars, generation: 1)), now: 0))!
        #expect(Self.sent(m.handle(.pageRead(ChangeLogPage(pieces: [Self.piece(1)], through: 10), ticket: r1.ticket), now: 1)).count == 1)
        #expect(Self.closed(m.handle(.received(Self.ack(10)), now: 2)) == nil)
        // Commits the peer does not want: read, but no frame for each.
        let r2 = Self.pageRequest(m.handle(.logAdvanced(20), now: 3))!
        #expect(Self.sent(m.handle(.pageRead(ChangeLogPage(pieces: [], through: 20), ticket: r2.ticket), now: 4)).isEmpty)
        #expect(m.lag == 0 && m.peerPosition == 20, "rows with nothing for the peer need no acknowledgement")
        let r3 = Self.pageRequest(m.handle(.logAdvanced(30), now: 5))!
        #expect(Self.sent(m.handle(.pageRead(ChangeLogPage(pieces: [], through: 30), ticket: r3.ticket), now: 6)).isEmpty)
        // The next tick sends one empty batch, through the log's end.
        let ticked = Self.sent(m.handle(.tick, now: 1_000_000))
        guard ticked.count == 1, case .deltaBatch(let moved) = ticked[0] else {
            Issue.record("expected one batch at the tick, got \(ticked)")
            return
        }
        #expect(moved.pieces.isEmpty && moved.throughSequence == 30 && moved.subscribeGeneration == 1)
        #expect(Self.sent(m.handle(.tick, now: 2_000_000)).isEmpty, "owed once")
        #expect(Self.closed(m.handle(.received(Self.ack(30)), now: 2_000_001)) == nil)
        // A batch with pieces moves the cursor itself: nothing is owed after it.
        let r4 = Self.pageRequest(m.handle(.logAdvanced(40), now: 2_000_002))!
        #expect(Self.sent(m.handle(.pageRead(ChangeLogPage(pieces: [], through: 40), ticket: r4.ticket), now: 2_000_003)).isEmpty)
        let r5 = Self.pageRequest(m.handle(.logAdvanced(50), now: 2_000_004))!
        let carried = Self.sent(m.handle(.pageRead(ChangeLogPage(pieces: [Self.piece(5)], through: 50), ticket: r5.ticket), now: 2_000_005))
        guard case .deltaBatch(let batch)? = carried.first else {
            Issue.record("expected a batch")
            return
        }
        #expect(batch.throughSequence == 50 && batch.pieces.count == 1)
        #expect(Self.sent(m.handle(.tick, now: 3_000_000)).isEmpty)
    }

    /// A machine whose peer subscribed to cars and has read (and had acknowledged) the log through 10.
    static func caughtUp(includeOwn: Bool = false) -> SessionStateMachine {
        var m = machine(window: 4)
        _ = m.handle(.logAdvanced(10), now: 0)
        let r = pageRequest(m.handle(.received(subscribe(cars, generation: 1, includeOwn: includeOwn)), now: 0))!
        _ = m.handle(.pageRead(ChangeLogPage(pieces: [piece(1)], through: 10), ticket: r.ticket), now: 1)
        _ = m.handle(.received(ack(10)), now: 2)
        return m
    }

    @Test func aCommitThePeerDoesNotWantIsPassedOverUnread() {
        var m = Self.caughtUp()
        // Boats only: no page read, the cursor move owed to the tick.
        #expect(m.handle(.logAppended(through: 12, after: 10, collections: ["boats"], echoes: false), now: 3).isEmpty)
        #expect(m.lag == 0 && m.peerPosition == 12)
        // The peer's own transactions and echoes of them: passed over too.
        #expect(m.handle(.logAppended(through: 13, after: 12, collections: ["cars"], echoes: true), now: 4).isEmpty)
        // A tick racing a commit (the log's end, nothing appended known) changes nothing.
        #expect(m.handle(.logAdvanced(13), now: 5).isEmpty)
        guard case .deltaBatch(let moved)? = Self.sent(m.handle(.tick, now: 1_000_000)).first else {
            Issue.record("expected the owed batch at the tick")
            return
        }
        #expect(moved.pieces.isEmpty && moved.throughSequence == 13)
        // Cars from someone else: read.
        let read = Self.pageRequest(m.handle(.logAppended(through: 14, after: 13, collections: ["cars", "boats"], echoes: false), now: 6))
        #expect(read?.after == 13)
    }

    @Test func aCommitIsReadWhenItCannotBePassedOver() {
        // Rows the machine has not accounted for lie before it.
        var m = Self.caughtUp()
        #expect(Self.pageRequest(m.handle(.logAppended(through: 15, after: 11, collections: ["boats"], echoes: false), now: 3))?.after == 10)
        // A page is being read: the commit is read after it.
        m = Self.caughtUp()
        let r = Self.pageRequest(m.handle(.logAdvanced(11), now: 3))!
        #expect(m.handle(.logAppended(through: 12, after: 11, collections: ["boats"], echoes: false), now: 4).isEmpty)
        #expect(Self.pageRequest(m.handle(.pageRead(ChangeLogPage(pieces: [], through: 11), ticket: r.ticket), now: 5))?.after == 11)
        // Echoes go back to a peer that asked for its own transactions (it evicted).
        m = Self.caughtUp(includeOwn: true)
        #expect(Self.pageRequest(m.handle(.logAppended(through: 11, after: 10, collections: ["cars"], echoes: true), now: 3))?.after == 10)
        // Before the first page of a Subscribe nothing is passed over.
        m = Self.machine(window: 4)
        _ = m.handle(.logAdvanced(10), now: 0)
        _ = m.handle(.received(Self.subscribe(Self.cars, generation: 1)), now: 0)
        #expect(m.handle(.logAppended(through: 11, after: 10, collections: ["boats"], echoes: false), now: 1).isEmpty, "a page is being read")
        #expect(m.lag == 11, "nothing passed over: the rows still count as lag")
    }

    @Test func theFirstEmptyBatchOfASubscribeGoesAtOnce() {
        var m = Self.machine(window: 4)
        _ = m.handle(.logAdvanced(10), now: 0)
        let r1 = Self.pageRequest(m.handle(.received(Self.subscribe(Self.cars, generation: 1)), now: 0))!
        let sent = Self.sent(m.handle(.pageRead(ChangeLogPage(pieces: [], through: 10), ticket: r1.ticket), now: 1))
        guard case .deltaBatch(let b)? = sent.first else {
            Issue.record("expected the first batch at once, got \(sent)")
            return
        }
        #expect(b.pieces.isEmpty && b.throughSequence == 10)
        // A new Subscribe starts again: its first batch goes at once too.
        let r2 = Self.pageRequest(m.handle(.received(Self.subscribe(Self.cars, generation: 2, resumeAfter: 5)), now: 2))!
        let again = Self.sent(m.handle(.pageRead(ChangeLogPage(pieces: [], through: 10), ticket: r2.ticket), now: 3))
        guard case .deltaBatch(let b2)? = again.first else {
            Issue.record("expected the first batch of generation 2 at once, got \(again)")
            return
        }
        #expect(b2.subscribeGeneration == 2 && b2.throughSequence == 10)
    }

    @Test func aBadSubscribeIsRefused() {
        var m = Self.machine()
        var s = Shoal_V1_Subscribe()
        var sub = Shoal_V1_Subscription()
        sub.query = "DELETE FROM cars"
        s.subscriptions = [sub]
        s.generation = 1
        #expect(Self.closed(m.handle(SessionStateMachine.Event(received: .subscribe(s)), now: 0))??.code == .invalidQuery)
    }

    // MARK: Keepalive and the rest

    @Test func keepalivePingsAndClosesASilentPeer() {
        var m = Self.machine()
        #expect(m.handle(.tick, now: 1_000_000).isEmpty)
        guard case .send(.ping(let ping))? = m.handle(.tick, now: 5_000_000).first else {
            Issue.record("expected a Ping after 5 s")
            return
        }
        #expect(ping.nonce == 1 && ping.sentAtMicros == 5_000_000)
        var stray = ping
        stray.nonce = 9
        #expect(m.handle(.received(.pong(stray)), now: 5_100_000).isEmpty, "a Pong that echoes no Ping of ours is ignored")
        var future = ping
        future.sentAtMicros = 9_000_000
        #expect(m.handle(.received(.pong(future)), now: 5_100_000).isEmpty, "nor one from the future")
        guard case .measuredRoundTrip(let rtt)? = m.handle(.received(.pong(ping)), now: 5_250_000).first else {
            Issue.record("expected a round trip")
            return
        }
        #expect(rtt == 250_000)
        let theirs = SessionMessage.Ping(nonce: 4, sentAtMicros: 0)
        #expect(Self.sent(m.handle(.received(.ping(theirs)), now: 6_000_000)) == [SessionMessage.pong(theirs).wire])
        // Last frame at 6 s: at 36 s it has been 30 s, not more; at 36.1 s the session closes, silently.
        _ = m.handle(.tick, now: 10_000_000)
        #expect(Self.closed(m.handle(.tick, now: 36_000_000)) == nil)
        #expect(Self.closed(m.handle(.tick, now: 36_100_000)) == .some(nil))
    }

    /// Part of a large frame arriving counts as a sign of life; only silence closes.
    @Test func partOfAFrameArrivingKeepsTheSessionOpen() {
        var m = Self.machine()
        // Nothing whole since 0, but bytes of a frame at 20 s: at 36.1 s it has been 16.1 s.
        #expect(m.handle(.inboundProgress, now: 20_000_000).isEmpty)
        #expect(Self.closed(m.handle(.tick, now: 36_100_000)) == nil)
        // Then silence: 30 s after the last progress it closes.
        #expect(Self.closed(m.handle(.tick, now: 50_000_000)) == nil)
        #expect(Self.closed(m.handle(.tick, now: 50_100_000)) == .some(nil))
    }

    @Test func framesOutOfPlaceAndErrors() {
        var m = Self.machine()
        #expect(Self.closed(m.handle(SessionStateMachine.Event(received: .hello(Shoal_V1_Hello())), now: 0))??.message == "unexpected Hello frame in an established session")
        m = Self.machine()
        let error = m.handle(SessionStateMachine.Event(received: .fatal(.shuttingDown, "bye")), now: 0)
        #expect(Self.closed(error)??.fromPeer == true)
        m = Self.machine()
        let request = SessionMessage.TransactionRequest(requestID: 0, transaction: TransactionID(origin: SiteID(0xA), sequence: 3))
        _ = m.handle(.received(Self.subscribe(Self.cars, generation: 1)), now: 0)
        guard case .answerTransactionRequest(let r, let set)? = m.handle(.received(.transactionRequest(request)), now: 1).first else {
            Issue.record("expected an answer")
            return
        }
        #expect(r == request && set == Self.cars, "answered for what the peer subscribed to")
        _ = m.handle(.cursorRead(Self.cars, resumeAfter: 0), now: 2)
        var pieces = Shoal_V1_TransactionPieces()
        pieces.found = true
        pieces.piece = PieceCodec.encode([Self.piece(3)], receiver: Self.cars.filter).pieces[0]
        guard case .deliver(let delivered)? = m.handle(SessionStateMachine.Event(received: .transactionPieces(pieces)), now: 3).first else {
            Issue.record("expected the pieces to go to the pipeline")
            return
        }
        #expect(delivered == [Self.piece(3)])
    }

    @Test func piecesRoundTripTheWireFormWithFilters() throws {
        let eu = Self.set("SELECT * FROM cars WHERE region = 'eu'")
        var piece = Self.piece(4)
        piece.verdicts = [
            Verdict(collection: "cars", coverage: .notCovered(Self.cars.filter)),
            Verdict(collection: "cars", coverage: .notCovered(eu.filter)),
            Verdict(collection: "cars", coverage: .superseded([TransactionID(origin: Self.origin, sequence: 9)])),
            Verdict(collection: "cars", coverage: .unknown),
        ]
        piece.context = [
            ContextField(
                document: DocumentRef(collection: "cars", id: "\"d4\""), field: "g", valueJSON: "\"x\"",
                timestamp: HybridTimestamp(rawValue: 2), transaction: TransactionID(origin: Self.origin, sequence: 1))
        ]
        let (wire, filters) = PieceCodec.encode([piece], receiver: Self.cars.filter)
        #expect(wire[0].verdicts.map(\.filter) == [0, 1, 0, 0], "the receiver's own set is filter 0")
        #expect(filters.count == 1)
        let back = try PieceCodec.decode(wire, filters: filters, receiver: Self.cars.filter, collections: ["cars"])
        #expect(back == [piece])
    }
}

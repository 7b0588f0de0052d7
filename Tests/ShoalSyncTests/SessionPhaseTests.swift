import ShoalCRDT
import ShoalStore
import ShoalStorage
@testable import ShoalSync
import Testing

/// The phases of a session's two roles, each alone: the subscriber's (`idle`,
/// `awaitingCursor`, `subscribed`, and its own transactions coming back) and the
/// publisher's (`awaitingSubscribe`, `streaming` from its first page to its first batch).
@Suite struct SessionPhaseTests {
    typealias T = SessionStateMachineTests
    typealias Subscriber = SessionStateMachine.Subscriber
    typealias Publisher = SessionStateMachine.Publisher

    static func configuration(version: UInt32 = 3) -> SessionStateMachine.Configuration {
        .init(peer: T.peer, batchSize: 100, maximumBatchesInFlight: 4, maximumBatchesPending: 8, version: version)
    }

    static let wider = T.set("SELECT * FROM cars", "SELECT * FROM boats")
    static let boats = T.set("SELECT * FROM boats")

    static func readCursor(_ actions: [SessionStateMachine.Action]) -> (SubscriptionSet, fromStart: Bool)? {
        for case .readCursor(let set, let fromStart) in actions { return (set, fromStart) }
        return nil
    }

    static func subscribe(_ actions: [SessionStateMachine.Action]) -> SessionMessage.Subscribe? {
        for case .send(.subscribe(let s)) in actions { return s }
        return nil
    }

    /// A DeltaBatch's payload answering `generation`.
    static func payload(through: UInt64, generation: UInt64, pieces: [TransactionPiece] = []) -> [UInt8] {
        OutboundBatch(
            pieces: pieces, receiver: T.cars.filter, encoding: .absolute, throughSequence: through, subscribeGeneration: generation
        ).payload()
    }

    // MARK: Subscriber

    @Test func theSubscriberReadsOneCursorAtATimeAndTheNewestSetWaits() {
        var s = Subscriber(configuration: Self.configuration())
        guard case .idle = s.state else {
            Issue.record("not idle: \(s.state)")
            return
        }
        #expect(s.resubscribe().isEmpty, "nothing to subscribe again to")
        #expect(Self.readCursor(s.subscriptionsChanged(to: T.cars, fromStart: false))?.0 == T.cars)
        guard case .awaitingCursor(let first) = s.state else {
            Issue.record("not awaiting a cursor: \(s.state)")
            return
        }
        #expect(first.latest == nil && first.next == nil)
        #expect(Self.subscribe(s.cursorRead(T.cars, resumeAfter: 4, includeOwn: false, held: .none, cursorEpoch: 0))?.generation == 1)
        guard case .subscribed(let one) = s.state else {
            Issue.record("not subscribed: \(s.state)")
            return
        }
        #expect(one.generation == 1 && one.subscriptions == T.cars && one.cursorKey == T.cars.key && one.ownTransactions == .leftOut)
        #expect(s.subscriptionsChanged(to: T.cars, fromStart: false).isEmpty, "the same set: nothing to ask")
        // A wider set reads its cursor; what changes meanwhile waits, the newest set winning
        // and "from the start" sticking.
        _ = s.subscriptionsChanged(to: Self.wider, fromStart: false)
        #expect(s.subscriptionsChanged(to: Self.boats, fromStart: true).isEmpty)
        #expect(s.subscriptionsChanged(to: T.cars, fromStart: false).isEmpty)
        #expect(s.resubscribe().isEmpty, "a change waiting already is asked for next")
        guard case .awaitingCursor(let waiting) = s.state else {
            Issue.record("not awaiting a cursor: \(s.state)")
            return
        }
        #expect(waiting.latest?.generation == 1 && waiting.next?.subscriptions == T.cars && waiting.next?.fromStart == true)
        let sent = s.cursorRead(Self.wider, resumeAfter: 0, includeOwn: false, held: .none, cursorEpoch: 0)
        #expect(Self.subscribe(sent)?.generation == 2)
        #expect(Self.readCursor(sent).map { $0.0 == T.cars && $0.fromStart } == true)
        guard case .awaitingCursor(let again) = s.state else {
            Issue.record("not awaiting the waiting set's cursor: \(s.state)")
            return
        }
        #expect(again.latest?.generation == 2 && again.next == nil)
        _ = s.cursorRead(T.cars, resumeAfter: 0, includeOwn: false, held: .none, cursorEpoch: 0)
        guard case .subscribed(let three) = s.state else {
            Issue.record("not subscribed: \(s.state)")
            return
        }
        #expect(three.generation == 3 && s.latestGeneration == 3)
        // Subscribing again to the same set reads its cursor anew.
        #expect(Self.readCursor(s.resubscribe()).map { $0.0 == T.cars && !$0.fromStart } == true)
    }

    /// A set equal to the one waiting behind a cursor read of itself is asked for no more.
    @Test func aWaitingSetEqualToTheOneReadIsDropped() {
        var s = Subscriber(configuration: Self.configuration())
        _ = s.subscriptionsChanged(to: T.cars, fromStart: false)
        _ = s.resubscribe()
        _ = s.subscriptionsChanged(to: T.cars, fromStart: false)
        let sent = s.cursorRead(T.cars, resumeAfter: 0, includeOwn: false, held: .none, cursorEpoch: 0)
        #expect(Self.readCursor(sent) == nil)
        guard case .subscribed = s.state else {
            Issue.record("not subscribed: \(s.state)")
            return
        }
    }

    /// Own transactions asked back: asked, then coming once a batch answers that very
    /// Subscribe, then back (and left out again) at the next Ping that vouches.
    @Test func ownTransactionsComeBackOnlyAfterABatchOfTheirSubscribe() throws {
        var s = Subscriber(configuration: Self.configuration())
        _ = s.cursorRead(T.cars, resumeAfter: 0, includeOwn: false, held: .none, cursorEpoch: 0)
        _ = s.cursorRead(T.cars, resumeAfter: 0, includeOwn: true, held: .none, cursorEpoch: 5)
        #expect(s.latest?.ownTransactions == .askedBack && s.latest?.cursorKey == SubscriptionSet.refillKey(T.cars.key))
        #expect(s.peerCaughtUp().isEmpty, "no batch of it yet: a Ping may speak of the stream before")
        // A batch of the earlier Subscribe, or of none in particular, says nothing of it.
        _ = try s.receivedBatch(Self.payload(through: 3, generation: 1))
        _ = try s.receivedBatch(Self.payload(through: 4, generation: 0))
        #expect(s.latest?.ownTransactions == .askedBack)
        guard case .submit(let inbound)? = try s.receivedBatch(Self.payload(through: 5, generation: 2)).first else {
            Issue.record("not submitted")
            return
        }
        #expect(inbound.cursorKey == SubscriptionSet.refillKey(T.cars.key) && inbound.cursorEpoch == 5)
        #expect(s.latest?.ownTransactions == .comingBack)
        let back = s.peerCaughtUp()
        guard case .ownTransactionsBack(let key)? = back.first else {
            Issue.record("not back: \(back)")
            return
        }
        #expect(key == T.cars.key && back.count == 1, "no routes to send again")
        #expect(s.latest?.ownTransactions == .leftOut && s.latest?.cursorKey == T.cars.key)
        #expect(s.peerCaughtUp().isEmpty, "said once")
    }

    // MARK: Publisher

    @Test func thePublisherFollowsTheLogAndRoutesBeforeTheFirstSubscribe() throws {
        var p = Publisher(configuration: Self.configuration(version: 4))
        #expect(p.logAdvanced(to: 30).isEmpty && p.logAppended(through: 31, after: 30, collections: ["cars"], echoes: false).isEmpty)
        let lazy = RouteTable.Routes(lazyByDefault: true)
        #expect(try p.routeUpdated(to: lazy).count == 1)
        guard case .awaitingSubscribe(let waiting) = p.state else {
            Issue.record("subscribed already: \(p.state)")
            return
        }
        #expect(waiting.logEnd == 31 && waiting.routes == lazy && p.routes == lazy && p.subscriptions == nil && p.lag == 0)
        let actions = try p.subscribed(SessionMessage.Subscribe(subscriptions: [.init(id: "", query: "SELECT * FROM cars")], generation: 1))
        guard case .streaming(let stream) = p.state else {
            Issue.record("not streaming: \(p.state)")
            return
        }
        #expect(stream.logEnd == 31 && stream.routes == nil && stream.progress == .firstPage, "the Subscribe's routes: none")
        #expect(T.pageRequest(actions)?.after == 0 && p.lag == 31)
    }

    /// A stream's first page may start inside a transaction sent before, and its first
    /// batch goes at once even when empty; after a batch, an empty page waits for the tick.
    @Test func aStreamGoesFromItsFirstPageToItsFirstBatch() throws {
        var p = Publisher(configuration: Self.configuration())
        _ = p.logAdvanced(to: 20)
        let first = try #require(T.pageRequest(try p.subscribed(SessionMessage.Subscribe(subscriptions: [.init(id: "", query: "SELECT * FROM cars")], resumeAfter: 5, generation: 1))))
        #expect(first.resuming)
        // Nothing for the peer, and the log goes on: no frame, and no longer the first page.
        let second = try #require(T.pageRequest(p.pageRead(ChangeLogPage(pieces: [], through: 10), ticket: first.ticket)))
        #expect(!second.resuming)
        guard case .streaming(let reading) = p.state else { return }
        #expect(reading.progress == .nothingSent && reading.cursorMoveOwed == false)
        // At the log's end with nothing sent yet: the empty batch goes at once.
        let atEnd = p.pageRead(ChangeLogPage(pieces: [], through: 20), ticket: second.ticket)
        #expect(atEnd.contains { if case .sendBatch(let b) = $0 { b.pieces.isEmpty && b.throughSequence == 20 } else { false } })
        guard case .streaming(let sent) = p.state else { return }
        #expect(sent.progress == .sent && sent.unacknowledged == [20])
        _ = try p.acknowledged(.batch(through: 20))
        // After a batch, an empty page at the log's end only owes the cursor move.
        let third = try #require(T.pageRequest(p.logAdvanced(to: 25)))
        #expect(p.pageRead(ChangeLogPage(pieces: [], through: 25), ticket: third.ticket).isEmpty)
        guard case .streaming(let owed) = p.state else { return }
        #expect(owed.cursorMoveOwed && owed.progress == .sent)
        #expect(p.sendOwedCursorMove().count == 1)
    }

    /// A log whose end has no row after the cursor (a hub's empty log moved above what a
    /// device may hold, when its database went back): the page finds nothing, and the
    /// stream passes to the end known when the read began, moving the peer's cursor,
    /// where it once asked for the same page again for ever.
    @Test func aLogEndWithNoRowAfterTheCursorIsPassedNotReadForEver() throws {
        var p = Publisher(configuration: Self.configuration())
        _ = p.logAdvanced(to: 2)
        let first = try #require(T.pageRequest(try p.subscribed(SessionMessage.Subscribe(subscriptions: [.init(id: "", query: "SELECT * FROM cars")], generation: 1))))
        _ = p.pageRead(ChangeLogPage(pieces: [], through: 2), ticket: first.ticket)
        _ = try p.acknowledged(.batch(through: 2))
        let empty = try #require(T.pageRequest(p.logAdvanced(to: 4_294_967_298)))
        // The log moved: nothing after 2, through its end as known when the read began.
        let passed = p.pageRead(ChangeLogPage(pieces: [], through: 2), ticket: empty.ticket)
        #expect(T.pageRequest(passed) == nil, "not read again")
        guard case .streaming(let stream) = p.state else { return }
        #expect(stream.sentThrough == 4_294_967_298 && stream.cursorMoveOwed)
        // The peer's cursor moves at the next tick.
        #expect(p.sendOwedCursorMove().contains { if case .sendBatch(let b) = $0 { b.pieces.isEmpty && b.throughSequence == 4_294_967_298 } else { false } })
        // A commit after it is read from there.
        _ = try p.acknowledged(.batch(through: 4_294_967_298))
        #expect(T.pageRequest(p.logAdvanced(to: 4_294_967_299))?.after == 4_294_967_298)
    }

    /// A newer Subscribe starts a stream of its own, carrying over what outlives one:
    /// the log's end, the page tickets, and the batches still to be acknowledged.
    @Test func aNewerSubscribeStartsAStreamCarryingWhatOutlivesTheOld() throws {
        var p = Publisher(configuration: Self.configuration())
        _ = p.logAdvanced(to: 20)
        let cars = SessionMessage.Subscribe(subscriptions: [.init(id: "", query: "SELECT * FROM cars")], generation: 1)
        let read = try #require(T.pageRequest(try p.subscribed(cars)))
        _ = p.pageRead(ChangeLogPage(pieces: [T.piece(1)], through: 20), ticket: read.ticket)
        #expect(try p.subscribed(cars).isEmpty, "the same generation again: crossed on the wire")
        var newer = cars
        newer.generation = 2
        newer.resumeAfter = 8
        let restarted = try #require(T.pageRequest(try p.subscribed(newer)))
        guard case .streaming(let stream) = p.state else { return }
        #expect(stream.generation == 2 && stream.progress == .firstPage && stream.sentThrough == 8 && stream.logEnd == 20)
        #expect(stream.unacknowledged.isEmpty && stream.earlierUnacknowledged == [20])
        #expect(restarted.ticket > read.ticket && restarted.after == 8)
        #expect(try p.acknowledged(.batch(through: 20)).isEmpty, "a late Ack of the old stream is still valid")
        #expect(throws: SyncError.self) { try p.acknowledged(.batch(through: 20)) }
    }

    /// Acks come in the order batches went out: while batches of an earlier Subscribe wait,
    /// an Ack is theirs, even when the restarted stream sent a batch through the same
    /// sequence. Taking it for the new one counted that batch held before the peer had it,
    /// and the new stream's own first Ack then closed the session.
    @Test func anAckThroughASequenceBothStreamsSentIsTheEarlierStreamsFirst() throws {
        var p = Publisher(configuration: Self.configuration())
        _ = p.logAdvanced(to: 12)
        let cars = SessionMessage.Subscribe(subscriptions: [.init(id: "", query: "SELECT * FROM cars")], generation: 1)
        let first = try #require(T.pageRequest(try p.subscribed(cars)))
        _ = p.pageRead(ChangeLogPage(pieces: [T.piece(1)], through: 12), ticket: first.ticket)
        let second = try #require(T.pageRequest(p.logAdvanced(to: 20)))
        _ = p.pageRead(ChangeLogPage(pieces: [T.piece(2)], through: 20), ticket: second.ticket)
        guard case .streaming(let old) = p.state else { return }
        #expect(old.unacknowledged == [12, 20])
        var newer = cars
        newer.generation = 2
        newer.resumeAfter = 8
        let restarted = try #require(T.pageRequest(try p.subscribed(newer)))
        let next = try #require(T.pageRequest(p.pageRead(ChangeLogPage(pieces: [T.piece(1)], through: 15), ticket: restarted.ticket)))
        _ = p.pageRead(ChangeLogPage(pieces: [T.piece(2)], through: 20), ticket: next.ticket)
        guard case .streaming(let stream) = p.state else { return }
        #expect(stream.earlierUnacknowledged == [12, 20] && stream.unacknowledged == [15, 20])
        _ = try p.acknowledged(.batch(through: 12))
        _ = try p.acknowledged(.batch(through: 20))
        guard case .streaming(let afterOld) = p.state else { return }
        #expect(afterOld.earlierUnacknowledged.isEmpty && afterOld.unacknowledged == [15, 20])
        #expect(afterOld.heldByPeer == 8, "the old stream's Acks say nothing of what the new one sent")
        _ = try p.acknowledged(.batch(through: 15))
        _ = try p.acknowledged(.batch(through: 20))
        guard case .streaming(let done) = p.state else { return }
        #expect(done.unacknowledged.isEmpty && done.heldByPeer == 20)
    }
}

extension SessionPhaseTests {
    /// A receiver tells the sender of transactions it refused whole in its next Ack
    /// (PROTOCOL.md §8.8): at most `Refusal.perAck` of them, through the wire and back;
    /// the sender is asked to log them, and an Ack listing more breaks the protocol.
    @Test func refusalsRideTheNextAckAndTheSenderIsToldOfThem() throws {
        let refusals = (1...70).map {
            SessionMessage.Refusal(id: TransactionID(origin: SiteID(7), sequence: UInt64($0)), code: .permissionDenied, reason: "may not write staff")
        }
        var s = Subscriber(configuration: Self.configuration())
        _ = s.subscriptionsChanged(to: T.cars, fromStart: false)
        _ = s.cursorRead(T.cars, resumeAfter: 0, includeOwn: false, held: .none, cursorEpoch: 0)
        _ = try s.receivedBatch(Self.payload(through: 5, generation: 1))
        let actions = s.batchDurable(heldLimit: nil, refused: refusals)
        var sent: SessionMessage.Ack?
        for case .send(.ack(let ack)) in actions { sent = ack }
        guard case .batch(through: 5, heldThrough: 0, let told)? = sent else {
            Issue.record("no Ack through 5: \(actions)")
            return
        }
        #expect(told == Array(refusals.prefix(SessionMessage.Refusal.perAck)))
        // Through the wire and back, codes and all.
        let decoded = SessionMessage(wire: SessionMessage.ack(.batch(through: 5, refused: told)).wire)
        #expect(decoded == .ack(.batch(through: 5, refused: told)))

        var p = Publisher(configuration: Self.configuration())
        _ = p.logAdvanced(to: 5)
        let request = try #require(T.pageRequest(try p.subscribed(SessionMessage.Subscribe(subscriptions: [.init(id: "", query: "SELECT * FROM cars")], generation: 1))))
        _ = p.pageRead(ChangeLogPage(pieces: [T.piece(1)], through: 5), ticket: request.ticket)
        let tooMany = #expect(throws: SyncError.self) { try p.acknowledged(.batch(through: 5, refused: refusals)) }
        #expect(tooMany?.code == .protocolViolation)
        let heard = try p.acknowledged(.batch(through: 5, refused: Array(told.prefix(2))))
        #expect(heard.contains { if case .peerRefused(let r, retold: false) = $0 { r == Array(told.prefix(2)) } else { false } })
    }
}

extension SessionPhaseTests {
    /// The peer's own transactions a node refused are told again at the start of each
    /// session (PROTOCOL.md §8.8): in version 4 at once, in an Ack with held_only that
    /// acknowledges no batch; the publisher hears them as told again. Version 3 has no
    /// such Ack: they wait for the next Ack for a batch (`PeerRegistry.noteRefusal`).
    @Test func refusalsAreToldAgainInAHeldOnlyAck() throws {
        let refusals = (1...70).map {
            SessionMessage.Refusal(id: TransactionID(origin: SiteID(7), sequence: UInt64($0)), code: .limitExceeded, reason: "too large")
        }
        var s = Subscriber(configuration: Self.configuration(version: 4))
        let actions = s.retell(refusals)
        var sent: SessionMessage.Ack?
        for case .send(.ack(let ack)) in actions { sent = ack }
        guard case .heldOnly(heldThrough: 0, let told)? = sent else {
            Issue.record("no held_only Ack: \(actions)")
            return
        }
        #expect(told == Array(refusals.prefix(SessionMessage.Refusal.perAck)))
        let decoded = SessionMessage(wire: SessionMessage.ack(.heldOnly(heldThrough: 0, refused: told)).wire)
        #expect(decoded == .ack(.heldOnly(heldThrough: 0, refused: told)), "through the wire and back")
        var v3 = Subscriber(configuration: Self.configuration(version: 3))
        #expect(v3.retell(refusals).isEmpty)

        // Heard before the peer's Subscribe: no stream yet, the refusals all the same.
        var p = Publisher(configuration: Self.configuration(version: 4))
        let heard = try p.acknowledged(.heldOnly(heldThrough: 0, refused: Array(told.prefix(3))))
        #expect(heard.count == 1 && heard.contains { if case .peerRefused(let r, retold: true) = $0 { r == Array(told.prefix(3)) } else { false } })
        let tooMany = #expect(throws: SyncError.self) { try p.acknowledged(.heldOnly(heldThrough: 0, refused: refusals)) }
        #expect(tooMany?.code == .protocolViolation)
        var old = Publisher(configuration: Self.configuration(version: 3))
        #expect(throws: SyncError.self) { try old.acknowledged(.heldOnly(heldThrough: 0, refused: Array(told.prefix(1)))) }
    }
}

import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalWire
import Testing

/// What a version 4 Subscribe says of the nodes the subscriber relays for, both roles,
/// with no transport (PROTOCOL.md §8.2, `interests` and `continues`).
@Suite struct SessionInterestTests {
    typealias T = SessionStateMachineTests
    static let other = SiteID(0x77)

    static func upstream(_ set: SubscriptionSet, _ stated: [(SiteID, UInt64, SubscriptionSet)]) -> InterestTable.Upstream {
        InterestTable.Upstream(
            subscriptions: set, interests: stated.map { InterestTable.Stated(origin: $0.0, generation: $0.1, subscriptions: $0.2) })
    }

    static func subscribe(_ actions: [SessionStateMachine.Action]) -> Shoal_V1_Subscribe? {
        for case .subscribe(let s) in T.sent(actions) { return s }
        return nil
    }

    // MARK: subscriber

    @Test func statementsGoWithTheSubscribeAndOnlyANewOneSendsAnother() {
        var m = SessionRoutesTests.machine()
        let first = Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 5, T.cars)])
        _ = m.handle(.upstreamChanged(first, fromStart: false), now: 0)
        guard let s1 = Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1)) else {
            Issue.record("no Subscribe")
            return
        }
        #expect(s1.interests.map(\.origin) == [T.peer.rawValue, Self.other.rawValue])
        #expect(s1.interests.map(\.generation) == [1, 5] && !s1.continues)
        // Only a generation newer: the peer would learn nothing, nothing is sent.
        let restated = Self.upstream(T.cars, [(T.peer, 2, T.cars), (Self.other, 5, T.cars)])
        #expect(m.handle(.upstreamChanged(restated, fromStart: false), now: 2).isEmpty)
        // Another node's set changed, this node's set did not: a Subscribe that continues.
        let narrowed = Self.upstream(T.cars, [(T.peer, 2, T.cars), (Self.other, 6, SubscriptionSet())])
        guard case .readCursor? = m.handle(.upstreamChanged(narrowed, fromStart: false), now: 3).first,
            let s2 = Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 9), now: 4))
        else {
            Issue.record("no second Subscribe")
            return
        }
        #expect(s2.continues && s2.generation == 2 && s2.resumeAfter == 9 && s2.interests[1].subscriptions.isEmpty)
        // A list that only leaves out what the peer holds (it told this node of it) sends nothing.
        let shorter = Self.upstream(T.cars, [(T.peer, 2, T.cars)])
        #expect(m.handle(.upstreamChanged(shorter, fromStart: false), now: 5).isEmpty)
        // A resubscribe (routes overflowed) starts the stream again: it never continues.
        _ = m.handle(.resubscribe, now: 5)
        let s3 = Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 4), now: 6))
        #expect(s3?.continues == false && s3?.resumeAfter == 4)
        // A new set does not continue either.
        let wider = T.set("SELECT * FROM cars", "SELECT * FROM boats")
        _ = m.handle(.upstreamChanged(Self.upstream(wider, [(T.peer, 3, wider)]), fromStart: false), now: 7)
        #expect(Self.subscribe(m.handle(.cursorRead(wider, resumeAfter: 0), now: 8))?.continues == false)
    }

    /// Batches still in flight for a Subscribe that a later one only `continues` belong
    /// to the same stream: they file their progress under its set, or the cursor stays
    /// behind what was applied once the stream goes quiet (found by
    /// `RelayTests.aNodeThatDropsItsOwnCollectionCatchesUpOnlyOnWhatItMissed`: a set
    /// taken up again brought its history again). A resubscribe restarts the stream:
    /// batches of the stream before it file nothing, since offers it forgot may have held
    /// the cursor back.
    @Test func aContinuedStreamFilesItsEarlierBatchesAndARestartedOneDoesNot() {
        var m = SessionRoutesTests.machine()
        func key(_ actions: [SessionStateMachine.Action]) -> String?? {
            guard case .submit(let batch)? = actions.first else { return .none }
            return .some(batch.cursorKey)
        }
        _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 5, T.cars)]), fromStart: false), now: 0)
        _ = m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1)
        _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 6, SubscriptionSet())]), fromStart: false), now: 2)
        #expect(Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 3))?.continues == true)
        #expect(key(m.handle(T.batch([T.piece(1)], through: 5, generation: 1), now: 4)) == .some(T.cars.key), "the stream continued")
        #expect(key(m.handle(T.batch([T.piece(2)], through: 6, generation: 2), now: 5)) == .some(T.cars.key))
        _ = m.handle(.resubscribe, now: 6)
        #expect(Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 4), now: 7))?.continues == false)
        #expect(key(m.handle(T.batch([T.piece(3)], through: 8, generation: 2), now: 8)) == .some(nil), "restarted: files nothing")
        #expect(key(m.handle(T.batch([T.piece(4)], through: 5, generation: 3), now: 9)) == .some(T.cars.key))
    }

    /// Found by `ProcessRelayTests.aQueryDroppedInARingIsForgottenAllRoundIt`: a node's
    /// set that goes back to one it had is news to a peer told the set between.
    @Test func aSetThatGoesBackToAnEarlierOneIsListedAgain() {
        var m = SessionRoutesTests.machine()
        let boats = T.set("SELECT * FROM boats"), both = T.set("SELECT * FROM boats", "SELECT * FROM cars")
        var generation: UInt64 = 1
        func send(_ theirs: SubscriptionSet, _ set: SubscriptionSet) -> Shoal_V1_Subscribe? {
            generation += 1
            _ = m.handle(.upstreamChanged(Self.upstream(set, [(T.peer, 1, T.cars), (Self.other, generation, theirs)]), fromStart: false), now: generation)
            return Self.subscribe(m.handle(.cursorRead(set, resumeAfter: 0), now: generation))
        }
        #expect(send(boats, T.cars)?.interests.count == 2)
        #expect(send(both, both)?.interests.map(\.origin) == [T.peer.rawValue, Self.other.rawValue])
        let back = send(boats, T.cars)
        #expect(back?.interests.map(\.origin) == [T.peer.rawValue, Self.other.rawValue], "boats again: the peer holds cars and boats")
        #expect(back?.interests.last?.subscriptions.map(\.query) == ["SELECT * FROM boats"])
    }

    /// The peer lists an origin's set other than the one this node would list (it
    /// learned an older statement elsewhere): this node lists its own again at once.
    @Test func aPeerThatListsAnotherSetIsToldAgain() {
        var m = SessionRoutesTests.machine()
        let cars = Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 5, T.cars)])
        _ = m.handle(.upstreamChanged(cars, fromStart: false), now: 0)
        #expect(Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1))?.interests.count == 2)
        let older = [SessionMessage.Interest(origin: Self.other, generation: 4, subscriptions: [])]
        let actions = m.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false, interests: older)), now: 2)
        guard actions.contains(where: { if case .readCursor = $0 { true } else { false } }) else {
            Issue.record("no new Subscribe: \(actions)")
            return
        }
        let again = Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 3))
        #expect(again?.continues == true && again?.interests.last?.origin == Self.other.rawValue)
        #expect(again?.interests.last?.subscriptions.map(\.query) == ["SELECT * FROM cars"])
    }

    /// This node listed an origin's statement and then learned a newer one from the
    /// peer itself, so what it would list now leaves that origin out and tells the peer
    /// nothing new: no Subscribe. The peer's next Subscribe lists the newer statement;
    /// answering it with the statement listed before had the peer answer with its own,
    /// and so on, some 90 Subscribes each way in 4 s (the hub checker's seed
    /// 2773476187470350391), until something else changed the set.
    @Test func aStatementSinceLearnedFromThePeerIsNotListedBackToIt() {
        // The peer lists a newer statement before this node has read what it lists now
        // (the Subscribe that brings it is what this node learns it from): no answer.
        var early = SessionRoutesTests.machine()
        _ = early.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 4, T.cars)]), fromStart: false), now: 0)
        _ = early.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1)
        let newest = [SessionMessage.Interest(origin: Self.other, generation: 5, subscriptions: [])]
        let first = early.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false, interests: newest)), now: 2)
        #expect(!first.contains { if case .readCursor = $0 { true } else { false } }, "nothing to tell the peer: \(first)")

        var m = SessionRoutesTests.machine()
        _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 4, T.cars)]), fromStart: false), now: 0)
        #expect(Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1))?.interests.count == 2)
        // The peer told this node of `other`'s newer statement: what it lists now leaves `other` out.
        #expect(m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars)]), fromStart: false), now: 2).isEmpty)
        let newer = [SessionMessage.Interest(origin: Self.other, generation: 5, subscriptions: [])]
        let actions = m.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false, interests: newer)), now: 3)
        #expect(!actions.contains { if case .readCursor = $0 { true } else { false } }, "nothing to tell the peer: \(actions)")
        // The same while a Subscribe's cursor is read: the change waiting behind it is current too.
        var n = SessionRoutesTests.machine()
        _ = n.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 4, T.cars)]), fromStart: false), now: 0)
        _ = n.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1)
        let wider = T.set("SELECT * FROM cars", "SELECT * FROM boats")
        _ = n.handle(.upstreamChanged(Self.upstream(wider, [(T.peer, 2, wider), (Self.other, 4, T.cars)]), fromStart: false), now: 2)
        _ = n.handle(.upstreamChanged(Self.upstream(wider, [(T.peer, 2, wider)]), fromStart: false), now: 3)
        #expect(Self.subscribe(n.handle(.cursorRead(wider, resumeAfter: 0), now: 4))?.subscriptions.count == 2)
        let again = n.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false, interests: newer)), now: 5)
        #expect(!again.contains { if case .readCursor = $0 { true } else { false } }, "nothing to tell the peer: \(again)")
    }

    /// A resubscribe while a cursor is read restarts that Subscribe; it does not send the
    /// older set after it.
    @Test func aResubscribeWhileACursorIsReadRestartsThatSubscribe() {
        var m = SessionRoutesTests.machine()
        _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars)]), fromStart: false), now: 0)
        _ = m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1)
        let wider = T.set("SELECT * FROM cars", "SELECT * FROM boats")
        guard case .readCursor? = m.handle(.upstreamChanged(Self.upstream(wider, [(T.peer, 2, wider)]), fromStart: false), now: 2).first else {
            Issue.record("no cursor read for the wider set")
            return
        }
        #expect(m.handle(.resubscribe, now: 3).isEmpty)
        let sent = m.handle(.cursorRead(wider, resumeAfter: 7), now: 4)
        #expect(Self.subscribe(sent)?.continues == false && Self.subscribe(sent)?.subscriptions.count == 2)
        #expect(!sent.contains { if case .readCursor = $0 { true } else { false } }, "not the older set after it")
    }

    /// A version 3 peer hears only of the set: statements that change alone send nothing.
    @Test func aVersion3PeerIsNotResubscribedForStatements() {
        var m = SessionRoutesTests.machine(version: 3)
        _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars)]), fromStart: false), now: 0)
        _ = m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1)
        #expect(m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 3, T.cars)]), fromStart: false), now: 2).isEmpty)
    }

    @Test func aVersion3SessionListsNoStatements() {
        var m = SessionRoutesTests.machine(version: 3)
        _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars)]), fromStart: false), now: 0)
        let s = Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1))
        #expect(s != nil && s?.interests.isEmpty == true)
    }

    /// A stream bringing this node's own transactions back goes on when only another
    /// node's interest changes, as any other: restarted each time, a long one never
    /// reached its end (the hub checker's restored device, re-subscribing every few
    /// seconds from the same point, its interests changing under it). It continues only a
    /// stream that asked for them too.
    @Test func aStreamBringingOwnTransactionsBackContinuesWhenOnlyInterestsChange() {
        var m = SessionRoutesTests.machine()
        _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 5, T.cars)]), fromStart: false), now: 0)
        let s1 = Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 0, includeOwn: true), now: 1))
        #expect(s1?.includeOwnTransactions == true && s1?.continues == false)
        var generation: UInt64 = 5
        func interestChanges(resumeAfter: UInt64, includeOwn: Bool) -> Shoal_V1_Subscribe? {
            generation += 1
            let theirs = generation % 2 == 0 ? SubscriptionSet() : T.cars
            _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, generation, theirs)]), fromStart: false), now: generation)
            return Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: resumeAfter, includeOwn: includeOwn), now: generation))
        }
        let s2 = interestChanges(resumeAfter: 40, includeOwn: true)
        #expect(s2?.includeOwnTransactions == true && s2?.continues == true, "asked back, and asked back before: goes on")
        #expect(interestChanges(resumeAfter: 40, includeOwn: true)?.continues == true, "and again")
        #expect(interestChanges(resumeAfter: 60, includeOwn: false)?.continues == false, "no longer asked back: a stream of its own")
        #expect(interestChanges(resumeAfter: 60, includeOwn: false)?.continues == true)
        #expect(interestChanges(resumeAfter: 0, includeOwn: true)?.continues == false, "asked back again: a stream of its own")
    }

    /// A stream bringing this node's own transactions back, continued after its batches
    /// came, is still the stream a Ping speaks of: the publisher, its log quiet, sends no
    /// batch of the new generation, and the next Ping that vouches says they are all back.
    @Test func aContinuedStreamOfOwnTransactionsIsAllBackAtTheNextPing() {
        var m = SessionRoutesTests.machine()
        _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 5, T.cars)]), fromStart: false), now: 0)
        _ = m.handle(.cursorRead(T.cars, resumeAfter: 0, includeOwn: true), now: 1)
        _ = m.handle(T.batch([], through: 5, generation: 1), now: 2)
        _ = m.handle(.batchDurable(), now: 3)
        _ = m.handle(.upstreamChanged(Self.upstream(T.cars, [(T.peer, 1, T.cars), (Self.other, 6, SubscriptionSet())]), fromStart: false), now: 4)
        #expect(Self.subscribe(m.handle(.cursorRead(T.cars, resumeAfter: 5, includeOwn: true), now: 5))?.continues == true)
        let ping = SessionMessage.Ping(nonce: 1, sentAtMicros: 0, freshness: [Freshness.Entry(site: T.peer, throughMillis: 10)])
        let back = m.handle(.received(.ping(ping)), now: 6)
        #expect(back.contains { if case .ownTransactionsBack = $0 { true } else { false } }, "\(back)")
    }

    // MARK: publisher

    static func subscribeMessage(
        generation: UInt64, resumeAfter: UInt64, continues: Bool, interests: [SessionMessage.Interest]? = nil,
        includeOwn: Bool = false
    ) -> SessionMessage {
        guard case .subscribe(var s) = T.subscribe(T.cars, generation: generation, resumeAfter: resumeAfter, includeOwn: includeOwn) else {
            return T.subscribe(T.cars, generation: generation)
        }
        s.continues = continues
        s.interests = interests
        return .subscribe(s)
    }

    @Test func aSubscribeThatContinuesLeavesTheStreamWhereItIs() {
        var m = SessionRoutesTests.machine()
        let interests = [SessionMessage.Interest(origin: T.peer, generation: 1, subscriptions: [])]
        let first = m.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false, interests: interests)), now: 0)
        guard case .peerSubscribed(_, let stated)? = first.first(where: { if case .peerSubscribed = $0 { true } else { false } }) else {
            Issue.record("no peerSubscribed: \(first)")
            return
        }
        #expect(stated?.map(\.origin) == [T.peer])
        let r1 = SessionRoutesTests.pageRequest(m.handle(.logAdvanced(50), now: 1)) ?? SessionRoutesTests.pageRequest(first)
        guard let r1 else {
            Issue.record("no page read")
            return
        }
        let read = m.handle(.pageRead(ChangeLogPage(pieces: [T.piece(1)], through: 20), ticket: r1.ticket), now: 2)
        #expect(T.sent(read).count == 1, "one batch through 20")
        // Continues: no page read from its resume_after; the next batch answers generation 2.
        let continued = m.handle(.received(Self.subscribeMessage(generation: 2, resumeAfter: 5, continues: true)), now: 3)
        let r2 = SessionRoutesTests.pageRequest(continued) ?? SessionRoutesTests.pageRequest(read)
        #expect(r2?.after == 20, "goes on after 20, not from 5")
        // Does not continue: read again from its resume_after.
        let restarted = m.handle(.received(Self.subscribeMessage(generation: 3, resumeAfter: 5, continues: false)), now: 4)
        #expect(SessionRoutesTests.pageRequest(restarted)?.after == 5)
    }

    /// A publisher goes on with a stream that holds the peer's own transactions only for a
    /// Subscribe that asks for them too, and with one that leaves them out only for one
    /// that leaves them out.
    @Test(arguments: [(true, true, true), (true, false, false), (false, true, false)])
    func aContinuedStreamKeepsWhetherItHoldsThePeersOwnTransactions(servedOwn: Bool, askedOwn: Bool, goesOn: Bool) {
        var m = SessionRoutesTests.machine()
        let first = m.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false, includeOwn: servedOwn)), now: 0)
        guard let r1 = SessionRoutesTests.pageRequest(m.handle(.logAdvanced(50), now: 1)) ?? SessionRoutesTests.pageRequest(first) else {
            Issue.record("no page read")
            return
        }
        #expect((r1.excludingOrigin == nil) == servedOwn)
        let read = m.handle(.pageRead(ChangeLogPage(pieces: [T.piece(1)], through: 20), ticket: r1.ticket), now: 2)
        let next = m.handle(.received(Self.subscribeMessage(generation: 2, resumeAfter: 5, continues: true, includeOwn: askedOwn)), now: 3)
        let r2 = SessionRoutesTests.pageRequest(next) ?? SessionRoutesTests.pageRequest(read)
        #expect(r2?.after == (goesOn ? 20 : 5))
        #expect((r2?.excludingOrigin == nil) == askedOwn)
    }

    @Test func statementsAndRoutesAreBounded() {
        var m = SessionRoutesTests.machine()
        let many = (1...4_097).map { SessionMessage.Interest(origin: SiteID(UInt64($0)), generation: 1, subscriptions: []) }
        let over = m.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false, interests: many)), now: 0)
        #expect(T.closed(over)??.code == .limitExceeded)

        var zero = SessionRoutesTests.machine()
        let origin0 = [SessionMessage.Interest(origin: SiteID(0), generation: 1, subscriptions: [])]
        let refused = zero.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false, interests: origin0)), now: 0)
        #expect(T.closed(refused)??.code == .protocolViolation)

        var routed = SessionRoutesTests.machine()
        _ = routed.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false)), now: 0)
        let exceptions = Set((1...65_537).map { SiteID(UInt64($0)) })
        let tooMany = routed.handle(.received(.routeUpdate(RouteTable.Routes(lazyByDefault: true, exceptions: exceptions))), now: 1)
        #expect(T.closed(tooMany)??.code == .limitExceeded)
        var fine = SessionRoutesTests.machine()
        _ = fine.handle(.received(Self.subscribeMessage(generation: 1, resumeAfter: 0, continues: false)), now: 0)
        let atLimit = fine.handle(
            .received(.routeUpdate(RouteTable.Routes(lazyByDefault: true, exceptions: Set((1...65_536).map { SiteID(UInt64($0)) })))), now: 1)
        #expect(T.closed(atLimit) == nil)
    }
}

import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalWire
import Testing

/// Routes in a version 4 session, both roles, with no transport (PROTOCOL.md §8.11):
/// the subscriber's routes travel with its Subscribe and then as RouteUpdates, its
/// Acks say how far it holds the publisher's log; the publisher reads pages under the
/// routes, sends offers with them, and counts the peer as holding only what it said.
@Suite struct SessionRoutesTests {
    typealias T = SessionStateMachineTests
    static let lazyButPeer = RouteTable.Routes(lazyByDefault: true, exceptions: [T.peer])

    static func machine(version: UInt32 = 4) -> SessionStateMachine {
        SessionStateMachine(
            configuration: .init(
                peer: T.peer, keepaliveInterval: .seconds(5), idleTimeout: .seconds(30), batchSize: 100,
                maximumBatchesInFlight: 4, maximumBatchesPending: 8, version: version))
    }

    static func subscribe(routes: RouteTable.Routes?, generation: UInt64 = 1) -> SessionMessage {
        guard case .subscribe(var s) = T.subscribe(T.cars, generation: generation) else { return T.subscribe(T.cars, generation: 1) }
        s.routes = routes
        return .subscribe(s)
    }

    static func pageRequest(_ actions: [SessionStateMachine.Action]) -> SessionStateMachine.PageRequest? {
        for case .readPage(let request) in actions { return request }
        return nil
    }

    static func offer(_ sequence: UInt64, at log: UInt64) -> RouteTable.Offer {
        RouteTable.Offer(TransactionID(origin: T.origin, sequence: sequence), at: log)
    }

    // MARK: subscriber

    @Test func theRoutesGoWithTheFirstSubscribeThenAsRouteUpdates() {
        var m = Self.machine()
        #expect(m.handle(.routesChanged(Self.lazyButPeer), now: 0).isEmpty, "kept for the first Subscribe")
        _ = m.handle(.ownSubscriptionsChanged(T.cars, fromStart: false), now: 0)
        let sent = T.sent(m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1))
        guard case .subscribe(let subscribe)? = sent.first else {
            Issue.record("no Subscribe: \(sent)")
            return
        }
        #expect(subscribe.hasRoutes && subscribe.routes.lazyByDefault && subscribe.routes.exceptions == [T.peer.rawValue])
        // A graft: the origin turns eager, at once in a RouteUpdate.
        let grafted = RouteTable.Routes(lazyByDefault: true, exceptions: [T.peer, T.origin])
        let update = T.sent(m.handle(.routesChanged(grafted), now: 2))
        guard case .routeUpdate(let u)? = update.first else {
            Issue.record("no RouteUpdate: \(update)")
            return
        }
        #expect(u.routes.exceptions == [T.origin.rawValue, T.peer.rawValue].sorted())
        #expect(m.handle(.routesChanged(grafted), now: 3).isEmpty, "the same routes again send nothing")
        #expect(m.routesAsked == grafted)
    }

    /// After EVICT this node asks for its own transactions back: that stream carries
    /// every origin in full (an offer of an evicted transaction would look held), and
    /// the routes come back once the publisher says it is all here.
    @Test func aStreamThatBringsOwnTransactionsBackCarriesEveryOrigin() {
        var m = Self.machine()
        _ = m.handle(.routesChanged(Self.lazyButPeer), now: 0)
        _ = m.handle(.ownSubscriptionsChanged(T.cars, fromStart: true), now: 0)
        guard case .subscribe(let refill)? = T.sent(m.handle(.cursorRead(T.cars, resumeAfter: 0, includeOwn: true), now: 1)).first
        else {
            Issue.record("no Subscribe")
            return
        }
        #expect(refill.includeOwnTransactions && !refill.hasRoutes)
        let grafted = RouteTable.Routes(lazyByDefault: true, exceptions: [T.peer, T.origin])
        #expect(T.sent(m.handle(.routesChanged(grafted), now: 2)).isEmpty, "no RouteUpdate while own transactions come back")
        _ = m.handle(T.batch([], through: 5, generation: 1), now: 3)
        _ = m.handle(.batchDurable(), now: 4)
        let ping = SessionMessage.Ping(nonce: 1, sentAtMicros: 0, freshness: [Freshness.Entry(site: T.peer, throughMillis: 10)])
        let back = m.handle(.received(.ping(ping)), now: 5)
        #expect(back.contains { if case .ownTransactionsBack = $0 { true } else { false } })
        let updates = T.sent(back).compactMap { if case .routeUpdate(let u) = $0 { u } else { nil } }
        #expect(updates.count == 1 && updates.first?.routes.exceptions.sorted() == [T.origin.rawValue, T.peer.rawValue].sorted())
    }

    @Test func aVersion3SessionSendsNoRoutes() {
        var m = Self.machine(version: 3)
        _ = m.handle(.routesChanged(Self.lazyButPeer), now: 0)
        _ = m.handle(.ownSubscriptionsChanged(T.cars, fromStart: false), now: 0)
        guard case .subscribe(let subscribe)? = T.sent(m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1)).first else {
            Issue.record("no Subscribe")
            return
        }
        #expect(!subscribe.hasRoutes)
        let offered = Self.batch(offers: [Self.offer(1, at: 5)], through: 5)
        #expect(m.handle(offered, now: 2).contains { if case .close = $0 { true } else { false } })
    }

    static func batch(offers: [RouteTable.Offer], through: UInt64) -> SessionStateMachine.Event {
        var b = Shoal_V1_DeltaBatch()
        b.throughSequence = through
        b.subscribeGeneration = 1
        b.offered = offers.map { o in
            var w = Shoal_V1_Offer()
            w.originSite = o.id.origin.rawValue
            w.originSequence = o.id.sequence
            w.logSequence = o.logSequence
            return w
        }
        return SessionStateMachine.Event(received: .deltaBatch(b))
    }

    @Test func offersGoToThePipelineAndAcksSayHowFarThisNodeHolds() {
        var m = Self.machine()
        _ = m.handle(.ownSubscriptionsChanged(T.cars, fromStart: false), now: 0)
        _ = m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1)
        let actions = m.handle(Self.batch(offers: [Self.offer(7, at: 5)], through: 9), now: 2)
        guard case .submit(let inbound)? = actions.first else {
            Issue.record("not submitted: \(actions)")
            return
        }
        #expect(inbound.offered == [Self.offer(7, at: 5)] && inbound.through == 9)
        // Durable, with the offer not resolved: the Ack holds through 4 only.
        guard case .ack(let ack)? = T.sent(m.handle(.batchDurable(heldLimit: 4), now: 3)).first else {
            Issue.record("no Ack")
            return
        }
        #expect(ack.throughSequence == 9 && ack.heldThrough == 4 && !ack.heldOnly)
        #expect(m.handle(.heldAdvanced(heldLimit: 4), now: 4).isEmpty, "nothing resolved since")
        // Another link delivered it: the limit goes, and one held_only Ack says so.
        guard case .ack(let report)? = T.sent(m.handle(.heldAdvanced(heldLimit: nil), now: 5)).first else {
            Issue.record("no report")
            return
        }
        #expect(report.heldOnly && report.heldThrough == 9 && report.throughSequence == 0)
        #expect(m.handle(.heldAdvanced(heldLimit: nil), now: 6).isEmpty, "said once")
    }

    @Test(arguments: [(UInt64(0), UInt64(9)), (10, 9)])
    func anOfferOutsideItsBatchIsRefused(log: UInt64, through: UInt64) {
        var m = Self.machine()
        _ = m.handle(.ownSubscriptionsChanged(T.cars, fromStart: false), now: 0)
        _ = m.handle(.cursorRead(T.cars, resumeAfter: 0), now: 1)
        let actions = m.handle(Self.batch(offers: [Self.offer(7, at: log)], through: through), now: 2)
        guard case .close(let error?)? = actions.last else {
            Issue.record("not refused: \(actions)")
            return
        }
        #expect(error.message.contains("outside 1…\(through)"), "\(error.message)")
    }

    // MARK: publisher

    @Test func pagesAreReadUnderThePeersRoutesAndARouteUpdateChangesTheNextOnes() {
        var m = Self.machine()
        _ = m.handle(.logAdvanced(20), now: 0)
        let first = Self.pageRequest(m.handle(.received(Self.subscribe(routes: Self.lazyButPeer)), now: 1))
        #expect(first?.routes == Self.lazyButPeer)
        #expect(m.routesOfPeer == Self.lazyButPeer)
        var update = Shoal_V1_RouteUpdate()
        update.routes.lazyByDefault = false
        let changed = m.handle(SessionStateMachine.Event(received: .routeUpdate(update)), now: 2)
        #expect(changed.contains { if case .peerRouted(let r) = $0 { r == .everything } else { false } })
        // The page already being read is answered; the next one is read under the new routes.
        let next = Self.pageRequest(
            m.handle(.pageRead(ChangeLogPage(pieces: [], through: 10, offered: [Self.offer(1, at: 3)]), ticket: first!.ticket), now: 3))
        #expect(next?.routes == .everything && next?.after == 10)
    }

    @Test func theOffersGoOutAndThePeerHoldsOnlyWhatItSaysItHolds() {
        var m = Self.machine()
        _ = m.handle(.logAdvanced(10), now: 0)
        let request = Self.pageRequest(m.handle(.received(Self.subscribe(routes: Self.lazyButPeer)), now: 1))!
        let page = ChangeLogPage(pieces: [T.piece(2)], through: 10, offered: [Self.offer(1, at: 3)])
        let sent = m.handle(.pageRead(page, ticket: request.ticket), now: 2)
        let batches = sent.compactMap { if case .sendBatch(let b) = $0 { b } else { nil } }
        #expect(batches.count == 1 && batches[0].offered == [Self.offer(1, at: 3)] && batches[0].pieces.count == 1)
        #expect(batches[0].message.offered.count == 1)
        // The Ack moves the window but, held_through 2, not the peer past the offer.
        _ = m.handle(.received(.ack(.batch(through: 10, heldThrough: 2))), now: 3)
        #expect(m.inFlight == 0 && m.peerPosition == 2 && m.lag == 8)
        // Resolved elsewhere: a held_only Ack frees nothing and moves the position.
        #expect(!m.handle(.received(.ack(.heldOnly(heldThrough: 10))), now: 4).contains { if case .close = $0 { true } else { false } })
        #expect(m.peerPosition == 10 && m.lag == 0)
    }

    @Test func anOffersOnlyPageGoesOutAtOnce() {
        var m = Self.machine()
        _ = m.handle(.logAdvanced(10), now: 0)
        let request = Self.pageRequest(m.handle(.received(Self.subscribe(routes: Self.lazyButPeer)), now: 1))!
        // A page with nothing for the peer and the log going on is passed over, no batch;
        // one with offers only is sent at once, with them.
        let next = Self.pageRequest(m.handle(.pageRead(ChangeLogPage(pieces: [], through: 5), ticket: request.ticket), now: 2))
        let offered = m.handle(
            .pageRead(ChangeLogPage(pieces: [], through: 10, offered: [Self.offer(4, at: 8)]), ticket: try! #require(next).ticket),
            now: 4)
        let batches = offered.compactMap { if case .sendBatch(let b) = $0 { b } else { nil } }
        #expect(batches.count == 1 && batches[0].offered.count == 1 && batches[0].throughSequence == 10)
    }

    @Test func aVersion3PeerMayNotSendRoutesOrHeldOnlyAcks() {
        var m = Self.machine(version: 3)
        _ = m.handle(.logAdvanced(10), now: 0)
        let request = Self.pageRequest(m.handle(.received(Self.subscribe(routes: Self.lazyButPeer)), now: 1))
        #expect(request?.routes == nil, "a version 3 session reads every origin eagerly")
        #expect(m.handle(SessionStateMachine.Event(received: .routeUpdate(Shoal_V1_RouteUpdate())), now: 2).contains { if case .close = $0 { true } else { false } })
        var n = Self.machine(version: 3)
        #expect(n.handle(.received(.ack(.heldOnly(heldThrough: 0))), now: 0).contains { if case .close = $0 { true } else { false } })
    }
}

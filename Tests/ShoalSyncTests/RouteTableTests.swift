import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import Testing

/// The eager and lazy routes a node asks its publishers for (docs/ROUTES.md), driven
/// event by event: no sockets, no clock.
struct RouteTableTests {
    static let a = SiteID(0xA), b = SiteID(0xB), c = SiteID(0xC), d = SiteID(0xD)
    static func t(_ origin: SiteID, _ n: UInt64) -> TransactionID { TransactionID(origin: origin, sequence: n) }
    static func offer(_ origin: SiteID, _ n: UInt64, at log: UInt64) -> RouteTable.Offer { .init(t(origin, n), at: log) }
    static let nothingHeld: @Sendable (TransactionID) -> Bool = { _ in false }

    /// A node that knows A, B and C (a complete mesh of four, from D's side), A first.
    static func mesh() -> RouteTable {
        var table = RouteTable()
        #expect(table.open(a, now: 0) == (.everything, []), "the first link carries everything")
        table.caughtUp(a)
        // Later links carry their own origin only, and the first no longer carries it.
        #expect(
            table.open(b, now: 1)
                == (.init(lazyByDefault: true, exceptions: [b]), [.send(.init(lazyByDefault: false, exceptions: [b]), to: a)]))
        #expect(
            table.open(c, now: 2)
                == (.init(lazyByDefault: true, exceptions: [c]), [.send(.init(lazyByDefault: false, exceptions: [b, c]), to: a)]))
        return table
    }

    @Test(arguments: [
        RouteTable.Routes.everything, .init(lazyByDefault: true), .init(lazyByDefault: true, exceptions: [a]),
        .init(lazyByDefault: false, exceptions: [b, SiteID(0x0123_4567_89ab_cdef)]),
    ])
    func routesReadBackAsStatusPrintsThem(_ routes: RouteTable.Routes) {
        #expect(RouteTable.Routes(routes.description) == routes)
        #expect(RouteTable.Routes("sometimes") == nil && RouteTable.Routes("lazy but zz") == nil)
    }

    @Test func aCompleteMeshTakesEachOriginFromItself() {
        var table = Self.mesh()
        for origin in [Self.a, Self.b, Self.c] {
            let carriers = [Self.a, Self.b, Self.c].filter { table.routes(for: $0)!.isEager(origin) }
            #expect(carriers == [origin], "\(origin) comes from \(carriers), not from itself alone")
        }
        #expect(table.routes(for: Self.a)!.isEager(SiteID(0xF)), "the first link carries every other origin")
        #expect(table.received(Self.t(Self.b, 1), from: Self.b, duplicate: false, now: 10) == [])
        // A copy by a lazy link (an ask answered late) prunes nothing.
        #expect(table.received(Self.t(Self.b, 1), from: Self.a, duplicate: true, now: 11) == [])
        #expect(table.routes(for: Self.b)!.isEager(Self.b))
    }

    @Test func onlyLinksEagerForTheOriginArePruned() {
        var table = Self.mesh()
        let far = SiteID(0xF)
        _ = table.received(Self.t(far, 1), from: Self.b, duplicate: false, now: 10)
        #expect(table.received(Self.t(far, 1), from: Self.c, duplicate: true, now: 11) == [], "C is lazy for F: nothing to prune")
        let actions = table.received(Self.t(far, 1), from: Self.a, duplicate: true, now: 12)
        #expect(actions == [], "B delivered first but is lazy for F; A is the only eager link that delivered it")
        #expect(table.routes(for: Self.a)!.isEager(far), "never prune the one eager path")
    }

    /// A link that delivered a transaction and has closed since keeps nothing, nor does
    /// one that opened again, lazy for the origin now: the open link eager for it that
    /// delivers the transaction again stays eager.
    @Test(arguments: [false, true])
    func aLinkThatClosedSinceItDeliveredIsNotKept(reopened: Bool) {
        var table = RouteTable()
        let far = SiteID(0xF)
        _ = table.open(Self.a, now: 0)
        table.caughtUp(Self.a)
        _ = table.received(Self.t(far, 1), from: Self.a, duplicate: false, now: 1)
        _ = table.close(Self.a, now: 2)
        #expect(table.open(Self.b, now: 3).routes == .everything, "the only open link carries everything")
        table.caughtUp(Self.b)
        if reopened {
            _ = table.open(Self.a, now: 4)
            #expect(!table.routes(for: Self.a)!.isEager(far), "A opens again lazy but for its own origin")
        }
        #expect(table.received(Self.t(far, 1), from: Self.b, duplicate: true, now: 5) == [])
        #expect(table.routes(for: Self.b)!.isEager(far), "B, the one open link eager for F, keeps it")
    }

    /// F grafted onto B while A carries everything else: both eager for F. The copy
    /// that comes second is pruned, whichever link it came by.
    @Test(arguments: [false, true])
    func twoEagerLinksForAFarOriginBecomeOne(bFirst: Bool) {
        var table = RouteTable()
        _ = table.open(Self.a, now: 0)
        table.caughtUp(Self.a)
        _ = table.open(Self.b, now: 1)
        let far = SiteID(0xF)
        _ = table.offered([Self.offer(far, 1, at: 5)], by: Self.b, now: 10, isHeld: Self.nothingHeld)
        let graft = table.tick(now: 10 + 2_000, isHeld: Self.nothingHeld)
        #expect(graft == [.send(.init(lazyByDefault: true, exceptions: [Self.b, far]), to: Self.b), .ask(Self.t(far, 1), of: Self.b)])
        let (first, second) = bFirst ? (Self.b, Self.a) : (Self.a, Self.b)
        #expect(table.received(Self.t(far, 2), from: first, duplicate: false, now: 3_000) == [])
        let prune = table.received(Self.t(far, 2), from: second, duplicate: true, now: 3_001)
        #expect(
            prune
                == (bFirst
                    ? [.send(.init(lazyByDefault: false, exceptions: [Self.b, far]), to: Self.a)]
                    : [.send(.init(lazyByDefault: true, exceptions: [Self.b]), to: Self.b)]))
        #expect(table.received(Self.t(far, 2), from: second, duplicate: true, now: 3_002) == [], "nothing more to prune")
    }

    @Test func anOfferIsAskedForOnlyWhenNoEagerLinkDeliversIt() {
        var table = Self.mesh()
        _ = table.received(Self.t(Self.a, 5), from: Self.a, duplicate: false, now: 50)
        // C offers A's transaction 7, which A itself is still sending.
        #expect(table.offered([Self.offer(Self.a, 7, at: 40)], by: Self.c, now: 100, isHeld: Self.nothingHeld) == [])
        #expect(table.tick(now: 1_000, isHeld: Self.nothingHeld) == [], "within graftAfter")
        _ = table.received(Self.t(Self.a, 6), from: Self.a, duplicate: false, now: 1_900)
        #expect(table.tick(now: 2_500, isHeld: Self.nothingHeld) == [], "A made progress on its origin 600 ms ago")
        let actions = table.tick(now: 3_900, isHeld: Self.nothingHeld)
        #expect(actions == [.send(.init(lazyByDefault: true, exceptions: [Self.a, Self.c]), to: Self.c), .ask(Self.t(Self.a, 7), of: Self.c)])
        #expect(table.notedCount == 1, "noted until it is here")
        #expect(table.tick(now: 4_000, isHeld: Self.nothingHeld) == [], "asked once while an answer may come")
        // No answer (C closed before it, or lost it): asked again after graftAfter.
        #expect(table.tick(now: 5_900, isHeld: Self.nothingHeld) == [.ask(Self.t(Self.a, 7), of: Self.c)])
        _ = table.received(Self.t(Self.a, 7), from: Self.c, duplicate: false, now: 6_000)
        #expect(table.tick(now: 6_000, isHeld: { $0 == Self.t(Self.a, 7) }) == [], "applied with that piece")
        #expect(table.notedCount == 0)
        #expect(table.tick(now: 20_000, isHeld: Self.nothingHeld) == [])
    }

    /// In a line or a tree an origin beyond a lazy link comes by offers only: its first
    /// offer is asked at once, not after graftAfter; while this node is joining, after
    /// a quarter of it.
    /// An offer of a transaction applied here leaving out what this node takes now is
    /// asked `graftAfter` after the offer, however busy its origin: its eager links sent
    /// all they will of it.
    @Test func anOfferOfATransactionAppliedWithSomethingLeftOutIsAskedHoweverBusyItsOrigin() {
        var table = Self.mesh()
        let t = Self.t(Self.a, 1)
        _ = table.offered([Self.offer(Self.a, 1, at: 9)], by: Self.b, now: 0, leftOut: [t], isHeld: Self.nothingHeld)
        for now in stride(from: UInt64(500), to: 2_000, by: 500) {
            _ = table.received(Self.t(Self.a, now), from: Self.a, duplicate: false, now: now)
            #expect(table.tick(now: now, isHeld: Self.nothingHeld).isEmpty)
        }
        _ = table.received(Self.t(Self.a, 2_000), from: Self.a, duplicate: false, now: 2_000)
        #expect(table.tick(now: 2_000, isHeld: Self.nothingHeld).contains(.ask(t, of: Self.b)))
        // Not so one not applied here: A, busy with its origin, may still bring it.
        var other = Self.mesh()
        _ = other.offered([Self.offer(Self.a, 1, at: 9)], by: Self.b, now: 0, isHeld: Self.nothingHeld)
        _ = other.received(Self.t(Self.a, 2), from: Self.a, duplicate: false, now: 1_900)
        #expect(!other.tick(now: 2_000, isHeld: Self.nothingHeld).contains(.ask(t, of: Self.b)))
    }

    @Test func anOriginNoEagerLinkEverDeliveredIsGraftedAtOnce() {
        var table = Self.mesh()
        let far = SiteID(0xF)
        _ = table.offered([Self.offer(far, 1, at: 9)], by: Self.b, now: 0, isHeld: Self.nothingHeld)
        #expect(table.tick(now: 1, isHeld: Self.nothingHeld).contains(.ask(Self.t(far, 1), of: Self.b)))
        var joining = RouteTable()
        _ = joining.open(Self.a, now: 0)
        _ = joining.open(Self.b, now: 1)
        _ = joining.offered([Self.offer(far, 1, at: 9)], by: Self.b, now: 2, isHeld: Self.nothingHeld)
        #expect(joining.tick(now: 3, isHeld: Self.nothingHeld) == [], "A may still be streaming F's history")
        #expect(joining.tick(now: 502, isHeld: Self.nothingHeld).contains(.ask(Self.t(far, 1), of: Self.b)), "it would have sent some by now")
    }

    @Test func progressOnAnotherOriginDoesNotHoldAGraftBack() {
        var table = Self.mesh()
        let far = SiteID(0xF)
        _ = table.offered([Self.offer(far, 1, at: 9)], by: Self.b, now: 0, isHeld: Self.nothingHeld)
        for ms in stride(from: UInt64(100), to: 2_000, by: 100) {
            _ = table.received(Self.t(Self.c, ms), from: Self.a, duplicate: false, now: ms)
        }
        #expect(table.tick(now: 2_000, isHeld: Self.nothingHeld).contains(.ask(Self.t(far, 1), of: Self.b)))
    }

    @Test func anOfferDeliveredOrHeldIsNotAskedFor() {
        var table = Self.mesh()
        _ = table.offered([Self.offer(Self.a, 1, at: 3), Self.offer(Self.a, 2, at: 4)], by: Self.b, now: 0, isHeld: { $0.sequence == 2 })
        #expect(table.notedCount == 1, "a held one is not noted")
        _ = table.received(Self.t(Self.a, 1), from: Self.a, duplicate: false, now: 50)
        #expect(table.tick(now: 50, isHeld: { $0.sequence == 1 }) == [], "applied whole with the piece")
        #expect(table.notedCount == 0)
        #expect(table.tick(now: 60_000, isHeld: Self.nothingHeld) == [])
        // Held by the time of the tick (applied from an ask, in part after the coverage wait, or refused).
        _ = table.offered([Self.offer(Self.a, 3, at: 5)], by: Self.b, now: 70_000, isHeld: Self.nothingHeld)
        #expect(table.tick(now: 90_000, isHeld: { _ in true }) == [])
        #expect(table.notedCount == 0)
    }

    @Test func whenAnOriginsOwnLinkClosesTheDefaultLinkCarriesItAgain() {
        var table = Self.mesh()
        _ = table.received(Self.t(Self.b, 1), from: Self.b, duplicate: false, now: 0)
        #expect(table.close(Self.b, now: 5) == [.send(.init(lazyByDefault: false, exceptions: [Self.c]), to: Self.a)])
        #expect(table.isCarried(Self.b))
        // An offer of B's next transaction waits for A, which carries B again.
        _ = table.offered([Self.offer(Self.b, 2, at: 30)], by: Self.c, now: 10, isHeld: Self.nothingHeld)
        #expect(table.tick(now: 11, isHeld: Self.nothingHeld) == [])
    }

    @Test func anOriginNoLinkCarriesIsAskedForAtTheNextTick() {
        // The default link closes with an offer of its own origin noted: the heir takes
        // the default, and the offer, no longer carried by anyone, is asked at once.
        var table = RouteTable()
        _ = table.open(Self.a, now: 0)
        table.caughtUp(Self.a)
        _ = table.open(Self.b, now: 1)
        _ = table.offered([Self.offer(Self.a, 2, at: 30)], by: Self.b, now: 10, isHeld: Self.nothingHeld)
        let actions = table.close(Self.a, now: 11)
        #expect(actions == [.send(.everything, to: Self.b), .ask(Self.t(Self.a, 2), of: Self.b)])
    }

    @Test func whenTheLinkCarryingEverythingClosesAnotherTakesOver() {
        var table = Self.mesh()
        let far = SiteID(0xF)
        _ = table.offered([Self.offer(far, 1, at: 11), Self.offer(far, 2, at: 12)], by: Self.c, now: 0, isHeld: Self.nothingHeld)
        _ = table.offered([Self.offer(far, 2, at: 50), Self.offer(Self.c, 9, at: 51)], by: Self.b, now: 1, isHeld: Self.nothingHeld)
        let actions = table.close(Self.a, now: 100)
        #expect(
            actions == [
                .send(.init(lazyByDefault: false, exceptions: [Self.c]), to: Self.b),
                .send(.init(lazyByDefault: true, exceptions: [Self.c, far]), to: Self.c),
                .ask(Self.t(far, 1), of: Self.c),
                .ask(Self.t(far, 2), of: Self.c),
            ], "B, the oldest left, carries everything; what only A carried is asked of who offered it first")
        #expect(table.notedCount == 3, "the asked ones stay noted until they are here")
        #expect(table.tick(now: 101, isHeld: { $0.origin == far }) == [], "C's own transaction was never A's to carry")
        #expect(table.notedCount == 1)
        #expect(table.routes(for: Self.a) == nil)
    }

    /// An ask can go unanswered: the link asked closes first. The offer stays noted and
    /// is asked of the next link that offered it.
    @Test func anAskThatGoesUnansweredIsMadeOfTheNextLinkThatOffered() {
        var table = Self.mesh()
        let far = SiteID(0xF)
        _ = table.offered([Self.offer(far, 1, at: 10)], by: Self.b, now: 0, isHeld: Self.nothingHeld)
        _ = table.offered([Self.offer(far, 1, at: 20)], by: Self.c, now: 0, isHeld: Self.nothingHeld)
        _ = table.received(Self.t(far, 0), from: Self.a, duplicate: false, now: 0)
        #expect(table.tick(now: 2_000, isHeld: Self.nothingHeld).contains(.ask(Self.t(far, 1), of: Self.b)))
        #expect(table.resumeLimit(for: Self.c) == 19, "C's cursor stays before it while it is not here")
        let closed = table.close(Self.b, now: 2_100)
        #expect(closed.contains(.ask(Self.t(far, 1), of: Self.c)), "asked of C at once: B took the ask with it")
        #expect(table.notedCount == 1)
        _ = table.received(Self.t(far, 1), from: Self.c, duplicate: false, now: 2_200)
        _ = table.tick(now: 2_200, isHeld: { $0 == Self.t(far, 1) })
        #expect(table.notedCount == 0 && table.resumeLimit(for: Self.c) == nil)
    }

    @Test func theStoredCursorStaysBeforeAnOfferNotResolved() {
        var table = Self.mesh()
        #expect(table.resumeLimit(for: Self.b) == nil)
        _ = table.offered([Self.offer(Self.a, 4, at: 120), Self.offer(Self.a, 5, at: 90)], by: Self.b, now: 0, isHeld: Self.nothingHeld)
        _ = table.offered([Self.offer(Self.a, 5, at: 300)], by: Self.c, now: 0, isHeld: Self.nothingHeld)
        #expect(table.resumeLimit(for: Self.b) == 89)
        #expect(table.resumeLimit(for: Self.c) == 299)
        _ = table.received(Self.t(Self.a, 5), from: Self.a, duplicate: false, now: 5)
        #expect(table.resumeLimit(for: Self.b) == 89, "a piece of it came: it may still wait for the rest")
        _ = table.tick(now: 5, isHeld: { $0 == Self.t(Self.a, 5) })
        #expect(table.resumeLimit(for: Self.b) == 119)
        #expect(table.resumeLimit(for: Self.c) == nil)
    }

    /// C's link offers A's transaction 7 while A is part way through sending its
    /// pieces, and then A's link closes before the last: the offer, still noted, is
    /// asked of C at once. (Resolved by the first piece, it left the transaction
    /// waiting for a rest no link would send: C's stream had gone past it.)
    @Test func anOfferOfATransactionWaitingForItsOtherPiecesIsAskedWhenTheirLinkCloses() {
        var table = Self.mesh()
        _ = table.received(Self.t(Self.a, 7), from: Self.a, duplicate: false, now: 10)
        #expect(table.offered([Self.offer(Self.a, 7, at: 40)], by: Self.c, now: 20, isHeld: Self.nothingHeld) == [])
        _ = table.received(Self.t(Self.a, 7), from: Self.a, duplicate: false, now: 30)
        #expect(table.tick(now: 1_000, isHeld: Self.nothingHeld) == [], "A is still sending it")
        #expect(table.notedCount == 1)
        #expect(table.resumeLimit(for: Self.c) == 39, "C's cursor stays before it")
        let closed = table.close(Self.a, now: 1_100)
        #expect(closed.contains(.ask(Self.t(Self.a, 7), of: Self.c)), "\(closed)")
        // C's answer ends with its last piece: all C holds of it is here. Still waiting
        // (behind an earlier transaction of A, say), it is not asked of C again.
        _ = table.received(Self.t(Self.a, 7), from: Self.c, duplicate: false, now: 1_200)
        table.allSent(Self.t(Self.a, 7), by: Self.c)
        #expect(table.notedCount == 0 && table.resumeLimit(for: Self.c) == nil)
        #expect(table.tick(now: 60_000, isHeld: Self.nothingHeld) == [])
        // A's link alive but silent on its origin: asked after graftAfter instead.
        var stalled = Self.mesh()
        _ = stalled.received(Self.t(Self.a, 7), from: Self.a, duplicate: false, now: 10)
        _ = stalled.offered([Self.offer(Self.a, 7, at: 40)], by: Self.c, now: 20, isHeld: Self.nothingHeld)
        #expect(stalled.tick(now: 2_020, isHeld: Self.nothingHeld).contains(.ask(Self.t(Self.a, 7), of: Self.c)))
        // A last piece from a link that did not offer it (A's own) resolves nothing.
        stalled.allSent(Self.t(Self.a, 7), by: Self.a)
        #expect(stalled.notedCount == 1)
        // Two links offered it: the first one's last piece leaves the other's offer, asked next.
        _ = stalled.offered([Self.offer(Self.a, 7, at: 70)], by: Self.b, now: 2_030, isHeld: Self.nothingHeld)
        stalled.allSent(Self.t(Self.a, 7), by: Self.c)
        #expect(stalled.notedCount == 1 && stalled.resumeLimit(for: Self.c) == nil && stalled.resumeLimit(for: Self.b) == 69)
        #expect(stalled.tick(now: 4_100, isHeld: Self.nothingHeld).contains(.ask(Self.t(Self.a, 7), of: Self.b)))
    }

    @Test func tooManyOffersTurnTheBusiestLinkEager() {
        var table = RouteTable(configuration: .init(maximumNoted: 4))
        _ = table.open(Self.a, now: 0)
        table.caughtUp(Self.a)
        _ = table.open(Self.b, now: 1)
        _ = table.open(Self.c, now: 2)
        _ = table.offered([Self.offer(Self.d, 1, at: 70)], by: Self.c, now: 3, isHeld: Self.nothingHeld)
        let offers = (UInt64(1)...4).map { Self.offer(Self.a, $0, at: 10 + $0) }
        let actions = table.offered(offers, by: Self.b, now: 4, isHeld: Self.nothingHeld)
        #expect(actions == [.resubscribe(Self.b, after: 10)])
        #expect(table.routes(for: Self.b) == .everything)
        #expect(table.notedCount == 1, "C's offer stays")
        #expect(table.resumeLimit(for: Self.b) == nil)
    }

    @Test func eventsOfLinksNotOpenAreIgnored() {
        var table = Self.mesh()
        #expect(table.received(Self.t(Self.a, 1), from: Self.d, duplicate: true, now: 0) == [])
        #expect(table.offered([Self.offer(Self.a, 1, at: 1)], by: Self.d, now: 0, isHeld: Self.nothingHeld) == [])
        #expect(table.close(Self.d, now: 0) == [])
        #expect(table.notedCount == 0)
    }
}

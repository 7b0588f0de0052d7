import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalWire
import Testing

/// Freshness and the stale-replica refusal (PROTOCOL.md §8.10), with no store or
/// socket: the `Freshness` rules, the Hello check, and the Ping that carries it.
@Suite struct FreshnessTests {
    static let day: UInt64 = 86_400_000
    static let now: UInt64 = 1_800_000_000_000
    static let a = SiteID(0xA), b = SiteID(0xB), c = SiteID(0xC)

    @Test func aNodeHoldsWhatItsPeersVouchFor() {
        let f = Freshness(site: Self.a)
        #expect(f.takeChanges() == nil && f.entries.isEmpty)
        // b vouches for itself now, and for c as of a day ago; a's own entry is not taken.
        f.caughtUp(with: [Self.b: Self.now, Self.c: Self.now - Self.day, Self.a: 1])
        #expect(f.entries == [Self.b: Self.now, Self.c: Self.now - Self.day])
        #expect(f.takeChanges() == [Self.b: Self.now, Self.c: Self.now - Self.day])
        #expect(f.takeChanges() == nil, "nothing new since")
        // An older word changes nothing; a newer one raises the entry.
        f.caughtUp(with: [Self.b: Self.now - 5, Self.c: Self.now])
        #expect(f.entries == [Self.b: Self.now, Self.c: Self.now])
        #expect(f.vouching(now: Self.now + 7) == [Self.a: Self.now + 7, Self.b: Self.now, Self.c: Self.now])
    }

    /// Two nodes cut off together vouch for each other, never for the node they left:
    /// they stay stale for it.
    @Test func nodesCutOffTogetherStayStaleForTheRest() {
        let p = Freshness(site: Self.b), q = Freshness(site: Self.c)
        p.caughtUp(with: [Self.a: Self.now])
        q.caughtUp(with: p.vouching(now: Self.now))
        for hour in 1...1_000 {
            let t = Self.now + UInt64(hour) * 3_600_000
            q.caughtUp(with: p.vouching(now: t))
            p.caughtUp(with: q.vouching(now: t))
        }
        #expect(p.entries[Self.a] == Self.now && q.entries[Self.a] == Self.now)
        #expect(q.entries[Self.b] == Self.now + 1_000 * 3_600_000)
        let forgotten = Self.now + 31 * Self.day
        #expect(Freshness.refusal(peer: Self.b, peerFreshness: p.entries, peerHoldsOthersWrites: true, node: Self.a, forgottenThrough: forgotten) != nil)
        #expect(Freshness.refusal(peer: Self.c, peerFreshness: q.entries, peerHoldsOthersWrites: true, node: Self.a, forgottenThrough: forgotten) != nil)
    }

    @Test func aPeerHoldingDocumentsAndBehindTheNewestForgottenDeletionIsRefused() {
        let forgotten = Self.now - 30 * Self.day
        func refusal(_ entries: [SiteID: UInt64], holds: Bool = true, forgotten: UInt64 = forgotten) -> String? {
            Freshness.refusal(peer: Self.b, peerFreshness: entries, peerHoldsOthersWrites: holds, node: Self.a, forgottenThrough: forgotten)
        }
        #expect(refusal([:], forgotten: 0) == nil, "nothing forgotten")
        #expect(refusal([Self.a: forgotten]) == nil, "caught up through the newest deletion forgotten")
        #expect(refusal([:], holds: false) == nil, "a peer holding only its own writes brings nothing back")
        let behind = refusal([Self.a: forgotten - 1, Self.c: Self.now])
        #expect(behind?.hasPrefix("stale replica: site 000000000000000b caught up with site 000000000000000a only through ") == true, "\(behind ?? "")")
        #expect(behind?.contains("Start site 000000000000000b again from an empty data directory") == true)
        let never = refusal([Self.c: Self.now])
        #expect(never?.contains("has never caught up with site 000000000000000a (nor with a node that had)") == true, "\(never ?? "")")
    }

    static func machine(
        site: SiteID, freshness: [SiteID: UInt64] = [:], holds: Bool = true, forgotten: UInt64 = 0, role: PeerRole = .peer
    ) -> HandshakeStateMachine {
        HandshakeStateMachine(
            configuration: .init(
                siteID: site, nodeName: "n", meshName: role == .admin ? "" : "default", meshKey: nil, role: role,
                freshness: freshness, holdsOthersWrites: holds, forgottenThrough: forgotten))
    }

    @Test func theHandshakeRefusesAStalePeerBeforeEitherProof() {
        let forgotten = Self.now - 30 * Self.day
        var p = Self.machine(site: Self.b, freshness: [Self.a: forgotten - Self.day])
        var a = Self.machine(site: Self.a, forgotten: forgotten)
        let (endP, endA) = HandshakeStateMachineTests.run(&p, &a)
        let refused = HandshakeStateMachineTests.failure(endA)
        #expect(refused?.code == .staleReplica && refused?.fromPeer == false && refused?.peer == Self.b)
        let told = HandshakeStateMachineTests.failure(endP)
        #expect(told?.code == .staleReplica && told?.fromPeer == true, "the stale side hears why: \(String(describing: told))")
        #expect(told?.message.contains("Start site 000000000000000b again from an empty data directory") == true)
        #expect(!p.isEstablished && !a.isEstablished)

        // Two nodes that each forgot what the other missed both hear it, at once.
        var x = Self.machine(site: Self.b, forgotten: forgotten)
        var y = Self.machine(site: Self.c, forgotten: forgotten)
        let (endX, endY) = HandshakeStateMachineTests.run(&x, &y)
        #expect(HandshakeStateMachineTests.failure(endX)?.code == .staleReplica)
        #expect(HandshakeStateMachineTests.failure(endY)?.code == .staleReplica)

        // A peer caught up since, one holding only its own writes, and an admin client all connect.
        for var peer in [
            Self.machine(site: Self.b, freshness: [Self.a: forgotten]), Self.machine(site: Self.c, holds: false),
            Self.machine(site: SiteID(0), role: .admin),
        ] {
            var node = Self.machine(site: Self.a, forgotten: forgotten)
            guard case .established? = HandshakeStateMachineTests.run(&node, &peer).a else {
                Issue.record("expected \(peer.configuration.siteID) to connect")
                continue
            }
        }
    }

    @Test func helloCarriesFreshnessForPeersOnly() {
        var peer = Self.machine(site: Self.b, freshness: [Self.a: 1234, Self.c: 99], holds: false)
        var admin = Self.machine(site: SiteID(0), freshness: [Self.a: 1234], role: .admin)
        guard case .send(.hello(let hello))? = peer.start().first, case .send(.hello(let adminHello))? = admin.start().first else {
            Issue.record("expected Hellos")
            return
        }
        #expect(hello.freshness.map(\.siteID) == [0xA, 0xC] && hello.freshness.map(\.throughMillis) == [1234, 99], "newest first")
        #expect(hello.holdsOnlyOwnWrites)
        #expect(adminHello.freshness.isEmpty && !adminHello.holdsOnlyOwnWrites)
    }

    /// The publisher's Ping vouches only while the peer has acknowledged everything
    /// it asked for; a Ping that vouches tells the subscriber it caught up.
    @Test func aPingVouchesOnlyWhileThePeerIsCaughtUp() {
        var m = SessionStateMachineTests.machine(window: 2)
        m.localFreshness = [Self.a: 777, Self.c: 5]
        func ping(at now: UInt64) -> SessionMessage.Ping? {
            for action in m.handle(.tick, now: now) { if case .send(.ping(let p)) = action { return p } }
            return nil
        }
        #expect(ping(at: 5_000_000)?.freshness.isEmpty == true, "the peer has not subscribed yet")
        _ = m.handle(.logAdvanced(20), now: 5_050_000)
        let subscribed = m.handle(.received(SessionStateMachineTests.subscribe(SessionStateMachineTests.cars, generation: 1)), now: 5_100_000)
        guard let read = SessionStateMachineTests.pageRequest(subscribed) else {
            Issue.record("expected a page read, got \(subscribed)")
            return
        }
        _ = m.handle(.pageRead(ChangeLogPage(pieces: [SessionStateMachineTests.piece(1)], through: 20), ticket: read.ticket), now: 5_300_000)
        #expect(ping(at: 10_000_000)?.freshness.isEmpty == true, "a batch is unacknowledged")
        _ = m.handle(.received(SessionStateMachineTests.ack(20)), now: 10_100_000)
        #expect(ping(at: 15_000_000)?.freshness.map(\.throughMillis) == [777, 5], "caught up")
        _ = m.handle(.logAdvanced(30), now: 15_100_000)
        #expect(ping(at: 20_000_000)?.freshness.isEmpty == true, "behind again")

        var received = SessionMessage.Ping(nonce: 3, sentAtMicros: 0, freshness: [Freshness.Entry(site: SiteID(0xB), throughMillis: 555)])
        let actions = m.handle(.received(.ping(received)), now: 20_100_000)
        #expect(SessionStateMachineTests.sent(actions) == [SessionMessage.pong(received).wire])
        #expect(actions.contains { if case .caughtUp(let vouched) = $0 { return vouched == [Self.b: 555] } else { return false } })
        received.freshness = []
        #expect(!m.handle(.received(.ping(received)), now: 20_200_000).contains { if case .caughtUp = $0 { return true } else { return false } })
    }
}

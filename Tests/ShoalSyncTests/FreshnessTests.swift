import ShoalCRDT
import ShoalStore
import ShoalSync
import ShoalWire
import Testing

/// Freshness and the stale-replica refusal (PROTOCOL.md §8.11), with no store or
/// socket: the `Freshness` rules, the Hello check, and the Ping that carries it.
@Suite struct FreshnessTests {
    static let day: UInt64 = 86_400_000
    static let now: UInt64 = 1_800_000_000_000

    @Test func catchingUpWithAFreshPeerMakesThisNodeFreshNow() {
        let f = Freshness(freshThrough: Self.now - 40 * Self.day, horizon: .seconds(30 * 86_400))
        // A peer as stale as this node, or one that says nothing, changes nothing.
        #expect(f.caughtUp(withPeerFreshThrough: Self.now - 31 * Self.day, now: Self.now) == nil)
        #expect(f.caughtUp(withPeerFreshThrough: 0, now: Self.now) == nil)
        #expect(f.freshThrough == Self.now - 40 * Self.day)
        // A peer within the horizon: fresh now, and saved.
        #expect(f.caughtUp(withPeerFreshThrough: Self.now - 29 * Self.day, now: Self.now) == Self.now)
        #expect(f.freshThrough == Self.now)
        // Saved again only after it rose by 30 s, though it rises every time.
        #expect(f.caughtUp(withPeerFreshThrough: Self.now, now: Self.now + 10_000) == nil)
        #expect(f.freshThrough == Self.now + 10_000)
        #expect(f.caughtUp(withPeerFreshThrough: Self.now, now: Self.now + 30_000) == Self.now + 30_000)
        // It never falls.
        #expect(f.caughtUp(withPeerFreshThrough: Self.now, now: Self.now - Self.day) == nil)
        #expect(f.freshThrough == Self.now + 30_000)
    }

    @Test func aPeerLessFreshThanTheNewestForgottenDeletionIsRefused() {
        let forgotten = Self.now - 30 * Self.day
        #expect(Freshness.refusal(peer: SiteID(2), peerFreshThrough: 1, node: SiteID(1), forgottenThrough: 0) == nil, "nothing forgotten")
        #expect(Freshness.refusal(peer: SiteID(2), peerFreshThrough: forgotten, node: SiteID(1), forgottenThrough: forgotten) == nil)
        let stale = Freshness.refusal(peer: SiteID(2), peerFreshThrough: forgotten - 1, node: SiteID(1), forgottenThrough: forgotten)
        #expect(stale?.hasPrefix("stale replica: site 0000000000000002 learned the mesh's deletions only through ") == true, "\(stale ?? "")")
        #expect(stale?.contains("Start site 0000000000000002 again from an empty data directory") == true)
        let silent = Freshness.refusal(peer: SiteID(2), peerFreshThrough: 0, node: SiteID(1), forgottenThrough: forgotten)
        #expect(silent?.contains("does not say how recently it learned the mesh's deletions") == true, "an older peer is refused too")
    }

    static func machine(site: UInt64, fresh: UInt64, forgotten: UInt64, role: Shoal_V1_Role = .peer) -> HandshakeStateMachine {
        HandshakeStateMachine(
            configuration: .init(
                siteID: SiteID(site), nodeName: "n\(site)", meshName: site == 0 ? "" : "default", meshKey: nil, role: role,
                freshThrough: fresh, forgottenThrough: forgotten))
    }

    @Test func theHandshakeRefusesAStalePeerOnTheSideThatForgot() {
        let forgotten = Self.now - 30 * Self.day
        // b forgot deletions through `forgotten`; a learned deletions only a day before that.
        var a = Self.machine(site: 1, fresh: forgotten - Self.day, forgotten: 0)
        var b = Self.machine(site: 2, fresh: Self.now, forgotten: forgotten)
        let (endA, endB) = HandshakeStateMachineTests.run(&a, &b)
        let refused = HandshakeStateMachineTests.failure(endB)
        #expect(refused?.code == .staleReplica && refused?.fromPeer == false && refused?.peer == SiteID(1))
        // b sends no proof to a stale peer: a hears why while still in the handshake.
        #expect(!a.isEstablished)
        let told = HandshakeStateMachineTests.failure(endA)
        #expect(told?.code == .staleReplica && told?.fromPeer == true, "the stale side hears why: \(String(describing: told))")
        #expect(told?.message.contains("Start site 0000000000000001 again from an empty data directory") == true)
        // A peer fresh since then connects; an admin client always does.
        var fresh = Self.machine(site: 3, fresh: forgotten, forgotten: 0)
        var b2 = Self.machine(site: 2, fresh: Self.now, forgotten: forgotten)
        let (endFresh, endB2) = HandshakeStateMachineTests.run(&fresh, &b2)
        guard case .established? = endFresh, case .established? = endB2 else {
            Issue.record("expected a fresh peer to connect, got \(String(describing: endFresh)) / \(String(describing: endB2))")
            return
        }
        var admin = Self.machine(site: 0, fresh: 0, forgotten: 0, role: .admin)
        var b3 = Self.machine(site: 2, fresh: Self.now, forgotten: forgotten)
        guard case .established? = HandshakeStateMachineTests.run(&b3, &admin).a else {
            Issue.record("expected the admin client to be served")
            return
        }
    }

    /// A wrong key is told as such, stale or not.
    @Test func aWrongKeyIsToldBeforeStaleness() {
        var a = HandshakeStateMachine(
            configuration: .init(siteID: SiteID(1), nodeName: "a", meshName: "m", meshKey: HandshakeStateMachineTests.key))
        var b = HandshakeStateMachine(
            configuration: .init(
                siteID: SiteID(2), nodeName: "b", meshName: "m", meshKey: Array("another key entirely!".utf8),
                freshThrough: Self.now, forgottenThrough: Self.now))
        let (_, endB) = HandshakeStateMachineTests.run(&a, &b)
        #expect(HandshakeStateMachineTests.failure(endB)?.code == .meshKeyMismatch)
    }

    @Test func helloCarriesFreshnessForPeersOnly() {
        var peer = Self.machine(site: 1, fresh: 1234, forgotten: 0)
        var admin = Self.machine(site: 0, fresh: 1234, forgotten: 0, role: .admin)
        guard case .send(.hello(let hello))? = peer.start().first, case .send(.hello(let adminHello))? = admin.start().first else {
            Issue.record("expected Hellos")
            return
        }
        #expect(hello.freshThroughMillis == 1234 && adminHello.freshThroughMillis == 0)
    }

    /// The publisher's Ping carries its freshness only while the peer has
    /// acknowledged everything it asked for; a Ping that carries one tells the
    /// subscriber it caught up.
    @Test func aPingCarriesFreshnessOnlyWhileThePeerIsCaughtUp() {
        var m = SessionStateMachineTests.machine(window: 2)
        m.localFreshThrough = 777
        func ping(at now: UInt64) -> Shoal_V1_Ping? {
            for action in m.handle(.tick, now: now) { if case .send(.ping(let p)) = action { return p } }
            return nil
        }
        #expect(ping(at: 5_000_000)?.freshThroughMillis == 0, "the peer has not subscribed yet")
        _ = m.handle(.logAdvanced(20), now: 5_050_000)
        let subscribed = m.handle(.received(SessionStateMachineTests.subscribe(SessionStateMachineTests.cars, generation: 1)), now: 5_100_000)
        guard let read = SessionStateMachineTests.pageRequest(subscribed) else {
            Issue.record("expected a page read, got \(subscribed)")
            return
        }
        _ = m.handle(.pageRead(ChangeLogPage(pieces: [SessionStateMachineTests.piece(1)], through: 20), ticket: read.ticket), now: 5_300_000)
        #expect(ping(at: 10_000_000)?.freshThroughMillis == 0, "a batch is unacknowledged")
        _ = m.handle(.received(SessionStateMachineTests.ack(20)), now: 10_100_000)
        #expect(ping(at: 15_000_000)?.freshThroughMillis == 777, "caught up")
        _ = m.handle(.logAdvanced(30), now: 15_100_000)
        #expect(ping(at: 20_000_000)?.freshThroughMillis == 0, "behind again")

        var received = Shoal_V1_Ping()
        received.nonce = 3
        received.freshThroughMillis = 555
        let actions = m.handle(.received(.ping(received)), now: 20_100_000)
        #expect(SessionStateMachineTests.sent(actions) == [.pong(received)])
        #expect(actions.contains { if case .caughtUp(555) = $0 { return true } else { return false } })
        received.freshThroughMillis = 0
        #expect(!m.handle(.received(.ping(received)), now: 20_200_000).contains { if case .caughtUp = $0 { return true } else { return false } })
    }
}

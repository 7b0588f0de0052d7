import ShoalCRDT
@testable import ShoalSync
import Testing

/// Per-site traffic for metrics: counters that outlive the sessions they counted.
struct PeerRegistryTests {
    @Test func trafficAddsClosedSessionsToLiveOnes() {
        let registry = PeerRegistry()
        let local = SiteID(1), peer = SiteID(2)
        let first = registry.open(direction: .outbound, address: "127.0.0.1:1") {}
        _ = registry.establish(first, site: peer, localSite: local)
        registry.update(first) {
            $0.bytesIn += 100
            $0.bytesOut += 40
        }
        registry.countDeltas(first, in: 3, out: 5)
        registry.remove(first)
        #expect(registry.traffic()[peer] == PeerTraffic(bytesIn: 100, bytesOut: 40, deltasIn: 3, deltasOut: 5))

        let second = registry.open(direction: .inbound, address: "127.0.0.1:2") {}
        registry.update(second) { $0.bytesIn += 7 }
        #expect(registry.traffic()[peer]?.bytesIn == 100, "bytes of a session not yet named by its handshake are not a site's")
        _ = registry.establish(second, site: peer, localSite: local)
        registry.countDeltas(second, out: 1)
        #expect(registry.traffic()[peer] == PeerTraffic(bytesIn: 107, bytesOut: 40, deltasIn: 3, deltasOut: 6))
        #expect(registry.snapshots().first?.deltasOut == 6, "status shows the site's deltas over every session, as before")

        let stranger = registry.open(direction: .inbound, address: "127.0.0.1:3") {}
        registry.update(stranger) { $0.bytesIn += 9 }
        registry.remove(stranger)
        let admin = registry.open(direction: .inbound, address: "127.0.0.1:4") {}
        _ = registry.establish(admin, site: SiteID(0), localSite: local)
        registry.update(admin) {
            $0.state = "admin"
            $0.bytesIn += 50
        }
        #expect(registry.traffic()[SiteID(0)] == nil, "the CLI is no peer")
        registry.remove(admin)
        #expect(registry.traffic().count == 1)
    }
}

/// The node's amplification as status reports it: received over new, each site once.
struct NodeStatusAmplificationTests {
    static func peer(_ site: UInt64?, _ state: String, deltasIn: UInt64, duplicate: UInt64) -> NodeStatus.Peer {
        var peer = NodeStatus.Peer(
            siteID: site.map(SiteID.init), name: "", address: "", state: state, direction: "outbound", rttMillis: nil,
            bytesIn: 0, bytesOut: 0)
        peer.deltasIn = deltasIn
        peer.deltasDuplicate = duplicate
        return peer
    }

    @Test func aSiteListedTwiceCountsOnceAndNothingNewMeansNoRatio() {
        var status = NodeStatus(siteID: SiteID(1), name: "n", listen: "", meshName: "default", changeLogSequence: 0)
        #expect(status.amplification == nil, "nothing received yet")
        status.peers = [
            Self.peer(2, "connected", deltasIn: 300, duplicate: 200),
            // The same site again, as a dial target: the site's counters, not more.
            Self.peer(2, "disconnected", deltasIn: 300, duplicate: 200),
            Self.peer(3, "connected", deltasIn: 100, duplicate: 0),
            Self.peer(nil, "connecting", deltasIn: 0, duplicate: 0),
        ]
        #expect(status.deltasReceived.total == 400 && status.deltasReceived.duplicate == 200)
        #expect(status.amplification == 2.0)
        status.peers = [Self.peer(2, "connected", deltasIn: 50, duplicate: 50)]
        #expect(status.amplification == nil, "only copies: no new delta to divide by")
    }
}

extension PeerRegistryTests {
    /// Refusals wait for a peer's next Ack while it has a session: as many as fit in the
    /// byte budget go, the rest wait for the next; a long reason is cut at a character;
    /// none are kept once its last session ends, and none are noted without one.
    @Test func refusalsWaitForTheNextAckWhileThePeerHasASession() {
        let registry = PeerRegistry()
        let local = SiteID(1), peer = SiteID(2)
        func refusal(_ n: UInt64, _ reason: String = "may not write staff") -> SessionMessage.Refusal {
            .init(id: TransactionID(origin: peer, sequence: n), code: .permissionDenied, reason: reason)
        }
        registry.noteRefusal(refusal(1), to: peer)
        #expect(registry.takeRefusals(for: peer, fitting: 10_000).isEmpty, "no session: nothing kept")

        let session = registry.open(direction: .inbound, address: "127.0.0.1:1") {}
        _ = registry.establish(session, site: peer, localSite: local)
        for n: UInt64 in 1...3 { registry.noteRefusal(refusal(n), to: peer) }
        registry.noteRefusal(refusal(3), to: peer)
        let long = String(repeating: "é", count: 300)
        registry.noteRefusal(refusal(4, long), to: peer)
        // Each counts its reason (19 bytes) and 32: two fit in 152, not three (153).
        #expect(registry.takeRefusals(for: peer, fitting: 152).map(\.id.sequence) == [1, 2])
        let rest = registry.takeRefusals(for: peer, fitting: 10_000)
        #expect(rest.map(\.id.sequence) == [3, 4], "the third noted once")
        let cut = rest.last?.reason ?? ""
        #expect(cut.utf8.count <= SessionMessage.Refusal.maximumReasonBytes && cut.hasSuffix("...") && !cut.contains("\u{FFFD}"))
        #expect(registry.takeRefusals(for: peer, fitting: 10_000).isEmpty, "taken once")

        for n in 5...70 { registry.noteRefusal(refusal(UInt64(n)), to: peer) }
        registry.remove(session)
        let again = registry.open(direction: .inbound, address: "127.0.0.1:2") {}
        _ = registry.establish(again, site: peer, localSite: local)
        #expect(registry.takeRefusals(for: peer, fitting: 100_000).isEmpty, "dropped with the last session")
        for n in 1...70 { registry.noteRefusal(refusal(UInt64(n)), to: peer) }
        #expect(registry.takeRefusals(for: peer, fitting: 100_000).count == SessionMessage.Refusal.perAck)
    }

    /// Of two sessions with one site, the one the smaller site dialed stays; of two the
    /// same site dialed, the older (PROTOCOL.md section 1): one site may be several hubs,
    /// each dialing on its own, which preferring the newer would set closing each
    /// other's sessions for ever.
    @Test(arguments: [
        // (local site, peer site, directions in the order opened, which is kept)
        (1, 2, [ConnectionDirection.outbound, .inbound], 0),
        (1, 2, [ConnectionDirection.inbound, .outbound], 1),
        (2, 1, [ConnectionDirection.outbound, .inbound], 1),
        (2, 1, [ConnectionDirection.inbound, .outbound], 0),
        (1, 2, [ConnectionDirection.inbound, .inbound], 0),
        (2, 1, [ConnectionDirection.inbound, .inbound], 0),
        (1, 2, [ConnectionDirection.outbound, .outbound], 0),
    ])
    func ofTwoSessionsWithOneSiteTheSmallerSitesDialStaysThenTheOlder(
        local: UInt64, peer: UInt64, directions: [ConnectionDirection], kept: Int
    ) {
        let registry = PeerRegistry()
        var ids: [Int] = []
        for (n, direction) in directions.enumerated() {
            ids.append(registry.open(direction: direction, address: "127.0.0.1:\(n + 1)") {})
        }
        let first = registry.establish(ids[0], site: SiteID(peer), localSite: SiteID(local))
        #expect(first.keep && first.evict == nil, "alone, it stays")
        let second = registry.establish(ids[1], site: SiteID(peer), localSite: SiteID(local))
        #expect(second.keep == (kept == 1))
        #expect((second.evict != nil) == (kept == 1), "the first is closed when the second stays")
        let states = registry.snapshots().sorted { $0.address < $1.address }.map(\.state)
        #expect(states == (kept == 1 ? ["disconnected", "connected"] : ["connected", "handshaking"]))
    }

    /// A session whose peer closed the connection is no rival from then on, though its
    /// loop is still busy: the peer, which gave up on it and dialed again, is let in at
    /// once. Before, a hub whose session was stuck in a long page read refused a
    /// device's redials as duplicates for up to 18 s (the hub checker's seed
    /// 4216585026285580600).
    @Test func aSessionWhosePeerClosedTheConnectionRefusesNoRedial() {
        let registry = PeerRegistry()
        let local = SiteID(2), peer = SiteID(1)
        let old = registry.open(direction: .inbound, address: "127.0.0.1:1") {}
        #expect(registry.establish(old, site: peer, localSite: local).keep)
        let refused = registry.open(direction: .inbound, address: "127.0.0.1:2") {}
        #expect(!registry.establish(refused, site: peer, localSite: local).keep, "both live: the older stays")
        registry.remove(refused)
        registry.inboundEnded(old)
        let redial = registry.open(direction: .inbound, address: "127.0.0.1:3") {}
        let admitted = registry.establish(redial, site: peer, localSite: local)
        #expect(admitted.keep && admitted.evict == nil)
        #expect(registry.snapshots().filter { $0.state == "connected" }.map(\.address) == ["127.0.0.1:3"])
    }
}

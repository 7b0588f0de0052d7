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

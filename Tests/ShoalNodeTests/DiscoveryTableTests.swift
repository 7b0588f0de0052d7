import ShoalCRDT
import ShoalNode
import ShoalSync
import Testing

/// Whom discovery dials, with no socket (PROTOCOL.md §16.4).
struct DiscoveryTableTests {
    static func announcement(_ site: UInt64, addresses: [String] = ["127.0.0.1:7471"], versions: ClosedRange<UInt32> = 1...2)
        -> Announcement
    {
        Announcement(meshName: "m", siteID: SiteID(site), nodeName: "n\(site)", listenAddresses: addresses, versions: versions, sequence: 1)
    }

    @Test func theSmallerSiteDialsAtOnceTheLargerAfterTheGrace() {
        let t0 = ContinuousClock.now
        var table = DiscoveryTable(ownSite: SiteID(5), expiry: .seconds(5), grace: .seconds(3))
        #expect(table.heard(Self.announcement(9), from: "127.0.0.1", at: t0) == .new(SiteID(9), address: "127.0.0.1:7471"))
        #expect(table.heard(Self.announcement(2), from: "127.0.0.1", at: t0) == .new(SiteID(2), address: "127.0.0.1:7471"))
        #expect(table.shouldDial(SiteID(9), at: t0), "5 < 9: this node dials")
        #expect(!table.shouldDial(SiteID(2), at: t0), "2 < 5: the other node dials first")
        #expect(table.shouldDial(SiteID(2), at: t0 + .seconds(3)), "unless it has not within the grace period")
        #expect(table.heard(Self.announcement(9), from: "127.0.0.1", at: t0 + .seconds(1)) == .refreshed)
    }

    @Test func itselfAndIncompatibleNodesAreNotDialed() {
        var table = DiscoveryTable(ownSite: SiteID(5), expiry: .seconds(5), grace: .seconds(3))
        #expect(table.heard(Self.announcement(5), from: "127.0.0.1", at: .now) == .itself)
        #expect(table.heard(Self.announcement(6, versions: 1...1), from: "127.0.0.1", at: .now) == .incompatible)
        #expect(table.entries.isEmpty)
    }

    @Test func sitesNotHeardExpire() {
        let t0 = ContinuousClock.now
        var table = DiscoveryTable(ownSite: SiteID(5), expiry: .seconds(5), grace: .seconds(3))
        _ = table.heard(Self.announcement(9), from: "127.0.0.1", at: t0)
        _ = table.heard(Self.announcement(7), from: "127.0.0.1", at: t0 + .seconds(4))
        #expect(table.expire(at: t0 + .seconds(6)) == [SiteID(9)])
        #expect(!table.isFresh(SiteID(9), at: t0 + .seconds(6)) && table.isFresh(SiteID(7), at: t0 + .seconds(6)))
        #expect(!table.shouldDial(SiteID(9), at: t0 + .seconds(6)))
    }

    @Test(arguments: [
        (["10.0.0.7:7470"], "10.0.0.7", "10.0.0.7:7470"),
        (["0.0.0.0:7480"], "10.0.0.7", "10.0.0.7:7480"),
        (["127.0.0.1:7480", "10.0.0.7:7490"], "10.0.0.7", "10.0.0.7:7490"),
        (["203.0.113.9:7475"], "10.0.0.7", "10.0.0.7:7475"),
        ([String](), "10.0.0.7", "10.0.0.7:7470"),
    ])
    func theAddressDialedIsOnTheHostHeard(addresses: [String], source: String, expected: String) {
        var table = DiscoveryTable(ownSite: SiteID(1), expiry: .seconds(5), grace: .seconds(3))
        #expect(table.heard(Self.announcement(2, addresses: addresses), from: source, at: .now) == .new(SiteID(2), address: expected))
    }
}

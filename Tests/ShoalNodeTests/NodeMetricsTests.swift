import Metrics
import NIOHTTP1
import ShoalCRDT
@testable import ShoalNode
@testable import ShoalSync
import Testing

/// The metrics a scrape renders from what it read, and the one route it serves.
struct NodeMetricsTests {
    static let a = SiteID(0xA1), b = SiteID(0xB2)

    static func peer(_ site: SiteID?, _ state: String, lag: UInt64? = nil) -> PeerSnapshot {
        var p = PeerSnapshot(
            siteID: site, name: "", address: "127.0.0.1:1", state: state, direction: .outbound, rttMillis: nil, bytesIn: 0,
            bytesOut: 0, lastError: nil, subscriptions: [])
        p.lagDeltas = lag
        return p
    }

    /// The value of the sample `series` (name and labels, as written) in exposition text.
    static func value(_ text: String, _ series: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last!) }
    }

    @Test func aScrapeShowsWhatTheNodeKnows() throws {
        let metrics = NodeMetrics()
        var reading = NodeMetrics.Reading()
        reading.peers = [Self.peer(Self.a, "connected", lag: 7), Self.peer(Self.b, "connected"), Self.peer(nil, "connecting")]
        reading.traffic = [Self.a: PeerTraffic(bytesIn: 10, bytesOut: 2000, deltasIn: 1, deltasOut: 30, deltasDuplicate: 1)]
        reading.committedLocal = 5
        reading.appliedRemote = 4
        reading.waiting = 2
        reading.partial = 1
        reading.storeBytes = 4096
        reading.changeLogRows = 30
        metrics.commitDuration.record(duration: .milliseconds(3))
        let text = metrics.render(reading)
        let site = Self.a.description
        #expect(Self.value(text, "shoal_peers{state=\"connected\"}") == 2)
        #expect(Self.value(text, "shoal_peers{state=\"connecting\"}") == 1)
        #expect(Self.value(text, "shoal_peers{state=\"disconnected\"}") == 0, "every state shows, zero or not")
        #expect(Self.value(text, "shoal_peer_sent_bytes_total{peer_site=\"\(site)\"}") == 2000)
        #expect(Self.value(text, "shoal_peer_received_bytes_total{peer_site=\"\(site)\"}") == 10)
        #expect(Self.value(text, "shoal_peer_sent_deltas_total{peer_site=\"\(site)\"}") == 30)
        #expect(Self.value(text, "shoal_peer_received_deltas_total{peer_site=\"\(site)\"}") == 1)
        #expect(Self.value(text, "shoal_peer_received_duplicate_deltas_total{peer_site=\"\(site)\"}") == 1)
        #expect(Self.value(text, "shoal_peer_lag_deltas{peer_site=\"\(site)\"}") == 7)
        #expect(Self.value(text, "shoal_transactions_committed_total") == 5)
        #expect(Self.value(text, "shoal_transactions_applied_remote_total") == 4)
        #expect(Self.value(text, "shoal_transactions_waiting") == 2)
        #expect(Self.value(text, "shoal_transactions_partial") == 1)
        #expect(Self.value(text, "shoal_store_size_bytes") == 4096)
        #expect(Self.value(text, "shoal_change_log_rows") == 30)
        #expect(Self.value(text, "shoal_commit_duration_seconds_count") == 1)
        #expect(Self.value(text, "shoal_commit_duration_seconds_bucket{le=\"0.005\"}") == 1)
        #expect(Self.value(text, "shoal_remote_apply_duration_seconds_count") == 0)
        #expect(text.contains("# TYPE shoal_peer_sent_bytes_total counter"))
        #expect(text.contains("# TYPE shoal_commit_duration_seconds histogram"))

        // Counters follow the node's totals; a peer gone from the connected ones loses its lag.
        reading.committedLocal = 9
        reading.peers = [Self.peer(Self.b, "connected", lag: 0)]
        let next = metrics.render(reading)
        #expect(Self.value(next, "shoal_transactions_committed_total") == 9)
        #expect(!next.contains("shoal_peer_lag_deltas{peer_site=\"\(site)\"}"))
        #expect(Self.value(next, "shoal_peer_lag_deltas{peer_site=\"\(Self.b.description)\"}") == 0)
    }

    @Test func twoNodesKeepTheirOwnRegistries() {
        let one = NodeMetrics(), two = NodeMetrics()
        one.commitDuration.record(duration: .milliseconds(1))
        #expect(Self.value(one.render(.init()), "shoal_commit_duration_seconds_count") == 1)
        #expect(Self.value(two.render(.init()), "shoal_commit_duration_seconds_count") == 0)
    }

    @Test(arguments: [
        (HTTPMethod.GET, "/metrics", HTTPResponseStatus.ok),
        (.HEAD, "/metrics", .ok),
        (.GET, "/metrics?x=1", .ok),
        (.POST, "/metrics", .methodNotAllowed),
        (.GET, "/", .notFound),
        (.GET, "/metricsx", .notFound),
    ])
    func routes(method: HTTPMethod, uri: String, status: HTTPResponseStatus) {
        let route = MetricsServer.Route.of(method: method, uri: uri)
        #expect(route.status == status)
        #expect(route.metrics == (status == .ok))
    }
}

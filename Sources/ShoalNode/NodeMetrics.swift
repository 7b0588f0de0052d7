import Metrics
public import Prometheus
public import ShoalCRDT
package import ShoalStorage
public import ShoalSync
import Foundation

/// A node's metrics in Prometheus's text format, from a registry of its own.
///
/// Most values are read when Prometheus scrapes, from what the node already keeps
/// for `shoal status` (peers, their bytes and deltas, lag, transaction counts, the
/// change log), so the sync and store paths carry no counters for them. Only the two
/// latency histograms are fed as work happens, one sample per store commit.
///
/// The registry belongs to the node rather than to the process-wide `MetricsSystem`,
/// so several nodes in one process (tests, apps that embed two) keep apart.
public final class NodeMetrics: Sendable {
    /// What this node's `/metrics` serves.
    public let registry: PrometheusCollectorRegistry
    /// Local commits that wrote something: change-log rows and `COMMIT`.
    let commitDuration: Metrics.Timer
    /// Commits of received transactions by the inbound pipeline, one per store write transaction.
    let remoteApplyDuration: Metrics.Timer
    /// Scrapes take turns: each sets the values it read, then emits them. Holds the
    /// per-peer lag gauges last set, to drop those of peers that went away.
    private let scrape = Locked<[String: Prometheus.Gauge]>([:])

    /// The peer states `shoal_peers` always shows, zero or not.
    static let peerStates = ["connecting", "handshaking", "connected", "disconnected"]

    /// Histogram buckets for commits: SQLite commits on a local disk take well under 5 ms.
    static let durationBuckets: [Duration] = [
        .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
        .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .seconds(2), .seconds(5), .seconds(10),
    ]

    public init() {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        let factory = PrometheusMetricsFactory(registry: registry)
        func timer(_ name: String, _ help: String) -> Metrics.Timer {
            let histogram = registry.makeDurationHistogram(
                descriptor: Self.descriptor(name, help), buckets: Self.durationBuckets)
            return Metrics.Timer(label: name, dimensions: [], handler: histogram, factory: factory)
        }
        commitDuration = timer(
            "shoal_commit_duration_seconds", "Time to commit a local read-write transaction that wrote something.")
        remoteApplyDuration = timer(
            "shoal_remote_apply_duration_seconds",
            "Time to commit one batch of received transactions (one write transaction of the inbound pipeline).")
    }

    static func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    /// What a scrape reads from the node before it sets any metric.
    public struct Reading: Sendable {
        public var peers: [PeerSnapshot] = []
        public var traffic: [SiteID: PeerTraffic] = [:]
        public var committedLocal: UInt64 = 0
        public var appliedRemote: UInt64 = 0
        public var completedLater: UInt64 = 0
        public var refused: UInt64 = 0
        public var waiting = 0
        public var partial = 0
        public var storeBytes: UInt64 = 0
        public var changeLogRows: UInt64 = 0

        public init() {}
    }

    /// Sets every metric from `reading` and returns the exposition text.
    public func render(_ reading: Reading) -> String {
        scrape.withLock { lastLag in
            func gauge(_ name: String, _ help: String, _ labels: [(String, String)] = []) -> Prometheus.Gauge {
                labels.isEmpty
                    ? registry.makeGauge(descriptor: Self.descriptor(name, help))
                    : registry.makeGauge(descriptor: Self.descriptor(name, help), labels: labels)
            }
            func counter(_ name: String, _ help: String, _ value: UInt64, _ labels: [(String, String)] = []) {
                let counter =
                    labels.isEmpty
                    ? registry.makeCounter(descriptor: Self.descriptor(name, help))
                    : registry.makeCounter(descriptor: Self.descriptor(name, help), labels: labels)
                counter.reset()
                counter.increment(by: Int64(clamping: value))
            }

            let peers = reading.peers.filter { $0.state != "admin" }
            for state in Self.peerStates {
                gauge("shoal_peers", "Peer connections and dial targets, by state (as shoal status lists them).", [("state", state)])
                    .set(Double(peers.count { $0.state == state }))
            }
            for (site, traffic) in reading.traffic {
                let label = [("peer_site", site.description)]
                counter("shoal_peer_received_bytes_total", "Bytes received from a peer site, over every session since the node started.", traffic.bytesIn, label)
                counter("shoal_peer_sent_bytes_total", "Bytes sent to a peer site, over every session since the node started.", traffic.bytesOut, label)
                counter("shoal_peer_received_deltas_total", "Deltas received from a peer site since the node started.", traffic.deltasIn, label)
                counter("shoal_peer_sent_deltas_total", "Deltas sent to a peer site since the node started.", traffic.deltasOut, label)
                counter(
                    "shoal_peer_received_duplicate_deltas_total",
                    "Deltas received from a peer site that this node held already (another path, a resend), since the node started.",
                    traffic.deltasDuplicate, label)
            }
            var lag: [String: Prometheus.Gauge] = [:]
            for peer in peers where peer.state == "connected" {
                guard let site = peer.siteID, let deltas = peer.lagDeltas else { continue }
                let g = gauge(
                    "shoal_peer_lag_deltas", "Rows of this node's change log after the last one the peer acknowledged.",
                    [("peer_site", site.description)])
                g.set(Double(deltas))
                lag[site.description] = g
            }
            for (site, stale) in lastLag where lag[site] == nil { registry.unregisterGauge(stale) }
            lastLag = lag

            counter("shoal_transactions_committed_total", "Local read-write transactions committed since the node started.", reading.committedLocal)
            counter("shoal_transactions_applied_remote_total", "Remote transactions applied whole since the node started.", reading.appliedRemote)
            counter(
                "shoal_transactions_completed_later_total",
                "Remote transactions applied in part, then completed when their missing pieces arrived.", reading.completedLater)
            counter(
                "shoal_transactions_refused_total",
                "Remote transactions refused whole since the node started: a document they write is over this node's limits.",
                reading.refused)
            gauge("shoal_transactions_waiting", "Remote transactions held back, waiting for pieces their subscriptions cover.")
                .set(Double(reading.waiting))
            gauge("shoal_transactions_partial", "Remote transactions applied in part, still missing pieces.")
                .set(Double(reading.partial))
            gauge("shoal_store_size_bytes", "Size of the node's store on disk (SQLite: the database, WAL and shared-memory files).")
                .set(Double(reading.storeBytes))
            gauge("shoal_change_log_rows", "Rows in the change log.").set(Double(reading.changeLogRows))
            return registry.emitToString()
        }
    }
}

extension ShoalNode {
    /// Reads the node's current state, as `status` does, for a scrape.
    func metricsReading() async throws(ShoalError) -> NodeMetrics.Reading {
        var reading = NodeMetrics.Reading()
        reading.peers = sync.peers()
        reading.traffic = sync.traffic()
        reading.committedLocal = storage.committedLocalTransactions
        let pipeline = sync.pipeline.status
        reading.appliedRemote = pipeline.appliedRemote
        reading.completedLater = pipeline.completedLater
        reading.refused = pipeline.refused
        reading.waiting = pipeline.waiting.count
        reading.partial = pipeline.partial.count
        reading.storeBytes = storage.storeBytes()
        reading.changeLogRows = try await storage.changeLogRowCount()
        return reading
    }

    /// This node's metrics in Prometheus's text format, read now.
    package func renderMetrics() async throws(ShoalError) -> String {
        metrics.render(try await metricsReading())
    }
}

import ArgumentParser
import ShoalStorage
import Logging
import ServiceLifecycle
import UnixSignals
import ShoalNode

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Start a node and serve until SIGINT or SIGTERM; SIGHUP re-reads the TLS files.",
        discussion: """
            Every flag is also a key of the TOML file --config reads, under the same \
            name without the dashes (max-frame-size = 1048576, peer = ["10.0.0.2:7470"]); \
            a flag given on the command line wins over the file. \
            deploy/shoal.example.toml lists them all.
            """
    )

    @Option(name: .long, help: "A TOML file of settings; flags given here override it.")
    var config: String?

    @Option(name: .long, help: "Directory for the node's database (created if missing).")
    var data: String?

    @Option(name: .long, help: "Address to accept peers and the CLI on, HOST:PORT (default 0.0.0.0:7470; port 0: any free port).")
    var listen: String?

    @Option(name: .long, help: "A readable name for this node (default: shoal- and its site ID's first digits).")
    var name: String?

    @Option(name: .long, help: "A peer to connect to, HOST:PORT. Repeat for several.")
    var peer: [String] = []

    @Option(name: .long, help: "A sync subscription: a SELECT query of what to replicate from peers. Repeatable.")
    var subscribe: [String] = []

    @Option(name: .long, help: "The mesh name; peers must use the same one (default: default).")
    var mesh: String?

    @Option(name: .long, help: "A file holding the mesh key (at least 16 bytes); peers must hold the same key.")
    var meshKeyFile: String?

    @Option(name: .long, help: "A file holding the key admin clients (the CLI) must prove instead of the mesh key.")
    var adminKeyFile: String?

    @Flag(inversion: .prefixedNo, help: "Look for peers of the same mesh on the LAN (default: on).")
    var discovery: Bool?

    @Option(
        name: .long,
        help: "The interface LAN discovery announces and listens on, by name (lo, eth0) or IPv4 address (default: every multicast-capable one).")
    var discoveryInterface: String?

    @Flag(
        inversion: .prefixedNo,
        help: "Carry changes for neighbours' subscriptions that this node's own do not cover (default: on).")
    var relay: Bool?

    @Flag(
        inversion: .prefixedNo,
        help: "Ask peers to offer, not send, what another link brings already, so each change arrives about once (default: on; off sends every origin on every link, as protocol version 3).")
    var routes: Bool?

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error or critical (default: info).")
    var logLevel: String?

    @Option(name: .long, help: "Log format: text, or json for one JSON object per line (default: text).")
    var logFormat: String?

    @Option(
        name: .long,
        help: "normal, or full: every commit on disk before it is acknowledged, so a power failure loses nothing acknowledged, at an fsync per commit (default: normal).")
    var synchronous: String?

    @Option(
        name: .long,
        help: "Serve Prometheus metrics on HOST:PORT, GET /metrics over plain HTTP (port 0: any free port). It has no authentication: use loopback or a trusted network.")
    var metrics: String?

    @Option(name: .long, help: "Seconds between change-log compactions; 0 turns them off (default: 300).")
    var compactionInterval: Double?

    @Option(
        name: .long,
        help: "Seconds after which a peer not heard from no longer holds back compaction; it resyncs when it returns (default: 604800, 7 days).")
    var compactionHorizon: Double?

    @Option(
        name: .long,
        help: "Seconds a deleted document's tombstone is kept before compaction forgets the document; peers that learned the mesh's deletions longer ago are then refused as stale; 0 keeps tombstones (default: 2592000, 30 days; at least the compaction horizon).")
    var tombstoneHorizon: Double?

    @Option(name: .long, help: "The largest frame accepted, in bytes (default: 16777216).")
    var maxFrameSize: Int?

    @Option(
        name: .long,
        help: "Seconds a remote transaction waits for pieces its subscriptions cover before what arrived is applied (and reported as partial) (default: 30).")
    var coverageWait: Double?

    @Option(name: .long, help: "Remote transactions held back at most; over it the oldest is applied in part (default: 10000).")
    var maxWaitingTransactions: Int?

    @Option(name: .long, help: "Bytes of remote transactions held back at most; over it the oldest is applied in part (default: 268435456).")
    var maxWaitingBytes: Int?

    @Option(
        name: .long,
        help: "Seconds attachment bytes no document names are kept before they are deleted (and unfinished puts and fetches left untouched); 0 keeps them (default: 86400).")
    var attachmentHorizon: Double?

    @OptionGroup(title: "Limits") var limits: LimitOptions

    @OptionGroup(title: "TLS") var tls: TLSOptions

    /// The flags given, as settings.
    var flags: NodeSettings {
        var s = NodeSettings()
        s.setFlag("data", data.map { .string($0) })
        s.setFlag("listen", listen.map { .string($0) })
        s.setFlag("name", name.map { .string($0) })
        s.setFlag("peer", peer.isEmpty ? nil : .strings(peer))
        s.setFlag("subscribe", subscribe.isEmpty ? nil : .strings(subscribe))
        s.setFlag("mesh", mesh.map { .string($0) })
        s.setFlag("mesh-key-file", meshKeyFile.map { .string($0) })
        s.setFlag("admin-key-file", adminKeyFile.map { .string($0) })
        s.setFlag("discovery", discovery.map { .boolean($0) })
        s.setFlag("discovery-interface", discoveryInterface.map { .string($0) })
        s.setFlag("relay", relay.map { .boolean($0) })
        s.setFlag("routes", routes.map { .boolean($0) })
        s.setFlag("log-level", logLevel.map { .string($0) })
        s.setFlag("log-format", logFormat.map { .string($0) })
        s.setFlag("metrics", metrics.map { .string($0) })
        s.setFlag("synchronous", synchronous.map { .string($0) })
        s.setFlag("compaction-interval", compactionInterval.map { .seconds($0) })
        s.setFlag("compaction-horizon", compactionHorizon.map { .seconds($0) })
        s.setFlag("tombstone-horizon", tombstoneHorizon.map { .seconds($0) })
        s.setFlag("max-frame-size", maxFrameSize.map { .integer($0) })
        s.setFlag("coverage-wait", coverageWait.map { .seconds($0) })
        s.setFlag("max-waiting-transactions", maxWaitingTransactions.map { .integer($0) })
        s.setFlag("max-waiting-bytes", maxWaitingBytes.map { .integer($0) })
        s.setFlag("attachment-horizon", attachmentHorizon.map { .seconds($0) })
        limits.add(to: &s)
        tls.add(to: &s)
        return s
    }

    func run() async throws {
        let settings: NodeSettings
        let configuration: NodeConfiguration
        let level: Logger.Level
        let json: Bool
        do throws(ShoalError) {
            settings = try flags.overriding(config.map { path throws(ShoalError) in try NodeSettings.load(file: path) } ?? NodeSettings())
            configuration = try settings.configuration()
            level = Logger.Level(rawValue: try settings.logLevel())!
            json = try settings.logFormat() == "json"
        } catch {
            throw fail(error.message)
        }
        LoggingSystem.bootstrap { label in
            if json {
                var handler = JSONLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "shoal")
        let node: ShoalNode
        do {
            node = try ShoalNode(configuration: configuration, logger: logger)
        } catch {
            throw fail("\(error)")
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [node], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { await Self.reloadOnHangUp(node, logger: logger) }
                try await group.run()
                tasks.cancelAll()
            }
        } catch {
            throw fail("\(error)")
        }
    }

    /// Re-reads the node's TLS files on every SIGHUP until cancelled; a reload that
    /// fails is logged and leaves the files in use as they were.
    static func reloadOnHangUp(_ node: ShoalNode, logger: Logger) async {
        for await _ in await UnixSignalsSequence(trapping: .sighup) {
            do {
                if try node.reloadTLS() == nil { logger.notice("SIGHUP: this node has no TLS files to re-read") }
            } catch {
                logger.error("SIGHUP: the TLS files were not reloaded, the ones in use stay: \(error.message)")
            }
        }
    }
}

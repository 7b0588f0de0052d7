import ArgumentParser
import Logging
import ServiceLifecycle
import UnixSignals
import ShoalNode
import ShoalWire

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Start a node and serve until SIGINT or SIGTERM."
    )

    @Option(name: .long, help: "Directory for the node's database (created if missing).")
    var data: String

    @Option(name: .long, help: "Address to accept peers and the CLI on, HOST:PORT (port 0: any free port).")
    var listen: String = "0.0.0.0:\(HostAndPort.defaultPort)"

    @Option(name: .long, help: "A readable name for this node (default: shoal- and its site ID's first digits).")
    var name: String?

    @Option(name: .long, help: "A peer to connect to, HOST:PORT. Repeat for several.")
    var peer: [String] = []

    @Option(name: .long, help: "A sync subscription: a SELECT query of what to replicate from peers. Repeatable.")
    var subscribe: [String] = []

    @Option(name: .long, help: "The mesh name; peers must use the same one.")
    var mesh: String = "default"

    @Option(name: .long, help: "A file holding the mesh key (at least 16 bytes); peers must hold the same key.")
    var meshKeyFile: String?

    @Option(name: .long, help: "A file holding the key admin clients (the CLI) must prove instead of the mesh key.")
    var adminKeyFile: String?

    @Flag(name: .long, help: "Do not look for peers on the LAN.")
    var noDiscovery = false

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "info"

    @Option(name: .long, help: "The largest frame accepted, in bytes.")
    var maxFrameSize: Int = 16 << 20

    @Option(
        name: .long,
        help: "Seconds a remote transaction waits for pieces its subscriptions cover before what arrived is applied (and reported as partial).")
    var coverageWait: Double = 30

    @Option(name: .long, help: "Remote transactions held back at most; over it the oldest is applied in part.")
    var maxWaitingTransactions: Int = 10_000

    @Option(name: .long, help: "Bytes of remote transactions held back at most; over it the oldest is applied in part.")
    var maxWaitingBytes: Int = 256 << 20

    @OptionGroup(title: "Limits") var limits: LimitOptions

    func validate() throws {
        if Logger.Level(rawValue: logLevel) == nil {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        if maxFrameSize < 1024 { throw ValidationError("--max-frame-size must be at least 1024 bytes") }
        if mesh.isEmpty { throw ValidationError("--mesh must not be empty") }
        if !(coverageWait >= 0 && coverageWait <= 86_400) {
            throw ValidationError("--coverage-wait must be between 0 and 86400 seconds")
        }
        if maxWaitingTransactions < 1 { throw ValidationError("--max-waiting-transactions must be at least 1") }
        if maxWaitingBytes < 1 << 20 { throw ValidationError("--max-waiting-bytes must be at least 1048576 (1 MiB)") }
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel)!
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "shoal")
        let configuration: NodeConfiguration
        do {
            configuration = NodeConfiguration(
                dataDirectory: data,
                listen: try HostAndPort(parsing: listen),
                name: name,
                peers: try peer.map { text throws(NodeError) in try HostAndPort(parsing: text) },
                subscriptions: subscribe,
                meshName: mesh,
                meshKey: try meshKeyFile.map { path throws(NodeError) in try NodeConfiguration.readMeshKey(path: path) },
                discovery: !noDiscovery,
                limits: .init(maximumFrameSize: maxFrameSize, maximumInflatedSize: maxFrameSize), idleTimeout: limits.idle,
                coverageWait: .milliseconds(Int64(coverageWait * 1000)), maximumWaitingTransactions: maxWaitingTransactions,
                maximumWaitingBytes: maxWaitingBytes,
                adminKey: try adminKeyFile.map { path throws(NodeError) in try KeyFile.read(path: path, purpose: "admin key") },
                resources: limits.resources
            )
        } catch {
            throw fail(error.message)
        }
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
            try await group.run()
        } catch {
            throw fail("\(error)")
        }
    }
}

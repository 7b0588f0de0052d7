import Foundation
import ArgumentParser
import ShoalStorage
import Logging
import ServiceLifecycle
import UnixSignals
import ShoalNode
import ShoalPostgres
import Shoal

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

    @Option(name: .long, help: .setting("data"))
    var data: String?

    @Option(name: .long, help: .setting("store"))
    var store: String?

    @Option(name: .long, help: .setting("store-password-file"))
    var storePasswordFile: String?

    @Option(name: .long, help: .setting("store-timeout"))
    var storeTimeout: Double?

    @Option(name: .long, help: .setting("listen"))
    var listen: String?

    @Option(name: .long, help: .setting("name"))
    var name: String?

    @Option(name: .long, help: .setting("peer"))
    var peer: [String] = []

    @Option(name: .long, help: .setting("subscribe"))
    var subscribe: [String] = []

    @Option(name: .long, help: .setting("mesh"))
    var mesh: String?

    @Option(name: .long, help: .setting("mesh-key-file"))
    var meshKeyFile: String?

    @Option(name: .long, help: .setting("admin-key-file"))
    var adminKeyFile: String?

    @Flag(inversion: .prefixedNo, help: .setting("discovery"))
    var discovery: Bool?

    @Option(name: .long, help: .setting("discovery-interface"))
    var discoveryInterface: String?

    @Flag(inversion: .prefixedNo, help: .setting("relay"))
    var relay: Bool?

    @Flag(inversion: .prefixedNo, help: .setting("routes"))
    var routes: Bool?

    @Option(name: .long, help: .setting("log-level"))
    var logLevel: String?

    @Option(name: .long, help: .setting("log-format"))
    var logFormat: String?

    @Option(name: .long, help: .setting("synchronous"))
    var synchronous: String?

    @Option(name: .long, help: .setting("metrics"))
    var metrics: String?

    @Option(name: .long, help: .setting("compaction-interval"))
    var compactionInterval: Double?

    @Option(name: .long, help: .setting("compaction-horizon"))
    var compactionHorizon: Double?

    @Option(name: .long, help: .setting("tombstone-horizon"))
    var tombstoneHorizon: Double?

    @Option(name: .long, help: .setting("max-frame-size"))
    var maxFrameSize: Int?

    @Option(name: .long, help: .setting("coverage-wait"))
    var coverageWait: Double?

    @Option(name: .long, help: .setting("max-waiting-transactions"))
    var maxWaitingTransactions: Int?

    @Option(name: .long, help: .setting("max-waiting-bytes"))
    var maxWaitingBytes: Int?

    @Option(name: .long, help: .setting("attachment-horizon"))
    var attachmentHorizon: Double?

    @OptionGroup(title: "Limits") var limits: LimitOptions

    @OptionGroup(title: "TLS") var tls: TLSOptions

    @Option(name: .long, help: ArgumentHelp(TLSOptions.summary("permissions"), valueName: "file"))
    var permissions: String?

    /// The flags given, as settings.
    var flags: NodeSettings {
        var s = NodeSettings()
        s.setFlag("data", data.map { .string($0) })
        s.setFlag("store", store.map { .string($0) })
        s.setFlag("store-password-file", storePasswordFile.map { .string($0) })
        s.setFlag("store-timeout", storeTimeout.map { .seconds($0) })
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
        s.setFlag("permissions", permissions.map { .string($0) })
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
        guard let url = configuration.store else {
            let node: ShoalNode
            do {
                node = try ShoalNode(configuration: configuration, logger: logger)
            } catch {
                throw fail("\(error)")
            }
            try await serve(node, logger: logger)
            return
        }
        // A hub: the database's connection pool runs beside the node, from before the
        // store opens until the node has stopped.
        var location: PostgresLocation
        do throws(PostgresStoreError) {
            location = try PostgresLocation(parsing: url)
            if let file = configuration.storePasswordFile { try location.password(fromFile: file) }
        } catch {
            throw fail("--store: \(error.message)")
        }
        let database = PostgresHubDatabase(location: location, logger: logger, unreachableAfter: configuration.storeTimeout)
        try await withThrowingTaskGroup(of: Void.self) { pool in
            pool.addTask { await database.run() }
            defer { pool.cancelAll() }
            let node: ShoalNode
            do {
                try await database.checkReachable()
                // What this hub knew of the log when it last ran here, to find a database
                // that went back while it was stopped; read and written only by the process
                // that holds the directory's lock (released for the node, which takes it
                // again at once).
                let directory = try DataDirectoryLock(directory: configuration.dataDirectory)
                let store = try await PostgresStore.open(
                    database, systemParameters: configuration.storeParameters, rememberingIn: configuration.dataDirectory,
                    logger: Logger(label: "shoal.store"))
                directory.release()
                node = try ShoalNode(configuration: configuration, logger: logger) { opening in
                    store.timeCommits(with: opening.commitDuration)
                    return store
                }
                logger.info("a hub on \(location)", metadata: ["shoal.site": "\(store.siteID)"])
            } catch {
                throw fail("\(error)")
            }
            try await serve(node, logger: logger)
        }
    }

    /// Runs `node` until SIGTERM or SIGINT, re-reading its TLS files and permissions on SIGHUP.
    func serve(_ node: ShoalNode, logger: Logger) async throws {
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

    /// Re-reads the node's TLS files and permissions on every SIGHUP until cancelled; a
    /// reload that fails is logged and leaves what is in use as it was.
    static func reloadOnHangUp(_ node: ShoalNode, logger: Logger) async {
        for await _ in await UnixSignalsSequence(trapping: .sighup) {
            do {
                if try node.reloadTLS() == nil { logger.notice("SIGHUP: this node has no TLS files to re-read") }
            } catch {
                logger.error("SIGHUP: the TLS files were not reloaded, the ones in use stay: \(error.message)")
            }
            do {
                _ = try await node.reloadPermissions()
            } catch {
                logger.error("SIGHUP: the permissions were not reloaded, the rules in force stay: \(error.message)")
            }
        }
    }
}

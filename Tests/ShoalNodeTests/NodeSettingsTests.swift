import Shoal
import Foundation
import ShoalStore
import ShoalStorage
import ShoalNode
import ShoalTesting
import ShoalWire
import Testing

/// `shoal run --config FILE`: every flag a key, flags over the file, mistakes named by line and key.
struct NodeSettingsTests {
    static let file = """
        # a node
        data = "db"
        listen = "127.0.0.1:7471"
        name = "kitchen"
        peer = ["127.0.0.1:7472", "127.0.0.1:7473"]
        subscribe = "SELECT * FROM cars"
        mesh = "home"
        mesh-key-file = "mesh.key"
        discovery = false
        discovery-interface = "lo"
        relay = false
        log-level = "debug"
        max-frame-size = 65536
        routes = false
        coverage-wait = 2.5
        max-waiting-transactions = 50
        max-waiting-bytes = 2097152
        admin-key-file = "admin.key"
        idle-timeout = 12
        handshake-timeout = 1.5
        max-peers = 3
        max-handshakes = 7
        max-admin-connections = 4
        max-subscriptions-per-peer = 5
        max-query-length = 6000
        max-pending-outbound-bytes = 70000
        document-size-soft-limit = 8000
        document-size-hard-limit = 9000
        log-format = "json"
        metrics = "127.0.0.1:9470"
        synchronous = "full"
        store = "postgresql://hub@db.example:5433/shoal"
        store-password-file = "store.password"
        store-timeout = 4
        compaction-interval = 0
        compaction-horizon = 3600
        tombstone-horizon = 7200
        attachment-horizon = 90
        tls-cert = "node/node.pem"
        tls-key = "node/node.key"
        tls-ca = "ca/ca.pem"
        tls-revoked = "revoked.txt"
        permissions = "rules.toml"
        """

    @Test func aFileSetsEveryKey() throws {
        let dir = TemporaryDirectory(prefix: "shoal-settings")
        defer { dir.remove() }
        try writePrivateFile(dir.path + "/mesh.key", " correct horse battery staple\n")
        try writePrivateFile(dir.path + "/admin.key", "the admin's own sixteen bytes")
        let node = try MeshPKI(in: dir.path).issue("node")
        try "[[peer]]\nname = \"till-*\"\nread = [\"menu\"]\n".write(toFile: dir.path + "/rules.toml", atomically: true, encoding: .utf8)
        try "serial=0A:1B # a lost till\n".write(toFile: dir.path + "/revoked.txt", atomically: true, encoding: .utf8)
        let settings = try NodeSettings.parse(Self.file, file: dir.path + "/shoal.toml")
        let configuration = try settings.configuration()
        #expect(configuration.dataDirectory == dir.path + "/db", "a relative path is taken from the file's directory")
        #expect(configuration.meshKey == Array("correct horse battery staple".utf8))
        #expect(configuration.listen == HostAndPort(host: "127.0.0.1", port: 7471))
        #expect(configuration.name == "kitchen")
        #expect(configuration.peers.map(\.port) == [7472, 7473])
        #expect(configuration.subscriptions == ["SELECT * FROM cars"], "one string is a list of one")
        #expect(configuration.meshName == "home")
        #expect(configuration.discovery == false && configuration.discoveryInterface == "lo" && !configuration.relay)
        #expect(!configuration.routes)
        #expect(configuration.store == "postgresql://hub@db.example:5433/shoal")
        #expect(configuration.storePasswordFile == dir.path + "/store.password")
        #expect(configuration.storeTimeout == .seconds(4))
        #expect(configuration.limits.maximumFrameSize == 65536 && configuration.limits.maximumInflatedSize == 65536)
        #expect(configuration.coverageWait == .milliseconds(2500))
        #expect(configuration.maximumWaitingTransactions == 50 && configuration.maximumWaitingBytes == 2 << 20)
        #expect(try settings.logLevel() == "debug")
        #expect(configuration.adminKey == Array("the admin's own sixteen bytes".utf8))
        #expect(configuration.idleTimeout == .seconds(12))
        #expect(
            configuration.resources
                == ResourceLimits(
                    maximumPeers: 3, maximumAdminConnections: 4, maximumSubscriptionsPerPeer: 5, maximumQueryLength: 6000,
                    maximumPendingOutboundBytes: 70000, handshakeTimeout: .milliseconds(1500), maximumHandshakes: 7, documentSizeSoftLimit: 8000,
                    documentSizeHardLimit: 9000))
        #expect(try settings.logFormat() == "json")
        #expect(configuration.metrics == HostAndPort(host: "127.0.0.1", port: 9470))
        #expect(configuration.synchronousFull)
        #expect(configuration.compactionInterval == nil, "0 turns periodic compaction off")
        #expect(configuration.compactionHorizon == .seconds(3600))
        #expect(configuration.tombstoneHorizon == .seconds(7200))
        #expect(configuration.attachmentHorizon == .seconds(90))
        #expect(configuration.tls?.revoked == dir.path + "/revoked.txt")
        #expect(configuration.tls.map { TLSFiles(certificate: $0.certificate, key: $0.key, authority: $0.authority) } == node, "TLS files are taken from the file's directory too")
        #expect(configuration.permissions == dir.path + "/rules.toml")
        #expect(settings.origin(of: "max-frame-size") == dir.path + "/shoal.toml:13 (max-frame-size)")
        // Every key appears in the file above, so a key added without a test shows here.
        #expect(Set(NodeSettings.keys.map(\.name)) == Set(Self.file.split(separator: "\n").compactMap { line in
            line.hasPrefix("#") ? nil : line.split(separator: " ").first.map(String.init)
        }))
    }

    /// What an unset key becomes is its stated default (`NodeSettings.Key.defaultValue`,
    /// which `--help` and the example file show): read back from the configuration a file
    /// with nothing but `data` resolves to. A key given a default without a line here fails.
    @Test func everyUnsetKeyBecomesItsStatedDefault() throws {
        let settings = try NodeSettings.parse("data = \"db\"", file: "/tmp/shoal.toml")
        let c = try settings.configuration()
        func seconds(_ d: Duration?) -> NodeSettings.Value {
            guard let d else { return .seconds(0) }
            return .seconds(Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
        }
        let resolved: [String: NodeSettings.Value] = [
            "listen": .string(c.listen.description), "mesh": .string(c.meshName), "discovery": .boolean(c.discovery),
            "relay": .boolean(c.relay), "routes": .boolean(c.routes), "log-level": .string(try settings.logLevel()),
            "log-format": .string(try settings.logFormat()), "synchronous": .string(c.synchronousFull ? "full" : "normal"),
            "store-timeout": seconds(c.storeTimeout),
            "compaction-interval": seconds(c.compactionInterval), "compaction-horizon": seconds(c.compactionHorizon),
            "tombstone-horizon": seconds(c.tombstoneHorizon), "max-frame-size": .integer(c.limits.maximumFrameSize),
            "coverage-wait": seconds(c.coverageWait), "max-waiting-transactions": .integer(c.maximumWaitingTransactions),
            "max-waiting-bytes": .integer(c.maximumWaitingBytes), "attachment-horizon": seconds(c.attachmentHorizon),
            "idle-timeout": seconds(c.idleTimeout), "handshake-timeout": seconds(c.resources.handshakeTimeout),
            "max-handshakes": .integer(c.resources.maximumHandshakes), "max-peers": .integer(c.resources.maximumPeers),
            "max-admin-connections": .integer(c.resources.maximumAdminConnections),
            "max-subscriptions-per-peer": .integer(c.resources.maximumSubscriptionsPerPeer),
            "max-query-length": .integer(c.resources.maximumQueryLength),
            "max-pending-outbound-bytes": .integer(c.resources.maximumPendingOutboundBytes),
            "document-size-soft-limit": .integer(c.resources.documentSizeSoftLimit),
            "document-size-hard-limit": .integer(c.resources.documentSizeHardLimit),
        ]
        let stated = NodeSettings.keys.filter { $0.defaultValue != nil }
        #expect(Set(resolved.keys) == Set(stated.map(\.name)))
        for key in stated { #expect(resolved[key.name] == key.defaultValue, "\(key.name)") }
        #expect(NodeSettings.key("idle-timeout")?.help == "Seconds without a frame from the other side before a session is closed (default: 30).")
    }

    /// deploy/shoal.example.toml parses, and shows every key (most commented out, with their defaults).
    @Test func theExampleFileShowsEveryKey() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/shoal.example.toml").path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let settings = try NodeSettings.parse(text, file: path)
        #expect(settings["data"] == .string("/var/lib/shoal"))
        for key in NodeSettings.keys {
            let shown = text.split(separator: "\n").contains { line in
                line.hasPrefix("\(key.name) = ") || line.hasPrefix("# \(key.name) = ")
            }
            #expect(shown, "\(key.name) is missing from deploy/shoal.example.toml")
            // A key with one default shows it, as TOML writes it.
            guard let value = key.defaultValue else { continue }
            let toml: String
            switch value {
            case .string(let s): toml = "\"\(s)\""
            case .strings(let s): toml = "[" + s.map { "\"\($0)\"" }.joined(separator: ", ") + "]"
            case .boolean(let b): toml = "\(b)"
            case .integer(let n): toml = "\(n)"
            case .seconds(let d): toml = d == d.rounded() ? "\(Int(d))" : "\(d)"
            }
            #expect(text.contains("# \(key.name) = \(toml)\n"), "deploy/shoal.example.toml shows \(key.name)'s default as \(toml)")
        }
        // Uncommenting every example line still gives a valid file.
        let all = text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            NodeSettings.keys.contains { line.hasPrefix("# \($0.name) = ") } ? String(line.dropFirst(2)) : String(line)
        }
        #expect(throws: Never.self) { try NodeSettings.parse(all.joined(separator: "\n"), file: path) }
    }

    @Test func flagsOverrideTheFile() throws {
        let file = try NodeSettings.parse(
            Self.file.replacingOccurrences(of: "mesh-key-file = \"mesh.key\"\n", with: "")
                .replacingOccurrences(of: "admin-key-file = \"admin.key\"\n", with: "")
                .split(separator: "\n").filter { !$0.hasPrefix("tls-") && !$0.hasPrefix("permissions") }.joined(separator: "\n"),
            file: "shoal.toml")
        var flags = NodeSettings()
        flags.setFlag("listen", .string("127.0.0.1:0"))
        flags.setFlag("peer", .strings(["127.0.0.1:9000"]))
        flags.setFlag("discovery", .boolean(true))
        flags.setFlag("name", nil)
        let configuration = try flags.overriding(file).configuration()
        #expect(configuration.listen.port == 0)
        #expect(configuration.peers.map(\.port) == [9000], "a repeated flag replaces the file's list")
        #expect(configuration.discovery == true)
        #expect(configuration.name == "kitchen", "what the flags leave out comes from the file")
        #expect(configuration.dataDirectory == "db", "no directory to anchor a bare file name to")
    }

    /// Rules and revocations name peers by their certificates: either without TLS is
    /// refused at start, with the key that set it.
    @Test func permissionsWithoutTLSAreRefused() throws {
        var flags = NodeSettings()
        flags.setFlag("data", .string("/tmp/x"))
        flags.setFlag("permissions", .string("/tmp/rules.toml"))
        #expect {
            _ = try flags.configuration()
        } throws: { ($0 as? ShoalError)?.message.contains("it needs TLS") == true }
        var revoked = NodeSettings()
        revoked.setFlag("data", .string("/tmp/x"))
        revoked.setFlag("tls-revoked", .string("/tmp/revoked.txt"))
        #expect {
            _ = try revoked.configuration()
        } throws: { ($0 as? ShoalError)?.message.contains("it needs tls-cert, tls-key and tls-ca") == true }
    }

    @Test func defaultsWithoutAFile() throws {
        var flags = NodeSettings()
        flags.setFlag("data", .string("/tmp/x"))
        let configuration = try flags.configuration()
        #expect(configuration.listen == HostAndPort(host: "0.0.0.0", port: 7470))
        #expect(configuration.discovery && configuration.meshName == "default" && configuration.peers.isEmpty)
        // Built in code, a node keeps to the machine: loopback, no LAN announcements.
        let embedded = NodeConfiguration(dataDirectory: "/tmp/x")
        #expect(embedded.listen == HostAndPort(host: "127.0.0.1", port: 7470) && !embedded.discovery)
        #expect(configuration.coverageWait == .seconds(30))
        #expect(try flags.logLevel() == "info")
        #expect(try flags.logFormat() == "text")
        #expect(configuration.metrics == nil, "no metrics endpoint unless asked for")
        #expect(configuration.attachmentHorizon == .seconds(86_400))
        #expect(configuration.tombstoneHorizon == .seconds(2_592_000), "30 days")
        flags.setFlag("attachment-horizon", .seconds(0))
        #expect(try flags.configuration().attachmentHorizon == nil, "0 keeps every attachment")
        flags.setFlag("compaction-horizon", .seconds(86_400 * 60))
        #expect(try flags.configuration().tombstoneHorizon == .seconds(86_400 * 60), "unset, at least the compaction horizon")
        flags.setFlag("tombstone-horizon", .seconds(0))
        #expect(try flags.configuration().tombstoneHorizon == nil, "0 keeps tombstones")
        #expect(throws: ShoalError.self) { try NodeSettings().configuration() }
    }

    /// A soft document size limit may not be above the hard one; left unset, it follows
    /// a hard limit set below its default.
    @Test func theSoftDocumentSizeLimitIsAtMostTheHardOne() throws {
        var flags = NodeSettings()
        flags.setFlag("data", .string("/tmp/x"))
        flags.setFlag("document-size-hard-limit", .integer(100_000))
        #expect(try flags.configuration().resources.documentSizeSoftLimit == 100_000)
        flags.setFlag("document-size-soft-limit", .integer(100_001))
        let error = #expect(throws: ShoalError.self) { try flags.configuration() }
        #expect(
            error?.message
                == "--document-size-soft-limit: the soft document size limit (100001 bytes) would be above the hard one (100000 bytes); the soft limit, at which a write is only logged, must be at most the hard limit, at which it is refused: lower it or raise document-size-hard-limit")
        flags.setFlag("document-size-soft-limit", .integer(100_000))
        #expect(try flags.configuration().resources.documentSizeSoftLimit == 100_000, "equal limits are fine")
        var resources = ResourceLimits()
        resources.documentSizeSoftLimit = resources.documentSizeHardLimit + 1
        let embedded = NodeConfiguration(dataDirectory: "/tmp/x", listen: HostAndPort(host: "127.0.0.1", port: 0), resources: resources)
        #expect(throws: ShoalError.self) { try ShoalNode(configuration: embedded) }
    }

    @Test(arguments: [
        ("data = \"x\"\nlisten = 7470\n", "shoal.toml:2 (listen): 'listen' must be a string, not an integer"),
        ("data = \"x\"\n\nlisen = \"127.0.0.1:1\"\n", "shoal.toml:3 (lisen): unknown key 'lisen' (did you mean 'listen'?)"),
        ("data = \"x\"\nmax_frame_size = 2048\n", "shoal.toml:2 (max_frame_size): unknown key 'max_frame_size' (did you mean 'max-frame-size'?)"),
        ("data = \"x\"\npeer = [1, 2]\n", "shoal.toml:2 (peer): 'peer' must be an array of strings"),
        ("data = \"x\"\ndiscovery = \"no\"\n", "shoal.toml:2 (discovery): 'discovery' must be true or false"),
        ("data = \"x\"\nlisten = \"127.0.0.1\"\n", "shoal.toml:2 (listen): '127.0.0.1' is not HOST:PORT"),
        ("data = \"x\"\nmax-frame-size = 10\n", "shoal.toml:2 (max-frame-size): must be at least 1024 bytes"),
        ("data = \"x\"\nsubscribe = [\"SELECT name FROM cars\"]\n", "shoal.toml:2 (subscribe): 'SELECT name FROM cars'"),
        ("data = \"x\"\nlog-level = \"loud\"\n", "shoal.toml:2 (log-level): 'loud' is not one of"),
        ("data = \"x\"\n  \"mesh\" = \"\"\n", "shoal.toml:2 (mesh): the mesh name must not be empty"),
        ("data = \"x\"\nlisten = \"127.0.0.1:1\n", "shoal.toml:2:"),
        ("data = \"x\"\nidle-timeout = 0\n", "shoal.toml:2 (idle-timeout): must be between 1 and 86400 seconds"),
        ("data = \"x\"\nattachment-horizon = -1\n", "shoal.toml:2 (attachment-horizon): must be between 0 and 315360000 seconds (ten years)"),
        ("data = \"x\"\nmax-pending-outbound-bytes = 100\n", "shoal.toml:2 (max-pending-outbound-bytes): must be at least 65536"),
        ("data = \"x\"\nmax-peers = 0\n", "shoal.toml:2 (max-peers): must be at least 1"),
        ("data = \"x\"\n[discovery]\ninterface = \"lo\"\n", "shoal.toml:2 (discovery): 'discovery' must be true or false, not a table"),
        ("data = \"x\"\nlog-format = \"xml\"\n", "shoal.toml:2 (log-format): 'xml' is not one of text, json"),
        ("data = \"x\"\nsynchronous = \"off\"\n", "shoal.toml:2 (synchronous): 'off' is not one of normal, full"),
        ("data = \"x\"\nmetrics = \"9470\"\n", "shoal.toml:2 (metrics): '9470' is not HOST:PORT"),
        ("data = \"x\"\nstore = \"mysql://a@b/c\"\n", "shoal.toml:2 (store): give a postgresql://USER@HOST:PORT/DATABASE URL"),
        ("data = \"x\"\nstore-password-file = \"p\"\n", "shoal.toml:2 (store-password-file): is the password of a store: give store too"),
        ("data = \"x\"\nstore-timeout = 5\n", "shoal.toml:2 (store-timeout): is how long a hub waits for its store: give store too"),
        ("data = \"x\"\nstore = \"postgresql://a@b/c\"\nstore-timeout = 0.5\n", "shoal.toml:3 (store-timeout): must be between 1 and 3600 seconds"),
        ("data = \"x\"\ncompaction-interval = 0.5\n", "shoal.toml:2 (compaction-interval): must be 0 (off) or between 1 and 2592000 seconds"),
        ("data = \"x\"\ncompaction-horizon = 0\n", "shoal.toml:2 (compaction-horizon): must be between 1 and 315360000 seconds"),
        ("data = \"x\"\ntombstone-horizon = 0.5\n", "shoal.toml:2 (tombstone-horizon): must be 0 (keep tombstones) or between 1 and 315360000 seconds"),
        ("data = \"x\"\ntombstone-horizon = 60\n", "shoal.toml:2 (tombstone-horizon): must be at least the compaction horizon (604800 s)"),
        (
            "data = \"x\"\ndocument-size-soft-limit = 5000000\n",
            "shoal.toml:2 (document-size-soft-limit): the soft document size limit (5000000 bytes) would be above the hard one (4194304 bytes)"
        ),
        (
            "data = \"x\"\ndocument-size-hard-limit = 1000\ndocument-size-soft-limit = 1001\n",
            "shoal.toml:3 (document-size-soft-limit): the soft document size limit (1001 bytes) would be above the hard one (1000 bytes)"
        ),
    ])
    func mistakesNameTheLineAndTheKey(text: String, expected: String) {
        let error = #expect(throws: ShoalError.self) {
            let settings = try NodeSettings.parse(text, file: "shoal.toml")
            _ = try settings.configuration()
            _ = try settings.logLevel()
            _ = try settings.logFormat()
        }
        #expect(error?.message.hasPrefix(expected) == true, "\(error?.message ?? "no error")")
    }
}

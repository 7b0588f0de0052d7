import Foundation
public import ShoalStorage
import ShoalWire
import TOMLKit

/// What `shoal run` is told, from its flags and a config file, before it becomes
/// a `NodeConfiguration`.
///
/// Every flag of `shoal run` is a key here under the same name (`--max-frame-size`
/// is `max-frame-size`), so a config file can say anything the command line can.
/// Each value remembers where it came from, so a bad one is reported with its flag,
/// or with the file, line and key that set it.
public struct NodeSettings: Sendable, Hashable {
    /// The shape of a key's value.
    public enum Kind: Sendable, Hashable {
        case string
        /// A list of strings; a flag repeated, a TOML array of strings.
        case strings
        case boolean
        case integer
        /// A number of seconds, integer or not.
        case seconds
    }

    /// One setting a node takes.
    public struct Key: Sendable, Hashable {
        public var name: String
        public var kind: Kind
        public var summary: String
    }

    public enum Value: Sendable, Hashable {
        case string(String)
        case strings([String])
        case boolean(Bool)
        case integer(Int)
        case seconds(Double)
    }

    /// Every key, in the order the example file and `--help` list them.
    public static let keys: [Key] = [
        Key(name: "data", kind: .string, summary: "directory for the node's database (created if missing); required"),
        Key(name: "listen", kind: .string, summary: "HOST:PORT to accept peers and the CLI on (default 0.0.0.0:7470; port 0 picks one)"),
        Key(name: "name", kind: .string, summary: "a readable name (default shoal- and the site ID's first digits)"),
        Key(name: "peer", kind: .strings, summary: "peers to dial and keep dialing, HOST:PORT"),
        Key(name: "subscribe", kind: .strings, summary: "sync subscriptions, SELECT * FROM c [WHERE ...]"),
        Key(name: "mesh", kind: .string, summary: "the mesh name; peers must use the same one (default \"default\")"),
        Key(name: "mesh-key-file", kind: .string, summary: "a file holding the mesh key (at least 16 bytes)"),
        Key(name: "admin-key-file", kind: .string, summary: "a file holding the key admin clients (the CLI) prove instead of the mesh key"),
        Key(name: "tls-cert", kind: .string, summary: "this node's TLS certificate (PEM), issued by the mesh's CA: with tls-key and tls-ca, every link is TLS 1.3 with certificates on both sides (default: plaintext links)"),
        Key(name: "tls-key", kind: .string, summary: "the private key of tls-cert (PEM), readable by its owner only"),
        Key(name: "tls-ca", kind: .string, summary: "the mesh's CA certificate (PEM): peers must present a certificate it issued"),
        Key(name: "discovery", kind: .boolean, summary: "find peers of the same mesh on the LAN (default true)"),
        Key(name: "discovery-interface", kind: .string, summary: "the interface discovery uses, NAME or IPV4 (default: every multicast-capable one)"),
        Key(name: "relay", kind: .boolean, summary: "carry changes for neighbours' subscriptions this node's own do not cover (default true)"),
        Key(name: "routes", kind: .boolean, summary: "ask peers to offer, not send, what another link brings already, so each change arrives about once (default true)"),
        Key(name: "log-level", kind: .string, summary: "trace, debug, info, notice, warning, error or critical (default info)"),
        Key(name: "log-format", kind: .string, summary: "text, or json: one JSON object per line (default text)"),
        Key(name: "synchronous", kind: .string, summary: "normal, or full: every commit on disk before it is acknowledged, so a power failure loses nothing acknowledged, at an fsync per commit (default normal)"),
        Key(name: "metrics", kind: .string, summary: "HOST:PORT to serve Prometheus metrics on, GET /metrics over plain HTTP; no authentication, so loopback or a trusted network only (default: off; port 0 picks one)"),
        Key(name: "compaction-interval", kind: .seconds, summary: "seconds between change-log compactions; 0 turns them off (default 300)"),
        Key(name: "compaction-horizon", kind: .seconds, summary: "seconds after which a peer not heard from no longer holds back compaction; it resyncs when it returns (default 604800, 7 days)"),
        Key(name: "tombstone-horizon", kind: .seconds, summary: "seconds a deleted document's tombstone is kept before compaction forgets the document; peers that learned the mesh's deletions longer ago are then refused as stale; 0 keeps tombstones (default 2592000, 30 days)"),
        Key(name: "max-frame-size", kind: .integer, summary: "the largest frame accepted, in bytes (default 16777216)"),
        Key(name: "coverage-wait", kind: .seconds, summary: "seconds a remote transaction waits for pieces its subscriptions cover (default 30)"),
        Key(name: "max-waiting-transactions", kind: .integer, summary: "remote transactions held back at most (default 10000)"),
        Key(name: "max-waiting-bytes", kind: .integer, summary: "bytes of remote transactions held back at most (default 268435456)"),
        Key(name: "attachment-horizon", kind: .seconds, summary: "seconds attachment bytes no document names are kept before they are deleted; 0 keeps them (default 86400)"),
        Key(name: "idle-timeout", kind: .seconds, summary: "seconds without a frame from the other side before a session is closed (default 30)"),
        Key(name: "handshake-timeout", kind: .seconds, summary: "seconds a new connection has to finish its handshake (default 10)"),
        Key(name: "max-handshakes", kind: .integer, summary: "accepted connections in their handshake at once; one more closes the one that has waited longest (default 128)"),
        Key(name: "max-peers", kind: .integer, summary: "peers this node syncs with at once; one more is refused (default 64)"),
        Key(name: "max-admin-connections", kind: .integer, summary: "admin (CLI) connections served at once; one more is refused (default 32)"),
        Key(name: "max-subscriptions-per-peer", kind: .integer, summary: "subscriptions a peer may hold on this node, and this node's own (default 256)"),
        Key(name: "max-query-length", kind: .integer, summary: "bytes of DQL text in one request or subscription query (default 65536)"),
        Key(name: "max-pending-outbound-bytes", kind: .integer, summary: "bytes queued for one connection before writers wait; a peer that reads none of them for the idle timeout is cut off (default 4194304)"),
        Key(name: "document-size-soft-limit", kind: .integer, summary: "document size in bytes over which a write is logged (default 262144)"),
        Key(name: "document-size-hard-limit", kind: .integer, summary: "document size in bytes over which a write, or a received transaction, is refused (default 4194304)"),
    ]

    public static func key(_ name: String) -> Key? { keys.first { $0.name == name } }

    /// The longest node or mesh name, in bytes of UTF-8.
    public static let maximumNameLength = 1024

    private var values: [String: Value] = [:]
    private var origins: [String: String] = [:]

    public init() {}

    public subscript(name: String) -> Value? { values[name] }

    /// Where the value of `name` came from: `--name`, or `FILE:LINE (name)`.
    public func origin(of name: String) -> String? { origins[name] }

    /// Sets a value; `origin` says where it came from, for error messages.
    public mutating func set(_ name: String, _ value: Value, origin: String) {
        precondition(Self.key(name) != nil, "\(name) is not a setting")
        values[name] = value
        origins[name] = origin
    }

    /// Sets a value given on the command line as `--name`.
    public mutating func setFlag(_ name: String, _ value: Value?) {
        guard let value else { return }
        set(name, value, origin: "--\(name)")
    }

    /// These settings, with `base`'s for the keys these do not set: flags over a file.
    public func overriding(_ base: NodeSettings) -> NodeSettings {
        var merged = base
        for (name, value) in values { merged.set(name, value, origin: origins[name] ?? name) }
        return merged
    }

    // MARK: Reading a file

    /// Reads a TOML file whose top-level keys are the settings.
    ///
    /// Relative paths in it (`data`, `mesh-key-file`) are taken from the file's
    /// directory, so a file and its data can move together. A syntax error, an unknown
    /// key or a value of the wrong type is reported with the file, the line and the key.
    public static func load(file path: String) throws(ShoalError) -> NodeSettings {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw ShoalError(.invalidConfiguration, "cannot read the config file \(path)")
        }
        return try parse(text, file: path)
    }

    /// Parses config text; `file` names it in errors and anchors relative paths.
    public static func parse(_ text: String, file: String) throws(ShoalError) -> NodeSettings {
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw ShoalError(
                .invalidConfiguration,
                "\(file):\(error.source.begin.line):\(error.source.begin.column): \(error.description)")
        } catch {
            throw ShoalError(.invalidConfiguration, "\(file): \(error)")
        }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        /// The line that assigns `name`, for messages (TOML puts each key on its own line).
        func line(of name: String) -> Int {
            for (i, line) in lines.enumerated() {
                var rest = line.drop { $0 == " " || $0 == "\t" }
                for quote in ["\"", "'"] where rest.hasPrefix(quote) { rest = rest.dropFirst() }
                if rest.hasPrefix("[\(name)]") || rest.hasPrefix("[[\(name)]]") { return i + 1 }
                guard rest.hasPrefix(name) else { continue }
                let after = rest.dropFirst(name.count).drop { $0 == " " || $0 == "\t" || $0 == "\"" || $0 == "'" }
                if after.hasPrefix("=") { return i + 1 }
            }
            return 1
        }
        let directory = (file as NSString).deletingLastPathComponent
        var settings = NodeSettings()
        for name in table.keys {
            let origin = "\(file):\(line(of: name)) (\(name))"
            guard let key = Self.key(name) else {
                let known = keys.map(\.name)
                let hint = known.first { $0.replacingOccurrences(of: "_", with: "-") == name.replacingOccurrences(of: "_", with: "-") }
                    ?? known.min { distance($0, name) < distance($1, name) }.flatMap { distance($0, name) <= 3 ? $0 : nil }
                throw ShoalError(
                    .invalidConfiguration,
                    "\(origin): unknown key '\(name)'\(hint.map { " (did you mean '\($0)'?)" } ?? ""); the keys are the flags of shoal run: \(known.joined(separator: ", "))")
            }
            guard let raw = table[name] else { continue }
            func wrongType(_ expected: String) -> ShoalError {
                let found = raw.type.description
                let article = "aeiou".contains(found.first ?? "x") ? "an" : "a"
                return ShoalError(.invalidConfiguration, "\(origin): '\(name)' must be \(expected), not \(article) \(found)")
            }
            var value: Value
            switch key.kind {
            case .string:
                guard let s = raw.string else { throw wrongType("a string") }
                value = .string(s)
            case .strings:
                if let s = raw.string {
                    value = .strings([s])
                } else if let array = raw.array {
                    var items: [String] = []
                    for item in array {
                        guard let s = item.string else { throw wrongType("an array of strings") }
                        items.append(s)
                    }
                    value = .strings(items)
                } else {
                    throw wrongType("an array of strings")
                }
            case .boolean:
                guard let b = raw.bool else { throw wrongType("true or false") }
                value = .boolean(b)
            case .integer:
                guard let n = raw.int else { throw wrongType("an integer") }
                value = .integer(n)
            case .seconds:
                if let n = raw.int {
                    value = .seconds(Double(n))
                } else if let d = raw.double {
                    value = .seconds(d)
                } else {
                    throw wrongType("a number of seconds")
                }
            }
            if ["data", "mesh-key-file", "admin-key-file", "tls-cert", "tls-key", "tls-ca"].contains(name), case .string(let p) = value, !p.hasPrefix("/"), !directory.isEmpty {
                value = .string((directory as NSString).appendingPathComponent(p))
            }
            settings.set(name, value, origin: origin)
        }
        return settings
    }

    /// Edit distance, for suggesting the key that was meant.
    private static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var row = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var previous = row[0]
            row[0] = i
            for j in 1...max(b.count, 1) where !b.isEmpty {
                let old = row[j]
                row[j] = min(row[j] + 1, row[j - 1] + 1, previous + (a[i - 1] == b[j - 1] ? 0 : 1))
                previous = old
            }
        }
        return row[b.count]
    }

    // MARK: Typed values

    private func string(_ name: String) -> String? {
        if case .string(let s)? = values[name] { return s }
        return nil
    }

    private func strings(_ name: String) -> [String] {
        if case .strings(let s)? = values[name] { return s }
        return []
    }

    private func integer(_ name: String) -> Int? {
        if case .integer(let n)? = values[name] { return n }
        return nil
    }

    private func seconds(_ name: String) -> Double? {
        if case .seconds(let s)? = values[name] { return s }
        return nil
    }

    private func invalid(_ name: String, _ problem: String) -> ShoalError {
        ShoalError(.invalidConfiguration, "\(origins[name] ?? "--\(name)"): \(problem)")
    }

    /// The log level (`info` unless set); the executable bootstraps logging with it.
    public func logLevel() throws(ShoalError) -> String {
        let level = string("log-level") ?? "info"
        guard ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(level) else {
            throw invalid("log-level", "'\(level)' is not one of trace, debug, info, notice, warning, error, critical")
        }
        return level
    }

    /// The log format (`text` unless set): `text` lines, or `json`, one object per line.
    public func logFormat() throws(ShoalError) -> String {
        let format = string("log-format") ?? "text"
        guard ["text", "json"].contains(format) else {
            throw invalid("log-format", "'\(format)' is not one of text, json")
        }
        return format
    }

    /// The node configuration these settings describe, with the defaults for what they leave out.
    public func configuration() throws(ShoalError) -> NodeConfiguration {
        guard let data = string("data"), !data.isEmpty else {
            throw ShoalError(.invalidConfiguration, "no data directory: give --data DIR, or data = \"DIR\" in the config file")
        }
        let listen: HostAndPort
        do {
            listen = try HostAndPort(parsing: string("listen") ?? "0.0.0.0:\(HostAndPort.defaultPort)")
        } catch {
            throw invalid("listen", error.message)
        }
        var peers: [HostAndPort] = []
        for text in strings("peer") {
            do {
                peers.append(try HostAndPort(parsing: text))
            } catch {
                throw invalid("peer", error.message)
            }
        }
        var check = SubscriptionSet()
        for query in strings("subscribe") {
            do {
                try check.add(query: query)
            } catch {
                throw invalid("subscribe", "'\(query)': \(error.message)")
            }
        }
        let mesh = string("mesh") ?? "default"
        if mesh.isEmpty { throw invalid("mesh", "the mesh name must not be empty") }
        // Both travel in the Hello, which must fit the handshake's frame limit.
        for key in ["mesh", "name"] where (string(key)?.utf8.count ?? 0) > Self.maximumNameLength {
            throw invalid(key, "must be at most \(Self.maximumNameLength) bytes")
        }
        var meshKey: [UInt8]?
        if let path = string("mesh-key-file") {
            do {
                meshKey = try NodeConfiguration.readMeshKey(path: path)
            } catch {
                throw invalid("mesh-key-file", error.message)
            }
        }
        let frame = integer("max-frame-size") ?? WireLimits.default.maximumFrameSize
        if frame < 1024 { throw invalid("max-frame-size", "must be at least 1024 bytes") }
        var wait = 30.0
        if case .seconds(let s)? = values["coverage-wait"] { wait = s }
        if !(wait >= 0 && wait <= 86_400) { throw invalid("coverage-wait", "must be between 0 and 86400 seconds") }
        let waitingTransactions = integer("max-waiting-transactions") ?? 10_000
        if waitingTransactions < 1 { throw invalid("max-waiting-transactions", "must be at least 1") }
        let waitingBytes = integer("max-waiting-bytes") ?? 256 << 20
        if waitingBytes < 1 << 20 { throw invalid("max-waiting-bytes", "must be at least 1048576 (1 MiB)") }
        var adminKey: [UInt8]?
        if let path = string("admin-key-file") {
            do {
                adminKey = try KeyFile.read(path: path, purpose: "admin key")
            } catch {
                throw invalid("admin-key-file", error.message)
            }
        }
        let horizon = seconds("attachment-horizon") ?? 86_400
        if !(horizon >= 0 && horizon <= 315_360_000) { throw invalid("attachment-horizon", "must be between 0 and 315360000 seconds (ten years)") }
        let idle = seconds("idle-timeout") ?? 30
        if !(idle >= 1 && idle <= 86_400) { throw invalid("idle-timeout", "must be between 1 and 86400 seconds") }
        let handshake = seconds("handshake-timeout") ?? 10
        if !(handshake >= 0.1 && handshake <= 3_600) { throw invalid("handshake-timeout", "must be between 0.1 and 3600 seconds") }
        let defaults = ResourceLimits()
        var resources = defaults
        resources.handshakeTimeout = .milliseconds(Int64(handshake * 1000))
        for (name, path) in [
            ("max-peers", \ResourceLimits.maximumPeers), ("max-admin-connections", \.maximumAdminConnections),
            ("max-handshakes", \.maximumHandshakes),
            ("max-subscriptions-per-peer", \.maximumSubscriptionsPerPeer), ("max-query-length", \.maximumQueryLength),
            ("document-size-soft-limit", \.documentSizeSoftLimit), ("document-size-hard-limit", \.documentSizeHardLimit),
        ] {
            guard let n = integer(name) else { continue }
            if n < 1 { throw invalid(name, "must be at least 1") }
            resources[keyPath: path] = n
        }
        // Unset, the soft limit is its default or the hard limit, whichever is lower.
        if integer("document-size-soft-limit") == nil {
            resources.documentSizeSoftLimit = min(defaults.documentSizeSoftLimit, resources.documentSizeHardLimit)
        }
        if let problem = SystemParameters.sizeLimitsProblem(
            soft: Int64(resources.documentSizeSoftLimit), hard: Int64(resources.documentSizeHardLimit))
        {
            throw invalid("document-size-soft-limit", "\(problem): lower it or raise document-size-hard-limit")
        }
        if let n = integer("max-pending-outbound-bytes") {
            if n < 64 << 10 { throw invalid("max-pending-outbound-bytes", "must be at least 65536") }
            resources.maximumPendingOutboundBytes = n
        }
        let synchronous = string("synchronous") ?? "normal"
        guard ["normal", "full"].contains(synchronous) else {
            throw invalid("synchronous", "'\(synchronous)' is not one of normal, full")
        }
        var metrics: HostAndPort?
        if let text = string("metrics") {
            do {
                metrics = try HostAndPort(parsing: text)
            } catch {
                throw invalid("metrics", error.message)
            }
        }
        let compactionInterval = seconds("compaction-interval") ?? 300
        if !(compactionInterval == 0 || (compactionInterval >= 1 && compactionInterval <= 86_400 * 30)) {
            throw invalid("compaction-interval", "must be 0 (off) or between 1 and 2592000 seconds")
        }
        let compactionHorizon = seconds("compaction-horizon") ?? 604_800
        if !(compactionHorizon >= 1 && compactionHorizon <= 86_400 * 3650) {
            throw invalid("compaction-horizon", "must be between 1 and 315360000 seconds")
        }
        // Unset, it is 30 days, or the compaction horizon when that is longer.
        let tombstoneHorizon = seconds("tombstone-horizon") ?? max(2_592_000, compactionHorizon)
        if !(tombstoneHorizon == 0 || (tombstoneHorizon >= 1 && tombstoneHorizon <= 86_400 * 3650)) {
            throw invalid("tombstone-horizon", "must be 0 (keep tombstones) or between 1 and 315360000 seconds")
        }
        if tombstoneHorizon != 0, tombstoneHorizon < compactionHorizon {
            throw invalid(
                "tombstone-horizon",
                "must be at least the compaction horizon (\(Int(compactionHorizon)) s): a peer still holding compaction back must not find a deletion forgotten")
        }
        let tlsFiles = try tls()
        var relay = true
        if case .boolean(let b)? = values["relay"] { relay = b }
        var discovery = true
        if case .boolean(let b)? = values["discovery"] { discovery = b }
        var configuration = NodeConfiguration(
            dataDirectory: data, listen: listen, name: string("name"), peers: peers, subscriptions: strings("subscribe"),
            meshName: mesh, meshKey: meshKey, discovery: discovery, discoveryInterface: string("discovery-interface"), relay: relay,
            limits: WireLimits(maximumFrameSize: frame, maximumInflatedSize: frame),
            idleTimeout: .milliseconds(Int64(idle * 1000)),
            coverageWait: .milliseconds(Int64(wait * 1000)), maximumWaitingTransactions: waitingTransactions,
            maximumWaitingBytes: waitingBytes, adminKey: adminKey, resources: resources, metrics: metrics,
            synchronousFull: synchronous == "full",
            attachmentHorizon: horizon == 0 ? nil : .milliseconds(Int64(horizon * 1000)),
            compactionInterval: compactionInterval == 0 ? nil : .milliseconds(Int64(compactionInterval * 1000)),
            compactionHorizon: .milliseconds(Int64(compactionHorizon * 1000)),
            tombstoneHorizon: tombstoneHorizon == 0 ? nil : .milliseconds(Int64(tombstoneHorizon * 1000)), tls: tlsFiles)
        if case .boolean(let b)? = values["routes"] { configuration.routes = b }
        return configuration
    }

    /// The TLS files, loaded and checked once here so that a missing one, a key that
    /// does not match its certificate or a certificate another CA issued stops the
    /// node at start; nil when none is set.
    public func tls() throws(ShoalError) -> TLSFiles? {
        let names = ["tls-cert", "tls-key", "tls-ca"]
        let given = names.filter { string($0) != nil }
        guard !given.isEmpty else { return nil }
        if let missing = names.first(where: { string($0) == nil }) {
            throw invalid(
                given[0], "TLS needs all three of tls-cert, tls-key and tls-ca; \(missing) is missing (shoal cert makes them)")
        }
        let files = TLSFiles(certificate: string("tls-cert")!, key: string("tls-key")!, authority: string("tls-ca")!)
        _ = try LinkTLS(files: files)
        return files
    }
}

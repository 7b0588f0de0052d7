import Foundation
public import ShoalStorage
import ShoalWire

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

    /// One setting a node takes: what it sets, and what it is when nothing sets it.
    /// `configuration()` takes an unset key's default from here, and `shoal run --help`
    /// and the config reference show it from here, so the three cannot disagree.
    public struct Key: Sendable, Hashable {
        public var name: String
        public var kind: Kind
        /// What it sets, without its default.
        public var summary: String
        /// What an unset key is, when that is one value (nil: nothing, or what the note says).
        public var defaultValue: Value?
        /// Words on the default, after its value or in its place ("7 days", "every
        /// multicast-capable one").
        public var defaultNote: String?

        public init(name: String, kind: Kind, summary: String, default value: Value? = nil, note: String? = nil) {
            self.name = name
            self.kind = kind
            self.summary = summary
            self.defaultValue = value
            self.defaultNote = note
        }

        /// The default as `--help` shows it: "30", "0.0.0.0:7470; port 0 picks one".
        public var defaultText: String? {
            let value = defaultValue.map { value -> String in
                switch value {
                case .string(let s): s
                case .strings(let s): s.joined(separator: ", ")
                case .boolean(let b): b ? "on" : "off"
                case .integer(let n): "\(n)"
                case .seconds(let d): d == d.rounded() ? "\(Int(d))" : "\(d)"
                }
            }
            switch (value, defaultNote) {
            case (let value?, let note?): return "\(value), \(note)"
            case (let value?, nil): return value
            case (nil, let note?): return note
            case (nil, nil): return nil
            }
        }

        /// The summary with its default: a flag's help.
        public var help: String {
            let sentence = summary.prefix(1).uppercased() + summary.dropFirst()
            return defaultText.map { "\(sentence) (default: \($0))." } ?? "\(sentence)."
        }
    }

    public enum Value: Sendable, Hashable {
        case string(String)
        case strings([String])
        case boolean(Bool)
        case integer(Int)
        case seconds(Double)
    }

    /// Every key, in the order the example file and `--help` list them.
    public static let keys: [Key] = {
        let limits = ResourceLimits()
        return [
            Key(name: "data", kind: .string, summary: "directory for the node's database (created if missing); required"),
            Key(
                name: "store", kind: .string,
                summary: "postgresql://USER@HOST:PORT/DATABASE makes this process a hub: its documents in that database, one node of the mesh with every other hub on it (data still holds its lock); the password from store-password-file or SHOAL_STORE_PASSWORD, never shown",
                note: "SQLite in data"),
            Key(name: "store-password-file", kind: .string, summary: "a file holding the store's password (its first line), readable by its owner only"),
            Key(
                name: "store-timeout", kind: .seconds,
                summary: "seconds a hub waits for its database, no connection to be had and no statement answered, before what waits fails and its sessions end (the hub keeps trying)",
                default: .seconds(10)),
            Key(
                name: "listen", kind: .string, summary: "address to accept peers and the CLI on, HOST:PORT",
                default: .string("0.0.0.0:\(HostAndPort.defaultPort)"), note: "port 0 picks a free one"),
            Key(name: "name", kind: .string, summary: "a readable name for this node", note: "shoal- and its site ID's first digits"),
            Key(name: "peer", kind: .strings, summary: "a peer to connect to and keep connecting to, HOST:PORT; repeat for several"),
            Key(name: "subscribe", kind: .strings, summary: "a sync subscription: a SELECT query of what to replicate from peers, SELECT * FROM c [WHERE ...]; repeatable"),
            Key(name: "mesh", kind: .string, summary: "the mesh name; peers must use the same one", default: .string("default")),
            Key(name: "mesh-key-file", kind: .string, summary: "a file holding the mesh key (at least 16 bytes); peers must hold the same key"),
            Key(name: "admin-key-file", kind: .string, summary: "a file holding the key admin clients (the CLI) must prove instead of the mesh key"),
            Key(
                name: "tls-cert", kind: .string,
                summary: "this node's TLS certificate (PEM), issued by the mesh's CA: with tls-key and tls-ca, every link is TLS 1.3 with certificates on both sides",
                note: "plaintext links"),
            Key(name: "tls-key", kind: .string, summary: "the private key of tls-cert (PEM), readable by its owner only"),
            Key(name: "tls-ca", kind: .string, summary: "the mesh's CA certificate (PEM): peers must present a certificate it issued"),
            Key(
                name: "tls-revoked", kind: .string,
                summary: "a file of revoked certificates, one serial number in hex a line (openssl x509 -noout -serial): a peer presenting one is refused; re-read on SIGHUP",
                note: "none"),
            Key(
                name: "permissions", kind: .string,
                summary: "a TOML file of what each peer may read, write and administer, by its certificate's name (needs TLS; docs/PERMISSIONS.md); re-read on SIGHUP",
                note: "every peer the CA vouches for may do everything"),
            Key(name: "discovery", kind: .boolean, summary: "look for peers of the same mesh on the LAN", default: .boolean(true)),
            Key(
                name: "discovery-interface", kind: .string,
                summary: "the interface LAN discovery announces and listens on, by name (lo, eth0) or IPv4 address",
                note: "every multicast-capable one"),
            Key(
                name: "relay", kind: .boolean, summary: "carry changes for neighbours' subscriptions that this node's own do not cover",
                default: .boolean(true)),
            Key(
                name: "routes", kind: .boolean,
                summary: "ask peers to offer, not send, what another link brings already, so each change arrives about once (off sends every origin on every link, as protocol version 3)",
                default: .boolean(true)),
            Key(name: "log-level", kind: .string, summary: "log level: trace, debug, info, notice, warning, error or critical", default: .string("info")),
            Key(name: "log-format", kind: .string, summary: "log format: text, or json for one JSON object per line", default: .string("text")),
            Key(
                name: "synchronous", kind: .string,
                summary: "normal, or full: every commit on disk before it is acknowledged, so a power failure loses nothing acknowledged, at an fsync per commit",
                default: .string("normal")),
            Key(
                name: "metrics", kind: .string,
                summary: "serve Prometheus metrics on HOST:PORT, GET /metrics over plain HTTP (port 0 picks a free one); it has no authentication: use loopback or a trusted network",
                note: "off"),
            Key(
                name: "compaction-interval", kind: .seconds, summary: "seconds between change-log compactions; 0 turns them off",
                default: .seconds(300)),
            Key(
                name: "compaction-horizon", kind: .seconds,
                summary: "seconds after which a peer not heard from no longer holds back compaction; it resyncs when it returns",
                default: .seconds(604_800), note: "7 days"),
            Key(
                name: "tombstone-horizon", kind: .seconds,
                summary: "seconds a deleted document's tombstone is kept before compaction forgets the document; peers that learned the mesh's deletions longer ago are then refused as stale; 0 keeps tombstones",
                default: .seconds(2_592_000), note: "30 days, or the compaction horizon when that is longer"),
            Key(
                name: "max-frame-size", kind: .integer, summary: "the largest frame accepted, in bytes",
                default: .integer(WireLimits.default.maximumFrameSize)),
            Key(
                name: "coverage-wait", kind: .seconds,
                summary: "seconds a remote transaction waits for pieces its subscriptions cover before what arrived is applied (and reported as partial)",
                default: .seconds(30)),
            Key(
                name: "max-waiting-transactions", kind: .integer,
                summary: "remote transactions held back at most; over it the oldest is applied in part", default: .integer(10_000)),
            Key(
                name: "max-waiting-bytes", kind: .integer,
                summary: "bytes of remote transactions held back at most; over it the oldest is applied in part", default: .integer(256 << 20)),
            Key(
                name: "attachment-horizon", kind: .seconds,
                summary: "seconds attachment bytes no document names are kept before they are deleted (and unfinished puts and fetches left untouched); 0 keeps them",
                default: .seconds(86_400)),
            Key(
                name: "idle-timeout", kind: .seconds, summary: "seconds without a frame from the other side before a session is closed",
                default: .seconds(30)),
            Key(
                name: "handshake-timeout", kind: .seconds, summary: "seconds a new connection has to finish its handshake",
                default: .seconds(Double(limits.handshakeTimeout.components.seconds) + Double(limits.handshakeTimeout.components.attoseconds) / 1e18)),
            Key(
                name: "max-handshakes", kind: .integer,
                summary: "accepted connections in their handshake at once; one more closes the one that has waited longest",
                default: .integer(limits.maximumHandshakes)),
            Key(
                name: "max-peers", kind: .integer, summary: "peers this node syncs with at once; one more is refused",
                default: .integer(limits.maximumPeers)),
            Key(
                name: "max-admin-connections", kind: .integer, summary: "admin (CLI) connections served at once; one more is refused",
                default: .integer(limits.maximumAdminConnections)),
            Key(
                name: "max-subscriptions-per-peer", kind: .integer, summary: "subscriptions a peer may hold on this node, this node's own, and what it asks a peer for as a relay",
                default: .integer(limits.maximumSubscriptionsPerPeer)),
            Key(
                name: "max-query-length", kind: .integer, summary: "bytes of DQL text in one request or subscription query",
                default: .integer(limits.maximumQueryLength)),
            Key(
                name: "max-pending-outbound-bytes", kind: .integer,
                summary: "bytes queued for one connection before writers wait; a peer that reads none of them for the idle timeout is cut off",
                default: .integer(limits.maximumPendingOutboundBytes)),
            Key(
                name: "document-size-soft-limit", kind: .integer,
                summary: "document size in bytes over which a write is logged; the store's document_size_soft_limit_bytes",
                default: .integer(limits.documentSizeSoftLimit), note: "or the hard limit when that is lower"),
            Key(
                name: "document-size-hard-limit", kind: .integer,
                summary: "document size in bytes over which a write, or a received transaction, is refused; the store's document_size_hard_limit_bytes",
                default: .integer(limits.documentSizeHardLimit)),
        ]
    }()

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
            table = try TOML.parse(text)
        } catch {
            throw ShoalError(.invalidConfiguration, "\(file):\(error.line):\(error.column): \(error.message)")
        }
        let directory = (file as NSString).deletingLastPathComponent
        var settings = NodeSettings()
        for name in table.keys {
            let origin = "\(file):\(table.line(of: name) ?? 1) (\(name))"
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
                let found = raw.typeName
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
            if ["data", "store-password-file", "mesh-key-file", "admin-key-file", "tls-cert", "tls-key", "tls-ca", "tls-revoked", "permissions"].contains(name), case .string(let p) = value, !p.hasPrefix("/"), !directory.isEmpty {
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

    /// `name`'s value, or its default (`Key.defaultValue`).
    private func stringOrDefault(_ name: String) -> String {
        if let s = string(name) { return s }
        guard case .string(let s)? = Self.key(name)?.defaultValue else { preconditionFailure("\(name) has no default string") }
        return s
    }

    private func integerOrDefault(_ name: String) -> Int {
        if let n = integer(name) { return n }
        guard case .integer(let n)? = Self.key(name)?.defaultValue else { preconditionFailure("\(name) has no default integer") }
        return n
    }

    private func secondsOrDefault(_ name: String) -> Double {
        if let d = seconds(name) { return d }
        return Self.defaultSeconds(name)
    }

    private static func defaultSeconds(_ name: String) -> Double {
        guard case .seconds(let d)? = key(name)?.defaultValue else { preconditionFailure("\(name) has no default in seconds") }
        return d
    }

    private func booleanOrDefault(_ name: String) -> Bool {
        if case .boolean(let b)? = values[name] { return b }
        guard case .boolean(let b)? = Self.key(name)?.defaultValue else { preconditionFailure("\(name) has no default boolean") }
        return b
    }

    private func invalid(_ name: String, _ problem: String) -> ShoalError {
        ShoalError(.invalidConfiguration, "\(origins[name] ?? "--\(name)"): \(problem)")
    }

    /// The log level (`info` unless set); the executable bootstraps logging with it.
    public func logLevel() throws(ShoalError) -> String {
        let level = stringOrDefault("log-level")
        guard ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(level) else {
            throw invalid("log-level", "'\(level)' is not one of trace, debug, info, notice, warning, error, critical")
        }
        return level
    }

    /// The log format (`text` unless set): `text` lines, or `json`, one object per line.
    public func logFormat() throws(ShoalError) -> String {
        let format = stringOrDefault("log-format")
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
            listen = try HostAndPort(parsing: stringOrDefault("listen"))
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
        let mesh = stringOrDefault("mesh")
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
        let frame = integerOrDefault("max-frame-size")
        if frame < 1024 { throw invalid("max-frame-size", "must be at least 1024 bytes") }
        let wait = secondsOrDefault("coverage-wait")
        if !(wait >= 0 && wait <= 86_400) { throw invalid("coverage-wait", "must be between 0 and 86400 seconds") }
        let waitingTransactions = integerOrDefault("max-waiting-transactions")
        if waitingTransactions < 1 { throw invalid("max-waiting-transactions", "must be at least 1") }
        let waitingBytes = integerOrDefault("max-waiting-bytes")
        if waitingBytes < 1 << 20 { throw invalid("max-waiting-bytes", "must be at least 1048576 (1 MiB)") }
        var adminKey: [UInt8]?
        if let path = string("admin-key-file") {
            do {
                adminKey = try KeyFile.read(path: path, purpose: "admin key")
            } catch {
                throw invalid("admin-key-file", error.message)
            }
        }
        let horizon = secondsOrDefault("attachment-horizon")
        if !(horizon >= 0 && horizon <= 315_360_000) { throw invalid("attachment-horizon", "must be between 0 and 315360000 seconds (ten years)") }
        let idle = secondsOrDefault("idle-timeout")
        if !(idle >= 1 && idle <= 86_400) { throw invalid("idle-timeout", "must be between 1 and 86400 seconds") }
        let handshake = secondsOrDefault("handshake-timeout")
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
        let synchronous = stringOrDefault("synchronous")
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
        let compactionInterval = secondsOrDefault("compaction-interval")
        if !(compactionInterval == 0 || (compactionInterval >= 1 && compactionInterval <= 86_400 * 30)) {
            throw invalid("compaction-interval", "must be 0 (off) or between 1 and 2592000 seconds")
        }
        let compactionHorizon = secondsOrDefault("compaction-horizon")
        if !(compactionHorizon >= 1 && compactionHorizon <= 86_400 * 3650) {
            throw invalid("compaction-horizon", "must be between 1 and 315360000 seconds")
        }
        // Unset, it is 30 days, or the compaction horizon when that is longer.
        let tombstoneHorizon = seconds("tombstone-horizon") ?? max(Self.defaultSeconds("tombstone-horizon"), compactionHorizon)
        if !(tombstoneHorizon == 0 || (tombstoneHorizon >= 1 && tombstoneHorizon <= 86_400 * 3650)) {
            throw invalid("tombstone-horizon", "must be 0 (keep tombstones) or between 1 and 315360000 seconds")
        }
        if tombstoneHorizon != 0, tombstoneHorizon < compactionHorizon {
            throw invalid(
                "tombstone-horizon",
                "must be at least the compaction horizon (\(Int(compactionHorizon)) s): a peer still holding compaction back must not find a deletion forgotten")
        }
        let tlsFiles = try tls()
        let permissions = string("permissions")
        if let permissions {
            guard tlsFiles != nil else {
                throw invalid("permissions", "names peers by their certificates: it needs TLS (tls-cert, tls-key and tls-ca)")
            }
            _ = try AccessRulesFile.load(permissions)
        }
        let relay = booleanOrDefault("relay")
        let discovery = booleanOrDefault("discovery")
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
        configuration.routes = booleanOrDefault("routes")
        configuration.permissions = permissions
        if let store = string("store") {
            let scheme = store.prefix { $0 != ":" }.lowercased()
            guard scheme == "postgresql" || scheme == "postgres", store.contains("://") else {
                throw invalid("store", "give a postgresql://USER@HOST:PORT/DATABASE URL, or leave it out for SQLite in data")
            }
            configuration.store = store
        }
        if let file = string("store-password-file") {
            guard configuration.store != nil else { throw invalid("store-password-file", "is the password of a store: give store too") }
            configuration.storePasswordFile = file
        }
        if let timeout = seconds("store-timeout") {
            guard configuration.store != nil else { throw invalid("store-timeout", "is how long a hub waits for its store: give store too") }
            guard timeout >= 1 && timeout <= 3600 else { throw invalid("store-timeout", "must be between 1 and 3600 seconds") }
        }
        configuration.storeTimeout = .milliseconds(Int64(secondsOrDefault("store-timeout") * 1000))
        return configuration
    }

    /// The TLS files, loaded and checked once here so that a missing one, a key that
    /// does not match its certificate or a certificate another CA issued stops the
    /// node at start; nil when none is set.
    public func tls() throws(ShoalError) -> TLSFiles? {
        let names = ["tls-cert", "tls-key", "tls-ca"]
        let given = names.filter { string($0) != nil }
        guard !given.isEmpty else {
            if string("tls-revoked") != nil {
                throw invalid("tls-revoked", "names certificates a TLS peer may present: it needs tls-cert, tls-key and tls-ca")
            }
            return nil
        }
        if let missing = names.first(where: { string($0) == nil }) {
            throw invalid(
                given[0], "TLS needs all three of tls-cert, tls-key and tls-ca; \(missing) is missing (shoal cert makes them)")
        }
        let files = TLSFiles(
            certificate: string("tls-cert")!, key: string("tls-key")!, authority: string("tls-ca")!, revoked: string("tls-revoked"))
        _ = try LinkTLS(files: files)
        return files
    }
}

public import ShoalWire
public import ShoalStorage

/// Everything a node needs to start, as `shoal run` builds it from its flags.
///
/// Built in code, a node keeps to the machine until told otherwise: it listens on
/// 127.0.0.1:7470 and does not announce itself on the LAN. An app that syncs with
/// devices around it sets `listen` to `0.0.0.0` (or an interface's address) and
/// `discovery` to true; `shoal run` does both by default.
public struct NodeConfiguration: Sendable {
    /// Where the SQLite database lives; created if missing.
    public var dataDirectory: String
    /// Where the node accepts peers and admin clients (default 127.0.0.1:7470; port 0:
    /// one the system picks, which `ShoalNode.ready()` returns).
    public var listen: HostAndPort
    /// A readable name for status and logs; defaults to `shoal-` and the site ID's first digits.
    public var name: String?
    /// Addresses to dial and keep dialing.
    public var peers: [HostAndPort]
    /// SELECT queries this node syncs from its peers.
    public var subscriptions: [String]
    public var meshName: String
    public var meshKey: [UInt8]?
    /// The key admin clients (the CLI) prove instead of the mesh key; with neither,
    /// the node takes admin requests from loopback only.
    public var adminKey: [UInt8]?
    /// LAN discovery of peers over UDP multicast (PROTOCOL.md §16); default false here,
    /// true for `shoal run`.
    public var discovery: Bool
    /// The interface discovery announces and listens on, by name (`lo`, `eth0`) or
    /// IPv4 address; nil: every multicast-capable interface with an IPv4 address.
    public var discoveryInterface: String?
    /// Whether this node carries changes for its neighbours' subscriptions that its
    /// own do not cover (ARCHITECTURE.md, "Relaying for neighbours").
    public var relay: Bool
    /// Whether this node asks its peers to send some origins only as offers, so that in
    /// a mesh with cycles each change reaches it about once (docs/ROUTES.md); off,
    /// every link carries every origin in full, as protocol version 3 does.
    public var routes = true
    /// Where the documents are kept: nil for SQLite in `dataDirectory`; a
    /// `postgresql://USER@HOST:PORT/DATABASE` URL makes this process a hub on that
    /// database (ARCHITECTURE.md, "Hubs on PostgreSQL"), opened by `shoal run`, which
    /// never shows the URL's password.
    public var store: String?
    /// A file holding the store's password (first line; readable by its owner only).
    public var storePasswordFile: String?
    /// How long a hub waits for its database before what waits fails
    /// (`PostgresHubDatabase.unreachableAfter`).
    public var storeTimeout: Duration = .seconds(10)
    public var limits: WireLimits
    public var keepaliveInterval: Duration
    public var idleTimeout: Duration
    /// How long a remote transaction waits for pieces its subscriptions cover
    /// before what arrived is applied and reported as partial.
    public var coverageWait: Duration
    /// Remote transactions, and bytes of them, held back at most; over either, the
    /// oldest waiting one is applied in part (and reported).
    public var maximumWaitingTransactions: Int
    public var maximumWaitingBytes: Int
    /// Connections, sessions, subscriptions, query and document sizes, outbound bytes.
    public var resources: ResourceLimits
    /// Where to serve Prometheus metrics over plain HTTP (`GET /metrics`); nil: nowhere.
    /// It has no authentication: loopback or a trusted network only.
    public var metrics: HostAndPort?
    /// Whether every commit reaches the disk before it is acknowledged (SQLite's
    /// `synchronous = FULL`), so that a power failure loses nothing acknowledged;
    /// otherwise NORMAL, which a process crash cannot lose from but a power failure can.
    public var synchronousFull: Bool
    /// How often the change log is compacted; nil: only on demand (`shoal compact`).
    public var compactionInterval: Duration?
    /// How long a peer not heard from still holds back compaction at the position
    /// it acknowledged; past it, the log compacts beyond it and it resyncs on return.
    public var compactionHorizon: Duration
    /// How long attachment bytes no live document names are kept before a sweep
    /// deletes them (and unfinished puts and fetches left untouched); nil: kept forever.
    public var attachmentHorizon: Duration?
    /// How long a deleted document's tombstone is kept: compaction forgets the
    /// document once its DELETE is older and every counted peer has passed it, and
    /// the node then refuses peers whose freshness is older than what it forgot
    /// (DATA_MODEL.md §18). nil: deleted documents are never forgotten.
    public var tombstoneHorizon: Duration?
    /// Mutual TLS on every peer link and admin connection (PROTOCOL.md §17); nil:
    /// plaintext links, as the node says at start and in status.
    public var tls: TLSFiles?
    /// A TOML file of what each peer may read, write and administer, by the name its
    /// certificate gives it (docs/PERMISSIONS.md); needs `tls`. Nil: every peer the
    /// mesh's CA vouches for may do everything.
    public var permissions: String?

    public init(
        dataDirectory: String, listen: HostAndPort = HostAndPort(host: "127.0.0.1", port: HostAndPort.defaultPort),
        name: String? = nil, peers: [HostAndPort] = [], subscriptions: [String] = [], meshName: String = "default",
        meshKey: [UInt8]? = nil, discovery: Bool = false, discoveryInterface: String? = nil, relay: Bool = true, limits: WireLimits = .default,
        keepaliveInterval: Duration = .seconds(5), idleTimeout: Duration = .seconds(30),
        coverageWait: Duration = .seconds(30), maximumWaitingTransactions: Int = 10_000,
        maximumWaitingBytes: Int = 256 << 20, adminKey: [UInt8]? = nil, resources: ResourceLimits = .init(),
        metrics: HostAndPort? = nil, synchronousFull: Bool = false, attachmentHorizon: Duration? = .seconds(86_400),
        compactionInterval: Duration? = .seconds(300), compactionHorizon: Duration = .seconds(604_800),
        tombstoneHorizon: Duration? = .seconds(2_592_000), tls: TLSFiles? = nil
    ) {
        self.tls = tls
        self.tombstoneHorizon = tombstoneHorizon
        self.dataDirectory = dataDirectory
        self.listen = listen
        self.name = name
        self.peers = peers
        self.subscriptions = subscriptions
        self.meshName = meshName
        self.meshKey = meshKey
        self.adminKey = adminKey
        self.discovery = discovery
        self.discoveryInterface = discoveryInterface
        self.relay = relay
        self.limits = limits
        self.keepaliveInterval = keepaliveInterval
        self.idleTimeout = idleTimeout
        self.coverageWait = coverageWait
        self.maximumWaitingTransactions = maximumWaitingTransactions
        self.maximumWaitingBytes = maximumWaitingBytes
        self.resources = resources
        self.metrics = metrics
        self.synchronousFull = synchronousFull
        self.compactionInterval = compactionInterval
        self.compactionHorizon = compactionHorizon
        self.attachmentHorizon = attachmentHorizon
    }

    /// The smallest mesh key accepted, in bytes.
    public static let minimumMeshKeySize = KeyFile.minimumSize

    /// Reads a mesh key file: its bytes, with surrounding white space trimmed. A file
    /// other users may read is refused (`KeyFile.read`).
    public static func readMeshKey(path: String) throws(ShoalError) -> [UInt8] {
        try KeyFile.read(path: path)
    }
}

public import ShoalWire

/// How a node syncs: its identity in the mesh, limits and timings.
public struct SyncConfiguration: Sendable {
    public var nodeName: String
    public var meshName: String
    public var meshKey: [UInt8]?
    /// The key admin clients prove instead of the mesh key (PROTOCOL.md §10).
    public var adminKey: [UInt8]?
    /// Where this node accepts connections, told to peers in Hello.
    public var listenAddress: String
    public var limits: WireLimits
    /// How often a session sends a Ping (which also measures the round trip).
    public var keepaliveInterval: Duration
    /// A session that receives nothing for this long is closed as dead.
    public var idleTimeout: Duration
    /// How long the handshake may take.
    public var handshakeTimeout: Duration
    /// Deltas read per page of the change log: about this many, in whole log rows, and up
    /// to 4 times as many to finish a transaction (PROTOCOL.md §8.3).
    public var batchSize: Int
    /// Bytes of values read per delta batch at most (a batch holds at least one delta).
    public var batchBytes: Int
    /// Batches sent and not yet acknowledged before the sender waits.
    public var maximumBatchesInFlight: Int
    /// How remote transactions are put together and committed.
    public var inbound: InboundPipeline.Configuration
    /// Whether this node also asks its peers for what its other neighbours asked it
    /// for, so changes cross it for them (`SyncEngine.upstreamSubscriptions(for:)`).
    public var relayForNeighbours: Bool
    /// Sync sessions with peers at once; one more is refused after its handshake.
    public var maximumPeers: Int
    /// Admin sessions (CLI connections) at once; one more is refused after its handshake.
    public var maximumAdminSessions: Int
    /// Subscriptions a peer may hold on this node (one Subscribe), and this node itself.
    public var maximumSubscriptionsPerPeer: Int
    /// Bytes of DQL text in one admin request or one subscription query.
    public var maximumQueryLength: Int
    /// The protocol versions this node offers in Hello (tests narrow it to play an
    /// older peer).
    public var protocolVersions: ClosedRange<UInt32> = HandshakeStateMachine.supportedVersions
    /// Whether this node asks version 4 peers to send some origins lazily, as offers,
    /// so that each change reaches it about once (docs/ROUTES.md). Off (`--no-routes`):
    /// every link carries every origin in full, as version 3 does.
    public var routes = true
    /// How long an attachment fetch waits for each chunk it asks a peer for, before it
    /// moves on to the next peer (PROTOCOL.md §8.7).
    public var attachmentChunkWait: Duration = .seconds(10)
    /// What each peer may do, by its certificate's name (`AccessRules`); none: everything.
    public var accessRules: AccessRules = .none
    /// Where to keep what each peer was last allowed to read (`ServedReads`), so that
    /// rules that change while the node is stopped are noticed; nil: in memory only.
    public var servedReadsFile: String?
    /// How long a node asked for attachment bytes it does not hold waits for its own
    /// fetch of them before it answers "not found": shorter than the asker's wait for a
    /// chunk (`attachmentChunkWait`), so the asker hears an answer (PROTOCOL.md §8.7).
    public var attachmentRelayWait: Duration = .seconds(8)

    public init(
        nodeName: String, meshName: String = "default", meshKey: [UInt8]? = nil, listenAddress: String = "",
        limits: WireLimits = .default, keepaliveInterval: Duration = .seconds(5), idleTimeout: Duration = .seconds(30),
        handshakeTimeout: Duration = .seconds(10), batchSize: Int = 2048, batchBytes: Int = 4 << 20,
        maximumBatchesInFlight: Int = 4, inbound: InboundPipeline.Configuration = .init(), relayForNeighbours: Bool = true,
        adminKey: [UInt8]? = nil, maximumPeers: Int = 64, maximumAdminSessions: Int = 32,
        maximumSubscriptionsPerPeer: Int = 256, maximumQueryLength: Int = 64 << 10
    ) {
        self.relayForNeighbours = relayForNeighbours
        self.nodeName = nodeName
        self.meshName = meshName
        self.meshKey = meshKey
        self.adminKey = adminKey
        self.listenAddress = listenAddress
        self.limits = limits
        self.keepaliveInterval = keepaliveInterval
        self.idleTimeout = idleTimeout
        self.handshakeTimeout = handshakeTimeout
        self.batchSize = batchSize
        self.batchBytes = batchBytes
        self.maximumBatchesInFlight = maximumBatchesInFlight
        self.inbound = inbound
        self.maximumPeers = maximumPeers
        self.maximumAdminSessions = maximumAdminSessions
        self.maximumSubscriptionsPerPeer = maximumSubscriptionsPerPeer
        self.maximumQueryLength = maximumQueryLength
    }
}

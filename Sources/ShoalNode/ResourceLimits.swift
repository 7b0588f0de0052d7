/// The bounds a node puts on what others can make it hold, each with a `shoal run`
/// flag; PROTOCOL.md §12 lists them with the wire limits (`WireLimits`).
public struct ResourceLimits: Sendable, Hashable {
    /// Sync sessions with peers at once (`--max-peers`).
    public var maximumPeers: Int
    /// Admin (CLI) connections served at once (`--max-admin-connections`).
    public var maximumAdminConnections: Int
    /// Subscriptions one peer may hold here, this node's own, and what it asks a peer
    /// for as a relay (`--max-subscriptions-per-peer`).
    public var maximumSubscriptionsPerPeer: Int
    /// Bytes of DQL text in one admin request or subscription query (`--max-query-length`).
    public var maximumQueryLength: Int
    /// Bytes queued for one connection before its writers wait (`--max-pending-outbound-bytes`);
    /// a connection that stays over it for the idle timeout is closed.
    public var maximumPendingOutboundBytes: Int
    /// How long the handshake may take (`--handshake-timeout`).
    public var handshakeTimeout: Duration
    /// Accepted connections still in their handshake at once (`--max-handshakes`): one
    /// more closes the one that has waited longest. With the handshake's frame limit
    /// (`WireLimits.maximumHandshakeFrameSize`), this bounds what connections nobody has
    /// proven can make the node hold: 128 × 256 KiB, 32 MiB, by default.
    public var maximumHandshakes: Int
    /// Document bodies over the soft limit are logged, over the hard one refused: the
    /// initial `document_size_soft_limit_bytes` and `document_size_hard_limit_bytes`
    /// (`--document-size-soft-limit`, `--document-size-hard-limit`).
    public var documentSizeSoftLimit: Int
    public var documentSizeHardLimit: Int

    public init(
        maximumPeers: Int = 64, maximumAdminConnections: Int = 32, maximumSubscriptionsPerPeer: Int = 256,
        maximumQueryLength: Int = 64 << 10, maximumPendingOutboundBytes: Int = 4 << 20,
        handshakeTimeout: Duration = .seconds(10), maximumHandshakes: Int = 128, documentSizeSoftLimit: Int = 256 << 10,
        documentSizeHardLimit: Int = 4 << 20
    ) {
        self.maximumPeers = maximumPeers
        self.maximumAdminConnections = maximumAdminConnections
        self.maximumSubscriptionsPerPeer = maximumSubscriptionsPerPeer
        self.maximumQueryLength = maximumQueryLength
        self.maximumPendingOutboundBytes = maximumPendingOutboundBytes
        self.handshakeTimeout = handshakeTimeout
        self.maximumHandshakes = maximumHandshakes
        self.documentSizeSoftLimit = documentSizeSoftLimit
        self.documentSizeHardLimit = documentSizeHardLimit
    }
}

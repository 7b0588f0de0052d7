import ArgumentParser
import ShoalNode

/// `shoal run`'s flags for the node's resource limits (PROTOCOL.md §12). Each is
/// also a config-file key (`NodeSettings`), which checks the values.
struct LimitOptions: ParsableArguments {
    @Option(name: .long, help: "Seconds without a frame from the other side before a session is closed (default: 30).")
    var idleTimeout: Double?

    @Option(name: .long, help: "Seconds a new connection has to finish its handshake (default: 10).")
    var handshakeTimeout: Double?

    @Option(
        name: .long,
        help: "Accepted connections in their handshake at once; one more closes the one that has waited longest (default: 128).")
    var maxHandshakes: Int?

    @Option(name: .long, help: "Peers this node syncs with at once; one more is refused (default: 64).")
    var maxPeers: Int?

    @Option(name: .long, help: "Admin (CLI) connections served at once; one more is refused (default: 32).")
    var maxAdminConnections: Int?

    @Option(name: .long, help: "Subscriptions a peer may hold on this node, and this node's own (default: 256).")
    var maxSubscriptionsPerPeer: Int?

    @Option(name: .long, help: "Bytes of DQL text in one request or subscription query (default: 65536).")
    var maxQueryLength: Int?

    @Option(
        name: .long,
        help: "Bytes queued for one connection before writers wait; a peer that reads none of them for the idle timeout is cut off (default: 4194304).")
    var maxPendingOutboundBytes: Int?

    @Option(name: .long, help: "Document size in bytes over which a write is logged (document_size_soft_limit_bytes; default: 262144).")
    var documentSizeSoftLimit: Int?

    @Option(
        name: .long,
        help: "Document size in bytes over which a write, or a received transaction, is refused (document_size_hard_limit_bytes; default: 4194304).")
    var documentSizeHardLimit: Int?

    /// Adds the limits given on the command line to `settings`.
    func add(to settings: inout NodeSettings) {
        settings.setFlag("idle-timeout", idleTimeout.map { .seconds($0) })
        settings.setFlag("handshake-timeout", handshakeTimeout.map { .seconds($0) })
        settings.setFlag("max-handshakes", maxHandshakes.map { .integer($0) })
        settings.setFlag("max-peers", maxPeers.map { .integer($0) })
        settings.setFlag("max-admin-connections", maxAdminConnections.map { .integer($0) })
        settings.setFlag("max-subscriptions-per-peer", maxSubscriptionsPerPeer.map { .integer($0) })
        settings.setFlag("max-query-length", maxQueryLength.map { .integer($0) })
        settings.setFlag("max-pending-outbound-bytes", maxPendingOutboundBytes.map { .integer($0) })
        settings.setFlag("document-size-soft-limit", documentSizeSoftLimit.map { .integer($0) })
        settings.setFlag("document-size-hard-limit", documentSizeHardLimit.map { .integer($0) })
    }
}

import ArgumentParser
import ShoalNode

/// `shoal run`'s flags for the node's resource limits (PROTOCOL.md §12).
struct LimitOptions: ParsableArguments {
    @Option(name: .long, help: "Seconds without a frame from the other side before a session is closed.")
    var idleTimeout: Double = 30

    @Option(name: .long, help: "Seconds a new connection has to finish its handshake.")
    var handshakeTimeout: Double = 10

    @Option(name: .long, help: "Peers this node syncs with at once; one more is refused.")
    var maxPeers: Int = 64

    @Option(name: .long, help: "Admin (CLI) connections served at once; one more is refused.")
    var maxAdminConnections: Int = 32

    @Option(name: .long, help: "Subscriptions a peer may hold on this node (and this node's own).")
    var maxSubscriptionsPerPeer: Int = 256

    @Option(name: .long, help: "Bytes of DQL text in one request or subscription query.")
    var maxQueryLength: Int = 64 << 10

    @Option(name: .long, help: "Bytes queued for one connection before writers wait; a peer that reads none of them for the idle timeout is cut off.")
    var maxPendingOutboundBytes: Int = 4 << 20

    @Option(name: .long, help: "Document size in bytes over which a write is logged (document_size_soft_limit_bytes).")
    var documentSizeSoftLimit: Int = 256 << 10

    @Option(name: .long, help: "Document size in bytes over which a write, or a received transaction, is refused (document_size_hard_limit_bytes).")
    var documentSizeHardLimit: Int = 4 << 20

    func validate() throws {
        if !(idleTimeout >= 1 && idleTimeout <= 86_400) { throw ValidationError("--idle-timeout must be between 1 and 86400 seconds") }
        if !(handshakeTimeout >= 0.1 && handshakeTimeout <= 3_600) {
            throw ValidationError("--handshake-timeout must be between 0.1 and 3600 seconds")
        }
        for (name, value) in [
            ("--max-peers", maxPeers), ("--max-admin-connections", maxAdminConnections),
            ("--max-subscriptions-per-peer", maxSubscriptionsPerPeer), ("--max-query-length", maxQueryLength),
            ("--document-size-soft-limit", documentSizeSoftLimit), ("--document-size-hard-limit", documentSizeHardLimit),
        ] where value < 1 {
            throw ValidationError("\(name) must be at least 1")
        }
        if maxPendingOutboundBytes < 64 << 10 { throw ValidationError("--max-pending-outbound-bytes must be at least 65536") }
    }

    var resources: ResourceLimits {
        ResourceLimits(
            maximumPeers: maxPeers, maximumAdminConnections: maxAdminConnections,
            maximumSubscriptionsPerPeer: maxSubscriptionsPerPeer, maximumQueryLength: maxQueryLength,
            maximumPendingOutboundBytes: maxPendingOutboundBytes, handshakeTimeout: .milliseconds(Int64(handshakeTimeout * 1000)),
            documentSizeSoftLimit: documentSizeSoftLimit, documentSizeHardLimit: documentSizeHardLimit)
    }

    var idle: Duration { .milliseconds(Int64(idleTimeout * 1000)) }
}

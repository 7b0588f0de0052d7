import ArgumentParser
import ShoalNode

/// `shoal run`'s flags for the node's resource limits (PROTOCOL.md §12). Each is
/// also a config-file key (`NodeSettings`), which checks the values.
struct LimitOptions: ParsableArguments {
    @Option(name: .long, help: .setting("idle-timeout"))
    var idleTimeout: Double?

    @Option(name: .long, help: .setting("handshake-timeout"))
    var handshakeTimeout: Double?

    @Option(name: .long, help: .setting("max-handshakes"))
    var maxHandshakes: Int?

    @Option(name: .long, help: .setting("max-peers"))
    var maxPeers: Int?

    @Option(name: .long, help: .setting("max-admin-connections"))
    var maxAdminConnections: Int?

    @Option(name: .long, help: .setting("max-subscriptions-per-peer"))
    var maxSubscriptionsPerPeer: Int?

    @Option(name: .long, help: .setting("max-query-length"))
    var maxQueryLength: Int?

    @Option(name: .long, help: .setting("max-pending-outbound-bytes"))
    var maxPendingOutboundBytes: Int?

    @Option(name: .long, help: .setting("document-size-soft-limit"))
    var documentSizeSoftLimit: Int?

    @Option(name: .long, help: .setting("document-size-hard-limit"))
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

extension ArgumentHelp {
    /// A `shoal run` flag's help: its setting's summary and default (`NodeSettings.Key`),
    /// so that `--help`, the config file and the node agree on what an unset flag is.
    static func setting(_ name: String) -> ArgumentHelp {
        guard let key = NodeSettings.key(name) else { preconditionFailure("\(name) is not a setting") }
        return ArgumentHelp(key.help)
    }
}

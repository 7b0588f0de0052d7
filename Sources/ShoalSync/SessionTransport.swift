public import ShoalStorage
public import ShoalWire

/// The outbound half of a connection, as the sync layer sees it.
///
/// `write` may be called from several tasks of one session at once; each frame
/// goes out whole. `close` ends the connection in both directions, which ends the
/// session's inbound sequence too: that is how timeouts interrupt a waiting read.
public protocol SessionTransport: Sendable {
    func write(_ frame: Frame) async throws
    func close() async
    /// Bytes received on the connection, whole frames or not, when the transport
    /// counts them: the idle check then takes part of a frame as a sign of life.
    var inboundBytes: InboundByteCounter? { get }
    /// Called once the handshake has proven the other side: the connection stops
    /// counting as a stranger's.
    func established()
}

extension SessionTransport {
    public var inboundBytes: InboundByteCounter? { nil }
    public func established() {}
}

/// Which side opened the connection.
public enum ConnectionDirection: String, Sendable, Hashable {
    case inbound
    case outbound
}

/// Answers the CLI's admin requests; the node supplies it.
///
/// Each admin connection is served inside `serve(client:_:)`, which gives it a
/// connection of its own: state that lasts from one request to the next (a
/// transaction opened by `begin`), ended when `body` returns or throws, however the
/// connection ended.
public protocol AdminRequestHandler: Sendable {
    /// Runs `body` with the handler of one connection's requests; `client` is the
    /// connection's remote address, and `role` what its certificate lets it do
    /// (`AccessRules`; `.operate` without rules).
    func serve(client: String, role: PeerRights.AdminRole, _ body: (any AdminConnection) async throws -> Void) async throws
}

/// The requests of one admin connection.
///
/// Most requests get one response; an observe request gets a stream of them, so
/// the handler calls `respond` as often as it has something to say and returns
/// when it is done (or throws when the client has gone). `deadline` is the request's
/// budget counted from when it was read (PROTOCOL.md §10.2), nil when it has none.
public protocol AdminConnection: Sendable {
    func handle(
        _ request: AdminRequest, deadline: Deadline?, respond: @escaping @Sendable (AdminResponse) async throws -> Void
    ) async throws
}

import Logging
import ShoalStorage
import ShoalCRDT
import NIOCore
import NIOHTTP1
import NIOPosix

/// The plain HTTP/1.1 endpoint Prometheus scrapes: `GET /metrics`, nothing else.
///
/// It has no authentication and no TLS: it belongs on loopback or a trusted network
/// (the node warns at start when it is neither). Each connection takes requests one
/// after another; a scrape reads the node's state as it answers. It serves at most
/// `maximumConnections` at once (one more is closed at once), closes a connection
/// that completes no request for the idle timeout, and one whose request bodies
/// pass `maximumBodyBytes` (a scrape has none).
///
/// ```
///   Prometheus ── GET /metrics ──► MetricsServer ──► ShoalNode.renderMetrics()
///              ◄── 200 text/plain; version=0.0.4 ──┘
/// ```
struct MetricsServer {
    typealias Connection = NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>

    /// What to answer one request with.
    struct Route: Equatable {
        var status: HTTPResponseStatus
        /// Whether to serve the metrics; otherwise `message` is the body.
        var metrics: Bool
        var message: String
        var allow: String?

        /// The answer to `method` on `uri`: the metrics for GET (and HEAD) /metrics, 404 or 405 otherwise.
        static func of(method: HTTPMethod, uri: String) -> Route {
            let path = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? uri
            guard path == "/metrics" else {
                return Route(status: .notFound, metrics: false, message: "not found: this endpoint serves GET /metrics\n")
            }
            guard method == .GET || method == .HEAD else {
                return Route(status: .methodNotAllowed, metrics: false, message: "only GET /metrics\n", allow: "GET, HEAD")
            }
            return Route(status: .ok, metrics: true, message: "")
        }
    }

    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    let server: NIOAsyncChannel<Connection, Never>

    /// Connections served at once; Prometheus uses one.
    static let maximumConnections = 16
    /// Request body bytes taken on one connection before it is closed.
    static let maximumBodyBytes = 64 * 1024

    /// Binds `address`; a failure is a configuration error naming the address.
    static func bind(_ address: HostAndPort, group: any EventLoopGroup) async throws(ShoalError) -> MetricsServer {
        do {
            let server = try await ServerBootstrap(group: group)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .bind(host: address.host, port: address.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                        return try Connection(wrappingChannelSynchronously: channel)
                    }
                }
            return MetricsServer(server: server)
        } catch {
            throw ShoalError(.invalidConfiguration, "cannot serve metrics on \(address) (--metrics): \(ShoalError.describe(error))")
        }
    }

    /// The address bound (the real port when 0 was asked for).
    func boundAddress(asked: HostAndPort) -> HostAndPort {
        HostAndPort(host: asked.host, port: server.channel.localAddress?.port ?? asked.port)
    }

    /// Serves until the task is cancelled; `render` makes each scrape's body.
    func run(
        logger: Logger, idleTimeout: Duration, render: @escaping @Sendable () async throws -> String
    ) async throws {
        let open = Locked(0)
        try await withThrowingDiscardingTaskGroup { group in
            try await server.executeThenClose { connections in
                for try await connection in connections {
                    let admitted = open.withLock { n in
                        guard n < Self.maximumConnections else { return false }
                        n += 1
                        return true
                    }
                    guard admitted else {
                        logger.warning(
                            "refusing a metrics connection: \(Self.maximumConnections) are open already",
                            metadata: ["shoal.peer.address": "\(connection.channel.remoteAddress.map { "\($0)" } ?? "?")"])
                        try? await connection.channel.close()
                        continue
                    }
                    group.addTask {
                        defer { open.withLock { $0 -= 1 } }
                        do {
                            try await Self.serve(connection, idleTimeout: idleTimeout, render: render)
                        } catch {
                            logger.debug("metrics connection ended: \(error)")
                        }
                    }
                }
            }
        }
    }

    /// Answers the connection's requests in order; closes it when it completes none
    /// for `idleTimeout` or sends more body than `maximumBodyBytes`.
    private static func serve(
        _ connection: Connection, idleTimeout: Duration, render: @escaping @Sendable () async throws -> String
    ) async throws {
        let lastRequest = Locked(ContinuousClock.now)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while true {
                    try await Task.sleep(for: .seconds(1))
                    if ContinuousClock.now - lastRequest.withLock({ $0 }) > idleTimeout {
                        try? await connection.channel.close()
                        return
                    }
                }
            }
            defer { group.cancelAll() }
            try await answer(connection, lastRequest: lastRequest, render: render)
        }
    }

    private static func answer(
        _ connection: Connection, lastRequest: Locked<ContinuousClock.Instant>, render: @Sendable () async throws -> String
    ) async throws {
        try await connection.executeThenClose { inbound, outbound in
            var head: HTTPRequestHead?
            var bodyBytes = 0
            for try await part in inbound {
                switch part {
                case .head(let h):
                    head = h
                case .body(let bytes):
                    bodyBytes += bytes.readableBytes
                    if bodyBytes > Self.maximumBodyBytes { return }
                case .end:
                    lastRequest.withLock { $0 = .now }
                    guard let request = head else { continue }
                    head = nil
                    let route = Route.of(method: request.method, uri: request.uri)
                    var status = route.status
                    var body = route.message
                    var type = "text/plain; charset=utf-8"
                    if route.metrics {
                        do {
                            body = try await render()
                            type = contentType
                        } catch {
                            status = .internalServerError
                            body = "cannot read the node's state: \(error)\n"
                        }
                    }
                    var headers = HTTPHeaders()
                    headers.add(name: "Content-Type", value: type)
                    headers.add(name: "Content-Length", value: "\(body.utf8.count)")
                    if let allow = route.allow { headers.add(name: "Allow", value: allow) }
                    if !request.isKeepAlive { headers.add(name: "Connection", value: "close") }
                    try await outbound.write(.head(HTTPResponseHead(version: request.version, status: status, headers: headers)))
                    if request.method != .HEAD {
                        try await outbound.write(.body(.byteBuffer(ByteBuffer(string: body))))
                    }
                    try await outbound.write(.end(nil))
                    if !request.isKeepAlive { return }
                }
            }
        }
    }
}

import Foundation
import NIOCore
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A hand-driven peer on a blocking loopback socket: it completes a real handshake
/// (`HandshakeStateMachine`), then sends whatever a test wants, well formed or not,
/// and reads (or refuses to read) what the node sends back.
final class RawPeer {
    let fd: Int32
    private var buffer = ByteBuffer()
    private let decoder = FrameDecoder()
    private let codec = MessageCodec()
    let site: SiteID

    /// Connects to 127.0.0.1:`port`; `receiveBuffer` shrinks the socket's receive buffer.
    init(port: Int, site: SiteID = SiteID(UInt64.random(in: 1...UInt64.max)), receiveBuffer: Int32? = nil) throws {
        self.site = site
        fd = try Self.connect(port: port, receiveBuffer: receiveBuffer)
    }

    /// A connected socket. A failed connect is tried again for a few seconds: a slow
    /// node (a sanitized build) may not keep up with a swarm of connections and let its
    /// backlog fill.
    static func connect(port: Int, receiveBuffer: Int32?) throws -> Int32 {
        for _ in 0..<25 {
            if let fd = connectOnce(port: port, receiveBuffer: receiveBuffer) { return fd }
            usleep(200_000)
        }
        throw NodeProcessError(message: "connect to \(port) failed: \(String(cString: strerror(errno)))")
    }

    /// A socket connected to 127.0.0.1:`port` (its receive timeout 10 s), or nil at once
    /// if the connect fails or takes longer than `connectTimeout` seconds (a node that
    /// hangs accepts nothing, its backlog fills, and a connect would wait minutes).
    static func connectOnce(port: Int, receiveBuffer: Int32? = nil, connectTimeout: Int = 10) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var connectWait = timeval(tv_sec: connectTimeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &connectWait, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if connected == 0 {
            // Sends wait as long as they need, as before.
            var forever = timeval(tv_sec: 0, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &forever, socklen_t(MemoryLayout<timeval>.size))
            return fd
        }
        close(fd)
        return nil
    }

    deinit { close(fd) }

    /// The port this end of the connection has, as the node sees it.
    var localPort: Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    func send(_ message: WireMessage) throws {
        var out = ByteBuffer()
        codec.encode(message).encode(into: &out)
        try sendBytes(Array(out.readableBytesView))
    }

    func sendBytes(_ bytes: [UInt8]) throws {
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == bytes.count else { throw NodeProcessError(message: "send failed (\(sent) of \(bytes.count))") }
    }

    /// The next message, or nil when the node closed the connection (or 10 s passed).
    func receive() throws -> WireMessage? {
        guard let bytes = try receiveFrame() else { return nil }
        var frame = ByteBuffer(bytes: bytes)
        return try codec.decode(try decoder.next(from: &frame)!)
    }

    /// The next frame as it came, header and payload, or nil when the node closed the
    /// connection (or 10 s passed).
    func receiveFrame() throws -> [UInt8]? {
        while true {
            if let frame = try decoder.next(from: &buffer) {
                var bytes = ByteBuffer()
                frame.encode(into: &bytes)
                return Array(bytes.readableBytesView)
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = recv(fd, &chunk, chunk.count, 0)
            guard n > 0 else { return nil }
            buffer.writeBytes(chunk[0..<n])
        }
    }

    /// Runs the handshake as a peer (or an admin client) in mesh `mesh`; returns the node's identity.
    @discardableResult
    func handshake(mesh: String = "default", role: PeerRole = .peer) throws -> PeerIdentity {
        var machine = HandshakeStateMachine(
            configuration: .init(
                siteID: role == .admin ? SiteID(0) : site, nodeName: "raw", meshName: role == .admin ? "" : mesh,
                meshKey: nil, role: role))
        var actions = machine.start()
        while true {
            for action in actions {
                switch action {
                case .send(let m): try send(m)
                case .established(let identity): return identity
                case .fail(let error): throw error
                }
            }
            guard let message = try receive() else { throw NodeProcessError(message: "the node closed during the handshake") }
            actions = machine.receive(message)
        }
    }

    /// Reads until the node closes; returns the Error frame it sent, if any.
    func errorBeforeClose() throws -> Shoal_V1_Error? {
        var last: Shoal_V1_Error?
        while let message = try receive() {
            if case .error(let e) = message { last = e }
        }
        return last
    }

    static func subscribe(_ queries: [String], generation: UInt64 = 1) -> WireMessage {
        var s = Shoal_V1_Subscribe()
        s.generation = generation
        s.subscriptions = queries.map { q in
            var w = Shoal_V1_Subscription()
            w.query = q
            return w
        }
        return .subscribe(s)
    }
}

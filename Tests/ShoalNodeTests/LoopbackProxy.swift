import Foundation
import ShoalCRDT
import ShoalTesting

#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy on 127.0.0.1 that a test can cut and restore: a link between two
/// nodes that fails like a network does. Every socket it opens is closed by `stop()`
/// (and on deinit); its threads end with them.
final class LoopbackProxy: @unchecked Sendable {  // state behind `lock`
    let port: Int
    private let target: Int
    private let listener: Int32
    private let lock = Locked<(open: Set<Int32>, cut: Bool, stopped: Bool)>(([], false, false))

    /// Listens on a free port of 127.0.0.1 and forwards every connection to 127.0.0.1:`target`.
    init(to target: Int) throws {
        self.target = target
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            close(fd)
            throw NodeProcessError(message: "the proxy cannot listen")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    var address: String { "127.0.0.1:\(port)" }

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// Breaks every connection through the proxy and refuses new ones until `restore()`.
    func cut() {
        // Under the lock, so a pump cannot close (and the kernel reuse) a descriptor meanwhile.
        lock.withLock { state in
            state.cut = true
            for fd in state.open { shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    /// Lets connections through again.
    func restore() { lock.withLock { $0.cut = false } }

    func stop() {
        let first = lock.withLock { state -> Bool in
            guard !state.stopped else { return false }
            state.stopped = true
            state.cut = true
            for fd in state.open { shutdown(fd, Int32(SHUT_RDWR)) }
            return true
        }
        guard first else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    deinit { stop() }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }  // the listener was closed
            guard !lock.withLock({ $0.cut }) else {
                close(client)
                continue
            }
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: target)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else {
                close(client)
                close(upstream)
                continue
            }
            lock.withLock { _ = $0.open.formUnion([client, upstream]) }
            let pair = Pair(client: client, upstream: upstream)
            Thread.detachNewThread { [self] in pump(from: client, to: upstream, pair: pair) }
            Thread.detachNewThread { [self] in pump(from: upstream, to: client, pair: pair) }
        }
    }

    /// The two sockets of one connection, closed once both pumps have ended.
    final class Pair: @unchecked Sendable {  // `ended` behind `lock`
        let client: Int32, upstream: Int32
        let ended = Locked(0)
        init(client: Int32, upstream: Int32) {
            self.client = client
            self.upstream = upstream
        }
    }

    private func pump(from source: Int32, to destination: Int32, pair: Pair) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = recv(source, &buffer, buffer.count, 0)
            if n <= 0 { break }
            var sent = 0
            while sent < n {
                let m = buffer[sent..<n].withUnsafeBytes { send(destination, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if m <= 0 { break }
                sent += m
            }
            if sent < n { break }
        }
        shutdown(destination, Int32(SHUT_RDWR))
        shutdown(source, Int32(SHUT_RDWR))
        if pair.ended.withLock({ $0 += 1; return $0 }) == 2 {
            lock.withLock { $0.open.subtract([pair.client, pair.upstream]) }
            close(pair.client)
            close(pair.upstream)
        }
    }
}

import Foundation
import ShoalCRDT

#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy on 127.0.0.1 that fails like a network does: a link between two nodes
/// that a test or `shoal-check` can reset, blackhole or stall, each way or both.
///
/// ```
///   dialer ──► proxy (127.0.0.1:port) ──► 127.0.0.1:target
///          forward: dialer to target      backward: target to dialer
/// ```
///
/// Every socket it opens is closed by `stop()` (and on deinit); its threads end with
/// them. Each direction of each connection is pumped by a thread of its own, which
/// asks the proxy's `Mode` what to do with the bytes it reads.
public final class LoopbackProxy: @unchecked Sendable {  // state behind `state`
    /// What happens to the bytes of one direction.
    public enum Flow: Sendable, Equatable {
        /// Forwarded as they come.
        case open
        /// Read and thrown away, the connection kept open: the other end waits for
        /// bytes that never come (its idle or handshake timeout ends it). A connection
        /// that lost bytes is reset when the link heals, since its stream has a hole.
        case blackhole
        /// Not read at all: the sender's socket buffers fill and it waits, as behind a
        /// congested link; when the link heals, everything arrives late but whole.
        case stall
    }

    /// How the link behaves now.
    public struct Mode: Sendable, Equatable {
        /// Connections refused, and those open reset (`cut()`).
        public var refused = false
        public var forward = Flow.open
        public var backward = Flow.open

        public init(refused: Bool = false, forward: Flow = .open, backward: Flow = .open) {
            self.refused = refused
            self.forward = forward
            self.backward = backward
        }

        public static let open = Mode()
    }

    public let port: Int
    private let target: Int
    private let listener: Int32
    private struct State {
        var open: Set<Int32> = []
        var mode = Mode.open
        var stopped = false
        /// Connections that lost bytes to a blackhole, reset when the link heals.
        var holed: Set<ObjectIdentifier> = []
        var pairs: [ObjectIdentifier: Pair] = [:]
        /// Every byte forwarded, either way, when the proxy records.
        var transcript: [UInt8] = []
        /// Bytes the backward direction may still forward before the link is cut
        /// (`cut(afterBackward:)`); nil: no limit.
        var backwardBudget: Int?
        /// The statement whose answer the next connection to send it loses (`loseAnswer`).
        var answerFault: AnswerFault?
        /// Connections that sent the fault's `after` bytes, and so break at its marker.
        var primed: Set<ObjectIdentifier> = []
        /// Connections whose next backward bytes are thrown away as they break, and
        /// whether the whole link is cut then.
        var losing: [ObjectIdentifier: Bool] = [:]
        /// How many connections `loseAnswer` broke.
        var answersLost = 0
        /// Connections open when the target failed over (`failOver`), and whether silently.
        var failedOver: [ObjectIdentifier: Bool] = [:]
    }

    /// A statement whose answer is lost (`loseAnswer`).
    struct AnswerFault {
        var after: [UInt8]
        var marker: [UInt8]
        var delivering: Bool
        var cutting: Bool
        var keepingTarget: Bool
    }
    /// Whether forwarded bytes are kept for `transcript()`.
    private let recording: Bool
    private let state = Locked(State())

    /// Listens on a free port of 127.0.0.1 and forwards every connection to 127.0.0.1:`target`;
    /// with `recording`, keeps every byte it forwards for `transcript()`.
    public init(to target: Int, recording: Bool = false) throws {
        self.target = target
        self.recording = recording
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

    public var address: String { "127.0.0.1:\(port)" }

    public var mode: Mode { state.withLock { $0.mode } }

    /// The bytes forwarded so far, both ways, in the order the pumps read them (a
    /// recording proxy only): what an eavesdropper on the link would have seen.
    public func transcript() -> [UInt8] { state.withLock { $0.transcript } }

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// Breaks every connection through the proxy and refuses new ones until `restore()`.
    public func cut() { set(Mode(refused: true)) }

    /// Cuts the link, as `cut()` does, once the backward direction (target to dialer) has
    /// forwarded `bytes` more: a link that breaks part way through what the target sends,
    /// at a point a test chooses rather than one the timing of the moment does.
    public func cut(afterBackward bytes: Int) {
        state.withLock { $0.backwardBudget = max(0, bytes) }
    }

    /// Breaks the next connection that sends `marker` forward after it has sent `after`
    /// (a statement, then the one a test waits for), and only that connection: with
    /// `delivering`, the marker's bytes reach the target and what it answers is read and
    /// thrown away as the connection breaks, an answer lost on its way back; without,
    /// the connection breaks before they are sent. With `cutting`, the whole link is cut
    /// then (`cut()`), so that the dialer cannot ask again until `restore()`. With
    /// `keepingTarget` (and not `delivering`), only the dialer's side breaks: the target
    /// keeps its end open, waiting for bytes that never come, as across a network that
    /// lost the dialer. Once.
    public func loseAnswer(to marker: [UInt8], after: [UInt8], delivering: Bool, cutting: Bool = false, keepingTarget: Bool = false) {
        state.withLock {
            $0.answerFault = AnswerFault(after: after, marker: marker, delivering: delivering, cutting: cutting, keepingTarget: keepingTarget)
        }
    }

    /// How many connections `loseAnswer` broke so far.
    public var answersLost: Int { state.withLock { $0.answersLost } }

    /// Whether the forward bytes `bytes` of `pair` meet the fault of `loseAnswer`: nil
    /// when they do not, else the fault.
    private func meetsAnswerFault(_ bytes: ArraySlice<UInt8>, of pair: Pair) -> AnswerFault? {
        state.withLock { state in
            guard let fault = state.answerFault else { return nil }
            let id = ObjectIdentifier(pair)
            if state.primed.contains(id), Self.holds(bytes, fault.marker) {
                state.answerFault = nil
                state.primed = []
                state.answersLost += 1
                if fault.delivering { state.losing[id] = fault.cutting }
                return fault
            }
            if Self.holds(bytes, fault.after) { state.primed.insert(id) }
            return nil
        }
    }

    private static func holds(_ bytes: ArraySlice<UInt8>, _ part: [UInt8]) -> Bool {
        guard !part.isEmpty, bytes.count >= part.count else { return false }
        var start = bytes.startIndex
        while start + part.count <= bytes.endIndex {
            if bytes[start..<start + part.count].elementsEqual(part) { return true }
            start += 1
        }
        return false
    }

    /// Lets connections through again, each way.
    public func restore() { set(.open) }

    /// What a server's failover to another machine behind the same address does to the
    /// connections open now: nothing more arrives from the old server, and a connection
    /// is reset as soon as its client sends on it (the new machine knows nothing of it),
    /// so a client that only listens hears nothing, for ever. `silently`: what the
    /// client sends is lost too, as behind a firewall that forgot the flow, and nothing
    /// resets it. Connections made after are open.
    public func failOver(silently: Bool = false) {
        state.withLock { state in
            for id in state.pairs.keys { state.failedOver[id] = silently }
        }
    }

    /// Makes the link behave as `mode` says from now on. Going from refused to open
    /// lets new connections through; a connection that lost bytes to a blackhole is
    /// reset once its direction no longer drops them.
    public func set(_ mode: Mode) {
        // Under the lock, so a pump cannot close (and the kernel reuse) a descriptor meanwhile.
        state.withLock { state in
            state.mode = mode
            if mode.refused {
                for fd in state.open { shutdown(fd, Int32(SHUT_RDWR)) }
            } else if mode.forward != .blackhole && mode.backward != .blackhole {
                for id in state.holed {
                    guard let pair = state.pairs[id] else { continue }
                    shutdown(pair.client, Int32(SHUT_RDWR))
                    shutdown(pair.upstream, Int32(SHUT_RDWR))
                }
                state.holed = []
            }
        }
    }

    public func stop() {
        let first = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            state.stopped = true
            state.mode = Mode(refused: true)
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
            guard !state.withLock({ $0.mode.refused }) else {
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
            let pair = Pair(client: client, upstream: upstream)
            state.withLock {
                $0.open.formUnion([client, upstream])
                $0.pairs[ObjectIdentifier(pair)] = pair
            }
            Thread.detachNewThread { [self] in pump(from: client, to: upstream, pair: pair, forward: true) }
            Thread.detachNewThread { [self] in pump(from: upstream, to: client, pair: pair, forward: false) }
        }
    }

    /// The two sockets of one connection, closed once both pumps have ended.
    final class Pair: @unchecked Sendable {  // `ended` behind its lock
        let client: Int32, upstream: Int32
        let ended = Locked(0)
        init(client: Int32, upstream: Int32) {
            self.client = client
            self.upstream = upstream
        }
    }

    /// What one direction's pump does next.
    private func flow(forward: Bool) -> Flow {
        state.withLock { forward ? $0.mode.forward : $0.mode.backward }
    }

    private func pump(from source: Int32, to destination: Int32, pair: Pair, forward: Bool) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        // Left open when a fault keeps the target waiting: the backward pump ends it once
        // the target closes.
        var keepDestination = false
        loop: while true {
            // A stalled direction reads nothing until the link heals (or is cut, which
            // shuts the socket down under it).
            while flow(forward: forward) == .stall {
                // POLLRDHUP (0x2000, which Glibc's module does not import): the other end closed.
                let peerClosed: Int16 = 0x2000
                var descriptor = pollfd(fd: source, events: peerClosed, revents: 0)
                if poll(&descriptor, 1, 50) > 0, descriptor.revents & (Int16(POLLHUP | POLLERR | POLLNVAL) | peerClosed) != 0 {
                    break loop
                }
            }
            var n = recv(source, &buffer, buffer.count, 0)
            if n <= 0 { break }
            if let silently = state.withLock({ $0.failedOver[ObjectIdentifier(pair)] }) {
                // The client's bytes reach a machine that resets the connection (or are
                // lost); the old server's never arrive.
                if forward, !silently { break }
                continue
            }
            if flow(forward: forward) == .blackhole {
                state.withLock { _ = $0.holed.insert(ObjectIdentifier(pair)) }
                continue
            }
            if forward, let fault = meetsAnswerFault(buffer[0..<n], of: pair), !fault.delivering {
                if fault.cutting { cut() }
                keepDestination = fault.keepingTarget
                break
            }
            if !forward, let cutting = state.withLock({ $0.losing.removeValue(forKey: ObjectIdentifier(pair)) }) {
                if cutting { cut() }
                break
            }
            if recording { state.withLock { $0.transcript += buffer[0..<n] } }
            // Within the backward budget, if one is set: what is left of it goes, then the cut.
            let budgetSpent = forward ? false : state.withLock { state -> Bool in
                guard let budget = state.backwardBudget else { return false }
                n = min(n, budget)
                state.backwardBudget = budget - n
                return budget - n == 0
            }
            var sent = 0
            while sent < n {
                let m = buffer[sent..<n].withUnsafeBytes { send(destination, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if m <= 0 { break }
                sent += m
            }
            if sent < n { break }
            if budgetSpent {
                state.withLock { $0.backwardBudget = nil }
                cut()
                break
            }
        }
        if !keepDestination { shutdown(destination, Int32(SHUT_RDWR)) }
        shutdown(source, Int32(SHUT_RDWR))
        if pair.ended.withLock({ $0 += 1; return $0 }) == 2 {
            state.withLock {
                $0.open.subtract([pair.client, pair.upstream])
                $0.pairs[ObjectIdentifier(pair)] = nil
                $0.holed.remove(ObjectIdentifier(pair))
                $0.primed.remove(ObjectIdentifier(pair))
                $0.losing[ObjectIdentifier(pair)] = nil
                $0.failedOver[ObjectIdentifier(pair)] = nil
            }
            close(pair.client)
            close(pair.upstream)
        }
    }
}

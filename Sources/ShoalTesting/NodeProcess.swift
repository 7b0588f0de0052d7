public import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The `shoal` executable built next to the running program (a test bundle, or
/// `shoal-bench`), or `$SHOAL_BINARY`.
public enum ShoalBinary {
    public static var path: String {
        if let explicit = ProcessInfo.processInfo.environment["SHOAL_BINARY"] { return explicit }
        let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return me.deletingLastPathComponent().appendingPathComponent("shoal").path
    }

    public struct Output: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// Runs `shoal ARGS...` to completion and returns what it printed; `input`, if
    /// given, is its standard input. A command still running after two minutes (far
    /// beyond any test's, even on a loaded machine) is killed.
    public static func run(_ arguments: [String], input: Data? = nil) throws -> Output {
        let result = try ChildProcess.run(path, arguments, input: input, timeout: 120)
        return Output(
            status: result.status, stdout: String(decoding: result.stdout, as: UTF8.self),
            stderr: String(decoding: result.stderr, as: UTF8.self))
    }
}

/// A `shoal run` process on 127.0.0.1 with a port the kernel chose, always reaped.
public final class NodeProcess {
    public let name: String
    public let dataDirectory: String
    public let logPath: String
    /// Whether the log was the caller's to name, and so outlives this process.
    private let keepsLog: Bool
    private let process: ChildProcess
    public private(set) var address = ""
    /// Flags `exec` and `status` add to reach this node (its TLS files, say).
    public var clientArguments: [String] = []

    /// Starts `shoal run` and waits for its ready line; `environment` is added to the
    /// child's, and its output goes to `logPath` (appended to), or to a new file
    /// beside the data directory.
    public init(
        name: String, dataDirectory: String, listenPort: Int = 0, extra: [String] = [], plain: Bool = false,
        environment: [String: String] = [:], logPath: String? = nil
    ) throws {
        self.name = name
        self.dataDirectory = dataDirectory
        self.logPath = logPath ?? dataDirectory + ".\(UInt32.random(in: 0...UInt32.max)).log"
        keepsLog = logPath != nil
        if !FileManager.default.fileExists(atPath: self.logPath) {
            _ = FileManager.default.createFile(atPath: self.logPath, contents: nil)
        }
        // A log shared with earlier runs of the node is read from where this one starts.
        let start = (try? FileManager.default.attributesOfItem(atPath: self.logPath)[.size] as? Int) ?? 0
        let arguments = plain ? ["run"] + extra : [
            "run", "--data", dataDirectory, "--listen", "127.0.0.1:\(listenPort)", "--name", name, "--no-discovery",
        ] + extra
        process = try ChildProcess(
            ShoalBinary.path, arguments, stdout: .file(self.logPath), stderr: .file(self.logPath), environment: environment)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if let line = self.log().utf8.dropFirst(start).split(separator: UInt8(ascii: "\n"))
                .lazy.map({ String(decoding: $0, as: UTF8.self) }).first(where: { $0.contains("ready to accept connections on ") }),
                let range = line.range(of: "ready to accept connections on ")
            {
                // The address ends the text line; in a JSON line, a quote ends it.
                address = String(line[range.upperBound...].prefix { $0 != "\"" && !$0.isWhitespace })
                return
            }
            if !process.isRunning { break }
            usleep(20_000)
        }
        stop()
        throw NodeProcessError(message: "\(name) did not become ready:\n\(self.log())")
    }

    /// The process ID, while it runs.
    public var processIdentifier: Int32 { process.processIdentifier }

    /// Peak resident memory (VmHWM) in bytes, from /proc; nil once it has exited.
    public var peakResidentBytes: Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") })
        else { return nil }
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "").map { $0 * 1024 }
    }

    /// CPU seconds used so far (user + system), from /proc; nil once it has exited.
    public var cpuSeconds: Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8),
            let end = text.lastIndex(of: ")")
        else { return nil }
        // Fields after the command name: state is field 3; utime and stime are fields 14 and 15.
        let fields = text[text.index(after: end)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    public var port: Int { Int(address.split(separator: ":").last ?? "") ?? 0 }

    /// The address `--metrics` serves on, from the "serving metrics on http://ADDRESS/metrics" line.
    public var metricsAddress: String? {
        guard let line = log().split(separator: "\n").first(where: { $0.contains("serving metrics on http://") }),
            let start = line.range(of: "serving metrics on http://"),
            let end = line[start.upperBound...].range(of: "/metrics")
        else { return nil }
        return String(line[start.upperBound..<end.lowerBound])
    }
    public var isRunning: Bool { process.isRunning }

    public func log() -> String {
        (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
    }

    /// Sends SIGINT and waits for the exit status.
    @discardableResult
    public func interrupt() -> Int32 {
        process.send(SIGINT)
        return waitForExit()
    }

    /// Kills the process outright, as a crash would.
    public func crash() {
        process.send(SIGKILL)
        process.wait()
    }

    public func stop() {
        process.send(SIGTERM)
        _ = waitForExit()
    }

    /// Waits up to 15 s for the exit status, then kills it.
    private func waitForExit() -> Int32 { process.wait(timeout: 15) }

    /// `shoal exec --node THIS --json STATEMENTS`, parsed.
    public func exec(_ statements: String, args: String? = nil, extra: [String] = []) throws -> ShoalBinary.Output {
        var arguments = ["exec", "--node", address, "--json"] + clientArguments + extra
        if let args { arguments += ["--args", args] }
        return try ShoalBinary.run(arguments + [statements])
    }

    public func status() throws -> [String: Any] {
        let output = try ShoalBinary.run(["status", "--node", address, "--json"] + clientArguments)
        guard output.status == 0,
            let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any]
        else {
            throw NodeProcessError(message: "status failed: \(output.stderr)\(output.stdout)")
        }
        return object
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to the running process.
    public func signal(_ signal: Int32) { process.send(signal) }

    deinit {
        stop()
        if !keepsLog { try? FileManager.default.removeItem(atPath: logPath) }
    }
}

public struct NodeProcessError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
    public init(message: String) { self.message = message }
}

/// Writes `text` to a new file only its owner may read (mode 0600), as key files must be.
public func writePrivateFile(_ path: String, _ text: String) throws {
    try text.write(toFile: path, atomically: false, encoding: .utf8)
    guard chmod(path, 0o600) == 0 else { throw NodeProcessError(message: "chmod \(path) failed") }
}

/// A port of 127.0.0.1 that is free now, for a node that must listen on the same
/// port again after a restart.
public func freeLoopbackPort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Polls until `condition` holds or the time runs out.
public func eventually(_ seconds: Double = 20, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(100_000)
    }
    return try condition()
}

/// A plain TCP client for sending a node bytes no real peer would.
public enum RawSocket {
    /// Connects to 127.0.0.1:`port`, sends `bytes` (then, with `finish`, shuts down
    /// its sending side), and returns what the node sends back until it closes the
    /// connection (or 10 s pass).
    public static func exchange(
        port: Int, bytes: [UInt8], timeout seconds: Int = 10, finish: Bool = false
    ) throws -> (reply: [UInt8], closedByNode: Bool) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw NodeProcessError(message: "socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw NodeProcessError(message: "connect to \(port) failed") }
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if finish { shutdown(fd, Int32(SHUT_WR)) }
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n > 0 {
                reply += buffer[0..<n]
            } else {
                return (reply, n == 0)
            }
        }
    }

    /// The type bytes of the whole frames in `bytes`.
    public static func frameTypes(_ bytes: [UInt8]) -> [UInt8] {
        var types: [UInt8] = []
        var i = 0
        while i + 8 <= bytes.count {
            let length = Int(bytes[i + 4]) << 24 | Int(bytes[i + 5]) << 16 | Int(bytes[i + 6]) << 8 | Int(bytes[i + 7])
            guard i + 8 + length <= bytes.count else { break }
            types.append(bytes[i + 1])
            i += 8 + length
        }
        return types
    }
}

extension NodeProcess {
    /// Starts `shoal run ARGUMENTS` as they are (no --data, --listen or --name added).
    public convenience init(name: String, dataDirectory: String, arguments: [String]) throws {
        try self.init(name: name, dataDirectory: dataDirectory, listenPort: 0, extra: arguments, plain: true)
    }
}

/// Runs blocking work (processes started and waited for, `eventually`) on a thread of
/// its own, so that an async test holds no thread of the concurrency pool meanwhile:
/// on two cores, a blocked pool thread stalls every other test's async work.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

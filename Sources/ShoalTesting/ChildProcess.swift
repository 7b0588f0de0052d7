public import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, for tests and the benchmark.
///
/// Foundation's `Process` is not used: on Linux it lists `/proc/self/fd` on every
/// launch (and its copy of each entry can read past the end of the listing), its
/// pipes are inherited by every child started meanwhile from another thread, and
/// its `readDataToEndOfFile` traps on an interrupted read. Here the child starts
/// with only its three standard streams (glibc's `addclosefrom_np`, and the
/// parent's own ends are close-on-exec), reads and writes retry when interrupted,
/// and a writer sees EPIPE rather than a signal when the child has gone.
public final class ChildProcess: @unchecked Sendable {
    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable {
        /// `/dev/null`.
        case null
        /// A pipe to or from the parent: `input`, `output` or `errors`.
        case pipe
        /// A file, created if missing and appended to.
        case file(String)
    }

    public let processIdentifier: pid_t
    /// The write end of the child's standard input, when it is `.pipe`.
    public let input: ChildPipe?
    /// The read end of the child's standard output, when it is `.pipe`.
    public let output: ChildPipe?
    /// The read end of the child's standard error, when it is `.pipe`.
    public let errors: ChildPipe?

    private let lock = NSLock()
    // Under `lock`: set once the child has been reaped.
    private var status: Int32?

    /// Starts `executable` with `arguments`, this process's environment and
    /// `environment` over it (`LD_PRELOAD` for a faked clock, say).
    public init(
        _ executable: String, _ arguments: [String], stdin: Stream = .null, stdout: Stream = .null, stderr: Stream = .null,
        environment: [String: String] = [:]
    ) throws {
        _ = ChildProcess.ignoreBrokenPipes
        var parentEnds: [ChildPipe?] = [nil, nil, nil]
        var childEnds: [Int32] = []
        defer { for fd in childEnds { close(fd) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (target, stream) in [stdin, stdout, stderr].enumerated() {
            let fd: Int32
            switch stream {
            case .null:
                fd = open("/dev/null", O_RDWR | O_CLOEXEC)
            case .file(let path):
                fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
            case .pipe:
                var ends: [Int32] = [-1, -1]
                guard pipe(&ends) == 0 else { throw ChildProcessError.system("pipe", errno) }
                for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
                // The child reads its standard input and writes the other two.
                let (mine, theirs) = target == 0 ? (ends[1], ends[0]) : (ends[0], ends[1])
                parentEnds[target] = ChildPipe(mine)
                fd = theirs
            }
            guard fd >= 0 else { throw ChildProcessError.system("open", errno) }
            childEnds.append(fd)
            posix_spawn_file_actions_adddup2(&actions, fd, Int32(target))
        }
        ChildProcess.closeFrom(3, &actions)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group (a terminal's Ctrl-C reaches only the parent), no
        // blocked signals, and default handling of those the parent ignores or catches.
        var none = sigset_t(), defaults = sigset_t()
        sigemptyset(&none)
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let result: Int32
        if environment.isEmpty {
            result = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        } else {
            var merged = ProcessInfo.processInfo.environment
            merged.merge(environment) { $1 }
            let envp: [UnsafeMutablePointer<CChar>?] = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
            defer { for pointer in envp { free(pointer) } }
            result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        }
        guard result == 0 else { throw ChildProcessError.spawn(executable, result) }
        processIdentifier = pid
        input = parentEnds[0]
        output = parentEnds[1]
        errors = parentEnds[2]
    }

    /// Whether the child has not exited yet (reaping it once it has).
    public var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        return reap(blocking: false) == nil
    }

    /// The exit status, or the number of the signal that ended it; nil while it runs.
    public var terminationStatus: Int32? {
        lock.lock()
        defer { lock.unlock() }
        return reap(blocking: false)
    }

    /// Sends `signal` unless the child has been reaped already.
    public func send(_ signal: Int32) {
        lock.lock()
        defer { lock.unlock() }
        if status == nil { kill(processIdentifier, signal) }
    }

    /// Waits for the child to exit; after `timeout` seconds it is killed (SIGKILL).
    /// Returns the exit status, or the number of the signal that ended it.
    @discardableResult
    public func wait(timeout: Double = .infinity) -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while isRunning {
            if Date() >= deadline {
                send(SIGKILL)
                lock.lock()
                defer { lock.unlock() }
                return reap(blocking: true) ?? -1
            }
            usleep(2_000)
        }
        return terminationStatus ?? -1
    }

    /// Runs to completion: writes `input` (if any) to its standard input, collects
    /// both output streams, and kills it after `timeout` seconds.
    public static func run(
        _ executable: String, _ arguments: [String], input data: Data? = nil, timeout: Double = 30,
        environment: [String: String] = [:]
    ) throws -> (status: Int32, stdout: Data, stderr: Data) {
        let child = try ChildProcess(
            executable, arguments, stdin: data == nil ? .null : .pipe, stdout: .pipe, stderr: .pipe, environment: environment)
        if let data, let input = child.input {
            // Written beside the reads below: more than a pipe holds must not block them.
            Thread.detachNewThread {
                input.write(data)
                input.close()
            }
        }
        let deadline = Date().addingTimeInterval(timeout)
        let (stdout, stderr) = ChildPipe.readToEnd(child.output!, child.errors!, until: deadline)
        return (child.wait(timeout: max(1, deadline.timeIntervalSinceNow)), stdout, stderr)
    }

    // Under `lock`.
    private func reap(blocking: Bool) -> Int32? {
        if let status { return status }
        var raw: Int32 = 0
        while true {
            let result = waitpid(processIdentifier, &raw, blocking ? 0 : WNOHANG)
            if result == -1 && errno == EINTR { continue }
            guard result == processIdentifier else { return nil }
            break
        }
        // WIFSIGNALED / WTERMSIG / WEXITSTATUS, which Swift does not import.
        let signal = raw & 0x7f
        status = signal != 0 && signal != 0x7f ? signal : (raw >> 8) & 0xff
        return status
    }

    deinit {
        if isRunning {
            kill(processIdentifier, SIGKILL)
            lock.lock()
            _ = reap(blocking: true)
            lock.unlock()
        }
    }

    /// A write to a pipe whose reader has exited fails with EPIPE instead of
    /// ending this process. Children get the default back (`setsigdefault`).
    private static let ignoreBrokenPipes: Void = { signal(SIGPIPE, SIG_IGN) }()

    /// Closes every descriptor from `lowest` up in the child, where glibc offers it
    /// (2.34 and later); descriptors this process opens are close-on-exec besides.
    private static func closeFrom(_ lowest: Int32, _ actions: inout posix_spawn_file_actions_t) {
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        guard let symbol = closeFromSymbol else { return }
        _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, lowest)
    }
    nonisolated(unsafe) private static let closeFromSymbol = dlsym(
        UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")
}

/// The parent's end of a pipe to or from a child; closed when released.
public final class ChildPipe: @unchecked Sendable {
    private let lock = NSLock()
    // Under `lock`: -1 once closed.
    private var descriptor: Int32

    init(_ descriptor: Int32) { self.descriptor = descriptor }

    public var fileDescriptor: Int32 {
        lock.lock()
        defer { lock.unlock() }
        return descriptor
    }

    /// What is available, waiting for at least one byte; empty at the end.
    public func read() -> Data {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let fd = fileDescriptor
        guard fd >= 0 else { return Data() }
        while true {
            let count = Glibc.read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            return count > 0 ? Data(buffer[..<count]) : Data()
        }
    }

    /// Writes all of `data`; false if the reader has gone.
    @discardableResult
    public func write(_ data: Data) -> Bool {
        let fd = fileDescriptor
        guard fd >= 0 else { return false }
        return data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) -> Bool in
            var offset = 0
            while offset < bytes.count {
                let count = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if count < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                offset += count
            }
            return true
        }
    }

    public func close() {
        lock.lock()
        defer { lock.unlock() }
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }

    deinit { close() }

    /// Reads two pipes to their ends together (so neither child stream can block
    /// on a full pipe), or until `deadline`.
    public static func readToEnd(_ first: ChildPipe, _ second: ChildPipe, until deadline: Date) -> (Data, Data) {
        var collected = [Data(), Data()]
        var open = [first.fileDescriptor >= 0, second.fileDescriptor >= 0]
        let pipes = [first, second]
        while open.contains(true) {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { break }
            var polls = (0..<2).map { pollfd(fd: open[$0] ? pipes[$0].fileDescriptor : -1, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&polls, 2, Int32(min(left, 1) * 1000) + 1)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            for index in 0..<2 where open[index] && polls[index].revents != 0 {
                let data = pipes[index].read()
                if data.isEmpty { open[index] = false } else { collected[index].append(data) }
            }
        }
        return (collected[0], collected[1])
    }
}

public enum ChildProcessError: Error, CustomStringConvertible {
    case system(String, Int32)
    case spawn(String, Int32)

    public var description: String {
        switch self {
        case .system(let call, let code): "\(call) failed: \(String(cString: strerror(code)))"
        case .spawn(let path, let code): "cannot start \(path): \(String(cString: strerror(code)))"
        }
    }
}

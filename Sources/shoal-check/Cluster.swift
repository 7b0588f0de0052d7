import Foundation
import ShoalCRDT
import ShoalNode
import ShoalTesting

#if canImport(Glibc)
import Glibc
#endif

/// The nodes of a run and the proxies between them: `shoal run` processes on
/// 127.0.0.1, each link a node dialing another through a `LoopbackProxy`.
///
/// Process work (starting, signals, copies) blocks, so callers run it on threads of
/// their own (`blocking`); the state is behind one lock.
final class Cluster: @unchecked Sendable {  // mutable state behind `state`
    /// How one node is started, fixed for the run.
    struct Node: Sendable {
        var index: Int
        var name: String { "n\(index)" }
        /// The PostgreSQL database of a hub (`shoal run --store`), nil for a device on SQLite.
        var store: String?
        var isHub: Bool { store != nil }
        var dataDirectory: String
        var port: Int
        /// The proxies it dials, one per link it starts.
        var peers: [String]
        /// The collections it subscribes to, so holds and is checked on.
        var collections: Set<String>
        /// Collections it holds but is not checked on: ones whose documents may exceed its limits.
        var excused: Set<String>
        /// Flags beyond the common ones (`--max-frame-size`, …).
        var flags: [String]
        /// The file libfaketime reads this node's clock offset from (nil: a true clock).
        var clockFile: String?
        var logPath: String
    }

    /// A link: `from` dials `to` through `proxy`.
    struct Link: Sendable {
        var from: Int
        var to: Int
        var proxy: LoopbackProxy
        var name: String { "n\(from)->n\(to)" }
    }

    enum Life: String, Sendable {
        case running
        /// SIGSTOP: the process is there, frozen.
        case frozen
        /// Killed or stopped, not yet started again.
        case down
    }

    private struct State {
        var processes: [NodeProcess?]
        var life: [Life]
        var epochs: [Int]
        /// The copy of each node's data directory, when one was taken: its path, epoch and time.
        var copies: [Int: (path: String, epoch: Int, at: Double)] = [:]
        /// Collections a node dropped for a while during the run (the `narrow` fault):
        /// until the run's end, reads taken mid-run leave them out, since such a node
        /// rightly shows the other collections of a transaction ahead of these.
        var narrowed: [Int: Set<String>] = [:]
    }

    let nodes: [Node]
    let links: [Link]
    let directory: String
    /// Flags every node gets.
    let common: [String]
    /// The hubs' database password, given them as `SHOAL_STORE_PASSWORD` (a URL shown
    /// leaves it out).
    let storePassword: String?
    private let state: Locked<State>

    init(nodes: [Node], links: [Link], directory: String, common: [String], storePassword: String? = nil) {
        self.nodes = nodes
        self.links = links
        self.directory = directory
        self.common = common
        self.storePassword = storePassword
        state = Locked(State(processes: nodes.map { _ in nil }, life: nodes.map { _ in .down }, epochs: nodes.map { _ in 0 }))
    }

    /// The libfaketime library, where Debian's package put it (nil: not installed).
    static let fakeTimeLibrary: String? = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ].first { FileManager.default.fileExists(atPath: $0) }

    func life(_ i: Int) -> Life { state.withLock { $0.life[i] } }
    func epoch(_ i: Int) -> Int { state.withLock { $0.epochs[i] } }
    var running: [Int] { state.withLock { s in nodes.indices.filter { s.life[$0] == .running } } }
    func copy(of i: Int) -> (path: String, epoch: Int, at: Double)? { state.withLock { $0.copies[i] } }

    /// The collections node `i` is checked on mid-run: those it subscribes to, less the
    /// ones its limits excuse and the ones it dropped for a while.
    func checkedMidRun(_ i: Int) -> Set<String> {
        state.withLock { nodes[i].collections.subtracting(nodes[i].excused).subtracting($0.narrowed[i] ?? []) }
    }

    /// Leaves `collection` out of node `i`'s mid-run reads until the run ends.
    func narrow(_ i: Int, _ collection: String) { state.withLock { _ = $0.narrowed[i, default: []].insert(collection) } }

    func client(_ i: Int, timeout: Double = 10) -> AdminClient {
        AdminClient(node: HostAndPort(host: "127.0.0.1", port: nodes[i].port), timeout: .milliseconds(Int(timeout * 1000)))
    }

    /// The environment that makes libfaketime read a process's wall clock offset from `file`.
    static func fakeTime(_ library: String, file: String) -> [String: String] {
        // Only the wall clock moves: timeouts and timers keep the true monotonic clock.
        ["LD_PRELOAD": library, "FAKETIME_TIMESTAMP_FILE": file, "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_CACHE_DURATION": "1"]
    }

    /// Why clock skew cannot be injected here, or nil when it can: libfaketime must be
    /// installed, and `shoal` must still see its arguments under it (a Swift program
    /// started with some libfaketime builds preloaded sees none).
    static func fakeTimeUnavailable(in directory: String) -> String? {
        guard let library = fakeTimeLibrary else { return "libfaketime is not installed (Debian's package faketime)" }
        let file = directory + "/clock-probe"
        try? "+0\n".write(toFile: file, atomically: true, encoding: .utf8)
        let help = try? ChildProcess.run(ShoalBinary.path, ["run", "--help"], timeout: 30, environment: fakeTime(library, file: file))
        guard let help, String(decoding: help.stdout, as: UTF8.self).contains("--listen") else {
            return "under \(library) preloaded, shoal sees no command-line arguments (CommandLine.arguments is empty)"
        }
        return nil
    }

    /// Starts node `i` (blocking until it is ready), on its port, with its log appended to.
    func start(_ i: Int) throws {
        let node = nodes[i]
        var environment: [String: String] = [:]
        if let file = node.clockFile, let library = Self.fakeTimeLibrary { environment = Self.fakeTime(library, file: file) }
        if node.isHub, let storePassword { environment["SHOAL_STORE_PASSWORD"] = storePassword }
        var arguments = common + node.flags
        if let store = node.store { arguments += ["--store", store] }
        for peer in node.peers { arguments += ["--peer", peer] }
        for collection in node.collections.sorted() { arguments += ["--subscribe", "SELECT * FROM \(collection)"] }
        var lastError: (any Error)?
        // A port the kernel still holds for a moment after a kill: try again briefly.
        for _ in 0..<5 {
            do {
                let process = try NodeProcess(
                    name: node.name, dataDirectory: node.dataDirectory, listenPort: node.port, extra: arguments,
                    environment: environment, logPath: node.logPath)
                state.withLock {
                    $0.processes[i] = process
                    $0.life[i] = .running
                }
                return
            } catch {
                lastError = error
                usleep(500_000)
            }
        }
        throw lastError!
    }

    /// SIGKILL, as a crash would.
    func kill(_ i: Int) {
        let process = state.withLock { s -> NodeProcess? in
            s.life[i] = .down
            defer { s.processes[i] = nil }
            return s.processes[i]
        }
        process?.signal(SIGCONT)
        process?.crash()
    }

    /// SIGTERM, waiting for the node to shut down.
    func terminate(_ i: Int) {
        let process = state.withLock { s -> NodeProcess? in
            s.life[i] = .down
            defer { s.processes[i] = nil }
            return s.processes[i]
        }
        process?.signal(SIGCONT)
        process?.stop()
    }

    func freeze(_ i: Int) {
        state.withLock { s in
            guard s.life[i] == .running else { return }
            s.processes[i]?.signal(SIGSTOP)
            s.life[i] = .frozen
        }
    }

    func thaw(_ i: Int) {
        state.withLock { s in
            guard s.life[i] == .frozen else { return }
            s.processes[i]?.signal(SIGCONT)
            s.life[i] = .running
        }
    }

    /// Copies a down node's data directory aside, as a backup taken at `time`.
    func takeCopy(_ i: Int, at time: Double) throws {
        let path = directory + "/copy-n\(i)"
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.copyItem(atPath: nodes[i].dataDirectory, toPath: path)
        let epoch = epoch(i)
        state.withLock { $0.copies[i] = (path, epoch, time) }
    }

    /// Replaces a down node's data directory by its copy; the node is in `epoch` from
    /// now on. `inPlace`: the copy's bytes are written into the files the directory has
    /// (same inodes), as a backup copied over them or a rolled-back machine leaves them;
    /// otherwise the files are new ones, as `cp -a` of a backup makes.
    func restoreCopy(_ i: Int, epoch: Int, inPlace: Bool = false) throws {
        guard let copy = copy(of: i) else { return }
        let data = nodes[i].dataDirectory
        let saved = Set(try FileManager.default.contentsOfDirectory(atPath: copy.path))
        // Emptied in place rather than removed: it may be a mount point.
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: data)) ?? [] where !(inPlace && saved.contains(entry)) {
            try FileManager.default.removeItem(atPath: data + "/" + entry)
        }
        for entry in saved {
            let target = data + "/" + entry
            if inPlace, FileManager.default.fileExists(atPath: target), let handle = FileHandle(forWritingAtPath: target) {
                try handle.truncate(atOffset: 0)
                try handle.write(contentsOf: try Data(contentsOf: URL(fileURLWithPath: copy.path + "/" + entry)))
                try handle.close()
            } else {
                try FileManager.default.copyItem(atPath: copy.path + "/" + entry, toPath: target)
            }
        }
        state.withLock { $0.epochs[i] = epoch }
    }

    /// Puts hub `i` in `epoch`: its database was restored from a copy.
    func setEpoch(_ i: Int, _ epoch: Int) { state.withLock { $0.epochs[i] = epoch } }

    /// The hubs, nodes that share one database.
    var hubs: [Int] { nodes.filter(\.isHub).map(\.index) }

    /// Sets a node's clock offset (libfaketime's syntax: `+0`, `+90s`, `-3m`, `+2h`).
    func skew(_ i: Int, _ offset: String) {
        guard let file = nodes[i].clockFile else { return }
        try? (offset + "\n").write(toFile: file, atomically: true, encoding: .utf8)
    }

    /// Stops every node and proxy.
    func shutdown() {
        let processes = state.withLock { s -> [NodeProcess] in
            defer {
                s.processes = s.processes.map { _ in nil }
                s.life = s.life.map { _ in .down }
            }
            return s.processes.compactMap { $0 }
        }
        for process in processes {
            process.signal(SIGCONT)
            process.stop()
        }
        for link in links { link.proxy.stop() }
    }
}

/// Runs blocking work (process starts, signals, copies) on a thread of its own, so it
/// holds no thread of the concurrency pool.
func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

struct TimedOut: Error, CustomStringConvertible {
    var seconds: Double
    var description: String { "no answer within \(seconds) s" }
}

/// Runs `body`, giving up after `seconds`.
func withTimeout<T: Sendable>(_ seconds: Double, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
            throw TimedOut(seconds: seconds)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

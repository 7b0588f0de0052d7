public import Logging
import Foundation
public import ShoalCRDT
public import ShoalStore
import ShoalStorage
public import ShoalSync
import ShoalWire

/// Nodes in one process, joined by in-memory connections.
public enum InProcessMesh {
    /// Whether the tests run under a sanitizer (`SHOAL_SANITIZER`, set by scripts/sanitizers.sh).
    public static let sanitized = ProcessInfo.processInfo.environment["SHOAL_SANITIZER"] != nil

    /// Connects `a` (dialing) to `b` (accepting), runs `body`, then closes the
    /// connection and waits for both sessions to end. Both engines' inbound
    /// pipelines run meanwhile (`SyncEngine.run`; a nested link on the same engine
    /// shares the one running).
    ///
    /// - Parameter redial: when a session ends before `body` does (an idle timeout
    ///   while the machine is starved, a refusal), `a` dials again 100 ms later over a
    ///   new connection, as a node's dialer does. Without it the link stays down.
    /// - Parameter names: the names `a` and `b` are known by, as their certificates
    ///   would give them on a TLS link: each side's rights are its `accessRules`' for
    ///   the other's name.
    public static func withLink<T: Sendable>(
        _ a: SyncEngine, _ b: SyncEngine, connection: InMemoryConnection = InMemoryConnection(), redial: Bool = false,
        names: (a: String?, b: String?) = (nil, nil), _ body: @Sendable () async throws -> T
    ) async throws -> T {
        // The connection in use, and whether the body is done (then no new one is made).
        let current = Locked((link: connection, closed: false))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await a.run() }
            group.addTask { await b.run() }
            group.addTask {
                var link = connection
                while true {
                    await withTaskGroup(of: Void.self) { sessions in
                        sessions.addTask { [link] in
                            _ = try? await a.serve(
                                inbound: link.a.inbound, transport: link.a.transport, direction: .outbound,
                                remoteAddress: "memory:b", tlsIdentity: names.b)
                        }
                        sessions.addTask { [link] in
                            _ = try? await b.serve(
                                inbound: link.b.inbound, transport: link.b.transport, direction: .inbound,
                                remoteAddress: "memory:a", tlsIdentity: names.a)
                        }
                    }
                    guard redial else { return }
                    try? await Task.sleep(for: .milliseconds(100))
                    let next = link.another()
                    let dialed = current.withLock { state -> Bool in
                        if state.closed { return false }
                        state.link = next
                        return true
                    }
                    guard dialed else { return }
                    link = next
                }
            }
            let result: Result<T, any Error>
            do {
                result = .success(try await body())
            } catch {
                result = .failure(error)
            }
            await current.withLock { state in
                state.closed = true
                return state.link
            }.a.transport.close()
            group.cancelAll()
            try await group.waitForAll()
            return try result.get()
        }
    }

    /// Polls `condition` until it holds or `timeout` passes; returns whether it held.
    ///
    /// The default is long (60 s) because it only bounds a failure: a condition that
    /// holds returns at once. While a process suite blocks one of the two threads of
    /// a 2-core machine's concurrency pool, and builds run beside the tests, a task of
    /// an in-process test has waited longer than 15 s for its turn.
    /// Under a sanitizer (`SHOAL_SANITIZER`, set by scripts/sanitizers.sh) every wait is
    /// five times as long: there the whole suite runs about ten times slower, and under
    /// ThreadSanitizer in-process tests that pass in seconds took more than 60 s to
    /// connect three links (CI, AttachmentRelayTests and EvictSyncTests).
    public static func eventually(
        timeout: Duration = .seconds(60), _ condition: () async throws -> Bool
    ) async rethrows -> Bool {
        let deadline = ContinuousClock.now + timeout * (sanitized ? 5 : 1)
        while ContinuousClock.now < deadline {
            if try await condition() { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return try await condition()
    }
}

/// A store and a sync engine in a temporary directory: one in-process node.
public final class TestNode: Sendable {
    public let directory: TemporaryDirectory
    public let store: DocumentStore
    public let sync: SyncEngine

    /// - Parameter configure: changes the sync configuration (batch sizes, coverage waits) before the engine starts.
    public init(
        name: String, subscriptions: [String] = [], meshKey: [UInt8]? = nil, directory: TemporaryDirectory? = nil,
        configure: (inout SyncConfiguration) -> Void = { _ in },
        wallClock: @escaping @Sendable () -> UInt64 = HybridLogicalClock.systemMilliseconds,
        syncLogger: Logger = Logger(label: "shoal.sync")
    ) throws {
        self.directory = directory ?? TemporaryDirectory(prefix: "shoal-\(name)")
        store = try DocumentStore(directory: self.directory.path, wallClock: wallClock)
        var configuration = SyncConfiguration(nodeName: name, meshKey: meshKey, batchSize: 64)
        configure(&configuration)
        sync = SyncEngine(store: store, configuration: configuration, logger: syncLogger)
        let saved = try store.savedFreshness()
        sync.freshness.load(entries: saved.entries, forgottenThrough: saved.forgottenThrough)
        for query in subscriptions { try sync.subscribe(query) }
    }

    /// Closes the store, keeping the directory (to reopen it as a restarted node).
    public func stop() { store.close() }

    /// Closes the store and removes the directory.
    public func remove() {
        store.close()
        directory.remove()
    }
}

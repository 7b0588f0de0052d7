import Foundation
public import Logging
public import ShoalPostgres

/// A database of its own on the PostgreSQL server the tests use, if one was started
/// (`SHOAL_POSTGRES_URL`, which `scripts/postgres.sh start DIR` prints and `.ci/run`
/// sets): created for one test and dropped after it.
public enum TemporaryPostgresDatabase {
    /// The server's URL, nil when no server was started.
    public static let serverURL = ProcessInfo.processInfo.environment["SHOAL_POSTGRES_URL"]

    /// Why tests of PostgreSQL are skipped, when they are.
    public static let skipReason = "SHOAL_POSTGRES_URL is not set: scripts/postgres.sh start DIR starts a server"

    /// Runs `body` with `count` running clients of a new database, then drops it.
    ///
    /// - Parameters:
    ///   - through: makes each hub's port from the server's (called once per hub, in
    ///     order), for a test that puts a `LoopbackProxy` between them (the database is
    ///     created and dropped directly).
    ///   - unreachableAfter: the hubs' bound on waits for a server that does not answer.
    public static func withDatabase<T: Sendable>(
        hubs count: Int = 1, through: (@Sendable (Int) throws -> Int)? = nil, unreachableAfter: Duration = .seconds(10),
        logger: Logger = Logger(label: "shoal.test.postgres"),
        _ body: @Sendable ([PostgresHubDatabase]) async throws -> T
    ) async throws -> T {
        guard let serverURL else { throw PostgresStoreError(skipReason) }
        let admin = PostgresHubDatabase(location: try PostgresLocation(parsing: serverURL), logger: logger)
        let name = "shoal_test_\(UInt32.random(in: 0...UInt32.max))"
        var location = admin.location
        location.database = name
        let hubs = try (0..<count).map { _ in
            var reached = location
            if let through { reached.port = try through(location.port) }
            return PostgresHubDatabase(location: reached, logger: logger, unreachableAfter: unreachableAfter)
        }
        return try await withThrowingTaskGroup(of: Void.self) { outer in
            outer.addTask { await admin.run() }
            try await admin.execute("CREATE DATABASE \(name)")
            let result: Result<T, any Error> = await withTaskGroup(of: Void.self) { group in
                for hub in hubs { group.addTask { await hub.run() } }
                defer { group.cancelAll() }
                do {
                    return .success(try await body(hubs))
                } catch {
                    return .failure(error)
                }
            }
            // The hubs' connections are closed now: the database can go. (Rarely the
            // server refuses once, with a backend of its own still on the database:
            // "must be a member of the role whose process is being terminated".)
            for attempt in 1...5 {
                do {
                    try await admin.execute("DROP DATABASE \(name) WITH (FORCE)")
                    break
                } catch where attempt < 5 {
                    try await Task.sleep(for: .milliseconds(500))
                }
            }
            outer.cancelAll()
            return try result.get()
        }
    }
}

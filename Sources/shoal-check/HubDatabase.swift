import Foundation
import Logging
import ShoalPostgres
import ShoalTesting

/// The PostgreSQL database a run's hubs share, made for the run on the server
/// `SHOAL_POSTGRES_URL` names and dropped after it, and the copies the `restore` fault
/// takes of it: a backup of a hub's data is a backup of the database.
struct HubDatabase: Sendable {
    /// Statements about databases run on the server's own database, never on the hubs'.
    let admin: PostgresHubDatabase
    let name: String

    /// The URL the hubs are given (`shoal run --store`).
    var store: String {
        var location = admin.location
        location.database = name
        return location.description
    }

    /// The password the hubs are given (`SHOAL_STORE_PASSWORD`), when the server's URL
    /// has one: `store`, like every URL Shoal shows, leaves it out.
    var password: String? { admin.location.password }

    /// Runs `body` with a new database; drops it (and its copy) afterwards when `body`
    /// says every check passed, else keeps it for a look, as the run's directory is kept.
    static func with(_ body: @Sendable (HubDatabase) async throws -> Bool) async throws -> Bool {
        guard let server = TemporaryPostgresDatabase.serverURL else {
            throw PostgresStoreError(TemporaryPostgresDatabase.skipReason)
        }
        var logger = Logger(label: "shoal.check.postgres")
        logger.logLevel = .warning
        let admin = PostgresHubDatabase(location: try PostgresLocation(parsing: server), logger: logger)
        let database = HubDatabase(admin: admin, name: "shoal_check_\(UInt32.random(in: 0...UInt32.max))")
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await admin.run() }
            defer { group.cancelAll() }
            try await admin.execute("CREATE DATABASE \(database.name)")
            let passed: Bool
            do {
                passed = try await body(database)
            } catch {
                await database.drop()
                throw error
            }
            if passed {
                await database.drop()
            } else {
                // On standard error: with --json, standard output holds the summary alone.
                FileHandle.standardError.write(
                    Data("shoal-check: the hubs' database is kept too: \(database.name) (DROP DATABASE \(database.name) when done)\n".utf8))
            }
            return passed
        }
    }

    /// Drops the database and its copy, trying again for a few seconds: the server now
    /// and then refuses a drop while a backend of its own still leaves the database.
    func drop() async {
        for name in [name, copyName] {
            for attempt in 1...5 {
                do {
                    try await admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
                    break
                } catch {
                    if attempt < 5 { try? await Task.sleep(for: .milliseconds(500)) }
                }
            }
        }
    }

    /// The name of the one copy kept: a later copy replaces it.
    var copyName: String { name + "_copy" }

    /// Copies the database aside, as a backup; every hub must be down (a copy is taken
    /// from a database no session uses: what the killed hubs' sessions left is ended).
    func takeCopy() async throws {
        try await admin.execute("DROP DATABASE IF EXISTS \(copyName) WITH (FORCE)")
        try await retrying(ending: name) { try await admin.execute("CREATE DATABASE \(copyName) TEMPLATE \(name)") }
    }

    /// Replaces the database by the copy, as a backup restored; every hub must be down
    /// or frozen (the drop ends their connections to it).
    func restoreCopy() async throws {
        try await admin.execute("DROP DATABASE \(name) WITH (FORCE)")
        try await retrying(ending: copyName) { try await admin.execute("CREATE DATABASE \(name) TEMPLATE \(copyName)") }
    }

    /// Runs `body`, a copy from `template`, ending the sessions a killed hub left on it
    /// first and trying again for 10 s: a database with a session cannot be copied.
    private func retrying(ending template: String, _ body: () async throws -> Void) async throws {
        for attempt in 1...20 {
            do {
                try await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(template)' AND pid <> pg_backend_pid()")
                return try await body()
            } catch where attempt < 20 {
                try await Task.sleep(for: .milliseconds(500))
            }
        }
    }
}

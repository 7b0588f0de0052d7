import Foundation
import Logging
import ShoalCRDT
import ShoalPostgres
import ShoalTesting
import Testing

/// Where a hub's database is, parsed and checked without a server.
@Suite struct PostgresLocationTests {
    @Test func aURLGivesHostPortUserAndDatabaseAndNeverShowsItsPassword() throws {
        let location = try PostgresLocation(parsing: "postgresql://hub:s3cret@db.example:6543/shoal", environment: [:])
        #expect(location.host == "db.example" && location.port == 6543 && location.user == "hub" && location.database == "shoal")
        #expect(location.password == "s3cret")
        #expect(location.description == "postgresql://hub@db.example:6543/shoal")
        let fromEnvironment = try PostgresLocation(
            parsing: "postgres://hub@localhost/shoal", environment: ["SHOAL_STORE_PASSWORD": "env"])
        #expect(fromEnvironment.port == 5432 && fromEnvironment.password == "env")
    }

    @Test(arguments: [
        ("mysql://u@h/d", "not a PostgreSQL URL"),
        ("postgresql://h/d", "names no user"),
        ("postgresql://u@h", "names no database"),
        ("postgresql://u:pw@h:0/d", "outside 1-65535"),
    ])
    func aBadURLSaysWhatIsWrongWithoutThePassword(url: String, expected: String) {
        #expect {
            try PostgresLocation(parsing: url, environment: [:])
        } throws: { error in
            let message = (error as? PostgresStoreError)?.message ?? ""
            return message.contains(expected) && !message.contains("pw")
        }
    }

    @Test func aPasswordFileOthersMayReadIsRefused() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.path + "/password"
        try "s3cret\n".write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
        var location = try PostgresLocation(parsing: "postgresql://hub@h/d", environment: [:])
        #expect { try location.password(fromFile: path) } throws: { "\($0)".contains("chmod 600") }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        try location.password(fromFile: path)
        #expect(location.password == "s3cret")
    }
}

/// The server the tests use, if one was started.
let postgresServer = ProcessInfo.processInfo.environment["SHOAL_POSTGRES_URL"]

/// The hubs' shared database on a real PostgreSQL server (`SHOAL_POSTGRES_URL`, which
/// `scripts/postgres.sh start DIR` prints and `.ci/run` sets); each test in a database
/// of its own.
@Suite(.enabled(if: postgresServer != nil, "SHOAL_POSTGRES_URL is not set: scripts/postgres.sh start DIR starts a server"))
struct PostgresHubDatabaseTests {
    static let server = postgresServer
    static let logger = Logger(label: "shoal.test.postgres")

    /// Runs `body` with `count` clients of a new database, dropped afterwards.
    static func withDatabase(
        hubs count: Int = 1, _ body: @Sendable ([PostgresHubDatabase]) async throws -> Void
    ) async throws {
        try await TemporaryPostgresDatabase.withDatabase(hubs: count, logger: logger, body)
    }

    @Test func migratingTwiceRunsEachMigrationOnce() async throws {
        try await Self.withDatabase(hubs: 2) { hubs in
            // Two hubs starting together: the advisory lock lets one migrate, the other finds it done.
            async let first = hubs[0].migrate()
            async let second = hubs[1].migrate()
            let ran = try await [first, second]
            #expect(ran.flatMap { $0 } == ["v1-identity", "v2-clock", "v3-store", "v4-local-writes"], "\(ran)")
            #expect(try await hubs[0].migrate().isEmpty)
        }
    }

    @Test func everyHubOnADatabaseHasItsOneSiteID() async throws {
        try await Self.withDatabase(hubs: 3) { hubs in
            try await hubs[0].migrate()
            let sites = try await withThrowingTaskGroup(of: SiteID.self) { group in
                for hub in hubs { group.addTask { try await hub.siteID() } }
                return try await group.reduce(into: [SiteID]()) { $0.append($1) }
            }
            #expect(Set(sites).count == 1 && sites.count == 3)
            #expect(try await hubs[2].siteID() == sites[0], "and the same later")
        }
    }

    /// Hubs allocating at once are never given the same number, and a block is whole.
    @Test func hubsAllocatingAtOnceNeverShareASequenceNumber() async throws {
        try await Self.withDatabase(hubs: 2) { hubs in
            try await hubs[0].migrate()
            let blocks = try await withThrowingTaskGroup(of: [UInt64].self) { group in
                for (i, hub) in hubs.enumerated() {
                    group.addTask {
                        var mine: [UInt64] = []
                        for n in 1...50 {
                            let size = (n + i) % 5 + 1
                            let first = try await hub.allocateSequences(size)
                            mine += (first..<first + UInt64(size))
                        }
                        return mine
                    }
                }
                return try await group.reduce(into: [[UInt64]]()) { $0.append($1) }
            }
            let all = blocks.flatMap { $0 }
            #expect(Set(all).count == all.count, "no number given twice")
            #expect(Set(all) == Set(1...UInt64(all.count)), "and none skipped")
        }
    }

    /// What one hub announces of the log's end reaches a hub following it, in order.
    @Test(.timeLimit(.minutes(1))) func announcementsOfTheLogsEndReachTheOtherHubs() async throws {
        try await Self.withDatabase(hubs: 2) { hubs in
            try await hubs[0].migrate()
            let heard = Locked<[UInt64]>([])
            let listening = AsyncStream.makeStream(of: Void.self)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    // Should following fail before it listens, the wait below ends too.
                    defer { listening.continuation.finish() }
                    try await hubs[1].followLog(listening: { listening.continuation.yield() }) { sequence in
                        heard.withLock { $0.append(sequence) }
                    }
                }
                var ready = listening.stream.makeAsyncIterator()
                try #require(await ready.next() != nil, "following the log failed before it listened")
                for sequence in 1...50 { try await hubs[0].notifyLogEnd(UInt64(sequence)) }
                while heard.withLock({ $0.count }) < 50 { try await Task.sleep(for: .milliseconds(10)) }
                #expect(heard.withLock { $0 } == Array(1...50))
                group.cancelAll()
            }
        }
    }

    @Test(.timeLimit(.minutes(1))) func anUnreachableServerIsAClearError() async throws {
        let port = freeLoopbackPort()
        let hub = PostgresHubDatabase(
            location: try PostgresLocation(parsing: "postgresql://shoal@127.0.0.1:\(port)/shoal", environment: [:]),
            logger: Self.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await hub.run() }
            await #expect { try await hub.migrate() } throws: { error in
                "\(error)".contains("connecting on postgresql://shoal@127.0.0.1:\(port)/shoal")
            }
            group.cancelAll()
        }
    }
}

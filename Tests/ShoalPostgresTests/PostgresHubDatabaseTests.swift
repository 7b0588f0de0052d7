import Foundation
import Logging
import PostgresNIO
import ShoalCRDT
import ShoalPostgres
import ShoalStorage
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
        // A password that breaks the URL's parsing is not shown either.
        ("postgresql://u:a#pw/b@h/d", "not a PostgreSQL URL"),
        ("postgresql://u:a pw?@h/d", "not a PostgreSQL URL"),
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
        // A secret mounted as a symbolic link (an orchestrator's) is judged by its target.
        try FileManager.default.createSymbolicLink(atPath: dir.path + "/link", withDestinationPath: path)
        var linked = try PostgresLocation(parsing: "postgresql://hub@h/d", environment: [:])
        try linked.password(fromFile: dir.path + "/link")
        #expect(linked.password == "s3cret")
    }
}

/// What a hub tells its observers, with the log's reads faked: each commit once, in order.
@Suite struct CommitAnnouncerTests {
    static let x = TransactionID(origin: SiteID(1), sequence: 1)
    static let y = TransactionID(origin: SiteID(1), sequence: 2)

    /// Runs `body` with an announcer started at 0 that reads `log` (nil: the read fails),
    /// and returns what its observers heard.
    static func heard(
        log: @escaping @Sendable (UInt64, UInt64) throws -> Commit?, _ body: (CommitAnnouncer) async -> Void
    ) async -> [Commit] {
        let feed = ChangeFeed<Commit>(bufferingPolicy: .unbounded, replayLatest: false)
        let told = Locked<[Commit]>([])
        let listening = feed.listen({ commit in told.withLock { $0.append(commit) } }, finished: {})
        defer { listening.cancel() }
        let announcer = CommitAnnouncer(feed: feed, logger: Logger(label: "shoal.test"))
        announcer.start(at: 0) { from, to in try log(from, to) }
        await body(announcer)
        return told.withLock { $0 }
    }

    /// The hub's own announcement (or its slow timer) can tell its commit before the
    /// commit itself does: the commit is then not told again.
    @Test func anOwnCommitHeardFirstIsToldOnce() async {
        let told = await Self.heard(log: { _, to in Commit(transactions: [Self.x], collections: ["t"], sequence: to) }) { announcer in
            await announcer.heard(5)
            await announcer.committed(Commit(transactions: [Self.x], collections: ["t"], sequence: 5), after: 0)
        }
        #expect(told.map(\.transactions) == [[Self.x]])
    }

    /// Another hub's commit before this hub's own is read and told first.
    @Test func anotherHubsCommitBeforeAnOwnOneIsToldFirst() async {
        let told = await Self.heard(log: { _, to in Commit(transactions: [Self.x], collections: ["t"], sequence: to) }) { announcer in
            await announcer.committed(Commit(transactions: [Self.y], collections: ["t"], sequence: 9), after: 5)
        }
        #expect(told.map(\.transactions) == [[Self.x], [Self.y]])
        #expect(told.map(\.sequence) == [5, 9])
    }

    /// A read that fails tells nothing, not even the own commit after it, which the next
    /// read tells with the rest, once.
    @Test func aFailedReadLeavesEverythingToTheNext() async {
        let failing = Locked(true)
        struct Down: Error {}
        let told = await Self.heard(log: { _, to in
            if failing.withLock({ $0 }) { throw Down() }
            return Commit(transactions: [Self.x, Self.y], collections: ["t"], sequence: to)
        }) { announcer in
            await announcer.committed(Commit(transactions: [Self.y], collections: ["t"], sequence: 9), after: 5)
            failing.withLock { $0 = false }
            await announcer.heard(9)
        }
        #expect(told.map(\.transactions) == [[Self.x, Self.y]])
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
            #expect(ran.flatMap { $0 } == ["v1-identity", "v2-clock", "v3-store", "v4-local-writes", "v5-attachments", "v6-record-marks", "v7-history", "v8-user-indexes", "v9-refused-by-origin", "v10-supersession"], "\(ran)")
            #expect(try await hubs[0].migrate().isEmpty)
        }
    }

    /// Rests recorded before compaction's verdicts were kept apart: every `UNKNOWN` of
    /// an applied transaction moves to `supersession` (the two cannot be told apart),
    /// the rest stays, and a partial one's rest and one `jsonb` cannot read are left as
    /// they are.
    @Test func theSupersessionMigrationMovesEveryUnknownOutOfARest() async throws {
        try await Self.withDatabase(hubs: 1) { hubs in
            try await hubs[0].migrate()
            let filter = SubscriptionFilter([.init(query: "SELECT * FROM cars", argumentsJSON: "")])
            let covered = Verdict(collection: "boats", coverage: .notCovered(filter))
            let unknown = Verdict(collection: "cars", coverage: .unknown)
            let rests = [
                Verdict.encode([covered, unknown]), Verdict.encode([unknown]), Verdict.encode([covered]), "",
                Verdict.encode([Verdict(collection: "a\u{0}b", coverage: .unknown)]),
            ]
            let statements = try #require(PostgresHubDatabase.migrations.first { $0.name == "v10-supersession" }?.statements)
            let read = try await hubs[0].withConnection { connection in
                for (i, rest) in rests.enumerated() {
                    try await connection.query(
                        "INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, first_seen) VALUES (7, \(i), 1, 1, '', 1, \(rest), 0)",
                        logger: Logger(label: "shoal.test"))
                }
                let partialRest = Verdict.encode([unknown])
                try await connection.query(
                    "INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, first_seen) VALUES (8, 1, 1, 1, '', 2, \(partialRest), 0)",
                    logger: Logger(label: "shoal.test"))
                try await connection.query(PostgresQuery(unsafeSQL: statements[1]), logger: Logger(label: "shoal.test"))
                return try await connection.query("SELECT rest, supersession FROM txn WHERE origin = 7 ORDER BY seq", logger: Logger(label: "shoal.test"))
                    .decode((String, String).self).map { [Verdict.decode($0.0), Verdict.decode($0.1)] }
            }
            #expect(read.count == 5)
            #expect(read.first == [[covered], [unknown]])
            #expect(read.dropFirst().first == [[], [unknown]])
            #expect(read.dropFirst(2).first == [[covered], []])
            #expect(read.dropFirst(3).first == [[], []])
            #expect(read.last == [[Verdict(collection: "a\u{0}b", coverage: .unknown)], []], "a rest jsonb cannot read stays")
            let partial = try await hubs[0].withConnection { connection in
                try await connection.query("SELECT rest FROM txn WHERE origin = 8", logger: Logger(label: "shoal.test")).decode(String.self)
            }
            #expect(partial.map(Verdict.decode) == [[unknown]], "a partial transaction's rest stays: it is recorded again when it completes")
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
    /// Hubs count each other by their connections' names, never themselves, and hear
    /// each other's attachment requests on the log's channel, with who asked.
    @Test(.timeLimit(.minutes(1))) func hubsCountEachOtherAndHearAttachmentRequests() async throws {
        try await Self.withDatabase(hubs: 3) { hubs in
            try await hubs[0].migrate()
            #expect(try await hubs[0].otherHubs() == 0, "the others have not connected yet")
            _ = try await hubs[1].siteID()
            _ = try await hubs[2].siteID()
            #expect(try await hubs[0].otherHubs() == 2)
            #expect(Set(hubs.map(\.process)).count == 3)
            let hash = String(repeating: "ab", count: 32)
            let heard = Locked<[(String, UInt64)]>([])
            let listening = AsyncStream.makeStream(of: Void.self)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    defer { listening.continuation.finish() }
                    try await hubs[1].followLog(
                        listening: { listening.continuation.yield() }, asked: { hash, by in heard.withLock { $0.append((hash, by)) } }
                    ) { _ in }
                }
                var ready = listening.stream.makeAsyncIterator()
                try #require(await ready.next() != nil, "following the log failed before it listened")
                try await hubs[2].notifyLogEnd(7)
                try await hubs[0].askForAttachment(hash)
                while heard.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(10)) }
                #expect(heard.withLock { $0.map(\.0) } == [hash])
                #expect(heard.withLock { $0.map(\.1) } == [hubs[0].process])
                group.cancelAll()
            }
        }
        #expect(PostgresHubDatabase.attachmentRequest("attachment zz \(String(repeating: "0", count: 64))") == nil)
        #expect(PostgresHubDatabase.attachmentRequest("12") == nil)
    }

    // The limit ends a wait for an announcement that never comes; a loaded machine once
    // took longer than a minute to send and hear fifty.
    @Test(.timeLimit(.minutes(3))) func announcementsOfTheLogsEndReachTheOtherHubs() async throws {
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

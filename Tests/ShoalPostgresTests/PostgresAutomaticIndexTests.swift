import Logging
import PostgresNIO
import ShoalCRDT
@testable import ShoalPostgres
import ShoalQuery
import ShoalStorage
import ShoalTesting
import Testing

/// What a hub asks for and remembers of automatic indexes, with no database.
struct AutomaticIndexRequestsTests {
    let now = ContinuousClock.now

    /// `ask` and `take` outside `#expect`, which cannot hold a mutation.
    func ask(_ requests: inout AutomaticIndexRequests, collection: String, paths: [[String]], now: ContinuousClock.Instant) -> Bool {
        requests.ask(collection: collection, paths: paths, now: now)
    }

    func take(_ requests: inout AutomaticIndexRequests) -> [AutomaticIndexRequests.Wanted] { requests.take() }

    @Test func aPathIsAskedForOnceUntilItIsBuiltOrAMinutePassed() {
        var requests = AutomaticIndexRequests()
        #expect(ask(&requests, collection: "cars", paths: [["year"], ["make"]], now: now))
        #expect(!ask(&requests, collection: "cars", paths: [["year"]], now: now + .seconds(59)), "asked a moment ago")
        #expect(ask(&requests, collection: "boats", paths: [["year"]], now: now), "another collection's is its own request")
        #expect(take(&requests).map { "\($0.collection).\($0.index.path.joined(separator: "."))" } == ["cars.year", "cars.make", "boats.year"])
        #expect(take(&requests).isEmpty)
        #expect(ask(&requests, collection: "cars", paths: [["year"]], now: now + .seconds(61)), "not built a minute later: asked again")
        requests.found([AutomaticIndex(path: ["make"]).name], count: 1, most: 32)
        #expect(!ask(&requests, collection: "cars", paths: [["make"]], now: now + .seconds(120)), "built")
        #expect(!ask(&requests, collection: "cars", paths: [[]], now: now), "an empty path is no index")
        requests.found([], count: 32, most: 32)
        #expect(!ask(&requests, collection: "cars", paths: [["color"]], now: now), "no more may be built")
    }

    @Test func aPathPendingIsPendingOnceAndAFailedBuildWaitsLongerEachTime() {
        var requests = AutomaticIndexRequests()
        #expect(ask(&requests, collection: "cars", paths: [["year"], ["year"]], now: now))
        #expect(!ask(&requests, collection: "cars", paths: [["year"]], now: now + .seconds(90)), "still waiting to be taken")
        #expect(take(&requests).count == 1)
        let name = AutomaticIndex(path: ["year"]).name
        var at = now
        for wait in [60, 120, 240, 480, 960, 1_920, 3_600, 3_600] {
            requests.failed(name, now: at)
            #expect(!ask(&requests, collection: "boats", paths: [["year"]], now: at + .seconds(wait) - .milliseconds(1)), "\(wait) s")
            #expect(ask(&requests, collection: "boats", paths: [["year"]], now: at + .seconds(wait)), "\(wait) s")
            _ = take(&requests)
            at += .seconds(wait)
        }
        requests.found([name], most: 32)
        #expect(requests.failures.isEmpty, "built by another hub: its failures forgotten")
    }

    @Test func whatIsRememberedIsBounded() {
        var requests = AutomaticIndexRequests()
        for i in 0..<(AutomaticIndexRequests.mostRemembered + 10) {
            _ = requests.ask(collection: "c", paths: [["p\(i)"]], now: now)
        }
        #expect(requests.asked.count == AutomaticIndexRequests.mostRemembered, "a client naming ever new paths grows nothing past the bound")
        #expect(ask(&requests, collection: "c", paths: [["late"]], now: now + AutomaticIndexRequests.again), "the old ones forgotten")
        #expect(requests.asked.count == 1)
    }

    @Test(arguments: [["year"], ["a", "b c"], ["it's", "\\"], ["é"]])
    func anIndexIsFoundAgainByItsComment(path: [String]) throws {
        let index = AutomaticIndex(path: path)
        #expect(AutomaticIndex(comment: index.key) == index)
        #expect(index.name.hasPrefix("shoal_auto_") && index.name.utf8.count <= 63)
        #expect(AutomaticIndex(comment: "[]") == nil && AutomaticIndex(comment: "[1]") == nil && AutomaticIndex(comment: "x") == nil)
    }
}

/// Automatic indexes on hubs: a query's path gets one, built as the hubs' one writer,
/// which every hub's plans search and lists, and which changes no answer.
@Suite(.enabled(if: TemporaryPostgresDatabase.serverURL != nil, Comment(rawValue: TemporaryPostgresDatabase.skipReason)))
struct PostgresAutomaticIndexTests {
    typealias Wanted = AutomaticIndexRequests.Wanted

    static func wanted(_ collection: String, _ path: String...) -> Wanted {
        Wanted(collection: collection, index: AutomaticIndex(path: path))
    }

    @Test func aQueriedPathGetsAnIndexThatEveryHubSearchesAndLists() async throws {
        try await TemporaryPostgresDatabase.withDatabase(hubs: 2) { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            let other = try await PostgresStore.open(hubs[1], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close(); other.close() }
            try await PostgresIndexTests.cars(store)
            let queries = ["year = 2021", "year >= 2027 AND year < 2029", "year IN (2020, 2021)", "year > 2027"]
            var before: [String: Set<String>] = [:]
            for predicate in queries {
                before[predicate] = try await PostgresIndexTests.ids(store, "SELECT _id FROM cars WHERE (\(predicate)) OR make LIKE 'none%'")
                #expect(try await PostgresIndexTests.ids(store, "SELECT _id FROM cars WHERE \(predicate)") == before[predicate])
                #expect(try await !PostgresIndexTests.plan(other, "SELECT _id FROM cars WHERE \(predicate)").contains("shoal_auto_"))
            }
            #expect(await store.buildAskedIndexes() == [Self.wanted("cars", "year"): .built])
            #expect(await store.buildAskedIndexes().isEmpty, "asked once")
            let name = AutomaticIndex(path: ["year"]).name
            for predicate in queries {
                let query = "SELECT _id FROM cars WHERE \(predicate)"
                let plan = try await PostgresIndexTests.plan(other, query)
                #expect(plan.contains(name), "\(predicate): \(plan)")
                #expect(try await PostgresIndexTests.ids(other, query) == before[predicate], "the same answer through the index")
            }
            let automatic: Value = ["name": .string(name), "collection": .null, "paths": ["year"], "automatic": true]
            #expect(try await other.execute("SHOW INDEXES").items == [automatic], "every hub lists it")
            // Another hub asking for the same path finds it built.
            _ = try await other.execute("SELECT * FROM cars WHERE year = 1999")
            #expect(await other.buildAskedIndexes() == [Self.wanted("cars", "year"): .existed])
            _ = try await other.execute("SELECT * FROM boats WHERE year = 1998")
            #expect(await other.buildAskedIndexes().isEmpty, "known built now, for every collection")
            // It serves every collection, and cannot be dropped.
            #expect(
                try await PostgresIndexTests.count(hubs[1], "indexname = '\(name)' AND indexdef NOT LIKE '%WHERE%collection%'") == 1,
                "no one collection's")
            let error = try await #require(throws: ShoalError.self) { try await other.execute("DROP INDEX \(name)") }
            #expect(error.message.contains("is an automatic index"), "\(error.message)")
            #expect(try await other.execute("SHOW INDEXES").items == [automatic])
            // An UPDATE's read asks too.
            _ = try await store.execute("UPDATE cars SET seen = true WHERE make = 'make7'")
            #expect(await store.buildAskedIndexes() == [Self.wanted("cars", "make"): .built])
            #expect(try await PostgresIndexTests.plan(other, "SELECT _id FROM cars WHERE make = 'make7'").contains(AutomaticIndex(path: ["make"]).name))
        }
    }

    @Test func aPathADeclaredIndexLeadsWithGetsNoneAndTheLastDeclaredIndexKeepsUnfilterable() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            try await PostgresIndexTests.cars(store)
            _ = try await store.execute("CREATE INDEX by_year ON cars (year, make)")
            _ = try await store.execute("SELECT * FROM cars WHERE year = 2021 AND make = 'make7'")
            _ = try await store.execute("SELECT * FROM other WHERE year = 2021")
            #expect(
                await store.buildAskedIndexes() == [
                    Self.wanted("cars", "year"): .declared, Self.wanted("cars", "make"): .built, Self.wanted("other", "year"): .built,
                ])
            _ = try await store.execute("DROP INDEX by_year")
            #expect(
                try await PostgresIndexTests.count(hubs[0], "indexname = 'shoal_unfilterable'") == 1,
                "kept for the automatic indexes' ranges")
            let range = "SELECT _id FROM cars WHERE year >= 2020 AND year <= 2021"
            #expect(try await PostgresIndexTests.plan(store, range).contains("shoal_unfilterable"))
            #expect(try await PostgresIndexTests.ids(store, range).contains("nul"), "a body jsonb cannot hold is found")
        }
    }

    @Test func aBuildThatFailsLeavesNothing() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            try await PostgresIndexTests.carsOneNotJSON(store, hubs[0])
            _ = try await store.execute("SELECT * FROM cars WHERE year = 2000")
            let outcome = try #require(await store.buildAskedIndexes()[Self.wanted("cars", "year")])
            guard case .failed(let message) = outcome else {
                Issue.record("built over a body that is not JSON: \(outcome)")
                return
            }
            #expect(message.contains("invalid input syntax for type json"), "\(message)")
            #expect(try await PostgresIndexTests.count(hubs[0], #"indexname LIKE 'shoal\_auto\_%' OR indexname = 'shoal_unfilterable'"#) == 0, "nothing of it is left")
            #expect(try await store.execute("SHOW INDEXES").items.isEmpty)
            // The hub goes on writing.
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({_id: 'c', year: 2002})")
        }
    }

    /// Whether an automatic build (`CREATE INDEX CONCURRENTLY`) waits for a lock now.
    static func buildWaits(_ database: PostgresHubDatabase) async throws -> Bool {
        try await database.withConnection { connection in
            try await connection.query(
                """
                SELECT count(*)::bigint FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'CREATE INDEX CONCURRENTLY%'
                """, logger: Logger(label: "shoal.test")
            ).decode(Int.self).first ?? 0
        } > 0
    }

    /// How many indexes on the documents builds left invalid.
    static func invalidIndexes(_ database: PostgresHubDatabase) async throws -> Int {
        try await database.withConnection { connection in
            try await connection.query(
                "SELECT count(*)::bigint FROM pg_index WHERE indrelid = 'document'::regclass AND NOT indisvalid", logger: Logger(label: "shoal.test")
            ).decode(Int.self).first ?? 0
        }
    }

    /// An automatic build holds no hub's writes, even while it waits: here for another
    /// session's lock on the documents (as a VACUUM holds it), then done once it is
    /// released. Built as the one writer, as before, the write waited for the build,
    /// which gave up only after its lock wait.
    @Test func aBuildThatWaitsHoldsNoWrites() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({_id: 'a', year: 2000})")
            _ = try await store.execute("SELECT * FROM cars WHERE year = 2000")
            let (wrote, outcome) = try await hubs[0].withConnection { connection in
                _ = try await connection.query("BEGIN", logger: store.logger)
                _ = try await connection.query("LOCK TABLE document IN SHARE UPDATE EXCLUSIVE MODE", logger: store.logger)
                let done = Locked(false)
                let building = Task {
                    let outcome = await store.buildAskedIndexes()[Self.wanted("cars", "year")]
                    done.withLock { $0 = true }
                    return outcome
                }
                #expect(try await InProcessMesh.eventually(timeout: .seconds(20)) { try await Self.buildWaits(hubs[0]) }, "the build waits for the lock")
                _ = try await store.execute("INSERT INTO cars DOCUMENTS ({_id: 'b', year: 2001})")
                let wrote = !done.withLock { $0 }
                _ = try await connection.query("ROLLBACK", logger: store.logger)
                return (wrote, await building.value)
            }
            #expect(wrote, "the write committed while the build waited")
            #expect(outcome == .built, "built once the lock was released: \(String(describing: outcome))")
            #expect(try await store.execute("SELECT _id FROM cars").items.count == 2)
            #expect(try await PostgresIndexTests.names(store) == [AutomaticIndex(path: ["year"]).name])
        }
    }

    /// A declared index's statement while an automatic build waits for an older
    /// transaction (which a concurrent build must outwait, and the declared one need
    /// not): the statement ends the build's backend rather than wait for it, which would
    /// wait for the statement's transaction in turn; it commits while that transaction
    /// is still open. The build left an invalid index, which the builder drops.
    @Test func aDeclaredIndexEndsAnAutomaticBuildRatherThanWaitForIt() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            try await PostgresIndexTests.cars(store)
            _ = try await store.execute("SELECT * FROM cars WHERE year = 2000")
            let (declared, outcome) = try await hubs[0].withConnection { connection in
                _ = try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ", logger: store.logger)
                _ = try await connection.query("SELECT count(*) FROM document", logger: store.logger)
                let building = Task { await store.buildAskedIndexes()[Self.wanted("cars", "year")] }
                #expect(try await InProcessMesh.eventually(timeout: .seconds(20)) { try await Self.buildWaits(hubs[0]) }, "the build waits for the snapshot")
                let declared = try await store.execute("CREATE INDEX by_make ON cars (make)")
                _ = try await connection.query("ROLLBACK", logger: store.logger)
                return (declared, await building.value)
            }
            #expect(declared.items.first?["name"] == "by_make")
            #expect(outcome == .busy, "ended, to be asked for again, not counted as failed: \(String(describing: outcome))")
            // It ended in its first step (`shoal_unfilterable`) or its second (the path's index).
            #expect(try await Self.invalidIndexes(hubs[0]) == 1, "left invalid")
            // The builder, woken by the statement, drops it and makes a valid
            // `shoal_unfilterable` for the declared index; the path is asked for again later.
            #expect(await store.mendIndexes() == .built)
            #expect(try await Self.invalidIndexes(hubs[0]) == 0, "dropped")
            #expect(try await PostgresIndexTests.count(hubs[0], "indexname = 'shoal_unfilterable'") == 1)
            #expect(await store.mendIndexes() == nil, "nothing left to mend")
            _ = try await store.execute("SELECT * FROM cars WHERE color = 'red'")
            let next = await store.buildAskedIndexes()
            #expect(next == [Self.wanted("cars", "color"): .built], "\(next)")
            #expect(try await PostgresIndexTests.names(store).sorted() == ["by_make", AutomaticIndex(path: ["color"]).name].sorted())
        }
    }

    /// A build ended between its index and the comment naming its path leaves an index
    /// no hub can list or count: the builder drops it, and the next query on the path has
    /// it built whole.
    @Test func anAutomaticIndexLeftWithoutItsCommentIsDroppedAndBuiltAgain() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({_id: 'a', year: 2000})")
            let index = AutomaticIndex(path: ["year"])
            try await hubs[0].withConnection { connection in
                _ = try await connection.query(PostgresQuery(unsafeSQL: index.createConcurrently), logger: store.logger)
            }
            #expect(try await PostgresIndexTests.names(store).isEmpty, "not listed without its comment")
            #expect(await store.mendIndexes() == .built)
            #expect(try await PostgresIndexTests.count(hubs[0], "indexname = '\(index.name)'") == 0, "dropped")
            #expect(await store.mendIndexes() == nil)
            _ = try await store.execute("SELECT * FROM cars WHERE year = 2000")
            #expect(await store.buildAskedIndexes() == [Self.wanted("cars", "year"): .built])
            #expect(try await PostgresIndexTests.names(store) == [index.name])
        }
    }

    @Test func noMoreThanTheMostAreMade() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 1, p0: 1})")
            let most = PostgresStore.maximumAutomaticIndexes
            for i in 0...most { _ = try await store.execute("SELECT * FROM t WHERE p\(i) = 1") }
            let outcomes = await store.buildAskedIndexes()
            #expect(outcomes.values.count { $0 == .built } == most)
            #expect(outcomes[Self.wanted("t", "p\(most)")] == .full)
            #expect(try await store.execute("SHOW INDEXES").items.count == most)
            _ = try await store.execute("SELECT * FROM t WHERE q = 1")
            #expect(await store.buildAskedIndexes().isEmpty, "no more is asked for")
        }
    }
}

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

    /// A build that waits for a lock another session holds on the documents (here, as
    /// a VACUUM would) gives up after `buildLockWait`, and the writes it held go on.
    @Test func aBuildWaitsForAnotherSessionsLockOnlySoLong() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({_id: 'a', year: 2000})")
            _ = try await store.execute("SELECT * FROM cars WHERE year = 2000")
            let outcome = try await hubs[0].withConnection { connection in
                _ = try await connection.query("BEGIN", logger: store.logger)
                _ = try await connection.query("LOCK TABLE document IN SHARE UPDATE EXCLUSIVE MODE", logger: store.logger)
                // Gave up on its own (PostgreSQL's lock_timeout), with the lock still held.
                let outcome = await store.buildAskedIndexes()[Self.wanted("cars", "year")]
                _ = try await connection.query("ROLLBACK", logger: store.logger)
                return outcome
            }
            guard case .failed(let message)? = outcome else {
                Issue.record("built past another session's lock: \(String(describing: outcome))")
                return
            }
            #expect(message.contains("held a lock on the documents"), "\(message)")
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({_id: 'b', year: 2001})")
            #expect(try await store.execute("SHOW INDEXES").items.isEmpty)
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

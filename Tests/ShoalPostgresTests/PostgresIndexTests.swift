import Logging
import PostgresNIO
import ShoalCRDT
@testable import ShoalPostgres
import ShoalQuery
import ShoalStorage
import ShoalTesting
import Testing

/// `CREATE INDEX`, `DROP INDEX` and `SHOW INDEXES` on hubs: what they answer and refuse
/// (as on SQLite, `IndexTests`), that the planner searches a declared index for the
/// queries it serves, and that an index never changes an answer.
@Suite(.enabled(if: TemporaryPostgresDatabase.serverURL != nil, Comment(rawValue: TemporaryPostgresDatabase.skipReason)))
struct PostgresIndexTests {
    /// 2,000 cars: `year` 1990…2029, `make` one of 50; and three that a filter must keep
    /// whatever it says: a string year, a body `jsonb` cannot hold, and a year past 2^53.
    static func cars(_ store: PostgresStore) async throws {
        var docs: [Value] = (0..<2_000).map { i in
            ["_id": .string("car\(i)"), "year": .int(Int64(1990 + i % 40)), "make": .string("make\(i % 50)")]
        }
        docs.append(["_id": "text", "year": "2021", "make": "make7"])
        docs.append(["_id": "nul", "year": 2021, "make": "make31", "note": .string("a\u{0}b")])
        docs.append(["_id": "huge", "year": .double(0x1p60), "make": "make99"])
        // Values of every other kind at the indexed path, which a range must keep out (and
        // DQL decides), and a value too long for an index entry, which must be kept.
        let others: [Value] = [-5.5, 2021.5, true, false, .null, [2021], ["y": 2021], "", .string(String(repeating: "x", count: 3_000))]
        for (i, year) in others.enumerated() { docs.append(["_id": .string("other\(i)"), "year": year, "make": "make31"]) }
        docs.append(["_id": "long", "year": 2021, "make": .string(Self.longMake)])
        _ = try await store.execute("INSERT INTO cars DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
        _ = try await store.execute("INSERT INTO other DOCUMENTS ({_id: 1, year: 2021})")
    }

    /// A `make` longer than an index entry may hold (`shoal_at` gives it as `unfilterable`),
    /// and that does not compress to fit.
    static let longMake: String = {
        let letters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        var state: UInt64 = 42
        return String((0..<3_000).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return letters[Int(state >> 58)]
        })
    }()

    /// Cars `a` (2000) and `b`, whose body is stored by hand as a text that is not JSON.
    static func carsOneNotJSON(_ store: PostgresStore, _ database: PostgresHubDatabase) async throws {
        _ = try await store.execute("INSERT INTO cars DOCUMENTS ({_id: 'a', year: 2000}), ({_id: 'b', year: 2001})")
        try await database.withConnection { connection in
            _ = try await connection.query(
                #"UPDATE document SET body = 'not json' WHERE collection = 'cars' AND doc_id = '"b"'"#, logger: store.logger)
        }
    }

    /// The plan of the first query a SELECT's read makes on a hub.
    static func plan(_ store: PostgresStore, _ query: String) async throws -> String {
        guard case .select(let select) = try Parser.parseStatement(query) else { return "" }
        let filter = PreFilter.make(select.whereClause, arguments: ["long": .string(longMake)], rules: PostgresFilter.rules)
        let perQuery = PostgresStore.rowsPerQuery(enough: select.limit == nil ? nil : 10, filtered: filter != nil)
        let read = PostgresStore.bodiesQuery(of: select.collection, only: nil, after: "", filter: filter, perQuery: perQuery)
        return try await store.snapshot("explaining a query") { connection in
            let rows = try await connection.query(PostgresQuery(unsafeSQL: "EXPLAIN " + read.sql, binds: read.binds), logger: store.logger)
            return try rows.decode(String.self).joined(separator: "\n")
        }
    }

    /// How many of the database's indexes `condition` (on `pg_indexes`) holds.
    static func count(_ database: PostgresHubDatabase, _ condition: String) async throws -> Int? {
        try await database.withConnection { connection in
            try await connection.query(
                PostgresQuery(unsafeSQL: "SELECT count(*)::bigint FROM pg_indexes WHERE \(condition)"), logger: Logger(label: "shoal.test"))
                .decode(Int.self).first
        }
    }

    static func names(_ store: PostgresStore) async throws -> [String] {
        try await store.execute("SHOW INDEXES").items.compactMap { $0["name"]?.stringValue }
    }

    static func ids(_ store: PostgresStore, _ query: String) async throws -> Set<String> {
        Set(try await store.execute(query, arguments: ["long": .string(longMake)]).items.compactMap { $0["_id"]?.stringValue })
    }

    @Test(arguments: [
        ("year = 2021", true),
        ("year = 2021 AND make = 'make31'", true),
        ("year IN (2020, 2021)", true),
        ("year > 2027", true),
        ("year >= 2027 AND year < 2029", true),
        ("year <= 1991", true),
        ("year >= 2020 AND year <= 2021", true),
        ("year > -10 AND year < 2022 AND make = 'make31'", true),
        ("year = 2021 AND make = :long", true),
        // The index leads with year: the planner may still read make from the whole index
        // rather than each body (a check of `shoal_at` costs it more than an index entry).
        ("make = 'make7'", nil),
    ] as [(String, Bool?)])
    func theIndexServesItsQueriesAndChangesNoAnswer(predicate: String, searched: Bool?) async throws {
        try await TemporaryPostgresDatabase.withDatabase(hubs: 2) { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            let other = try await PostgresStore.open(hubs[1], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close(); other.close() }
            try await Self.cars(store)
            let query = "SELECT _id FROM cars WHERE \(predicate)"
            // The answer read unfiltered: an OR with a LIKE, which no filter holds.
            let before = try await Self.ids(store, "SELECT _id FROM cars WHERE (\(predicate)) OR make LIKE 'none%'")
            if predicate.contains(":long") { #expect(before == ["long"], "a value too long for an index entry is found") }
            if predicate.contains("-10") { #expect(before.isSuperset(of: ["other0", "other1"]), "-5.5 and 2021.5") }
            #expect(!before.isEmpty)
            #expect(
                before.contains("nul") == (predicate.contains("2021") && !predicate.contains(":long") || predicate.contains("2022")),
                "a body jsonb cannot hold is found: \(before.sorted())")
            #expect(before.contains("huge") == (predicate == "year > 2027"))
            #expect(try await Self.ids(store, query) == before, "the same answer through the filter")

            let created = try await store.execute("CREATE INDEX by_year ON cars (year, make)")
            #expect(created.items == [["name": "by_year", "collection": "cars", "paths": ["year", "make"], "automatic": false]])
            #expect(created.transactionID == nil, "an index is no document write")
            let plan = try await Self.plan(other, query)
            if let searched { #expect(plan.contains("shoal_index_") == searched, "plan: \(plan)") }
            #expect(try await Self.ids(other, query) == before, "the same answer through the index")
            #expect(try await Self.ids(store, query) == before)
            // A write's read goes through the same filter.
            let updated = try await other.execute("UPDATE cars SET seen = true WHERE \(predicate)", arguments: ["long": .string(Self.longMake)])
            #expect(Set(updated.mutatedDocumentIDs.compactMap(\.stringValue)) == before)
            #expect(try await Self.names(other) == ["by_year"], "every hub lists it")
            if predicate.contains(":long") {
                // Written once the index exists: a value too long for an index entry is no
                // reason to refuse a document.
                _ = try await store.execute("INSERT INTO cars DOCUMENTS ({_id: 'long2', year: 2021, make: :long})", arguments: ["long": .string(Self.longMake)])
                #expect(try await Self.ids(other, query) == ["long", "long2"])
            }
        }
    }

    @Test func refusedCreatesAndDropsSayWhyAndChangeNothing() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            _ = try await store.execute("CREATE INDEX by_year ON cars (year)")
            for (statement, message) in [
                ("CREATE INDEX BY_YEAR ON cars (price)", "line 1, column 14: an index named 'by_year' exists already, on cars (year)"),
                ("DROP INDEX nothing", "line 1, column 12: no index named 'nothing': SHOW INDEXES lists them"),
                ("SELECT * FROM cars;\nDROP INDEX gone", "line 2, column 12: no index named 'gone'"),
            ] {
                let error = try await #require(throws: ShoalError.self) { try await store.execute(statement) }
                #expect(error.code == .invalidQuery)
                #expect(error.message.hasPrefix(message), "\(error.message)")
            }
            let existing = try await store.execute("CREATE INDEX IF NOT EXISTS By_Year ON other (x)")
            #expect(existing.items == [["name": "by_year", "collection": "cars", "paths": ["year"], "automatic": false]])
            #expect(try await Self.names(store) == ["by_year"], "nothing changed")

            // Rolled back with its transaction: no declaration, no index.
            await #expect(throws: ShoalError.self) {
                try await store.execute("CREATE INDEX by_make ON cars (make); INSERT INTO cars DOCUMENTS ({_id: 1}), ({_id: 1})")
            }
            #expect(try await Self.names(store) == ["by_year"])
            let built = try await hubs[0].withConnection { connection in
                try await connection.query("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'shoal_index_%'", logger: store.logger)
                    .decode(Int.self).first
            }
            #expect(built == 1)
            #expect(try await Self.count(hubs[0], "indexname = 'shoal_unfilterable'") == 1, "made with the first index")

            // A call failing on the server for another reason than a body (an index of the
            // name PostgreSQL would give it, made by hand: "already exists") undoes itself,
            // and the transaction goes on and commits.
            let taken = UserIndex(name: "taken", collection: "cars", paths: [["x"]]).postgresName
            try await hubs[0].withConnection { connection in
                _ = try await connection.query(PostgresQuery(unsafeSQL: "CREATE INDEX \(taken) ON document (doc_id)"), logger: store.logger)
            }
            try await store.transaction { transaction in
                _ = try await transaction.execute("CREATE INDEX by_model ON cars (model)")
                let error = await #expect(throws: ShoalError.self) { try await transaction.execute("CREATE INDEX taken ON cars (x)") }
                #expect(error?.code == .database, "not a query error: \(String(describing: error))")
                _ = try await transaction.execute("INSERT INTO cars DOCUMENTS ({_id: 4})")
                return .commit
            }
            #expect(try await Self.names(store) == ["by_model", "by_year"])
            #expect(try await store.execute("SELECT _id FROM cars WHERE _id = 4").items.count == 1)
            _ = try await store.execute("DROP INDEX by_model")

            // Inside a transaction that goes on: a failed call undoes its index statement only.
            let kept = try await store.transaction { transaction in
                _ = try? await transaction.execute("CREATE INDEX by_make ON cars (make); INSERT INTO cars DOCUMENTS ({_id: 1}), ({_id: 1})")
                _ = try? await transaction.execute("DROP INDEX by_year; INSERT INTO cars DOCUMENTS ({_id: 2}), ({_id: 2})")
                return try await transaction.execute("INSERT INTO cars DOCUMENTS ({_id: 3})").mutatedDocumentIDs
            }
            #expect(kept == [3])
            #expect(try await Self.names(store) == ["by_year"], "neither the CREATE nor the DROP of a failed call stays")

            #expect(try await store.execute("DROP INDEX BY_YEAR").items.first?["name"] == "by_year")
            #expect(try await Self.names(store).isEmpty)
            #expect(try await store.execute("DROP INDEX IF EXISTS by_year").items.isEmpty)
            #expect(try await Self.count(hubs[0], "indexname LIKE 'shoal_index_%' AND indexname != '\(taken)'") == 0)
            #expect(
                try await Self.count(hubs[0], "indexname = 'shoal_unfilterable'") == 0,
                "gone with the last declared index, so that updates may be HOT again")
        }
    }

    /// A body stored by hand that PostgreSQL cannot read as JSON: the index cannot be
    /// built, which the statement says, and the transaction goes on without it.
    @Test func anIndexThatCannotBeBuiltSaysWhyAndTheTransactionGoesOn() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            try await PostgresIndexTests.carsOneNotJSON(store, hubs[0])
            let error = try await #require(throws: ShoalError.self) { try await store.execute("CREATE INDEX by_year ON cars (year)") }
            #expect(error.message.hasPrefix("line 1, column 14: index by_year could not be built on "), "\(error.message)")
            #expect(error.message.contains("invalid input syntax for type json"), "\(error.message)")
            #expect(try await Self.names(store).isEmpty)
            let written = try await store.transaction { transaction in
                _ = try? await transaction.execute("CREATE INDEX by_year ON cars (year)")
                return try await transaction.execute("UPDATE cars SET year = 2002 WHERE year = 2000").mutatedDocumentIDs
            }
            #expect(written == ["a"], "the failed statement undid only itself")
        }
    }
}

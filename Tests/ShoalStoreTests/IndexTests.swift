import GRDB
import ShoalCRDT
import ShoalQuery
@testable import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// `CREATE INDEX`, `DROP INDEX`, `SHOW INDEXES`, the plans that use them, and the
/// statistics the planner chooses by.
@Suite struct IndexTests {
    /// 1,000 cars: `year` 1990…2029, `make` one of 50, `price` a double.
    static func cars(_ store: DocumentStore) async throws {
        let docs: [Value] = (0..<1_000).map { i in
            [
                "_id": .string("car\(i)"), "year": .int(Int64(1990 + i % 40)), "make": .string("make\(i % 50)"),
                "price": .double(Double(i) * 10.5),
            ]
        }
        _ = try await store.execute("INSERT INTO cars DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
    }

    /// A new store in a directory of its own.
    static func open() throws -> (TemporaryDirectory, DocumentStore) {
        let dir = TemporaryDirectory()
        return (dir, try DocumentStore(directory: dir.path))
    }

    /// The declared indexes `SHOW INDEXES` lists.
    static func names(_ store: DocumentStore) async throws -> [String] {
        try await store.execute("SHOW INDEXES").items.filter { $0["automatic"] == false }.compactMap { $0["name"]?.stringValue }
    }

    /// A point query on `_id` reads by primary key, so neither it nor an UPDATE by
    /// `_id` makes an automatic index (which every later body write would maintain).
    @Test func anIDPointQueryMakesNoAutomaticIndexButAFilterOnAFieldDoes() async throws {
        let (dir, store) = try Self.open()
        defer { dir.remove(); store.close() }
        try await Self.cars(store)
        #expect(try await store.execute("SELECT year FROM cars WHERE _id = 'car7'").items == [["year": 1997]])
        _ = try await store.execute("UPDATE cars SET year = 2000 WHERE _id = :id", arguments: ["id": "car8"])
        #expect(try await store.execute("SELECT year FROM cars WHERE _id = 'car8'").items == [["year": 2000]])
        #expect(store.indexedPaths.withLock { $0.isEmpty }, "no index for _id: \(store.indexedPaths.withLock { $0 })")
        let plan = try await store.candidatePlan("SELECT * FROM cars WHERE _id = 'car7'")
        #expect(plan.contains("PRIMARY KEY"), "plan: \(plan)")
        _ = try await store.execute("SELECT * FROM cars WHERE make = 'make3'")
        #expect(store.indexedPaths.withLock { $0 } == [#"$."make""#], "a filter on a field still gets its index")
    }

    @Test func createUseDropAndReopen() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        var store = try DocumentStore(directory: dir.path)
        try await Self.cars(store)
        let created = try await store.execute("CREATE INDEX by_year ON cars (year, make)")
        #expect(
            created.items == [["name": "by_year", "collection": "cars", "paths": ["year", "make"], "automatic": false]])
        #expect(created.transactionID == nil, "an index is no document write")
        let plan = try await store.candidatePlan("SELECT * FROM cars WHERE year = 2021 AND make = 'make31'")
        #expect(plan.contains("USING INDEX shoal_index_by_year"), "plan: \(plan)")
        #expect(!store.indexedPaths.withLock { $0.contains(#"$."year""#) }, "the declared index serves year")
        let found = try await store.execute("SELECT _id FROM cars WHERE year = 2021 AND make = 'make31'").items
        #expect(found.count == 5)
        store.close()

        store = try DocumentStore(directory: dir.path)
        #expect(try await Self.names(store) == ["by_year"])
        let again = try await store.candidatePlan("SELECT * FROM cars WHERE year > 2027 LIMIT 10")
        #expect(again.contains("USING INDEX shoal_index_by_year"), "plan: \(again)")
        let dropped = try await store.execute("DROP INDEX BY_YEAR")
        #expect(dropped.items.first?["name"] == "by_year")
        #expect(try await Self.names(store).isEmpty)
        let left = try await store.read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE name LIKE 'shoal_index_%'")
        }
        #expect(left.isEmpty)
        #expect(try await store.execute("DROP INDEX IF EXISTS by_year").items.isEmpty)
        store.close()
    }

    /// A point query and a range query on an indexed path are answered by a SEARCH
    /// of that index, for a declared index and for an automatic one.
    @Test(arguments: [
        ("SELECT * FROM cars WHERE make = 'make7'", "shoal_index_by_make"),
        ("SELECT * FROM cars WHERE make IN ('make7', 'make8') LIMIT 50", "shoal_index_by_make"),
        ("SELECT * FROM cars WHERE year > 2020 LIMIT 50", "shoal_index_by_year"),
        ("SELECT * FROM cars WHERE year >= 2020 AND year < 2022", "shoal_index_by_year"),
        ("SELECT * FROM cars WHERE price = 105.0", "document_by_"),
        ("SELECT * FROM cars WHERE price > 10000 LIMIT 50", "document_by_"),
    ])
    func queryPlansSearchTheIndex(query: String, index: String) async throws {
        let (dir, store) = try Self.open()
        defer { store.close(); dir.remove() }
        try await Self.cars(store)
        _ = try await store.execute("CREATE INDEX by_make ON cars (make); CREATE INDEX by_year ON cars (year)")
        _ = try await store.execute(query)  // makes the automatic index of a path no declared index leads with
        let plan = try await store.candidatePlan(query)
        #expect(plan.contains("SEARCH document USING INDEX \(index)"), "plan: \(plan)")
    }

    @Test func limitStopsEarlyAndKeepsOnlyMatches() async throws {
        let (dir, store) = try Self.open()
        defer { store.close(); dir.remove() }
        try await Self.cars(store)
        // Strings sort after numbers in SQLite, so they pass `year > 2020` there; the
        // evaluator drops them, and the LIMIT still gets its count.
        let strings: [Value] = (0..<20).map { ["_id": .string("s\($0)"), "year": "new"] }
        _ = try await store.execute("INSERT INTO cars DOCUMENTS (:docs)", arguments: ["docs": .array(strings)])
        _ = try await store.execute("CREATE INDEX by_year ON cars (year)")
        let page = try await store.execute("SELECT * FROM cars WHERE year > 2027 LIMIT 30 OFFSET 10").items
        #expect(page.count == 30)
        #expect(page.allSatisfy { if case .int(let year)? = $0["year"] { year > 2027 } else { false } })
        let all = try await store.execute("SELECT * FROM cars WHERE year > 2027 LIMIT 1000").items
        #expect(all.count == 50, "2 of every 40 years, of 1,000 cars")
        #expect(try await store.execute("SELECT * FROM cars WHERE year > 2027 LIMIT 0").items.isEmpty)
        let ordered = try await store.execute("SELECT _id FROM cars WHERE year > 2027 ORDER BY _id LIMIT 2").items
        #expect(ordered == [["_id": "car118"], ["_id": "car119"]])
    }

    @Test(arguments: [
        ("CREATE INDEX BY_YEAR ON cars (price)", "line 1, column 14: an index named 'by_year' exists already, on cars (year)"),
        ("DROP INDEX nothing", "line 1, column 12: no index named 'nothing': SHOW INDEXES lists them"),
        ("CREATE INDEX i ON cars (`a\"b`)", "line 1, column 25: 'a\"b' cannot be indexed"),
        ("SELECT * FROM cars;\nDROP INDEX gone", "line 2, column 12: no index named 'gone'"),
    ])
    func refusesWithThePosition(statement: String, message: String) async throws {
        let (dir, store) = try Self.open()
        defer { store.close(); dir.remove() }
        _ = try await store.execute("CREATE INDEX by_year ON cars (year)")
        let error = try await #require(throws: ShoalError.self) { try await store.execute(statement) }
        #expect(error.code == .invalidQuery)
        #expect(error.message.hasPrefix(message), "\(error.message)")
        #expect(try await Self.names(store) == ["by_year"], "nothing changed")
    }

    @Test func automaticIndexesAreListedAndKept() async throws {
        let (dir, store) = try Self.open()
        defer { store.close(); dir.remove() }
        try await Self.cars(store)
        _ = try await store.execute("SELECT * FROM cars WHERE price = 1.5")
        let rows = try await store.execute("SHOW INDEXES").items
        let automatic = try #require(rows.first)
        #expect(automatic["paths"] == ["price"])
        #expect(automatic["automatic"] == true)
        #expect(automatic["collection"] == .null)
        let name = try #require(automatic["name"]?.stringValue)
        let error = try await #require(throws: ShoalError.self) { try await store.execute("DROP INDEX \(name)") }
        #expect(error.message.contains("is an automatic index"), "\(error.message)")
        let existing = try await store.execute("CREATE INDEX IF NOT EXISTS p ON cars (price); CREATE INDEX IF NOT EXISTS P ON other (x)")
        #expect(existing.items == [["name": "p", "collection": "cars", "paths": ["price"], "automatic": false]])
    }

    @Test func aRolledBackCreateLeavesNoIndex() async throws {
        let (dir, store) = try Self.open()
        defer { store.close(); dir.remove() }
        await #expect(throws: ShoalError.self) {
            try await store.execute("CREATE INDEX by_year ON cars (year); INSERT INTO cars DOCUMENTS ({_id: 1}), ({_id: 1})")
        }
        #expect(try await Self.names(store).isEmpty)
        #expect(store.userIndexes.withLock { $0.isEmpty })
    }

    /// The statistics are refreshed inside a commit once `minimumGrowth` documents were
    /// written since the last refresh, and half as many as it counted; a store opened
    /// again counts from what `sqlite_stat1` holds.
    @Test func statisticsAreRefreshedAsDocumentsAreWritten() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        var store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        store.statistics.withLock { $0.minimumGrowth = 500 }
        let documents = {
            try await store.read { db in
                guard try db.tableExists("sqlite_stat1") else { return nil as Int? }
                return try Int.fetchOne(db, sql: "SELECT CAST(stat AS INTEGER) FROM sqlite_stat1 WHERE tbl = 'document' LIMIT 1")
            }
        }
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({_id: 0, n: 0})")
        #expect(try await documents() == nil, "no statistics before 500 documents were written")
        try await Self.cars(store)  // 1,000 documents in one transaction, one log row
        #expect(try await documents() == 1_001)
        let more: [Value] = (0..<400).map { ["_id": .int(Int64($0 + 1)), "n": .int(Int64($0))] }
        _ = try await store.execute("INSERT INTO c DOCUMENTS (:more)", arguments: ["more": .array(more)])
        #expect(try await documents() == 1_001, "400 documents is less than half the 1,001 at the last refresh")
        _ = try await store.execute("INSERT INTO c DOCUMENTS (:more) ON ID CONFLICT DO UPDATE", arguments: ["more": .array(more)])
        #expect(try await documents() == 1_401)

        store.close()
        store = try DocumentStore(directory: dir.path)
        #expect(store.statistics.withLock { $0.documentsAtRefresh } == 1_401, "read from sqlite_stat1")
        store.statistics.withLock { $0.minimumGrowth = 500 }
        _ = try await store.execute("INSERT INTO c DOCUMENTS (:more) ON ID CONFLICT DO UPDATE", arguments: ["more": .array(more)])
        #expect(try await documents() == 1_401, "400 is less than half of 1,401")
        _ = try await store.execute("INSERT INTO c DOCUMENTS (:more) ON ID CONFLICT DO UPDATE", arguments: ["more": .array(more)])
        #expect(try await documents() == 1_401, "400 + 400 is more: refreshed, and the count is the same")
        #expect(store.statistics.withLock { $0.loggedSinceRefresh } == 0)
    }
}

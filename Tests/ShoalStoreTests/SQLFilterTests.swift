import ShoalCRDT
import ShoalQuery
@testable import ShoalStore
import ShoalStorage
import ShoalTesting
import Synchronization
import Testing

/// The SQLite pre-filter must never drop a document the DQL predicate matches.
@Suite struct SQLFilterTests {
    static let documents: [Value] = [
        ["_id": "a", "n": 1, "s": "x", "o": ["k": 2]],
        ["_id": "b", "n": 1.0, "s": "y", "o": ["k": "2"]],
        ["_id": "c", "n": true, "s": "e\u{301}", "o": ["k": [2]]],
        ["_id": "d", "n": "1", "s": "é", "o": 2],
        ["_id": "e", "n": 5, "s": nil],
        ["_id": "f", "s": "X", "o": ["k": 2.5]],
        ["_id": "g", "n": -3, "s": "[1]", "o": ["k": nil]],
    ]

    static let predicates = [
        "n = 1", "1 = n", "n = '1'", "n < 2", "n >= 1", "2 > n", "n > -10", "s = 'x'", "s = 'é'", "s = 'e\u{301}'",
        "s IN ('x', 'y', 'z')", "n IN (1, 5)", "o.k = 2", "o.k >= 2", "o.k = '2'", "n = 1 AND s = 'x'",
        "n = 1 OR s = 'X'", "n = 1 OR s LIKE 'X%'", "NOT n = 1", "n != 1", "s IS NULL", "o.k IS MISSING",
        "n = :one", "s = :x", "n < :two AND o.k = 2", "s = '[1]'", "n = true",
    ]

    @Test(arguments: predicates)
    func preFilterKeepsEveryMatch(predicate: String) async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        _ = try await store.execute("INSERT INTO c DOCUMENTS (:docs)", arguments: ["docs": .array(Self.documents)])
        let arguments: [String: Value] = ["one": 1, "two": 2, "x": "x"]
        let statement = try Parser.parseStatement("SELECT * FROM c WHERE \(predicate)")
        guard case .select(let select) = statement else { return }
        var expected: [Value] = []
        for doc in Self.documents where try Evaluator.matches(select.whereClause, document: doc, arguments: arguments) {
            expected.append(doc["_id"]!)
        }
        let got = try await store.execute("SELECT _id FROM c WHERE \(predicate) ORDER BY _id", arguments: arguments)
            .items.compactMap { $0["_id"] }
        #expect(got == expected.sorted(), "\(predicate)")
    }

    @Test func literalsDoubleEveryQuote() {
        #expect(SQLFilter.literal("cars") == "'cars'")
        #expect(SQLFilter.literal("") == "''")
        #expect(SQLFilter.literal("it's") == "'it''s'")
        #expect(SQLFilter.literal("''") == "''''''")
        #expect(SQLFilter.literal("é'🚗'x") == "'é''🚗''x'")
        #expect(SQLFilter.collectionCondition("o'brien").sql == "collection = 'o''brien'")
    }

    @Test func translatesWhatSQLiteCanCheck() {
        func sql(_ predicate: String) -> String? {
            guard case .select(let s)? = try? Parser.parseStatement("SELECT * FROM c WHERE \(predicate)") else { return nil }
            return SQLFilter.make(s.whereClause, arguments: ["p": 3])?.sql
        }
        #expect(sql("a = 1") == #"json_extract(body, '$."a"') = ?"#)
        #expect(sql("3 < a.b") == #"json_extract(body, '$."a"."b"') > ?"#)
        #expect(sql("a = :p AND b LIKE 'x%'") == #"json_extract(body, '$."a"') = ?"#, "the LIKE side stays in Swift")
        #expect(sql("a IN ('x', 2)") == #"json_extract(body, '$."a"') IN (?, ?)"#)
        #expect(sql("a = 1 OR b = 2") == #"(json_extract(body, '$."a"') = ? OR json_extract(body, '$."b"') = ?)"#)
        #expect(sql("`it's` = 1") == #"json_extract(body, '$."it''s"') = ?"#, "quotes in names are escaped")
        #expect(sql("a = 1 OR b LIKE 'x'") == nil)
        #expect(sql("a < 'x'") == nil, "string order is Swift's")
        #expect(sql("a = 'é'") == nil, "non-ASCII strings are compared by canonical equivalence in Swift")
        #expect(sql("NOT a = 1") == nil)
        #expect(sql("a = 'K'") == nil, "U+212A KELVIN SIGN equals K in DQL")
        #expect(sql("Kind = 1") == nil, "a key of U+212A is found by Kind in DQL")
        #expect(sql("`é` = 1") == nil, "a key is found by canonical equivalence in DQL")
    }

    @Test func queriedPathsGetAnIndexThatSQLiteUses() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'n': 1, 'o': {'k': 'x'}})")
        let many: [Value] = (2..<300).map { ["_id": .string("d\($0)"), "n": .int(Int64($0))] }
        _ = try await store.execute("INSERT INTO c DOCUMENTS (:many)", arguments: ["many": .array(many)])
        #expect(try await store.execute("SELECT * FROM c WHERE n = 1 AND o.k = 'x'").items.count == 1)
        let plan = try await store.candidatePlan("SELECT * FROM c WHERE n = 1")
        #expect(plan.contains("document_by_"), "plan: \(plan)")
        store.close()
        // The indexes are remembered across a restart (and not created twice).
        let reopened = try DocumentStore(directory: dir.path)
        defer { reopened.close() }
        #expect(reopened.indexedPaths.withLock { $0 } == ["$.\"n\"", "$.\"o\".\"k\""])
    }

    /// The largest predicates DQL accepts: the longest OR and AND chains the parser's
    /// height allows, the deepest nesting of alternating AND and OR its bracket limit
    /// allows, and more terms than SQLite's expression depth, in brackets.
    static func largestPredicates() -> [(name: String, predicate: String)] {
        func term(_ i: Int) -> String { "n = \(i % 10)" }
        /// The longest chain of `op` the parser takes.
        func chain(_ op: String) -> String {
            var terms = 2
            while (try? Parser.parseStatement("SELECT * FROM c WHERE " + (0...terms).map(term).joined(separator: " \(op) "))) != nil {
                terms += 1
            }
            return (0..<terms).map(term).joined(separator: " \(op) ")
        }
        /// `n = 0 OR (n = 1 AND (n = 2 OR (...)))`, the deepest the parser takes, right or left.
        func nesting(right: Bool) -> String {
            func nested(_ depth: Int) -> String {
                var e = term(depth)
                for level in (0..<depth).reversed() {
                    let op = level % 2 == 0 ? "OR" : "AND"
                    e = right ? "\(term(level)) \(op) (\(e))" : "(\(e)) \(op) \(term(level))"
                }
                return e
            }
            var depth = 1
            while (try? Parser.parseStatement("SELECT * FROM c WHERE " + nested(depth + 1))) != nil { depth += 1 }
            return nested(depth)
        }
        // Forty bracketed chains of fifty: 2,000 terms, every chain within the height.
        let wide = (0..<40).map { group in "(" + (0..<50).map { term(group + $0) }.joined(separator: " OR ") + ")" }
            .joined(separator: " OR ")
        func brackets(_ depth: Int) -> String { String(repeating: "(", count: depth) + term(1) + String(repeating: ")", count: depth) }
        let deepest = (1...Parser.maximumNesting).last { (try? Parser.parseStatement("SELECT * FROM c WHERE " + brackets($0))) != nil }!
        return [
            ("OR chain", chain("OR")), ("AND chain", chain("AND")), ("nested right", nesting(right: true)),
            ("nested left", nesting(right: false)), ("2,000 terms", wide), ("brackets", brackets(deepest)),
        ]
    }

    /// Every predicate DQL accepts stays inside SQLite's limits (its parser's stack and
    /// its expression depth) in SELECT, UPDATE and DELETE, and matches what the
    /// evaluator matches.
    @Test(arguments: largestPredicates().map(\.name))
    func theLargestPredicatesDQLAcceptsRunInEveryStatement(name: String) async throws {
        let predicate = try #require(Self.largestPredicates().first { $0.name == name }).predicate
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        let documents: [Value] = (0..<12).map { ["_id": .string("d\($0)"), "n": .int(Int64($0))] }
        _ = try await store.execute("INSERT INTO c DOCUMENTS (:docs)", arguments: ["docs": .array(documents)])
        guard case .select(let select) = try Parser.parseStatement("SELECT * FROM c WHERE \(predicate)") else { return }
        let expected = try documents.filter { try Evaluator.matches(select.whereClause, document: $0, arguments: [:]) }
            .compactMap { $0["_id"] }.sorted { $0.canonicalJSON < $1.canonicalJSON }
        let selected = try await store.execute("SELECT _id FROM c WHERE \(predicate) ORDER BY _id").items.compactMap { $0["_id"] }
        #expect(selected == expected, "\(name)")
        let updated = try await store.execute("UPDATE c SET hit = true WHERE \(predicate)").mutatedDocumentIDs
        #expect(updated.sorted { $0.canonicalJSON < $1.canonicalJSON } == expected, "\(name)")
        let deleted = try await store.execute("DELETE FROM c WHERE \(predicate)").mutatedDocumentIDs
        #expect(deleted.sorted { $0.canonicalJSON < $1.canonicalJSON } == expected, "\(name)")
        #expect(try await store.execute("SELECT COUNT(*) AS n FROM c").items.first?["n"] == .int(Int64(12 - expected.count)))
    }
}

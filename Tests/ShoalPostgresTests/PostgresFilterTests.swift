import Logging
import PostgresNIO
import ShoalCRDT
@testable import ShoalPostgres
import ShoalQuery
import ShoalStorage
import ShoalTesting
import Testing

/// A hub's WHERE pre-filter (`PostgresFilter`): what it writes, that it narrows what a
/// query reads, and that a body PostgreSQL cannot check costs only the narrowing.
/// That it never drops a match is `PreFilterConformanceTests`, on both engines.
@Suite struct PostgresFilterTests {
    static func condition(_ predicate: String, _ arguments: [String: Value] = [:]) throws -> String? {
        guard case .select(let select) = try Parser.parseStatement("SELECT * FROM c WHERE \(predicate)") else { return nil }
        guard let filter = PreFilter.make(select.whereClause, arguments: arguments, rules: PostgresFilter.rules) else { return nil }
        var binds = PostgresBindings()
        binds.append("c")
        return PostgresFilter.condition(filter, binds: &binds)
    }

    @Test func writesWhatPostgreSQLCanCheck() throws {
        let a = "shoal_at(body, ARRAY[E'a']::text[])"
        let kept = #"'{"shoal": "unfilterable"}'::jsonb"#
        #expect(try Self.condition("a = 1") == "\(a) IN ($2::jsonb, \(kept))", "a body jsonb cannot hold is kept")
        let unreadable = #"body LIKE E'%\\\\u0000%'"#
        #expect(
            try Self.condition("3 < a.b")
                == "(\(unreadable) OR (shoal_at(body, ARRAY[E'a', E'b']::text[]) > $2::jsonb"
                + " AND shoal_at(body, ARRAY[E'a', E'b']::text[]) < 'false'::jsonb))",
            "a range compares numbers only: in jsonb, booleans, arrays and objects sort above them")
        #expect(
            try Self.condition("a <= 3") == "(\(unreadable) OR (\(a) > '-1e1000'::jsonb AND \(a) <= $2::jsonb))",
            "strings and null sort below numbers, and no double below -1e1000")
        #expect(
            try Self.condition("a < 9 AND b = 1 AND 2 <= a")
                == "((\(unreadable) OR (\(a) >= $2::jsonb AND \(a) < $3::jsonb)) AND shoal_at(body, ARRAY[E'b']::text[]) IN ($4::jsonb, \(kept)))",
            "two bounds on one path are one range")
        #expect(try Self.condition("a IN ('x', 2)") == "\(a) IN ($2::jsonb, $3::jsonb, \(kept))")
        #expect(
            try Self.condition("a = 1 OR b > 2 OR a IN (3, 4) OR 5 = a")
                == "(\(a) IN ($2::jsonb, $3::jsonb, $4::jsonb, $5::jsonb, \(kept)) OR (\(unreadable) OR (shoal_at(body, ARRAY[E'b']::text[]) > $6::jsonb AND shoal_at(body, ARRAY[E'b']::text[]) < 'false'::jsonb)))",
            "equalities ORed on one path are one IN: one cast of the body")
        #expect(
            try Self.condition("a = 1 OR (b = 2 AND c LIKE 'x%')")
                == "(\(a) IN ($2::jsonb, \(kept)) OR shoal_at(body, ARRAY[E'b']::text[]) IN ($3::jsonb, \(kept)))")
        #expect(
            try Self.condition(#"`it's \q` = 1"#) == #"shoal_at(body, ARRAY[E'it''s \\q']::text[]) IN ($2::jsonb, "# + kept + ")",
            "a key's quotes and backslashes are doubled, in an E'' string")
        #expect(try Self.condition("`it's \"q\"` = 1") != nil, "any key a path can name, quotes included")
        #expect(try Self.condition("Kind = 1") == nil, "a key of U+212A KELVIN SIGN is found by Kind in DQL")
        #expect(try Self.condition("a = 9007199254740991") != nil)
        #expect(try Self.condition("a = 9007199254740992") == nil, "numbers from 2^53 stay in Swift")
        #expect(try Self.condition("a < -9007199254740992.0") == nil)
        #expect(try Self.condition("a = :s", ["s": "nul\u{0}"]) == nil, "TEXT cannot hold U+0000")
        #expect(try Self.condition("`k\u{0}` = 1") == nil)
        #expect(try Self.condition("a < 'x'") == nil, "string order is Swift's")
        #expect(try Self.condition("a = 'é'") == nil, "non-ASCII strings are compared by canonical equivalence in Swift")
    }

    @Test(.enabled(if: TemporaryPostgresDatabase.serverURL != nil, Comment(rawValue: TemporaryPostgresDatabase.skipReason)))
    func aFilteredQueryReadsOnlyWhatItMayMatchAndABodyPostgreSQLCannotCheckOnlyWidensIt() async throws {
        try await TemporaryPostgresDatabase.withDatabase { hubs in
            let store = try await PostgresStore.open(hubs[0], logger: Logger(label: "shoal.test.postgres"))
            defer { store.close() }
            let many: [Value] = (0..<300).map { ["_id": .string("d\($0)"), "n": .int(Int64($0))] }
            _ = try await store.execute("INSERT INTO c DOCUMENTS (:many)", arguments: ["many": .array(many)])
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'nul', 'n': 7, 's': :s})", arguments: ["s": "a\u{0}b"])

            func read(_ predicate: String) async throws -> Int {
                guard case .select(let select) = try Parser.parseStatement("SELECT * FROM c WHERE \(predicate)") else { return -1 }
                let filter = PreFilter.make(select.whereClause, arguments: [:], rules: PostgresFilter.rules)
                return try await store.snapshot("counting what a filter reads") { connection in
                    var count = 0
                    try await PostgresStore.liveBodies(connection, of: "c", filter: filter, logger: store.logger) { _, _ in
                        count += 1
                        return true
                    }
                    return count
                }
            }
            #expect(try await read("n = 7") == 2, "d7, and the body jsonb cannot hold")
            #expect(try await read("n >= 290 OR n = 3") == 12)
            #expect(try await read("n LIKE '7'") == 301, "nothing translates: every live body")

            // A body PostgreSQL cannot read as jsonb (stored so by hand): the query reads
            // on unfiltered, and answers as it would have.
            try await hubs[0].withConnection { connection in
                _ = try await connection.query(
                    #"UPDATE document SET body = 'not json' WHERE collection = 'c' AND doc_id = '"d5"'"#, logger: store.logger)
            }
            let answer = try await store.execute("SELECT _id FROM c WHERE n = 7 OR n = 250 ORDER BY _id").items
            #expect(answer == [["_id": "d250"], ["_id": "d7"], ["_id": "nul"]])
            // And in a write, where a failed statement would abort the transaction.
            let updated = try await store.execute("UPDATE c SET hit = true WHERE n = 250")
            #expect(updated.mutatedDocumentIDs == ["d250"])
            #expect(try await store.execute("SELECT _id FROM c WHERE hit = true").items == [["_id": "d250"]])
        }
    }
}

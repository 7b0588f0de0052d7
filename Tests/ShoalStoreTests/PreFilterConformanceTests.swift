import Foundation
import ShoalCRDT
import ShoalQuery
import ShoalStorage
import ShoalTesting
import Testing

/// A WHERE's pre-filter (`PreFilter`, checked in SQL on each engine) must never drop a
/// document the DQL predicate matches: the same answers on SQLite and on PostgreSQL,
/// read alone, inside a read-write transaction, and written by an UPDATE, as DQL's
/// evaluator gives over every document.
@Suite struct PreFilterConformanceTests {
    typealias Engine = StoreConformanceTests.Engine

    /// Documents where SQL and DQL could part: numbers by value and past 2^53, strings
    /// that are not ASCII or hold U+0000, values of other types at the same path, keys
    /// SQL paths must quote, and a key that reads as an array index.
    static let documents: [Value] = [
        ["_id": "a", "n": 1, "s": "x", "o": ["k": 2]],
        ["_id": "b", "n": 1.0, "s": "y", "o": ["k": "2"]],
        ["_id": "c", "n": true, "s": "e\u{301}", "o": ["k": [2]]],
        ["_id": "d", "n": "1", "s": "é", "o": 2],
        ["_id": "e", "n": 5, "s": nil, "t": "nul\u{0}here"],
        ["_id": "f", "s": "X", "o": ["k": 2.5]],
        ["_id": "g", "n": -3, "s": "[1]", "o": ["k": nil]],
        ["_id": "h", "n": .double(0x1p60)],
        ["_id": "i", "n": .int(9_007_199_254_740_993), "we\"ird": 1, "back\\slash": 2],
        ["_id": "j", "n": 0.1, "list": [5, 6], "s": "\u{0}"],
        ["_id": "k", "n": .double(0x1p53), "0": 3],
        ["_id": "l", "a": ["0": 4], "n": 1e300, "list": ["0": 5]],
        ["_id": "m", "n": .int(Int64.max), "s": "x"],
        // Canonically equivalent to ASCII (KELVIN SIGN is K, GREEK QUESTION MARK is ;),
        // and a key composed where the query decomposes it.
        ["_id": "o", "s": "\u{212A}", "\u{212A}ind": 1, "q": "a\u{037E}b", "pr\u{E9}nom": 2],
    ]

    static let arguments: [String: Value] = [
        "one": 1, "two": 2, "x": "x", "nul": "\u{0}", "big": .int(1 << 60), "near": .int(1_152_921_504_606_846_990),
        "half": 0.5,
    ]

    static let predicates = [
        "n = 1", "1 = n", "n = '1'", "n < 2", "n >= 1", "2 > n", "n > -10", "n = true", "s = 'x'", "s = 'é'",
        "s = 'e\u{301}'", "s IN ('x', 'y', 'z')", "n IN (1, 5)", "n IN (1, 'x', 0.1)", "o.k = 2", "o.k >= 2", "o.k = '2'",
        "n = 1 AND s = 'x'", "n = 1 OR s = 'X'", "n = 1 OR s LIKE 'X%'", "NOT n = 1", "n != 1", "s IS NULL",
        "o.k IS MISSING", "n = :one", "s = :x", "n < :two AND o.k = 2", "s = '[1]'", "s = :nul",
        // Past 2^53, where a stored double's shortest decimal is not its value.
        "n = :big", "n > :near", "n < :near", "n >= 9007199254740992", "n = 9007199254740993", "n > 9007199254740992.0",
        "n = 9223372036854775807", "n > 1e299", "n < 1e300",
        "n = 0.1", "n < 0.1", "n <= 0.1", "n > :half", "`we\"ird` = 1", "`back\\slash` = 2", "`0` = 3", "a.`0` = 4",
        "list.`0` = 5", "n > 0 AND (s = 'x' OR s = 'y')", "t = :nul", "n = 5 AND t IS NOT NULL",
        "s = 'K'", "s IN ('K', 'x')", "Kind = 1", "q = 'a;b'", "`pre\u{301}nom` = 2", "Kind = 1 OR n = 5",
    ]

    @Test(arguments: Engine.allCases)
    func aPreFilterNeverDropsAMatch(engine: Engine) async throws {
        try await engine.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS (:docs)", arguments: ["docs": .array(Self.documents)])
            // Every document as the engine stores it, read with no WHERE, so no filter.
            let stored = try await store.execute("SELECT * FROM c ORDER BY _id").items
            #expect(stored.count == Self.documents.count)
            for predicate in Self.predicates {
                let statement = try Parser.parseStatement("SELECT * FROM c WHERE \(predicate)")
                guard case .select(let select) = statement else {
                    Issue.record("not a SELECT: \(predicate)")
                    continue
                }
                var expected: [Value] = []
                for document in stored
                where try Evaluator.matches(select.whereClause, document: document, arguments: Self.arguments) {
                    expected.append(document["_id"]!)
                }
                let query = "SELECT _id FROM c WHERE \(predicate) ORDER BY _id"
                let read = try await store.execute(query, arguments: Self.arguments).items.compactMap { $0["_id"] }
                #expect(read == expected, "\(engine), read: \(predicate)")
                // Inside a read-write transaction: the reads ahead of a hub's writes. An
                // UPDATE marks what it matches, and a second filtered read finds those it
                // wrote, which its own pre-filter did not read.
                try await store.transaction(hint: "pre-filter") { tx in
                    let inside = try await tx.execute(query, arguments: Self.arguments).items.compactMap { $0["_id"] }
                    #expect(inside == expected, "\(engine), in a transaction: \(predicate)")
                    _ = try await tx.execute("UPDATE c SET hit = 77 WHERE \(predicate)", arguments: Self.arguments)
                    let marked = try await tx.execute("SELECT _id FROM c WHERE hit = 77 ORDER BY _id").items.compactMap { $0["_id"] }
                    #expect(marked == expected, "\(engine), updated: \(predicate)")
                    return .rollback
                }
            }
        }
    }

    /// Values where SQL and DQL could part, for `randomPredicatesNeverDropAMatch`: numbers
    /// about 2^53 and past it, strings equal in DQL to others, and other types.
    static let numbers: [Value] = [
        0, 1, -1, 1.0, 0.5, -0.0, 0.1, .int(9_007_199_254_740_991), .int(9_007_199_254_740_992), .int(9_007_199_254_740_993),
        .double(0x1p53), .double(0x1p60), .int(1_152_921_504_606_846_990), .int(Int64.max), .int(Int64.min), 1e300,
    ]
    static let strings: [Value] = ["K", "\u{212A}", "a", "A", "é", "e\u{301}", ";", "\u{037E}", "x\u{0}y", "", "1"]
    static let others: [Value] = [true, false, .null, [1], ["k": 1]]
    /// Keys, some equal in DQL to others (`K` and KELVIN SIGN, composed and decomposed é).
    static let keys = ["n", "s", "K", "\u{212A}", "é", "e\u{301}", "o"]

    /// Random documents of tricky values and random predicates over them, each read
    /// with its pre-filter on the engine and judged by DQL's evaluator over every
    /// document: the answers must be equal. `SHOAL_PREFILTER_SEED` replays a seed.
    @Test(arguments: Engine.allCases)
    func randomPredicatesNeverDropAMatch(engine: Engine) async throws {
        let seed = ProcessInfo.processInfo.environment["SHOAL_PREFILTER_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 0...UInt64.max)
        var random = SplitMix(state: seed)
        func value() -> Value {
            let roll = Int.random(in: 0..<20, using: &random)
            return (roll < 10 ? Self.numbers : roll < 17 ? Self.strings : Self.others).randomElement(using: &random)!
        }
        var documents: [Value] = []
        for i in 0..<40 {
            var object: [String: Value] = ["_id": .string("d\(i)")]
            for key in Self.keys where Bool.random(using: &random) {
                object[key] = key == "o" ? .object([Self.keys.randomElement(using: &random)!: value()]) : value()
            }
            documents.append(.object(object))
        }
        let paths = ["n", "n", "n", "s", "s", "`K`", "`\u{212A}`", "`é`", "`e\u{301}`", "o.n", "o.`K`", "o.`é`", "missing"]
        var arguments: [String: Value] = [:]
        func argument() -> String {
            let name = "v\(arguments.count)"
            arguments[name] = value()
            return ":" + name
        }
        func predicate(_ depth: Int) -> String {
            let path = paths.randomElement(using: &random)!
            switch Int.random(in: 0..<(depth > 0 ? 7 : 4), using: &random) {
            case 0: return "\(path) IN (\(argument()), \(argument()))"
            case 1: return "\(argument()) \(["=", "<", ">="].randomElement(using: &random)!) \(path)"
            case 2, 3: return "\(path) \(["=", "=", "<", "<=", ">", ">=", "!="].randomElement(using: &random)!) \(argument())"
            case 4: return "(\(predicate(depth - 1)) AND \(predicate(depth - 1)))"
            case 5: return "(\(predicate(depth - 1)) OR \(predicate(depth - 1)))"
            default: return "NOT (\(predicate(depth - 1)))"
            }
        }
        let predicates = (0..<600).map { _ in predicate(3) }
        let (inserted, bound) = (documents, arguments)
        try await engine.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS (:docs)", arguments: ["docs": .array(inserted)])
            let stored = try await store.execute("SELECT * FROM c ORDER BY _id").items
            for predicate in predicates {
                guard case .select(let select) = try Parser.parseStatement("SELECT * FROM c WHERE \(predicate)") else { continue }
                var expected: [Value] = []
                for document in stored where try Evaluator.matches(select.whereClause, document: document, arguments: bound) {
                    expected.append(document["_id"]!)
                }
                let read = try await store.execute("SELECT _id FROM c WHERE \(predicate) ORDER BY _id", arguments: bound)
                    .items.compactMap { $0["_id"] }
                #expect(read == expected, "\(engine), seed \(seed) (SHOAL_PREFILTER_SEED): \(predicate)")
            }
        }
    }
}

import ShoalCRDT
import ShoalQuery
import Testing

private let document: Value = [
    "_id": "b1", "title": "Dune", "year": 1965, "rating": 4.5, "done": true, "tags": ["sf", "classic"],
    "author": ["name": "Herbert", "born": 1920, "address": ["city": "Tacoma"]], "nothing": nil,
]
private let arguments: [String: Value] = [
    "year": 1965, "title": "Dune", "obj": ["k": 1], "years": [1965, 2000], "empty": [], "key": "name", "i": 1,
    "prefix": "Du%",
]

/// Parses `text` as an expression (the WHERE clause of a SELECT).
private func expression(_ text: String) throws -> Expression {
    guard case .select(let s) = try Parser.parseStatement("SELECT * FROM c WHERE " + text), let e = s.whereClause else {
        throw QueryError("not a WHERE clause")
    }
    return e
}

/// Evaluates `text` against the sample document and arguments.
private func eval(_ text: String) throws -> Value? {
    try Evaluator.evaluate(expression(text), document: document, arguments: arguments)
}

@Suite struct EvaluatorTests {
    @Test(arguments: [
        ("title", Value?.some("Dune")), ("_id", "b1"), ("author.name", "Herbert"), ("author.address.city", "Tacoma"),
        ("nothing", .null), ("missing", nil), ("author.missing", nil), ("title.length", nil), ("tags.sf", nil),
        ("author.address", Value.object(["city": "Tacoma"])),
    ])
    func paths(text: String, expected: Value?) throws {
        #expect(try eval(text) == expected)
    }

    @Test func pathsOnANonObjectDocumentAreMissing() throws {
        #expect(try Evaluator.evaluate(.path(["a"]), document: [1, 2], arguments: [:]) == nil)
    }

    @Test func parametersAndLiterals() throws {
        #expect(try eval(":year") == 1965)
        #expect(try eval(":obj") == ["k": 1])
        #expect(try eval("'x'") == "x")
        #expect(try eval("NULL") == .null)
        #expect(try eval("-2.5") == -2.5)
        let error = try #require(throws: QueryError.self) { try eval(":nope = 1") }
        #expect(error.message == "missing argument :nope")
        #expect(error.position == nil)
    }

    @Test func objectAndArrayLiterals() throws {
        #expect(
            try eval("{t: title, m: missing, n: nothing, nested: {y: year + 1}}") == [
                "t": "Dune", "n": nil, "nested": ["y": 1966],
            ])
        #expect(try eval("[title, missing, 1, [nothing]]") == ["Dune", nil, 1, [nil]])
    }

    @Test(arguments: [
        ("1 + 2", Value?.some(3)), ("7 - 10", -3), ("6 * 7", 42), ("7 / 2", 3.5), ("8 / 2", 4), ("-8 / 2", -4),
        ("7 % 3", 1), ("-7 % 3", -1), ("1 + 0.5", 1.5), ("0.5 * 4", 2.0), ("7.5 % 2", 1.5), ("year - 65", 1900),
        ("rating * 2", 9.0), ("1 / 0", .null), ("1.5 / 0", .null), ("5 % 0", .null), ("1.0 % 0", .null),
        ("'ab' + 'cd'", "abcd"), ("title + '!'", "Dune!"), ("'a' + 1", .null), ("1 + true", .null), ("1 - 'a'", .null),
        ("'a' * 2", .null), ("[1] + [2]", .null), ("nothing + 1", .null), ("missing + 1", nil), ("1 * missing", nil),
        ("-year", -1965), ("-rating", -4.5), ("-title", .null), ("-missing", nil),
        ("9223372036854775807 % -1", 0), ("1e308 * 10", .null),
    ])
    func arithmetic(text: String, expected: Value?) throws {
        #expect(try eval(text) == expected)
    }

    @Test(arguments: [
        "9223372036854775807 + 1", "-9223372036854775807 - 2", "4611686018427387904 * 2",
        "(-9223372036854775807 - 1) / -1",
        "-(-9223372036854775807 - 1)",
    ])
    func integerOverflowIsAnError(text: String) throws {
        let error = try #require(throws: QueryError.self) { try eval(text) }
        #expect(error.message.contains("integer overflow"))
        #expect(error.message.contains("does not fit in 64 bits"))
    }

    @Test func intDivisionStaysIntOnlyWhenExact() throws {
        #expect(try eval("9 / 3") == .int(3))
        #expect(try eval("10 / 4") == .double(2.5))
        #expect(try eval("9.0 / 3") == .double(3))
    }

    @Test(arguments: [
        ("year = 1965", true), ("year = 1965.0", true), ("1.0 = 1", true), ("year == :year", true),
        ("title = :title", true),
        ("year != 1965", false), ("year <> 1964", true), ("title = 'dune'", false), ("nothing = NULL", true),
        ("nothing != NULL", false), ("missing = NULL", false), ("missing != NULL", false), ("missing != 1", false),
        ("NULL = missing", false), ("tags = ['sf', 'classic']", true), ("tags = ['classic', 'sf']", false),
        ("author.address = {city: 'Tacoma'}", true), ("{a: 1, b: [2.0]} = {b: [2], a: 1.0}", true),
        ("{a: 1} = {a: 1, b: 2}", false), ("1 = '1'", false), ("TRUE = 1", false), ("done = TRUE", true),
        ("year < 2000", true), ("year <= 1965", true), ("year > 1965.5", false), ("year >= 1964.9", true),
        ("rating > 4", true), ("'abc' < 'abd'", true), ("'b' > 'abc'", true), ("title <= 'Dune'", true),
        ("1 < 'a'", false), ("'a' < 1", false), ("NULL < 1", false), ("TRUE > FALSE", false), ("[1] < [2]", false),
        ("missing < 1", false), ("missing >= 1", false), ("9007199254740993 > 9007199254740992.0", true),
        ("9007199254740993 = 9007199254740992.0", false), ("9223372036854775807 < 9223372036854775808.0", true),
        ("-9223372036854775807 > -1e19", true), ("2 > 1.5", true), ("-2 < -1.5", true),
    ])
    func comparisons(text: String, expected: Bool) throws {
        #expect(try eval(text) == .bool(expected))
    }

    @Test(arguments: [
        ("TRUE AND TRUE", true), ("TRUE AND FALSE", false), ("TRUE AND 1", false), ("TRUE AND missing", false),
        ("FALSE OR TRUE", true), ("FALSE OR NULL", false), ("missing OR done", true), ("NOT TRUE", false),
        ("NOT FALSE", true), ("NOT missing", true), ("NOT NULL", true), ("NOT 'x'", true), ("NOT (year = 1964)", true),
        ("NOT (missing = 1)", true), ("year = 1965 AND title = 'Dune' AND NOT done", false),
        ("year = 1 OR year = 1965 OR year = 2", true),
    ])
    func logic(text: String, expected: Bool) throws {
        #expect(try eval(text) == .bool(expected))
    }

    @Test func andAndOrShortCircuit() throws {
        // The right side would throw (a missing argument) if it were evaluated.
        #expect(try eval("FALSE AND :undefined") == false)
        #expect(try eval("TRUE OR :undefined") == true)
        #expect(throws: QueryError.self) { try eval("TRUE AND :undefined") }
    }

    @Test func deserializeJSON() throws {
        #expect(try eval("deserialize_json('{\"a\": [1, 2.5, null]}')") == ["a": [1, 2.5, nil]])
        #expect(try eval("deserialize_json('\"x\"') = 'x'") == true)
        #expect(try eval("deserialize_json(missing)") == nil)
        #expect(try eval("deserialize_json(nothing)") == .null)
        let invalid = try #require(throws: QueryError.self) { try eval("deserialize_json('{oops}')") }
        #expect(invalid.message.hasPrefix("deserialize_json: invalid JSON at byte 1"))
        let wrongType = try #require(throws: QueryError.self) { try eval("deserialize_json(year)") }
        #expect(wrongType.message == "deserialize_json expects a string, got a number")
    }

    @Test func unknownFunctionsAndWrongArityAreErrors() throws {
        let unknown = try #require(throws: QueryError.self) {
            try Evaluator.evaluate(.function("frobnicate", [.literal(1)]), document: document, arguments: [:])
        }
        #expect(unknown.message == "unknown function 'frobnicate'")
        let arity = try #require(throws: QueryError.self) {
            try Evaluator.evaluate(.function("deserialize_json", []), document: document, arguments: [:])
        }
        #expect(arity.message.contains("deserialize_json takes 1 argument"))
    }

    @Test(arguments: [
        (String?.none, true), ("year = 1965", true), ("year = 1", false), ("title", false), ("done", true),
        ("missing", false), ("1", false), ("year = :year AND author.born < 1930", true),
    ])
    func matches(predicate: String?, expected: Bool) throws {
        let e = try predicate.map(expression)
        #expect(try Evaluator.matches(e, document: document, arguments: arguments) == expected)
    }

    @Test(arguments: [
        ("_id = 'b1'", Value?.some("b1")), ("'b1' = _id", "b1"), ("_id == 42", 42), ("_id = -3", -3),
        ("_id = :title", "Dune"), (":obj = _id", Value.object(["k": 1])), ("_id = :undefined", nil),
        ("_id != 'b1'", nil),
        ("_id = 'b1' AND year = 1", nil), ("_id = title", nil), ("_id.x = 1", nil), ("id = 1", nil),
        ("_id = 1 + 1", nil),
        ("_id = {a: 1}", nil), ("_id = [1]", nil), ("_id = _id", nil),
    ])
    func constantIDEquality(predicate: String, expected: Value?) throws {
        #expect(Evaluator.constantIDEquality(try expression(predicate), arguments: arguments) == expected)
    }

    @Test func constantIDEqualityWithoutAPredicate() {
        #expect(Evaluator.constantIDEquality(nil, arguments: [:]) == nil)
        #expect(
            Evaluator.constantIDEquality(.binary(.equal, .path(["_id"]), .literal(["a": 1])), arguments: [:]) == [
                "a": 1
            ])
    }

    @Test func structuralEqualityTreatsIntsAndDoublesAlike() {
        #expect(Evaluator.equal(.int(1), .double(1)))
        #expect(Evaluator.equal(["a": [1, 2.0]], ["a": [1.0, 2]]))
        #expect(!Evaluator.equal(.int(1), .double(1.5)))
        #expect(!Evaluator.equal(.double(.nan), .double(.nan)))
        #expect(!Evaluator.equal(.string("1"), .int(1)))
        #expect(!Evaluator.equal(["a": 1], ["b": 1]))
    }

    @Test(arguments: [
        ("nothing IS NULL", true), ("missing IS NULL", false), ("title IS NULL", false), ("NULL IS NULL", true),
        ("nothing IS NOT NULL", false), ("missing IS NOT NULL", false), ("title IS NOT NULL", true),
        ("missing IS MISSING", true), ("author.missing IS MISSING", true), ("nothing IS MISSING", false),
        ("title IS MISSING", false), ("title IS NOT MISSING", true), ("nothing IS NOT MISSING", true),
        ("missing IS NOT MISSING", false), ("NOT missing IS MISSING", false), ("tags[5] IS MISSING", true),
        ("missing + 1 IS MISSING", true), ("nothing + 1 IS NULL", true),
    ])
    func isNullAndIsMissing(text: String, expected: Bool) throws {
        #expect(try eval(text) == .bool(expected))
    }

    @Test(arguments: [
        ("year IN (1964, 1965)", true), ("year IN [1965.0]", true), ("1965.0 IN (year)", true),
        ("year IN (1, 2)", false), ("year NOT IN (1, 2)", true), ("year NOT IN (1965)", false),
        ("year IN ('1965')", false), ("title IN ('dune', 'DUNE')", false), ("title IN ('x', title)", true),
        ("missing IN (1)", false), ("missing NOT IN (1)", false), ("missing IN (NULL)", false),
        ("missing NOT IN ()", false), ("nothing IN (NULL)", true), ("nothing IN (missing)", false),
        ("nothing NOT IN (missing)", true), ("NULL IN (1, NULL)", true), ("1 IN ()", false), ("1 NOT IN ()", true),
        ("tags IN [['sf', 'classic']]", true), ("tags IN ['sf', 'classic']", false),
        ("author.address IN [{city: 'Tacoma'}]", true), ("{a: [1.0]} IN ({a: [1]})", true),
        ("year IN :years", true), ("2000 IN :years", true), ("2001 IN :years", false), ("year NOT IN :years", false),
        ("year IN :empty", false), ("year NOT IN :empty", true), ("year IN (:years)", false),
        (":years IN (:years)", true),
    ])
    func membership(text: String, expected: Bool) throws {
        #expect(try eval(text) == .bool(expected))
    }

    @Test(arguments: ["year IN :year", "year NOT IN :title", "year IN :obj", "missing IN :year"])
    func inNeedsAList(text: String) throws {
        let error = try #require(throws: QueryError.self) { try eval(text) }
        #expect(error.message.hasPrefix("IN needs a list"))
        #expect(error.message.contains("pass an array"))
    }

    @Test func inNeedsAListNamesTheParameterAndType() throws {
        let error = try #require(throws: QueryError.self) { try eval("1 IN :title") }
        #expect(error.message == "IN needs a list, but :title is a string: pass an array")
        let built = Expression.binary(.in, .literal(1), .path(["title"]))
        let other = try #require(throws: QueryError.self) {
            try Evaluator.evaluate(built, document: document, arguments: [:])
        }
        #expect(other.message == "IN needs a list, but the right side is a string: pass an array")
        #expect(throws: QueryError.self) { try eval("1 IN :undefined") }
    }

    @Test(arguments: [
        ("title LIKE 'Du%'", true), ("title LIKE 'du%'", false), ("title LIKE '_une'", true),
        ("title LIKE '%n%'", true),
        ("title LIKE 'D_n'", false), ("title LIKE 'Dune'", true), ("title LIKE '%'", true),
        ("title NOT LIKE 'X%'", true),
        ("title NOT LIKE '%e'", false), ("title LIKE :prefix", true), ("title LIKE :title", true),
        ("author.name LIKE '%ber%'", true), ("title LIKE 'Du' + '%'", true), ("year LIKE '19%'", false),
        ("year NOT LIKE '19%'", false), ("missing LIKE '%'", false), ("missing NOT LIKE 'x'", false),
        ("nothing LIKE '%'", false), ("tags LIKE '%'", false), ("title LIKE :year", false),
        ("title NOT LIKE :year", false),
    ])
    func like(text: String, expected: Bool) throws {
        #expect(try eval(text) == .bool(expected))
    }

    @Test(arguments: [
        ("", "", true), ("", "%", true), ("", "%%", true), ("", "_", false), ("a", "", false), ("abc", "abc", true),
        ("abc", "ab", false), ("ab", "abc", false), ("abc", "a%", true), ("abc", "%c", true), ("abc", "%b%", true),
        ("abc", "%d%", false), ("abc", "a_c", true), ("abc", "a__c", false), ("abc", "___", true), ("abc", "__", false),
        ("abc", "%%%", true), ("abc", "ABC", false), ("ABC", "a%", false), ("100%", "100\\%", true),
        ("1000", "100\\%", false), ("a_b", "a\\_b", true), ("axb", "a\\_b", false), ("a%b", "a\\%b", true),
        ("a\\b", "a\\\\b", true), ("ab\\", "ab\\", true), ("\\", "\\", true), ("xy", "%\\y", true),
        ("a.b", "a.b", true), ("axb", "a.b", false), ("a*b", "a*b", true), ("aab", "a*b", false),
        ("[ab]", "[ab]", true),
        ("a", "[ab]", false), ("mississippi", "mis%is%pi", true), ("mississippi", "%ppi_", false),
        ("mississippi", "%s_s%", true), ("mississippi", "m%ss%ss%p", false), ("abcabc", "%abc", true),
        ("abcab", "%abc", false), ("aaa", "a%a%a", true), ("aaa", "a%a%a%a", false), ("é", "_", true),
        ("e\u{301}", "é", true), ("👍🏽x", "_x", true), ("👍🏽x", "__x", false), ("line\nbreak", "line_break", true),
    ])
    func matchLike(text: String, pattern: String, expected: Bool) {
        #expect(Evaluator.matchLike(text, pattern: pattern) == expected)
    }

    @Test func likeNeverBacktracksExponentially() {
        let text = String(repeating: "a", count: 20_000)
        let clock = ContinuousClock()
        let elapsed = clock.measure {
            // A backtracking matcher tries every way of splitting the text among the %s.
            #expect(!Evaluator.matchLike(text, pattern: String(repeating: "%a", count: 500) + "b"))
            #expect(!Evaluator.matchLike(text, pattern: String(repeating: "%a", count: 500) + "%b"))
            #expect(Evaluator.matchLike(text + "b", pattern: String(repeating: "%a", count: 500) + "%b"))
            #expect(!Evaluator.matchLike(text, pattern: String(repeating: "%_", count: 500) + "%ab%"))
            // The worst case for this matcher is text × pattern, still far from exponential.
            #expect(!Evaluator.matchLike(text, pattern: "%" + String(repeating: "a", count: 50) + "b"))
        }
        #expect(elapsed < .seconds(5), "took \(elapsed)")
    }

    @Test func likeThroughAQueryStaysFast() throws {
        let long: Value = ["s": .string(String(repeating: "ab", count: 5_000))]
        let e = try expression("s LIKE :p")
        let clock = ContinuousClock()
        let elapsed = try clock.measure {
            let result = try Evaluator.evaluate(
                e, document: long, arguments: ["p": .string(String(repeating: "%a", count: 300) + "%c")])
            #expect(result == false)
        }
        #expect(elapsed < .seconds(5), "took \(elapsed)")
    }

    @Test(arguments: [
        ("tags[0]", Value?.some("sf")), ("tags[1]", "classic"), ("tags[-1]", "classic"), ("tags[-2]", "sf"),
        ("tags[2]", nil), ("tags[-3]", nil), ("tags[9223372036854775807]", nil), ("tags[-9223372036854775807]", nil),
        ("tags['0']", nil), ("tags[0.0]", "sf"), ("tags[0.5]", nil), ("tags[NULL]", nil), ("tags[TRUE]", nil),
        ("author['name']", "Herbert"), ("author['address']['city']", "Tacoma"), ("author.address['city']", "Tacoma"),
        ("author['address'].city", "Tacoma"), ("author['missing']", nil), ("author[0]", nil), ("title[0]", nil),
        ("year['a']", nil), ("missing[0]", nil), ("missing['a']", nil), ("nothing['a']", nil), ("author[missing]", nil),
        ("author[:key]", "Herbert"), ("tags[:i]", "classic"), ("tags[year - 1965]", "sf"),
        ("author['na' + 'me']", "Herbert"), ("[10, 20, 30][1]", 20), ("{a: 1}['a']", 1), (":years[-1]", 2000),
        (":obj['k']", 1), ("deserialize_json('[1, [2, 3]]')[1][0]", 2), ("tags[0] = 'sf'", true),
        ("author['address'] = {city: 'Tacoma'}", true),
    ])
    func index(text: String, expected: Value?) throws {
        #expect(try eval(text) == expected)
    }

    @Test func indexOnBuiltExpressions() throws {
        let e = Expression.index(.path(["author"]), .literal("born"))
        #expect(try Evaluator.evaluate(e, document: document, arguments: [:]) == 1920)
        let nested = Expression.index(.literal([["a": [1, 2]]]), .literal(0))
        #expect(try Evaluator.evaluate(.index(nested, .literal("a")), document: document, arguments: [:]) == [1, 2])
        #expect(try Evaluator.evaluate(.index(.literal(.null), .literal(0)), document: document, arguments: [:]) == nil)
    }

    @Test func countAllIsOnlyAProjection() throws {
        let error = try #require(throws: QueryError.self) {
            try Evaluator.evaluate(.countAll, document: document, arguments: [:])
        }
        #expect(error.message.hasPrefix("COUNT(*) is only allowed as a projection"))
        #expect(error.position == nil)
    }

    @Test func constantIDEqualityIgnoresTheNewOperators() throws {
        for predicate in ["_id IN ('b1')", "_id LIKE 'b1'", "_id IS NOT NULL", "_id[0] = 'b1'"] {
            #expect(Evaluator.constantIDEquality(try expression(predicate), arguments: arguments) == nil)
        }
    }

    @Test func deepestAcceptedExpressionEvaluates() throws {
        let chain = Array(repeating: "year", count: Parser.maximumHeight / 2).joined(separator: " + ")
        #expect(try eval("\(chain) > 0") == true)
        let nested =
            String(repeating: "[", count: Parser.maximumNesting - 1) + "1"
            + String(repeating: "]", count: Parser.maximumNesting - 1)
        let expected = (1..<Parser.maximumNesting).reduce(Value.int(1)) { inner, _ in .array([inner]) }
        #expect(try eval(nested) == expected)
    }
}

/// The `_id` comparisons a store checks on a key before reading a body.
@Test(arguments: [
    ("_id > :after", "_id > :after"),
    ("color = 'red' AND _id > 'k'", "_id > 'k'"),
    ("_id >= 3 AND (a = 1 AND 'z' > _id)", "_id >= 3 AND 'z' > _id"),
    ("color = 'red' OR _id > 'k'", nil),
    ("NOT (_id > 'k')", nil),
    ("_id > other", nil),
    ("_id.x > 'k'", nil),
] as [(String, String?)])
func idComparisonsAreTheTermsOfTheTopLevelANDThatReadOnlyTheID(predicate: String, expected: String?) throws {
    #expect(try Evaluator.idComparisons(expression(predicate)) == expected.map(expression))
}

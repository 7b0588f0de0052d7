import ShoalCRDT
import ShoalQuery
import Testing

// Small builders so the expected ASTs below stay readable.
private func path(_ components: String...) -> Expression { .path(components) }
private func lit(_ value: Value) -> Expression { .literal(value) }
private func param(_ name: String) -> Expression { .parameter(name) }
private func bin(_ op: BinaryOperator, _ l: Expression, _ r: Expression) -> Expression { .binary(op, l, r) }
private func not(_ e: Expression) -> Expression { .unary(.not, e) }
private func pos(_ offset: Int, _ line: Int, _ column: Int) -> SourcePosition {
    SourcePosition(offset: offset, line: line, column: column)
}

private func select(
    _ collection: String, _ projection: [Projection] = [], where whereClause: Expression? = nil,
    orderBy: [OrderTerm] = [], limit: Expression? = nil, offset: Expression? = nil
) -> Statement {
    .select(
        SelectStatement(
            collection: collection, projection: projection, whereClause: whereClause, orderBy: orderBy, limit: limit,
            offset: offset))
}

private func index(_ base: Expression, _ key: Expression) -> Expression { .index(base, key) }
private func unary(_ op: UnaryOperator, _ e: Expression) -> Expression { .unary(op, e) }
private func field(_ path: [String], _ position: SourcePosition) -> FieldPath {
    FieldPath(path: path, position: position)
}
private func counter(_ path: [String], _ kind: CounterOperation.Kind, _ position: SourcePosition) -> CounterOperation {
    CounterOperation(path: path, kind: kind, position: position)
}

/// The WHERE clause of `SELECT * FROM c WHERE <text>`.
private func condition(_ text: String) throws -> Expression? {
    guard case .select(let s) = try Parser.parseStatement("SELECT * FROM c WHERE " + text) else { return nil }
    return s.whereClause
}

@Suite struct ParserTests {
    static let validQueries: [(String, Statement)] = [
        ("SELECT * FROM books", select("books")),
        ("select * from books;", select("books")),
        (
            "SELECT title, author.name AS writer, _id FROM books",
            select(
                "books",
                [
                    Projection(expression: path("title"), name: "title"),
                    Projection(expression: path("author", "name"), name: "writer"),
                    Projection(expression: path("_id"), name: "_id"),
                ])
        ),
        (
            "SELECT 1 + 2, a, 'x', :p AS `the p` FROM c",
            select(
                "c",
                [
                    Projection(expression: bin(.add, lit(1), lit(2)), name: "$1"),
                    Projection(expression: path("a"), name: "a"),
                    Projection(expression: lit("x"), name: "$3"),
                    Projection(expression: param("p"), name: "the p"),
                ])
        ),
        (
            "SELECT * FROM c WHERE a = 1 AND b != 'x' ORDER BY a DESC, b ASC, c LIMIT 10 OFFSET :skip",
            select(
                "c", where: bin(.and, bin(.equal, path("a"), lit(1)), bin(.notEqual, path("b"), lit("x"))),
                orderBy: [
                    OrderTerm(expression: path("a"), descending: true),
                    OrderTerm(expression: path("b"), descending: false),
                    OrderTerm(expression: path("c"), descending: false),
                ],
                limit: lit(10), offset: param("skip"))
        ),
        ("SELECT * FROM c OFFSET 5", select("c", offset: lit(5))),
        (
            "SELECT * FROM `odd coll` WHERE `odd field`.x <> 2",
            select("odd coll", where: bin(.notEqual, path("odd field", "x"), lit(2)))
        ),
        ("SELECT * FROM c WHERE _id == :id", select("c", where: bin(.equal, path("_id"), param("id")))),
        (
            "SELECT * FROM c WHERE a.limit.Order = TRUE",
            select("c", where: bin(.equal, path("a", "limit", "Order"), lit(true)))
        ),
        (
            "SELECT id, values, desc FROM documents ORDER BY desc DESC",
            select(
                "documents",
                [
                    Projection(expression: path("id"), name: "id"),
                    Projection(expression: path("values"), name: "values"),
                    Projection(expression: path("desc"), name: "desc"),
                ], orderBy: [OrderTerm(expression: path("desc"), descending: true)])
        ),
        (
            "SELECT * FROM c WHERE NOT a = 1 OR b < -2.5 AND c >= -3",
            select(
                "c",
                where: bin(
                    .or, not(bin(.equal, path("a"), lit(1))),
                    bin(.and, bin(.less, path("b"), lit(-2.5)), bin(.greaterOrEqual, path("c"), lit(-3)))))
        ),
        (
            "SELECT * FROM c WHERE a + b * c - d / e % f > 0",
            select(
                "c",
                where: bin(
                    .greater,
                    bin(
                        .subtract, bin(.add, path("a"), bin(.multiply, path("b"), path("c"))),
                        bin(.remainder, bin(.divide, path("d"), path("e")), path("f"))),
                    lit(0)))
        ),
        (
            "SELECT * FROM c WHERE (a + b) * c <= -x",
            select(
                "c",
                where: bin(
                    .lessOrEqual, bin(.multiply, bin(.add, path("a"), path("b")), path("c")), .unary(.negate, path("x"))
                ))
        ),
        (
            "SELECT * FROM c WHERE - - 5 = 5 AND -(a) < 0 AND NOT NOT b",
            select(
                "c",
                where: bin(
                    .and,
                    bin(.and, bin(.equal, lit(5), lit(5)), bin(.less, .unary(.negate, path("a")), lit(0))),
                    not(not(path("b")))))
        ),
        (
            "SELECT * FROM c WHERE Deserialize_JSON(s) = {\"k\": [1, null, :p], k2: {}, 'k3': []}",
            select(
                "c",
                where: bin(
                    .equal, .function("deserialize_json", [path("s")]),
                    .object([
                        ObjectEntry(key: "k", value: .array([lit(1), lit(nil), param("p")])),
                        ObjectEntry(key: "k2", value: .object([])),
                        ObjectEntry(key: "k3", value: .array([])),
                    ])))
        ),
        (
            "SELECT * FROM c WHERE a = {done:true, n:null, v:x.y, select: :p, `odd key`: 1}",
            select(
                "c",
                where: bin(
                    .equal, path("a"),
                    .object([
                        ObjectEntry(key: "done", value: lit(true)),
                        ObjectEntry(key: "n", value: lit(nil)),
                        ObjectEntry(key: "v", value: path("x", "y")),
                        ObjectEntry(key: "select", value: param("p")),
                        ObjectEntry(key: "odd key", value: lit(1)),
                    ])))
        ),
        (
            "SELECT * FROM c WHERE s = 'it''s' OR s = \"line\\nbreak\" -- a comment",
            select(
                "c", where: bin(.or, bin(.equal, path("s"), lit("it's")), bin(.equal, path("s"), lit("line\nbreak"))))
        ),
        (
            "INSERT INTO c DOCUMENTS ({_id: 1, 'name': 'x'})",
            .insert(
                InsertStatement(
                    collection: "c",
                    documents: [
                        .object([ObjectEntry(key: "_id", value: lit(1)), ObjectEntry(key: "name", value: lit("x"))])
                    ]))
        ),
        (
            "insert into c values (:doc), ({a: [1, 2.5, -3]}) on id conflict do update_local_diff",
            .insert(
                InsertStatement(
                    collection: "c",
                    documents: [
                        param("doc"), .object([ObjectEntry(key: "a", value: .array([lit(1), lit(2.5), lit(-3)]))]),
                    ],
                    conflict: .doUpdateLocalDiff))
        ),
        (
            "UPDATE c SET a = 1, b.c.d = a + 1, `x y` = 'z' WHERE _id = 'k'",
            .update(
                UpdateStatement(
                    collection: "c",
                    assignments: [
                        Assignment(path: ["a"], value: lit(1), position: pos(13, 1, 14)),
                        Assignment(
                            path: ["b", "c", "d"], value: bin(.add, path("a"), lit(1)), position: pos(20, 1, 21)),
                        Assignment(path: ["x y"], value: lit("z"), position: pos(35, 1, 36)),
                    ], whereClause: bin(.equal, path("_id"), lit("k"))))
        ),
        (
            "UPDATE docs\nSET id = :v,\n    desc.limit = null",
            .update(
                UpdateStatement(
                    collection: "docs",
                    assignments: [
                        Assignment(path: ["id"], value: param("v"), position: pos(16, 2, 5)),
                        Assignment(path: ["desc", "limit"], value: lit(nil), position: pos(29, 3, 5)),
                    ]))
        ),
        // DELETE and EVICT.
        ("DELETE FROM c", .delete(DeleteStatement(collection: "c"))),
        (
            "delete from `odd coll` where a = 1;",
            .delete(DeleteStatement(collection: "odd coll", whereClause: bin(.equal, path("a"), lit(1))))
        ),
        (
            "EVICT FROM c WHERE _id IN (:a, :b)",
            .evict(
                DeleteStatement(collection: "c", whereClause: bin(.in, path("_id"), .array([param("a"), param("b")]))))
        ),
        (
            "EVICT FROM COLLECTION c (n COUNTER) WHERE n > 1",
            .evict(
                DeleteStatement(
                    collection: "c", whereClause: bin(.greater, path("n"), lit(1)), declaredTypes: ["n": .counter]))
        ),
        ("DELETE FROM `collection`", .delete(DeleteStatement(collection: "collection"))),
        // UPDATE with every clause.
        (
            "UPDATE c APPLY n INCREMENT BY 1, m PN_INCREMENT BY -2, r RESTART, s.t RESTART WITH 5 SET a = 1 "
                + "UNSET b, c.d WHERE x = 1 ORDER BY y DESC LIMIT 10 OFFSET 2",
            .update(
                UpdateStatement(
                    collection: "c", assignments: [Assignment(path: ["a"], value: lit(1), position: pos(89, 1, 90))],
                    whereClause: bin(.equal, path("x"), lit(1)),
                    counterOperations: [
                        counter(["n"], .increment(lit(1)), pos(15, 1, 16)),
                        counter(["m"], .increment(lit(-2)), pos(33, 1, 34)),
                        counter(["r"], .restart(nil), pos(55, 1, 56)),
                        counter(["s", "t"], .restart(lit(5)), pos(66, 1, 67)),
                    ],
                    unsets: [field(["b"], pos(101, 1, 102)), field(["c", "d"], pos(104, 1, 105))],
                    orderBy: [OrderTerm(expression: path("y"), descending: true)], limit: lit(10), offset: lit(2)))
        ),
        (
            "update c unset a.b",
            .update(UpdateStatement(collection: "c", assignments: [], unsets: [field(["a", "b"], pos(15, 1, 16))]))
        ),
        (
            "UPDATE c\nAPPLY hits increment by :k\nWHERE _id = :id LIMIT 1",
            .update(
                UpdateStatement(
                    collection: "c", assignments: [], whereClause: bin(.equal, path("_id"), param("id")),
                    counterOperations: [counter(["hits"], .increment(param("k")), pos(15, 2, 7))], limit: lit(1)))
        ),
        (
            "UPDATE COLLECTION c (n COUNTER, f MAP) APPLY n RESTART WITH 0 SET f.x = 1, g = 2 UNSET h ORDER BY g",
            .update(
                UpdateStatement(
                    collection: "c",
                    assignments: [
                        Assignment(path: ["f", "x"], value: lit(1), position: pos(66, 1, 67)),
                        Assignment(path: ["g"], value: lit(2), position: pos(75, 1, 76)),
                    ], counterOperations: [counter(["n"], .restart(lit(0)), pos(45, 1, 46))],
                    unsets: [field(["h"], pos(87, 1, 88))],
                    orderBy: [OrderTerm(expression: path("g"), descending: false)],
                    declaredTypes: ["n": .counter, "f": .map]))
        ),
        (
            "UPDATE c SET a.apply = 1 UNSET a.unset, `apply`",
            .update(
                UpdateStatement(
                    collection: "c",
                    assignments: [Assignment(path: ["a", "apply"], value: lit(1), position: pos(13, 1, 14))],
                    unsets: [field(["a", "unset"], pos(31, 1, 32)), field(["apply"], pos(40, 1, 41))]))
        ),
        // INSERT ... INITIAL and COLLECTION declarations.
        (
            "INSERT INTO c INITIAL DOCUMENTS ({_id: 1})",
            .insert(
                InsertStatement(
                    collection: "c", documents: [.object([ObjectEntry(key: "_id", value: lit(1))])], initial: true))
        ),
        (
            "insert into collection c (f MAP, n Counter, photo ATTACHMENT, r register) initial values (:d), (:e)",
            .insert(
                InsertStatement(
                    collection: "c", documents: [param("d"), param("e")], initial: true,
                    declaredTypes: ["f": .map, "n": .counter, "photo": .attachment, "r": .register]))
        ),
        (
            "INSERT INTO COLLECTION initial (`x y` MAP) DOCUMENTS (:d) ON ID CONFLICT DO NOTHING",
            .insert(
                InsertStatement(
                    collection: "initial", documents: [param("d")], conflict: .doNothing,
                    declaredTypes: ["x y": .map]))
        ),
        (
            "SELECT * FROM COLLECTION c (map MAP, counter COUNTER) WHERE map.counter = counter",
            .select(
                SelectStatement(
                    collection: "c", whereClause: bin(.equal, path("map", "counter"), path("counter")),
                    declaredTypes: ["map": .map, "counter": .counter]))
        ),
        // COUNT(*), brackets and the new unreserved words as names.
        (
            "SELECT COUNT(*) FROM c WHERE a IS NOT NULL",
            select("c", [Projection(expression: .countAll, name: "$1")], where: unary(.isNotNull, path("a")))
        ),
        ("SELECT count(*) AS n FROM c", select("c", [Projection(expression: .countAll, name: "n")])),
        (
            "SELECT a['k'], b[0] AS first, count FROM c",
            select(
                "c",
                [
                    Projection(expression: index(path("a"), lit("k")), name: "$1"),
                    Projection(expression: index(path("b"), lit(0)), name: "first"),
                    Projection(expression: path("count"), name: "count"),
                ])
        ),
        (
            "SELECT missing, map, initial, restart, with, collection FROM c WHERE register.pn_increment IS MISSING",
            select(
                "c",
                ["missing", "map", "initial", "restart", "with", "collection"].map {
                    Projection(expression: path($0), name: $0)
                }, where: unary(.isMissing, path("register", "pn_increment")))
        ),
    ]

    @Test(arguments: validQueries)
    func parsesValidQuery(text: String, expected: Statement) throws {
        #expect(try Parser.parseStatement(text) == expected)
    }

    static let malformedQueries: [(String, Int, Int, String)] = [
        ("SELECT title, author FORM books", 1, 22, "expected FROM after the projection, found 'FORM'"),
        ("", 1, 1, "empty query"),
        ("  -- only a comment\n", 1, 1, "empty query"),
        (
            ";", 1, 1,
            "expected SELECT, INSERT, UPDATE, DELETE, EVICT, ALTER SYSTEM, SHOW, CREATE INDEX or DROP INDEX at the start of a statement, found ';'"
        ),
        ("SELCT * FROM c", 1, 1, "found 'SELCT'; did you mean SELECT?"),
        ("SELECT FROM c", 1, 8, "expected * or a list of expressions after SELECT, found 'FROM'"),
        ("SELECT * FROM", 1, 14, "unexpected end of query: expected a collection name after FROM"),
        ("SELECT * FROM order", 1, 15, "quote it with backticks (`order`)"),
        ("SELECT * FROM c WHRE a = 1", 1, 17, "found 'WHRE'; did you mean WHERE?"),
        ("SELECT * FROM c WHERE", 1, 22, "unexpected end of query: expected an expression"),
        ("SELECT * FROM c WHERE a = 1 b = 2", 1, 29, "after the WHERE clause, found 'b'"),
        ("SELECT * FROM c LIMIT 1 WHERE a = 1", 1, 25, "WHERE must come before LIMIT"),
        ("SELECT * FROM c LIMIT 1 LIMIT 2", 1, 25, "LIMIT can appear only once"),
        ("SELECT * FROM c ORDER a", 1, 23, "expected BY after ORDER, found 'a'"),
        ("SELECT * FROM c WHERE a = 'abc", 1, 27, "unterminated string literal"),
        ("SELECT * FROM c WHERE a < b < c", 1, 29, "comparisons cannot be chained"),
        ("SELECT * FROM c WHERE order = 1", 1, 23, "'order' is a reserved word"),
        ("SELECT * FROM c WHERE foo(a) = 1", 1, 23, "unknown function 'foo'"),
        ("SELECT * FROM c WHERE deserialize_json(a, b) = 1", 1, 23, "takes 1 argument, but 2 were given"),
        ("SELECT * FROM c WHERE (a = 1", 1, 29, "expected ')' to close the '(' at line 1, column 23"),
        ("SELECT a, b.a FROM c", 1, 11, "duplicate column name 'a'"),
        ("SELECT a AS FROM c", 1, 13, "expected a column name after AS, found 'FROM'"),
        ("SELECT * FROM c WHERE a = :", 1, 27, "write a parameter as :name"),
        ("SELECT * FROM c WHERE a.5 = 1", 1, 25, "expected a field name after '.', found '5'"),
        ("SELECT * FROM c WHERE a = [1, 2", 1, 32, "unexpected end of query: expected ']' or ','"),
        ("SELECT *, a FROM c", 1, 9, "expected FROM after the projection, found ','"),
        ("SELECT * FROM c WHERE a = 1 AND", 1, 32, "unexpected end of query: expected an expression"),
        ("SELECT * FROM c;;", 1, 17, "at the start of a statement, found ';'"),
        ("SELECT * FROM c\n\tWHERE x = )", 2, 12, "expected an expression, found ')'"),
        ("SELECT * FROM c;\nSELECT * FROM d WHERE\n  a = `x", 3, 7, "unterminated quoted identifier"),
        ("INSERT c DOCUMENTS (:d)", 1, 8, "expected INTO after INSERT, found 'c'"),
        ("INSERT INTO c DOCUMENTS {a: 1}", 1, 25, "wrap each document in parentheses"),
        (
            "INSERT INTO c DOCUMENTS ({a: 1}) ON ID CONFLICT FOO", 1, 49,
            "unknown conflict policy 'FOO': expected FAIL, DO NOTHING, DO UPDATE or DO UPDATE_LOCAL_DIFF"
        ),
        ("INSERT INTO c DOCUMENTS ({a: 1}) ON ID CONFLICT DO FOO", 1, 52, "unknown conflict policy 'DO FOO'"),
        (
            "INSERT INTO c DOCUMENTS ({a: 1}) ON ID CONFLICT", 1, 48,
            "unexpected end of query: expected a conflict policy"
        ),
        ("INSERT INTO c DOCUMENTS (:d) ON CONFLICT FAIL", 1, 33, "expected ID after ON, found 'CONFLICT'"),
        ("INSERT INTO c DOCUMNTS ({a: 1})", 1, 15, "did you mean DOCUMENTS?"),
        ("INSERT INTO c DOCUMENTS ({a: 1, a: 2})", 1, 33, "duplicate key 'a' in object literal"),
        ("INSERT INTO c DOCUMENTS ({a 1})", 1, 29, "expected ':' after the object key 'a', found '1'"),
        ("INSERT INTO c DOCUMENTS ({a: 1)", 1, 31, "expected '}' or ',' after the object member, found ')'"),
        ("INSERT INTO c DOCUMENTS ({1: 1})", 1, 27, "expected an object key (a name or a quoted string), found '1'"),
        (
            "INSERT INTO c DOCUMENTS ({a: 1}) ({b: 1})", 1, 34,
            "expected ',', ON ID CONFLICT or the end of the statement"
        ),
        ("UPDATE c SET a = 1, a.b = 2", 1, 21, "the assignment to 'a.b' overlaps the earlier one to 'a'"),
        ("UPDATE c SET _id = 1", 1, 14, "cannot assign to '_id'"),
        ("UPDATE c SET a == 1", 1, 16, "expected '=' after the field path 'a', found '=='"),
        (
            "UPDATE c SET a = 1 b = 2", 1, 20,
            "expected ',', UNSET, WHERE, ORDER BY, LIMIT, OFFSET or the end of the statement after the assignments"
        ),
        ("UPDATE c SET a = 1 WHERE b = 2 WHERE", 1, 32, "WHERE can appear only once"),
        ("UPDATE c WHERE a = 1", 1, 10, "expected APPLY, SET or UNSET after the collection name, found 'WHERE'"),
        ("SELECT * FROM c WHERE a = 99999999999999999999", 1, 27, "does not fit in 64 bits"),
        // DELETE and EVICT.
        ("DELETE c", 1, 8, "expected FROM after DELETE, found 'c'"),
        ("DELETE * FROM c", 1, 8, "DELETE works on whole documents: write DELETE FROM c WHERE ..."),
        ("EVICT FROM c LIMIT 1", 1, 14, "expected WHERE or the end of the statement after the collection name"),
        ("DELETE FROM c WHERE a = 1 WHERE b = 2", 1, 27, "WHERE can appear only once"),
        ("DELETE FROM", 1, 12, "unexpected end of query: expected a collection name after FROM"),
        ("EVICT FORM c", 1, 7, "found 'FORM'; did you mean FROM?"),
        // UPDATE.
        ("UPDATE c", 1, 9, "unexpected end of query: expected APPLY, SET or UNSET after the collection name"),
        ("UPDATE c APPLY n = 1", 1, 18, "found '='; assign values with SET n = ..."),
        ("UPDATE c APPLY n INCREMENT 1", 1, 28, "expected BY after INCREMENT, found '1'"),
        ("UPDATE c APPLY n INCREMNT BY 1", 1, 18, "found 'INCREMNT'; did you mean INCREMENT?"),
        (
            "UPDATE c APPLY n RESTART SET n = 1", 1, 30,
            "the assignment to 'n' overlaps the earlier counter operation on 'n'"
        ),
        ("UPDATE c SET a.b = 1 UNSET a", 1, 28, "the UNSET of 'a' overlaps the earlier assignment to 'a.b'"),
        ("UPDATE c UNSET a, a", 1, 19, "the UNSET of 'a' overlaps the earlier one of 'a'"),
        ("UPDATE c APPLY n.x RESTART, n INCREMENT BY 1", 1, 29, "overlaps the earlier one on 'n.x'"),
        ("UPDATE c UNSET a SET b = 1", 1, 18, "SET must come before UNSET"),
        ("UPDATE c SET a = 1 SET b = 2", 1, 20, "SET can appear only once: list all its items after one SET"),
        ("UPDATE c SET a = 1 WHERE b = 2 UNSET c", 1, 32, "UNSET must come before WHERE"),
        ("UPDATE c UNSET a LIMIT 1 ORDER BY b", 1, 26, "ORDER BY must come before LIMIT"),
        ("UPDATE c UNSET _id", 1, 16, "cannot unset '_id'"),
        ("UPDATE c APPLY _id.n INCREMENT BY 1", 1, 16, "cannot apply a counter operation to '_id.n'"),
        ("UPDATE c SET tags[0] = 'x'", 1, 18, "brackets cannot be used in the fields an UPDATE changes"),
        ("UPDATE c APPLY n RESTART WITH", 1, 30, "unexpected end of query: expected an expression"),
        ("UPDATE c APPLY n RESTART x", 1, 26, "expected ',', SET, UNSET, WHERE, ORDER BY, LIMIT, OFFSET or the end"),
        ("UPDATE c UNSET a = 1", 1, 18, "or the end of the statement after the fields to unset, found '='"),
        ("UPDATE COLLECTION c (n COUNTER)", 1, 32, "unexpected end of query: expected APPLY, SET or UNSET"),
        // INSERT ... INITIAL.
        (
            "INSERT INTO c INITIAL DOCUMENTS ({a: 1}) ON ID CONFLICT DO NOTHING", 1, 42,
            "ON ID CONFLICT cannot be used with INITIAL DOCUMENTS"
        ),
        ("INSERT INTO c INITIAL ({a: 1})", 1, 23, "expected DOCUMENTS or VALUES after INITIAL, found '('"),
        ("INSERT INTO c INITIAL DOCUMENTS (:d) (:e)", 1, 38, "expected ',' or the end of the statement after the"),
        ("INSERT INTO c DOCUMENTS INITIAL (:d)", 1, 25, "INITIAL comes before DOCUMENTS"),
        // COLLECTION declarations.
        (
            "SELECT * FROM COLLECTION c (f STRING)", 1, 31,
            "unknown field type 'STRING' for 'f': the field types are REGISTER, MAP, COUNTER or ATTACHMENT"
        ),
        ("SELECT * FROM COLLECTION c (f COUNTR)", 1, 31, "did you mean COUNTER?"),
        ("SELECT * FROM COLLECTION c (f MAP, g COUNTER, f REGISTER)", 1, 47, "field 'f' is declared twice"),
        ("SELECT * FROM collection", 1, 25, "quote it with backticks (`collection`)"),
        ("SELECT * FROM collection WHERE a = 1", 1, 26, "expected a collection name after COLLECTION, found 'WHERE'"),
        ("SELECT * FROM COLLECTION c WHERE a = 1", 1, 28, "expected '(' after COLLECTION c, found 'WHERE'"),
        ("SELECT * FROM COLLECTION c (f)", 1, 30, "expected a field type (REGISTER, MAP, COUNTER or ATTACHMENT)"),
        ("SELECT * FROM COLLECTION c (f MAP g COUNTER)", 1, 35, "expected ')' or ',' after the field types"),
        ("SELECT * FROM COLLECTION c ()", 1, 29, "expected a field name to declare in COLLECTION c, found ')'"),
        ("SELECT * FROM COLLECTION c (a.b MAP)", 1, 30, "only top-level fields can be declared"),
        ("DELETE FROM COLLECTION order (f MAP)", 1, 24, "'order' is a reserved word"),
        ("UPDATE COLLECTION c (n COUNTER", 1, 31, "unexpected end of query: expected ')' or ','"),
        // IS, IN, LIKE.
        ("SELECT * FROM c WHERE a IS 5", 1, 28, "expected NULL or MISSING after IS, found '5'; IS only tests"),
        ("SELECT * FROM c WHERE a IS NUL", 1, 28, "found 'NUL'; did you mean NULL?"),
        ("SELECT * FROM c WHERE a IS NOT", 1, 31, "unexpected end of query: expected NULL or MISSING after IS NOT"),
        ("SELECT * FROM c WHERE a IS NULL IS NULL", 1, 33, "comparisons cannot be chained"),
        ("SELECT * FROM c WHERE a = 1 IN (1)", 1, 29, "comparisons cannot be chained"),
        ("SELECT * FROM c WHERE a IN (1, 2) = TRUE", 1, 35, "comparisons cannot be chained"),
        ("SELECT * FROM c WHERE a IN b", 1, 28, "expected a list after IN: (a, b, ...), [a, b, ...] or a :parameter"),
        ("SELECT * FROM c WHERE a NOT IN (1, 2", 1, 37, "unexpected end of query: expected ')' or ',' after the list"),
        ("SELECT * FROM c WHERE a NOT = 1", 1, 29, "expected IN or LIKE after NOT, found '='"),
        ("SELECT * FROM c WHERE a LIKE 5", 1, 30, "LIKE needs a string pattern"),
        ("SELECT * FROM c WHERE a LIKE 'abc\\'", 1, 30, "the LIKE pattern ends with a lone '\\'"),
        ("SELECT *\nFROM c\nWHERE a.b[1] NOT LIKE", 3, 22, "unexpected end of query: expected an expression"),
        ("SELECT * FROM c WHERE in = 1", 1, 23, "'in' is a reserved word"),
        // Brackets.
        ("SELECT * FROM c WHERE a[] = 1", 1, 25, "expected a key or an index between '[' and ']'"),
        ("SELECT * FROM c WHERE a[0 = 1", 1, 30, "expected ']' to close the '[' at line 1, column 24"),
        ("SELECT * FROM c WHERE a[0].5 = 1", 1, 28, "expected a field name after '.', found '5'"),
        // COUNT(*).
        ("SELECT * FROM c WHERE COUNT(*) > 1", 1, 23, "COUNT(*) is only allowed as a whole item of the SELECT list"),
        ("SELECT * FROM c ORDER BY COUNT(*)", 1, 26, "COUNT(*) is only allowed as a whole item of the SELECT list"),
        ("SELECT COUNT(*) + 1 FROM c", 1, 8, "COUNT(*) must be a whole item of the SELECT list"),
        ("SELECT [1, COUNT(*)] FROM c", 1, 12, "COUNT(*) must be a whole item of the SELECT list"),
        ("SELECT COUNT(a) FROM c", 1, 14, "expected '*' in COUNT(*), found 'a'"),
        ("SELECT a, COUNT(*) FROM c", 1, 11, "COUNT(*) cannot be combined with other columns"),
        ("SELECT COUNT(*), a FROM c", 1, 18, "COUNT(*) cannot be combined with other columns"),
        ("SELECT COUNT(*), COUNT(*) AS n FROM c", 1, 18, "COUNT(*) cannot be combined with other columns"),
        // ALTER SYSTEM and SHOW.
        ("ALTR SYSTEM SET x = 1", 1, 1, "found 'ALTR'; did you mean ALTER?"),
        ("SHWO ALL", 1, 1, "found 'SHWO'; did you mean SHOW?"),
        ("ALTER SET x = 1", 1, 7, "expected SYSTEM after ALTER, found 'SET'"),
        ("ALTER SYSTEM x = 1", 1, 14, "expected SET after ALTER SYSTEM, found 'x'"),
        ("ALTER SYSTEM STE x = 1", 1, 14, "found 'STE'; did you mean SET?"),
        ("ALTER SYSTEM SET = 1", 1, 18, "expected a system parameter name after ALTER SYSTEM SET, found '='"),
        ("ALTER SYSTEM SET x 1", 1, 20, "expected '=' after the parameter name 'x', found '1'"),
        ("ALTER SYSTEM SET x == 1", 1, 20, "found '=='; set a parameter with a single '='"),
        ("ALTER SYSTEM SET x =", 1, 21, "unexpected end of query: expected a value after '=': a number, a string"),
        ("ALTER SYSTEM SET x = a", 1, 22, "expected a value after '=': a number, a string, TRUE, FALSE or a :parameter, found 'a'"),
        ("ALTER SYSTEM SET x = -'a'", 1, 22, "expected a number after '-', found string 'a'"),
        ("ALTER SYSTEM SET x = 1 + 1", 1, 24, "expected the end of the statement after the value of x, found '+'"),
        ("ALTER SYSTEM", 1, 13, "unexpected end of query: expected SET after ALTER SYSTEM"),
        ("SHOW", 1, 5, "unexpected end of query: expected a system parameter name or ALL after SHOW"),
        ("SHOW ALL x", 1, 10, "expected the end of the statement after SHOW ALL, found 'x'"),
        ("SHOW a b", 1, 8, "expected the end of the statement after the parameter name 'a', found 'b'"),
        ("SHOW where", 1, 6, "'where' is a reserved word"),
    ]

    @Test(arguments: malformedQueries + malformedIndexStatements)
    func rejectsMalformedQuery(text: String, line: Int, column: Int, message: String) throws {
        let error = try #require(throws: QueryError.self) { try Parser.parse(text) }
        #expect(error.position?.line == line)
        #expect(error.position?.column == column)
        #expect(error.message.contains(message), "\(error.message)")
        #expect(error.query == text)
    }

    @Test(arguments: [
        ("FAIL", ConflictPolicy.fail), ("DO NOTHING", .doNothing), ("do update", .doUpdate),
        ("DO UPDATE_LOCAL_DIFF", .doUpdateLocalDiff), ("", .fail),
    ])
    func conflictPolicies(clause: String, policy: ConflictPolicy) throws {
        let text = "INSERT INTO c DOCUMENTS (:a), (:b)" + (clause.isEmpty ? "" : " ON ID CONFLICT " + clause)
        guard case .insert(let insert) = try Parser.parseStatement(text) else {
            Issue.record("not an INSERT")
            return
        }
        #expect(insert.conflict == policy)
        #expect(insert.documents == [param("a"), param("b")])
    }

    static let systemStatements: [(String, SystemStatement)] = [
        (
            "ALTER SYSTEM SET transaction_trace_interval_ms = 250",
            .set(
                SystemSetting(
                    name: "transaction_trace_interval_ms", value: lit(250), namePosition: pos(17, 1, 18),
                    valuePosition: pos(49, 1, 50)))
        ),
        (
            "alter system set x = 'text';",
            .set(SystemSetting(name: "x", value: lit("text"), namePosition: pos(17, 1, 18), valuePosition: pos(21, 1, 22)))
        ),
        (
            "ALTER SYSTEM SET x = -5",
            .set(SystemSetting(name: "x", value: lit(-5), namePosition: pos(17, 1, 18), valuePosition: pos(21, 1, 22)))
        ),
        (
            "ALTER SYSTEM SET y = 2.5",
            .set(SystemSetting(name: "y", value: lit(2.5), namePosition: pos(17, 1, 18), valuePosition: pos(21, 1, 22)))
        ),
        (
            "ALTER SYSTEM SET x = :v",
            .set(SystemSetting(name: "x", value: param("v"), namePosition: pos(17, 1, 18), valuePosition: pos(21, 1, 22)))
        ),
        (
            "ALTER SYSTEM SET x = TRUE",
            .set(SystemSetting(name: "x", value: lit(true), namePosition: pos(17, 1, 18), valuePosition: pos(21, 1, 22)))
        ),
        ("SHOW transaction_trace_interval_ms", .show(name: "transaction_trace_interval_ms", position: pos(5, 1, 6))),
        ("show  X", .show(name: "X", position: pos(6, 1, 7))),
        ("SHOW ALL", .showAll),
        ("show all;", .showAll),
    ]

    @Test(arguments: systemStatements)
    func parsesSystemStatements(text: String, expected: SystemStatement) throws {
        let statement = try Parser.parseStatement(text)
        #expect(statement == .system(expected))
        #expect(statement.targetCollection == nil, "a system statement names no collection")
        #expect(statement.collection == "")
        #expect(!statement.isMutation, "ALTER SYSTEM changes parameters, not documents")
        #expect(statement.declaredTypes.isEmpty)
    }

    @Test(arguments: [
        "SELECT alter, system, show, all FROM c WHERE all = 1",
        "INSERT INTO show DOCUMENTS ({system: 1})",
        "UPDATE alter SET all = 1",
    ])
    func systemWordsStayUsableAsNames(text: String) throws {
        let statement = try Parser.parseStatement(text)
        #expect(statement.targetCollection != nil)
        if case .select(let select) = statement {
            #expect(select.projection.map(\.name) == ["alter", "system", "show", "all"])
        }
    }

    @Test func parseStatementsKeepsEachStatementsText() throws {
        let text = "SHOW ALL;\n  INSERT INTO c DOCUMENTS ({'a': ';'}) ;UPDATE c SET a = 1 -- done\n"
        let parsed = try Parser.parseStatements(text)
        #expect(parsed.map(\.text) == ["SHOW ALL", "INSERT INTO c DOCUMENTS ({'a': ';'})", "UPDATE c SET a = 1"])
        #expect(parsed.map(\.position) == [pos(0, 1, 1), pos(12, 2, 3), pos(50, 2, 41)])
        #expect(parsed.map(\.statement) == (try Parser.parse(text)))
        #expect(parsed.map(\.statement.targetCollection) == [nil, "c", "c"])
    }

    @Test func parsesSeveralStatements() throws {
        let statements = try Parser.parse("SELECT * FROM a; INSERT INTO b VALUES (:d);\nUPDATE c SET x = 1;")
        #expect(statements.map(\.collection) == ["a", "b", "c"])
        #expect(statements.map(\.isMutation) == [false, true, true])
    }

    @Test func deleteAndEvictAreMutationsWithDeclaredTypes() throws {
        let statements = try Parser.parse(
            "DELETE FROM a; EVICT FROM COLLECTION b (p ATTACHMENT); SELECT * FROM COLLECTION c (n COUNTER)")
        #expect(statements.map(\.collection) == ["a", "b", "c"])
        #expect(statements.map(\.isMutation) == [true, true, false])
        #expect(statements.map(\.declaredTypes) == [[:], ["p": .attachment], ["n": .counter]])
    }

    @Test func bracketNestingIsLimited() throws {
        let deep = "a" + String(repeating: "[a", count: 500) + String(repeating: "]", count: 500)
        let error = try #require(throws: QueryError.self) { try condition(deep) }
        #expect(error.message.contains("nested too deeply"))
        let inLists = String(repeating: "a IN (", count: 500) + "1" + String(repeating: ")", count: 500)
        let inError = try #require(throws: QueryError.self) { try condition(inLists) }
        #expect(inError.message.contains("nested too deeply"))
        let chain = "a" + String(repeating: "[0]", count: 1000)
        let chainError = try #require(throws: QueryError.self) { try condition(chain) }
        #expect(chainError.message.contains("expression too complex"))
    }

    @Test func parseStatementRejectsASecondStatement() throws {
        #expect(try Parser.parseStatement("SELECT * FROM a;") == select("a"))
        let error = try #require(throws: QueryError.self) {
            try Parser.parseStatement("SELECT * FROM a;\n  SELECT * FROM b")
        }
        #expect(error.position == pos(19, 2, 3))
        #expect(error.message == "expected a single statement, found a second one starting with 'SELECT'")
    }

    @Test(arguments: [
        ("a OR b OR c", bin(.or, bin(.or, path("a"), path("b")), path("c"))),
        ("a - b - c", bin(.subtract, bin(.subtract, path("a"), path("b")), path("c"))),
        ("a / b * c", bin(.multiply, bin(.divide, path("a"), path("b")), path("c"))),
        ("NOT a AND b", bin(.and, not(path("a")), path("b"))),
        ("NOT (a AND b)", not(bin(.and, path("a"), path("b")))),
        ("a = b OR c", bin(.or, bin(.equal, path("a"), path("b")), path("c"))),
        ("-a * b", bin(.multiply, .unary(.negate, path("a")), path("b"))),
        ("-2 * 3", bin(.multiply, lit(-2), lit(3))),
        ("2 - -3", bin(.subtract, lit(2), lit(-3))),
        ("-9223372036854775807", lit(-9_223_372_036_854_775_807)),
        ("-(1.5)", lit(-1.5)),
        ("a.b.c", path("a", "b", "c")),
        ("x.from.true", path("x", "from", "true")),
        ("[]", .array([])),
        ("{}", .object([])),
        ("f_id", path("f_id")),
        // IS [NOT] NULL / MISSING.
        ("a IS NULL", unary(.isNull, path("a"))),
        ("a.b is not null", unary(.isNotNull, path("a", "b"))),
        ("missing IS MISSING", unary(.isMissing, path("missing"))),
        ("a IS NOT MISSING", unary(.isNotMissing, path("a"))),
        ("NOT a IS NULL", not(unary(.isNull, path("a")))),
        ("a + 1 IS NULL", unary(.isNull, bin(.add, path("a"), lit(1)))),
        ("a IS NULL AND b IS MISSING", bin(.and, unary(.isNull, path("a")), unary(.isMissing, path("b")))),
        // [NOT] IN.
        ("a IN (1, 'x', :p)", bin(.in, path("a"), .array([lit(1), lit("x"), param("p")]))),
        ("a NOT IN [1, 2]", bin(.notIn, path("a"), .array([lit(1), lit(2)]))),
        ("a IN :list", bin(.in, path("a"), param("list"))),
        ("a not in :list", bin(.notIn, path("a"), param("list"))),
        ("a IN ()", bin(.in, path("a"), .array([]))),
        ("a IN (b + 1)", bin(.in, path("a"), .array([bin(.add, path("b"), lit(1))]))),
        ("a + 1 IN (2)", bin(.in, bin(.add, path("a"), lit(1)), .array([lit(2)]))),
        ("NOT a IN (1)", not(bin(.in, path("a"), .array([lit(1)])))),
        ("a IN (1) OR b", bin(.or, bin(.in, path("a"), .array([lit(1)])), path("b"))),
        // [NOT] LIKE.
        ("a LIKE 'x%'", bin(.like, path("a"), lit("x%"))),
        ("a NOT LIKE :p", bin(.notLike, path("a"), param("p"))),
        ("a LIKE 'x' + '%'", bin(.like, path("a"), bin(.add, lit("x"), lit("%")))),
        ("a LIKE 'a\\\\'", bin(.like, path("a"), lit("a\\\\"))),
        // Bracket access.
        ("a['key']", index(path("a"), lit("key"))),
        ("a[0]", index(path("a"), lit(0))),
        ("a[-1]", index(path("a"), lit(-1))),
        ("a.b[1].c", index(index(path("a", "b"), lit(1)), lit("c"))),
        ("a[:i]", index(path("a"), param("i"))),
        ("a[0][1]", index(index(path("a"), lit(0)), lit(1))),
        ("a['x'].from.c", index(index(index(path("a"), lit("x")), lit("from")), lit("c"))),
        ("a[b[0] + 1]", index(path("a"), bin(.add, index(path("b"), lit(0)), lit(1)))),
        (":p[0]", index(param("p"), lit(0))),
        ("(a)[0]", index(path("a"), lit(0))),
        ("[1, 2][0] = a", bin(.equal, index(.array([lit(1), lit(2)]), lit(0)), path("a"))),
        ("a[0] IN (1)", bin(.in, index(path("a"), lit(0)), .array([lit(1)]))),
        ("count = 1", bin(.equal, path("count"), lit(1))),
    ])
    func expressions(text: String, expected: Expression) throws {
        #expect(try condition(text) == expected)
    }

    @Test func descriptionAndCaretLine() throws {
        let error = try #require(throws: QueryError.self) { try Parser.parse("SELECT title, author FORM books") }
        #expect(error.description == "line 1, column 22: expected FROM after the projection, found 'FORM'")
        #expect(
            error.detailedDescription == """
                line 1, column 22: expected FROM after the projection, found 'FORM'
                SELECT title, author FORM books
                                     ^
                """)
    }

    @Test func caretLineShowsTheOffendingLineAndKeepsTabs() throws {
        let error = try #require(throws: QueryError.self) { try Parser.parse("SELECT *\nFROM c\n\tWHERE a = = 1") }
        #expect(error.position == pos(27, 3, 12))
        #expect(
            error.detailedDescription
                == "line 3, column 12: expected an expression, found '='\n\tWHERE a = = 1\n\t          ^")
    }

    @Test func caretAtTheEndOfTheQuery() throws {
        let error = try #require(throws: QueryError.self) { try Parser.parse("SELECT * FROM c WHERE") }
        #expect(error.detailedDescription.hasSuffix("SELECT * FROM c WHERE\n                     ^"))
    }

    @Test func errorsWithoutAPositionAreJustTheMessage() {
        let error = QueryError("missing argument :x")
        #expect(error.description == "missing argument :x")
        #expect(error.detailedDescription == "missing argument :x")
    }

    @Test func nestingIsLimited() throws {
        let depth = Parser.maximumNesting - 1
        let ok = String(repeating: "(", count: depth) + "a" + String(repeating: ")", count: depth)
        #expect(try condition(ok) == path("a"))
        let tooDeep = String(repeating: "(", count: 500) + "a" + String(repeating: ")", count: 500)
        let error = try #require(throws: QueryError.self) { try condition(tooDeep) }
        #expect(error.message.contains("nested too deeply"))
        #expect(error.position?.column == 23 + Parser.maximumNesting)
        #expect(throws: QueryError.self) { try condition(String(repeating: "NOT ", count: 200) + "a") }
        #expect(throws: QueryError.self) { try condition(String(repeating: "[", count: 200)) }
    }

    @Test func treeHeightIsLimited() throws {
        let terms = { (n: Int) in Array(repeating: "a", count: n).joined(separator: " OR ") }
        guard case .binary(.or, _, _)? = try condition(terms(Parser.maximumHeight)) else {
            Issue.record("expected an OR chain")
            return
        }
        let error = try #require(throws: QueryError.self) { try condition(terms(100_000)) }
        #expect(error.message.contains("expression too complex"))
    }

    static let indexStatements: [(String, IndexStatement)] = [
        (
            "CREATE INDEX by_year ON cars (year)",
            .create(
                IndexDefinition(
                    name: "by_year", collection: "cars", paths: [field(["year"], pos(30, 1, 31))],
                    namePosition: pos(13, 1, 14)),
                ifNotExists: false)
        ),
        (
            "create index if not exists ByOwner on `car list` (owner.name, year);",
            .create(
                IndexDefinition(
                    name: "ByOwner", collection: "car list",
                    paths: [field(["owner", "name"], pos(50, 1, 51)), field(["year"], pos(62, 1, 63))],
                    namePosition: pos(27, 1, 28)),
                ifNotExists: true)
        ),
        ("DROP INDEX by_year", .drop(name: "by_year", ifExists: false, position: pos(11, 1, 12))),
        ("drop index if exists by_year", .drop(name: "by_year", ifExists: true, position: pos(21, 1, 22))),
        ("SHOW INDEXES", .show),
        ("show indexes;", .show),
    ]

    @Test(arguments: indexStatements)
    func parsesIndexStatements(text: String, expected: IndexStatement) throws {
        let statement = try Parser.parseStatement(text)
        #expect(statement == .index(expected))
        #expect(!statement.writesDocuments, "an index statement changes no document")
        if case .show = expected {
            #expect(!statement.isMutation, "SHOW INDEXES only reads")
        } else {
            #expect(statement.isMutation, "CREATE and DROP INDEX change the database's schema")
        }
    }

    static let malformedIndexStatements: [(String, Int, Int, String)] = [
        ("CREATE TABLE t (a)", 1, 8, "expected INDEX after CREATE, found 'TABLE'; CREATE makes indexes only"),
        ("CREATE INDX i ON c (a)", 1, 8, "did you mean INDEX?"),
        ("CREATE INDEX ON c (a)", 1, 14, "expected an index name after CREATE INDEX, found 'ON'"),
        ("CREATE INDEX IF EXISTS i ON c (a)", 1, 17, "expected NOT after IF, found 'EXISTS'"),
        ("CREATE INDEX IF NOT i ON c (a)", 1, 21, "expected EXISTS after IF NOT, found 'i'"),
        ("CREATE INDEX 'i' ON c (a)", 1, 14, "expected an index name after CREATE INDEX, found"),
        ("DROP INDX i", 1, 6, "found 'INDX'; did you mean INDEX?"),
        ("CREATE INDEX `by year` ON c (a)", 1, 14, "invalid index name 'by year': use 1 to 64 ASCII letters"),
        ("CREATE INDEX _i ON c (a)", 1, 14, "invalid index name '_i'"),
        ("CREATE INDEX i c (a)", 1, 16, "expected ON after the index name 'i', found 'c'"),
        ("CREATE INDEX i ON (a)", 1, 19, "expected a collection name after ON, found '('"),
        ("CREATE INDEX i ON c a", 1, 21, "expected '(' after ON c, found 'a'; list the indexed fields in parentheses"),
        ("CREATE INDEX i ON c ()", 1, 22, "expected a field path to index, found ')'"),
        ("CREATE INDEX i ON c (a b)", 1, 24, "expected ')' or ',' after the indexed paths, found 'b'"),
        ("CREATE INDEX i ON c (a", 1, 23, "unexpected end of query: expected ')' or ','"),
        ("CREATE INDEX i ON c (a, a)", 1, 25, "'a' appears twice in index i: list each path once"),
        ("CREATE INDEX i ON c (_id)", 1, 22, "'_id' cannot be indexed: documents are found by _id"),
        ("CREATE INDEX i ON c (tags[0])", 1, 26, "brackets cannot be used in an indexed path"),
        ("CREATE INDEX i ON c (`a\"b`)", 1, 22, "'a\"b' cannot be indexed: a field name in an indexed path may not contain"),
        ("CREATE INDEX i ON c (a, b, c, d, e, f, g, h, k)", 1, 46, "index i lists 9 paths; an index takes at most 8"),
        ("CREATE INDEX i ON c (a) WHERE a = 1", 1, 25, "expected the end of the statement after the indexed paths, found 'WHERE'"),
        ("DROP TABLE t", 1, 6, "expected INDEX after DROP, found 'TABLE'; DROP removes indexes only"),
        ("DROP INDEX", 1, 11, "unexpected end of query: expected an index name after DROP INDEX"),
        ("DROP INDEX IF i", 1, 15, "expected EXISTS after IF, found 'i'"),
        ("DROP INDEX i j", 1, 14, "expected the end of the statement after the index name 'i', found 'j'"),
        ("SHOW INDEXES FROM c", 1, 14, "expected the end of the statement after SHOW INDEXES, found 'FROM'"),
        ("CRATE INDEX i ON c (a)", 1, 1, "found 'CRATE'; did you mean CREATE?"),
    ]

    @Test func indexWordsStayUsableAsNames() throws {
        let statement = try Parser.parseStatement(
            "SELECT create, drop, index, indexes, if, exists FROM index WHERE exists = 1 AND if > 2")
        guard case .select(let select) = statement else {
            Issue.record("not a SELECT")
            return
        }
        #expect(select.collection == "index")
        #expect(select.projection.map(\.name) == ["create", "drop", "index", "indexes", "if", "exists"])
        #expect(try Parser.parseStatement("SHOW indexes_limit") == .system(.show(name: "indexes_limit", position: pos(5, 1, 6))))
    }
}

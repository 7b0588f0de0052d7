import ShoalQuery
import Testing

/// The kinds of every token of `text`, without the final `.end`.
private func kinds(_ text: String) throws -> [Token.Kind] {
    try Lexer.tokenize(text).dropLast().map(\.kind)
}

private func pos(_ offset: Int, _ line: Int, _ column: Int) -> SourcePosition {
    SourcePosition(offset: offset, line: line, column: column)
}

@Suite struct LexerTests {
    @Test func tokenizesAStatementWithTextAndPositions() throws {
        let tokens = try Lexer.tokenize("SELECT a.b FROM `my coll` WHERE x >= :min")
        let expected: [(Token.Kind, String, Int)] = [
            (.keyword(.select), "SELECT", 0),
            (.identifier("a"), "a", 7),
            (.symbol(.dot), ".", 8),
            (.identifier("b"), "b", 9),
            (.keyword(.from), "FROM", 11),
            (.identifier("my coll"), "`my coll`", 16),
            (.keyword(.where), "WHERE", 26),
            (.identifier("x"), "x", 32),
            (.symbol(.greaterOrEqual), ">=", 34),
            (.parameter("min"), ":min", 37),
            (.end, "", 41),
        ]
        #expect(tokens.count == expected.count)
        for (token, (kind, text, offset)) in zip(tokens, expected) {
            #expect(token.kind == kind)
            #expect(token.text == text)
            #expect(token.position == pos(offset, 1, offset + 1))
        }
    }

    @Test(arguments: ["select", "SELECT", "SeLeCt", "sElEcT"])
    func keywordsAreCaseInsensitive(word: String) throws {
        let token = try #require(try Lexer.tokenize(word).first)
        #expect(token.kind == .keyword(.select))
        #expect(token.text == word)
    }

    @Test func everyKeywordIsRecognized() throws {
        for keyword in Token.Keyword.allCases {
            #expect(try kinds(keyword.rawValue.lowercased()) == [.keyword(keyword)])
        }
    }

    @Test(arguments: [
        ("_id", "_id"), ("title2", "title2"), ("café", "café"), ("名前", "名前"), ("a_b_C", "a_b_C"),
        ("`odd name`", "odd name"), ("`select`", "select"), ("`a``b`", "a`b"), ("`1st`", "1st"),
        ("selected", "selected"), ("update_local", "update_local"),
    ])
    func identifiers(text: String, name: String) throws {
        #expect(try kinds(text) == [.identifier(name)])
    }

    @Test(arguments: [
        ("'hello'", "hello"), ("'it''s'", "it's"), ("''", ""), ("'a\\nb'", "a\\nb"), ("'two\nlines'", "two\nlines"),
        ("\"hello\"", "hello"), ("\"say \\\"hi\\\"\"", "say \"hi\""), ("\"a\\nb\\tc\\r\"", "a\nb\tc\r"),
        ("\"\\u00e9\\u00C9\"", "éÉ"), ("\"\\ud83d\\ude00\"", "😀"), ("\"\\\\ \\/ \\b \\f\"", "\\ / \u{8} \u{C}"),
        ("\"it's\"", "it's"), ("'say \"hi\"'", "say \"hi\""),
    ])
    func strings(text: String, value: String) throws {
        #expect(try kinds(text) == [.string(value)])
    }

    @Test(arguments: [
        ("0", Token.Kind.integer(0)), ("42", .integer(42)), ("9223372036854775807", .integer(.max)),
        ("1.5", .decimal(1.5)), ("0.25", .decimal(0.25)), ("1e3", .decimal(1000)), ("2.5E-2", .decimal(0.025)),
        ("6e+2", .decimal(600)), ("007", .integer(7)),
    ])
    func numbers(text: String, kind: Token.Kind) throws {
        #expect(try kinds(text) == [kind])
    }

    @Test func numberFollowedByDotAndNameIsNotADecimal() throws {
        #expect(try kinds("1.a") == [.integer(1), .symbol(.dot), .identifier("a")])
        #expect(try kinds("1.5.2") == [.decimal(1.5), .symbol(.dot), .integer(2)])
    }

    @Test func parametersAndColons() throws {
        #expect(try kinds(":name :_x1 :select") == [.parameter("name"), .parameter("_x1"), .parameter("select")])
        #expect(
            try kinds("{\"a\": 1}") == [
                .symbol(.leftBrace), .string("a"), .symbol(.colon), .integer(1), .symbol(.rightBrace),
            ])
        #expect(try kinds("::p") == [.symbol(.colon), .parameter("p")])
    }

    @Test func everySymbol() throws {
        let text = Token.Symbol.allCases.map(\.rawValue).joined(separator: " ")
        #expect(try kinds(text) == Token.Symbol.allCases.map { .symbol($0) })
    }

    @Test func twoCharacterOperatorsWithoutSpaces() throws {
        #expect(
            try kinds("a<=b<>c!=d==e>=f<g") == [
                .identifier("a"), .symbol(.lessOrEqual), .identifier("b"), .symbol(.lessGreater), .identifier("c"),
                .symbol(.notEqual), .identifier("d"), .symbol(.doubleEqual), .identifier("e"), .symbol(.greaterOrEqual),
                .identifier("f"), .symbol(.less), .identifier("g"),
            ])
        #expect(try kinds("a-1") == [.identifier("a"), .symbol(.minus), .integer(1)])
    }

    @Test func commentsRunToTheEndOfTheLine() throws {
        let tokens = try Lexer.tokenize("-- leading\nSELECT * -- trailing ; stuff\nFROM c --")
        #expect(tokens.map(\.kind) == [.keyword(.select), .symbol(.star), .keyword(.from), .identifier("c"), .end])
        #expect(tokens[2].position == pos(40, 3, 1))
    }

    @Test func positionsCountCharactersAcrossLines() throws {
        // "é" and the emoji are one Character each; "\r\n" is a single Character too.
        let tokens = try Lexer.tokenize("é 'x😀' y\r\n  'a'\n\t:p")
        #expect(
            tokens.map(\.kind) == [
                .identifier("é"), .string("x😀"), .identifier("y"), .string("a"), .parameter("p"), .end,
            ])
        #expect(
            tokens.map(\.position) == [
                pos(0, 1, 1), pos(2, 1, 3), pos(7, 1, 8), pos(11, 2, 3), pos(16, 3, 2), pos(18, 3, 4),
            ])
    }

    @Test func tokenDescriptionsNameTheTokenForMessages() throws {
        let tokens = try Lexer.tokenize("FORM 'abc' 12 ;")
        #expect(tokens.map(\.description) == ["'FORM'", "string 'abc'", "'12'", "';'", "end of query"])
    }

    @Test func nextReturnsEndRepeatedly() throws {
        var lexer = Lexer("a")
        #expect(try lexer.next().kind == .identifier("a"))
        #expect(try lexer.next().kind == .end)
        #expect(try lexer.next().kind == .end)
    }

    @Test(arguments: [
        ("'abc", 1, 1, "unterminated string literal"),
        ("a = \"abc", 1, 5, "unterminated string literal"),
        ("x\n  `name", 2, 3, "unterminated quoted identifier"),
        ("``", 1, 1, "empty quoted identifier"),
        ("\"a\\qb\"", 1, 3, "unknown escape '\\q'"),
        ("\"abc\\", 1, 5, "unknown escape '\\' at the end of the query"),
        ("\"\\u12g4\"", 1, 2, "expected four hexadecimal digits"),
        ("\"\\ud800\"", 1, 2, "unpaired UTF-16 surrogate"),
        ("\"\\udc00\"", 1, 2, "unpaired UTF-16 surrogate"),
        ("\"\\ud800\\u0041\"", 1, 8, "invalid low surrogate"),
        ("a # b", 1, 3, "unexpected character '#'"),
        ("a ! b", 1, 3, "use NOT for negation or != for inequality"),
        ("a && b", 1, 3, "use AND"),
        ("a || b", 1, 3, "use OR"),
        ("x = 12abc", 1, 5, "invalid number '12abc'"),
        ("x = 1e", 1, 5, "invalid number '1e'"),
        ("99999999999999999999", 1, 1, "does not fit in 64 bits"),
        ("\n 1e999", 2, 2, "number 1e999 is out of range"),
    ])
    func errors(text: String, line: Int, column: Int, message: String) throws {
        let error = try #require(throws: QueryError.self) { try Lexer.tokenize(text) }
        #expect(error.position?.line == line)
        #expect(error.position?.column == column)
        #expect(error.message.contains(message), "\(error.message)")
        #expect(error.query == text)
    }
}

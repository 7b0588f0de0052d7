import ShoalCRDT

/// Parses DQL text into statements.
public enum Parser {
    /// The deepest nesting of brackets and prefix operators accepted, so hostile input
    /// cannot exhaust the parser's stack.
    public static let maximumNesting = 64
    /// The tallest expression tree accepted, so evaluating it cannot exhaust the stack.
    public static let maximumHeight = 256

    /// The statements of `text`, separated by `;` (a trailing `;` is allowed).
    public static func parse(_ text: String) throws(QueryError) -> [Statement] {
        var state = try State(text)
        return try state.parseStatements().map(\.statement)
    }

    /// The single statement of `text` (a trailing `;` is allowed).
    public static func parseStatement(_ text: String) throws(QueryError) -> Statement {
        var state = try State(text)
        let statements = try state.parseStatements()
        if statements.count > 1 {
            let second = statements[1].start
            throw state.error(
                "expected a single statement, found a second one starting with \(second)", at: second.position)
        }
        return statements[0].statement
    }
}

extension Parser {
    typealias Keyword = Token.Keyword
    typealias Symbol = Token.Symbol

    /// A cursor over the tokens of one query.
    struct State {
        let text: String
        var tokens: [Token]
        var index = 0
        var nesting = 0

        init(_ text: String) throws(QueryError) {
            self.text = text
            self.tokens = try Lexer.tokenize(text)
        }

        // MARK: Tokens

        var current: Token { tokens[index] }
        var atEnd: Bool { current.kind == .end }
        var next: Token { tokens[min(index + 1, tokens.count - 1)] }

        @discardableResult
        mutating func advance() -> Token {
            defer { if index < tokens.count - 1 { index += 1 } }
            return current
        }

        mutating func accept(_ keyword: Keyword) -> Bool {
            guard current.is(keyword) else { return false }
            advance()
            return true
        }

        mutating func accept(_ symbol: Symbol) -> Bool {
            guard current.is(symbol) else { return false }
            advance()
            return true
        }

        mutating func expect(_ keyword: Keyword, _ context: String) throws(QueryError) {
            guard accept(keyword) else { throw unexpected("\(keyword.rawValue) \(context)") }
        }

        mutating func expect(_ symbol: Symbol, _ context: String) throws(QueryError) {
            guard accept(symbol) else { throw unexpected("'\(symbol.rawValue)' \(context)") }
        }

        // MARK: Errors

        func error(_ message: String, at position: SourcePosition) -> QueryError {
            QueryError(message, position: position, query: text)
        }

        /// "expected X, found 'y'" at the current token, or "unexpected end of query: expected X".
        func unexpected(_ expected: String, suggesting keywords: [Keyword] = [], hint: String? = nil) -> QueryError {
            if atEnd { return error("unexpected end of query: expected \(expected)", at: current.position) }
            var message = "expected \(expected), found \(current)"
            if let hint {
                message += "; \(hint)"
            } else if case .identifier(let word) = current.kind,
                let guess = keywords.first(where: { Self.isTypo(word.uppercased(), of: $0.rawValue) })
            {
                message += "; did you mean \(guess.rawValue)?"
            }
            return error(message, at: current.position)
        }

        /// Whether `word` is within a small edit distance (with transpositions) of `keyword`.
        static func isTypo(_ word: String, of keyword: String) -> Bool {
            let a = Array(word)
            let b = Array(keyword)
            guard a != b, abs(a.count - b.count) <= 2 else { return false }
            var d = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
            for i in 0...a.count { d[i][0] = i }
            for j in 0...b.count { d[0][j] = j }
            for i in 1..<(a.count + 1) {
                for j in 1..<(b.count + 1) {
                    let cost = a[i - 1] == b[j - 1] ? 0 : 1
                    d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
                    if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                        d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
                    }
                }
            }
            return d[a.count][b.count] <= (b.count <= 4 ? 1 : 2)
        }

        static func list(_ items: [String]) -> String {
            items.count < 2 ? items.joined() : items.dropLast().joined(separator: ", ") + " or " + items.last!
        }

        static func reservedHint(_ token: Token) -> String {
            "'\(token.text)' is a reserved word: quote it with backticks (`\(token.text)`) to use it as a name"
        }

        // MARK: Statements

        mutating func parseStatements() throws(QueryError) -> [(statement: Statement, start: Token)] {
            if atEnd { throw error("empty query", at: SourcePosition(offset: 0, line: 1, column: 1)) }
            var statements: [(statement: Statement, start: Token)] = []
            repeat {
                let start = current
                statements.append((try parseStatement(), start))
            } while accept(.semicolon) && !atEnd
            return statements
        }

        mutating func parseStatement() throws(QueryError) -> Statement {
            switch current.keyword {
            case .select: return .select(try parseSelect())
            case .insert: return .insert(try parseInsert())
            case .update: return .update(try parseUpdate())
            default:
                throw unexpected(
                    "SELECT, INSERT or UPDATE at the start of a statement", suggesting: [.select, .insert, .update])
            }
        }

        mutating func parseSelect() throws(QueryError) -> SelectStatement {
            advance()
            var projection: [Projection] = []
            if !accept(.star) {
                if current.is(.from) { throw unexpected("* or a list of expressions after SELECT") }
                repeat {
                    let start = current.position
                    let expression = try parseExpression()
                    let name: String
                    if accept(.as) {
                        name = try parseName("a column name after AS")
                    } else if case .path(let path) = expression, let last = path.last {
                        name = last
                    } else {
                        name = "$\(projection.count + 1)"
                    }
                    if projection.contains(where: { $0.name == name }) {
                        throw error(
                            "duplicate column name '\(name)': give one of the columns another name with AS", at: start)
                    }
                    projection.append(Projection(expression: expression, name: name))
                } while accept(.comma)
            }
            try expect(.from, "after the projection")
            var select = SelectStatement(
                collection: try parseName("a collection name after FROM"), projection: projection)
            var last = -1
            if accept(.where) {
                last = 0
                select.whereClause = try parseExpression()
            }
            if accept(.order) {
                last = 1
                try expect(.by, "after ORDER")
                repeat {
                    let expression = try parseExpression()
                    let descending = accept(.desc)
                    if !descending { _ = accept(.asc) }
                    select.orderBy.append(OrderTerm(expression: expression, descending: descending))
                } while accept(.comma)
            }
            if accept(.limit) {
                last = 2
                select.limit = try parseExpression()
            }
            if accept(.offset) {
                last = 3
                select.offset = try parseExpression()
            }
            try finish([.where, .order, .limit, .offset], last: last, after: "the collection name")
            return select
        }

        mutating func parseInsert() throws(QueryError) -> InsertStatement {
            advance()
            try expect(.into, "after INSERT")
            let collection = try parseName("a collection name after INTO")
            guard accept(.documents) || accept(.values) else {
                throw unexpected("DOCUMENTS or VALUES after the collection name", suggesting: [.documents, .values])
            }
            var documents: [Expression] = []
            repeat {
                let open = current
                guard accept(.leftParen) else {
                    throw unexpected(
                        "'(' before the document",
                        hint: current.is(.leftBrace)
                            ? "wrap each document in parentheses, as in DOCUMENTS ({...})" : nil)
                }
                documents.append(try parseExpression())
                try expect(.rightParen, "to close the document opened at \(open.position)")
            } while accept(.comma)
            var insert = InsertStatement(collection: collection, documents: documents)
            var last = -1
            if accept(.on) {
                last = 0
                try expect(.id, "after ON")
                try expect(.conflict, "after ON ID")
                insert.conflict = try parseConflictPolicy()
            }
            try finish([.on], last: last, after: "the documents", also: ["','"])
            return insert
        }

        mutating func parseConflictPolicy() throws(QueryError) -> ConflictPolicy {
            let policies = "FAIL, DO NOTHING, DO UPDATE or DO UPDATE_LOCAL_DIFF"
            if accept(.fail) { return .fail }
            if accept(.do) {
                if accept(.nothing) { return .doNothing }
                if accept(.update) { return .doUpdate }
                if accept(.updateLocalDiff) { return .doUpdateLocalDiff }
                if atEnd { throw unexpected("NOTHING, UPDATE or UPDATE_LOCAL_DIFF after DO") }
                throw error("unknown conflict policy 'DO \(current.text)': expected \(policies)", at: current.position)
            }
            if atEnd { throw unexpected("a conflict policy (\(policies))") }
            throw error("unknown conflict policy '\(current.text)': expected \(policies)", at: current.position)
        }

        mutating func parseUpdate() throws(QueryError) -> UpdateStatement {
            advance()
            var update = UpdateStatement(collection: try parseName("a collection name after UPDATE"), assignments: [])
            try expect(.set, "after the collection name")
            repeat {
                let position = current.position
                var path = [try parseName("a field name to assign")]
                while accept(.dot) { path.append(try parseName("a field name after '.'", allowReserved: true)) }
                let shown = path.joined(separator: ".")
                if path[0] == "_id" {
                    throw error("cannot assign to '\(shown)': the _id of a document never changes", at: position)
                }
                if let other = update.assignments.first(where: {
                    $0.path.starts(with: path) || path.starts(with: $0.path)
                }) {
                    let otherShown = other.path.joined(separator: ".")
                    throw error(
                        "the assignment to '\(shown)' overlaps the earlier one to '\(otherShown)'", at: position)
                }
                try expect(.equal, "after the field path '\(shown)'")
                update.assignments.append(Assignment(path: path, value: try parseExpression(), position: position))
            } while accept(.comma)
            var last = -1
            if accept(.where) {
                last = 0
                update.whereClause = try parseExpression()
            }
            try finish([.where], last: last, after: "the assignments", also: ["','"])
            return update
        }

        /// Checks the statement ends here, explaining misplaced or unknown clauses.
        mutating func finish(_ clauses: [Keyword], last: Int, after start: String, also: [String] = [])
            throws(QueryError)
        {
            if atEnd || current.is(.semicolon) { return }
            func name(_ k: Keyword) -> String { k == .order ? "ORDER BY" : k == .on ? "ON ID CONFLICT" : k.rawValue }
            if let k = current.keyword, let i = clauses.firstIndex(of: k), i <= last {
                let message =
                    i == last ? "\(name(k)) can appear only once" : "\(name(k)) must come before \(name(clauses[last]))"
                throw error(message, at: current.position)
            }
            let remaining = Array(clauses[(last + 1)...])
            let expected = (last < 0 ? also : []) + remaining.map(name) + ["the end of the statement"]
            let context = last < 0 ? start : "the \(name(clauses[last])) clause"
            throw unexpected("\(Self.list(expected)) after \(context)", suggesting: remaining)
        }

        /// A collection, field or column name: an identifier, a backtick-quoted name or an
        /// unreserved keyword (any keyword when `allowReserved`), as written.
        mutating func parseName(_ expected: String, allowReserved: Bool = false) throws(QueryError) -> String {
            switch current.kind {
            case .identifier(let name):
                advance()
                return name
            case .keyword(let k) where allowReserved || !k.isReserved:
                return advance().text
            case .keyword:
                throw unexpected(expected, hint: Self.reservedHint(current))
            default:
                throw unexpected(expected)
            }
        }

        // MARK: Expressions

        /// An expression and the height of its tree, which bounds the evaluator's recursion.
        struct Node {
            var expression: Expression
            var height: Int
        }

        mutating func parseExpression() throws(QueryError) -> Expression { try parseOr().expression }

        mutating func parseOr() throws(QueryError) -> Node {
            var left = try parseAnd()
            while current.is(.or) {
                let op = advance()
                left = try combine(.or, left, try parseAnd(), at: op)
            }
            return left
        }

        mutating func parseAnd() throws(QueryError) -> Node {
            var left = try parseNot()
            while current.is(.and) {
                let op = advance()
                left = try combine(.and, left, try parseNot(), at: op)
            }
            return left
        }

        mutating func parseNot() throws(QueryError) -> Node {
            guard current.is(.not) else { return try parseComparison() }
            try enter()
            defer { nesting -= 1 }
            let op = advance()
            let operand = try parseNot()
            return try node(.unary(.not, operand.expression), height: operand.height + 1, at: op)
        }

        mutating func parseComparison() throws(QueryError) -> Node {
            let left = try parseAdditive()
            guard let op = comparison(current) else { return left }
            let token = advance()
            let right = try parseAdditive()
            if comparison(current) != nil {
                throw error(
                    "comparisons cannot be chained: combine them with AND, as in a < b AND b < c", at: current.position)
            }
            return try combine(op, left, right, at: token)
        }

        func comparison(_ token: Token) -> BinaryOperator? {
            switch token.symbol {
            case .equal, .doubleEqual: .equal
            case .notEqual, .lessGreater: .notEqual
            case .less: .less
            case .lessOrEqual: .lessOrEqual
            case .greater: .greater
            case .greaterOrEqual: .greaterOrEqual
            default: nil
            }
        }

        mutating func parseAdditive() throws(QueryError) -> Node {
            var left = try parseMultiplicative()
            while true {
                let op: BinaryOperator
                switch current.symbol {
                case .plus: op = .add
                case .minus: op = .subtract
                default: return left
                }
                let token = advance()
                left = try combine(op, left, try parseMultiplicative(), at: token)
            }
        }

        mutating func parseMultiplicative() throws(QueryError) -> Node {
            var left = try parseUnary()
            while true {
                let op: BinaryOperator
                switch current.symbol {
                case .star: op = .multiply
                case .slash: op = .divide
                case .percent: op = .remainder
                default: return left
                }
                let token = advance()
                left = try combine(op, left, try parseUnary(), at: token)
            }
        }

        mutating func parseUnary() throws(QueryError) -> Node {
            try enter()
            defer { nesting -= 1 }
            guard current.is(.minus) else { return try parsePrimary() }
            let op = advance()
            let operand = try parseUnary()
            switch operand.expression {
            case .literal(.int(let i)) where i != .min: return Node(expression: .literal(.int(-i)), height: 1)
            case .literal(.double(let d)): return Node(expression: .literal(.double(-d)), height: 1)
            case let e: return try node(.unary(.negate, e), height: operand.height + 1, at: op)
            }
        }

        /// Counts one level of recursion, failing past `maximumNesting`.
        mutating func enter() throws(QueryError) {
            nesting += 1
            if nesting > Parser.maximumNesting {
                throw error(
                    "expression nested too deeply "
                        + "(more than \(Parser.maximumNesting) levels of brackets or prefix operators)",
                    at: current.position)
            }
        }

        func combine(_ op: BinaryOperator, _ l: Node, _ r: Node, at token: Token) throws(QueryError) -> Node {
            try node(.binary(op, l.expression, r.expression), height: max(l.height, r.height) + 1, at: token)
        }

        /// A node, failing when its tree is taller than `maximumHeight`.
        func node(_ e: Expression, height: Int, at token: Token) throws(QueryError) -> Node {
            if height > Parser.maximumHeight {
                throw error(
                    "expression too complex (more than \(Parser.maximumHeight) levels of operators): "
                        + "split it up or pass values as parameters",
                    at: token.position)
            }
            return Node(expression: e, height: height)
        }

        mutating func parsePrimary() throws(QueryError) -> Node {
            let token = current
            let leaf: Expression
            switch token.kind {
            case .string(let s): leaf = .literal(.string(s))
            case .integer(let i): leaf = .literal(.int(i))
            case .decimal(let d): leaf = .literal(.double(d))
            case .keyword(.true), .keyword(.false): leaf = .literal(.bool(token.is(.true)))
            case .keyword(.null): leaf = .literal(.null)
            case .parameter(let name): leaf = .parameter(name)
            case .identifier(let name) where next.is(.leftParen) && !token.text.hasPrefix("`"):
                return try parseCall(name.lowercased())
            case .identifier(let name):
                advance()
                return Node(expression: try parsePath(from: name), height: 1)
            case .keyword(let k) where !k.isReserved:
                advance()
                return Node(expression: try parsePath(from: token.text), height: 1)
            case .keyword where next.is(.dot) || comparison(next) != nil:
                throw unexpected("an expression", hint: Self.reservedHint(token))
            case .symbol(.leftParen):
                advance()
                let inner = try parseOr()
                try expect(.rightParen, "to close the '(' at \(token.position)")
                return inner
            case .symbol(.leftBrace):
                return try parseObject()
            case .symbol(.leftBracket):
                advance()
                let items = try parseList(until: .rightBracket, what: "array element")
                return try node(
                    .array(items.map(\.expression)), height: 1 + (items.map(\.height).max() ?? 0), at: token)
            case .symbol(.colon):
                throw unexpected("an expression", hint: "write a parameter as :name, with no space after the colon")
            default:
                throw unexpected("an expression")
            }
            advance()
            return Node(expression: leaf, height: 1)
        }

        mutating func parsePath(from first: String) throws(QueryError) -> Expression {
            var path = [first]
            while accept(.dot) { path.append(try parseName("a field name after '.'", allowReserved: true)) }
            return .path(path)
        }

        /// Comma-separated expressions up to `close` (the opening bracket already read).
        mutating func parseList(until close: Symbol, what: String) throws(QueryError) -> [Node] {
            if accept(close) { return [] }
            var items: [Node] = []
            repeat {
                items.append(try parseOr())
            } while accept(.comma)
            try expect(close, "or ',' after the \(what)")
            return items
        }

        mutating func parseCall(_ name: String) throws(QueryError) -> Node {
            let token = advance()
            advance()
            let arguments = try parseList(until: .rightParen, what: "function argument")
            guard let arity = Evaluator.functionArity[name] else {
                let known = Evaluator.functionArity.keys.sorted().joined(separator: ", ")
                throw error(
                    "unknown function '\(token.text)': the available functions are \(known)", at: token.position)
            }
            if arguments.count != arity {
                let given = arguments.count == 1 ? "1 was" : "\(arguments.count) were"
                throw error(
                    "\(name) takes \(arity) argument\(arity == 1 ? "" : "s"), but \(given) given", at: token.position)
            }
            let height = 1 + (arguments.map(\.height).max() ?? 0)
            return try node(.function(name, arguments.map(\.expression)), height: height, at: token)
        }

        mutating func parseObject() throws(QueryError) -> Node {
            let open = advance()
            var entries: [ObjectEntry] = []
            var height = 1
            if accept(.rightBrace) { return Node(expression: .object(entries), height: height) }
            repeat {
                let keyToken = current
                let key: String
                switch keyToken.kind {
                case .string(let s), .identifier(let s): key = s
                case .keyword: key = keyToken.text
                default: throw unexpected("an object key (a name or a quoted string)")
                }
                advance()
                if entries.contains(where: { $0.key == key }) {
                    throw error("duplicate key '\(key)' in object literal", at: keyToken.position)
                }
                splitParameter()
                try expect(.colon, "after the object key '\(key)'")
                let value = try parseOr()
                height = max(height, value.height + 1)
                entries.append(ObjectEntry(key: key, value: value.expression))
            } while accept(.comma)
            try expect(.rightBrace, "or ',' after the object member")
            return try node(.object(entries), height: height, at: open)
        }

        /// `{done:true}` lexes as `done` then the parameter `:true`; split it back into `:` and `true`.
        mutating func splitParameter() {
            guard case .parameter(let name) = current.kind else { return }
            let p = current.position
            let colon = Token(kind: .symbol(.colon), text: ":", position: p)
            let word = Token(
                kind: Lexer.classify(name), text: name,
                position: SourcePosition(offset: p.offset + 1, line: p.line, column: p.column + 1))
            tokens.replaceSubrange(index...index, with: [colon, word])
        }
    }
}

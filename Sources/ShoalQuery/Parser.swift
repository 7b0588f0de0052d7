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

    /// The statements of `text`, each with its own text and where it starts.
    public static func parseStatements(_ text: String) throws(QueryError) -> [ParsedStatement] {
        var state = try State(text)
        let statements = try state.parseStatements()
        let characters = Array(text)
        return statements.map { parsed in
            let start = parsed.start.position.offset
            return ParsedStatement(
                statement: parsed.statement, text: String(characters[start..<max(start, parsed.end)]),
                position: parsed.start.position)
        }
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
        /// Whether `COUNT(*)` may be read: only while reading an item of a SELECT list.
        var countAllAllowed = false
        /// Where the first `COUNT(*)` of the current SELECT item is.
        var countAllPosition: SourcePosition?

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
            if atEnd {
                let note = hint.map { "; \($0)" } ?? ""
                return error("unexpected end of query: expected \(expected)\(note)", at: current.position)
            }
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

        /// Each statement with its first token and the character offset just past its last one.
        mutating func parseStatements() throws(QueryError) -> [(statement: Statement, start: Token, end: Int)] {
            if atEnd { throw error("empty query", at: SourcePosition(offset: 0, line: 1, column: 1)) }
            var statements: [(statement: Statement, start: Token, end: Int)] = []
            repeat {
                let start = current
                let statement = try parseStatement()
                let last = tokens[max(0, index - 1)]
                statements.append((statement, start, last.position.offset + last.text.count))
            } while accept(.semicolon) && !atEnd
            return statements
        }

        mutating func parseStatement() throws(QueryError) -> Statement {
            switch current.keyword {
            case .select: return .select(try parseSelect())
            case .insert: return .insert(try parseInsert())
            case .update: return .update(try parseUpdate())
            case .delete: return .delete(try parseDelete())
            case .evict: return .evict(try parseDelete())
            case .alter: return .system(try parseAlterSystem())
            case .show where next.is(.indexes):
                advance()
                advance()
                try finish([], last: -1, after: "SHOW INDEXES")
                return .index(.show)
            case .show: return .system(try parseShow())
            case .create: return .index(try parseCreateIndex())
            case .drop: return .index(try parseDropIndex())
            default:
                throw unexpected(
                    "SELECT, INSERT, UPDATE, DELETE, EVICT, ALTER SYSTEM, SHOW, CREATE INDEX or DROP INDEX "
                        + "at the start of a statement",
                    suggesting: [.select, .insert, .update, .delete, .evict, .alter, .show, .create, .drop])
            }
        }

        /// `CREATE INDEX [IF NOT EXISTS] name ON collection (path, ...)`.
        mutating func parseCreateIndex() throws(QueryError) -> IndexStatement {
            advance()
            guard accept(.index) else {
                throw unexpected("INDEX after CREATE", suggesting: [.index], hint: typoOfIndex ? nil : "CREATE makes indexes only")
            }
            var ifNotExists = false
            if accept(.if) {
                try expect(.not, "after IF")
                try expect(.exists, "after IF NOT")
                ifNotExists = true
            }
            let nameToken = current
            let name = try parseName("an index name after CREATE INDEX")
            try checkIndexName(name, at: nameToken.position)
            try expect(.on, "after the index name '\(name)'")
            let collection = try parseName("a collection name after ON")
            guard accept(.leftParen) else {
                throw unexpected(
                    "'(' after ON \(collection)",
                    hint: "list the indexed fields in parentheses, as in CREATE INDEX \(name) ON \(collection) (year)")
            }
            var paths: [FieldPath] = []
            repeat {
                let position = current.position
                var path = [try parseName("a field path to index")]
                while accept(.dot) { path.append(try parseName("a field name after '.'", allowReserved: true)) }
                let shown = path.joined(separator: ".")
                if current.is(.leftBracket) {
                    throw error(
                        "brackets cannot be used in an indexed path: name nested fields with dots, as in \(shown).key",
                        at: current.position)
                }
                if path[0] == "_id" {
                    throw error(
                        "'\(shown)' cannot be indexed: documents are found by _id through the primary key already",
                        at: position)
                }
                if let bad = path.first(where: { $0.contains("\"") || $0.contains("\\") }) {
                    throw error(
                        "'\(bad)' cannot be indexed: a field name in an indexed path may not contain '\"' or '\\'",
                        at: position)
                }
                if paths.contains(where: { $0.path == path }) {
                    throw error("'\(shown)' appears twice in index \(name): list each path once", at: position)
                }
                paths.append(FieldPath(path: path, position: position))
            } while accept(.comma)
            if paths.count > Self.maximumIndexPaths {
                throw error(
                    "index \(name) lists \(paths.count) paths; an index takes at most \(Self.maximumIndexPaths)",
                    at: paths[Self.maximumIndexPaths].position)
            }
            try expect(.rightParen, "or ',' after the indexed paths")
            try finish([], last: -1, after: "the indexed paths")
            return .create(
                IndexDefinition(name: name, collection: collection, paths: paths, namePosition: nameToken.position),
                ifNotExists: ifNotExists)
        }

        /// `DROP INDEX [IF EXISTS] name`.
        mutating func parseDropIndex() throws(QueryError) -> IndexStatement {
            advance()
            guard accept(.index) else {
                throw unexpected("INDEX after DROP", suggesting: [.index], hint: typoOfIndex ? nil : "DROP removes indexes only")
            }
            var ifExists = false
            if accept(.if) {
                try expect(.exists, "after IF")
                ifExists = true
            }
            let nameToken = current
            let name = try parseName("an index name after DROP INDEX")
            try finish([], last: -1, after: "the index name '\(name)'")
            return .drop(name: name, ifExists: ifExists, position: nameToken.position)
        }

        /// Whether the current word looks like a misspelled INDEX (then the message suggests it).
        var typoOfIndex: Bool {
            guard case .identifier(let word) = current.kind else { return false }
            return Self.isTypo(word.uppercased(), of: Keyword.index.rawValue)
        }

        /// The most paths one index may list.
        static let maximumIndexPaths = 8

        /// An index name is 1 to 64 ASCII letters, digits and underscores, starting
        /// with a letter: it becomes part of an SQLite name, which ignores case.
        func checkIndexName(_ name: String, at position: SourcePosition) throws(QueryError) {
            let ascii = name.unicodeScalars
            let valid =
                !ascii.isEmpty && ascii.count <= 64
                && ascii.allSatisfy { $0.isASCII && ($0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0)) }
                && ascii.first!.properties.isAlphabetic
            guard valid else {
                throw error(
                    "invalid index name '\(name)': use 1 to 64 ASCII letters, digits and underscores, "
                        + "starting with a letter",
                    at: position)
            }
        }

        /// `ALTER SYSTEM SET name = value`, where the value is a literal or a `:parameter`.
        mutating func parseAlterSystem() throws(QueryError) -> SystemStatement {
            advance()
            try expect(.system, "after ALTER")
            guard accept(.set) else { throw unexpected("SET after ALTER SYSTEM", suggesting: [.set]) }
            let nameToken = current
            let name = try parseName("a system parameter name after ALTER SYSTEM SET")
            guard accept(.equal) else {
                throw unexpected(
                    "'=' after the parameter name '\(name)'",
                    hint: current.is(.doubleEqual) ? "set a parameter with a single '='" : nil)
            }
            let valueToken = current
            let value = try parseSystemValue()
            try finish([], last: -1, after: "the value of \(name)")
            return .set(
                SystemSetting(
                    name: name, value: value, namePosition: nameToken.position, valuePosition: valueToken.position))
        }

        /// The value of `ALTER SYSTEM SET`: a number (maybe negative), a string, TRUE, FALSE or a `:parameter`.
        mutating func parseSystemValue() throws(QueryError) -> Expression {
            let expected = "a value after '=': a number, a string, TRUE, FALSE or a :parameter"
            if current.is(.minus) {
                let minus = advance()
                switch current.kind {
                case .integer(let i):
                    advance()
                    return .literal(.int(-i))
                case .decimal(let d):
                    advance()
                    return .literal(.double(-d))
                default:
                    throw error("expected a number after '-', found \(current)", at: minus.position)
                }
            }
            let value: Expression
            switch current.kind {
            case .integer(let i): value = .literal(.int(i))
            case .decimal(let d): value = .literal(.double(d))
            case .string(let s): value = .literal(.string(s))
            case .keyword(.true): value = .literal(.bool(true))
            case .keyword(.false): value = .literal(.bool(false))
            case .parameter(let name): value = .parameter(name)
            default: throw unexpected(expected)
            }
            advance()
            return value
        }

        /// `SHOW name` or `SHOW ALL`.
        mutating func parseShow() throws(QueryError) -> SystemStatement {
            advance()
            if accept(.all) {
                try finish([], last: -1, after: "SHOW ALL")
                return .showAll
            }
            let token = current
            let name = try parseName("a system parameter name or ALL after SHOW")
            try finish([], last: -1, after: "the parameter name '\(name)'")
            return .show(name: name, position: token.position)
        }

        mutating func parseSelect() throws(QueryError) -> SelectStatement {
            advance()
            var projection: [Projection] = []
            if !accept(.star) {
                if current.is(.from) { throw unexpected("* or a list of expressions after SELECT") }
                repeat {
                    let start = current.position
                    let expression = try parseProjectionItem()
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
                    if !projection.isEmpty, expression == .countAll || projection[0].expression == .countAll {
                        throw error(
                            "COUNT(*) cannot be combined with other columns: it returns a single row "
                                + "with the number of matching documents",
                            at: start)
                    }
                    projection.append(Projection(expression: expression, name: name))
                } while accept(.comma)
            }
            try expect(.from, "after the projection")
            let (collection, types) = try parseCollection(after: "FROM")
            var select = SelectStatement(collection: collection, projection: projection, declaredTypes: types)
            var last = -1
            let clauses: [Keyword] = [.where, .order, .limit, .offset]
            try parseFilterClauses(
                base: 0, last: &last, where: &select.whereClause, orderBy: &select.orderBy, limit: &select.limit,
                offset: &select.offset)
            try finish(clauses, last: last, after: Self.context(clauses, last: last, otherwise: "the collection name"))
            return select
        }

        /// One item of a SELECT list, where (and only where) a whole `COUNT(*)` is allowed.
        mutating func parseProjectionItem() throws(QueryError) -> Expression {
            countAllAllowed = true
            countAllPosition = nil
            defer { countAllAllowed = false }
            let expression = try parseExpression()
            if expression != .countAll, let position = countAllPosition {
                throw error(
                    "COUNT(*) must be a whole item of the SELECT list, not part of an expression, "
                        + "as in SELECT COUNT(*) FROM c",
                    at: position)
            }
            return expression
        }

        /// The optional `WHERE`, `ORDER BY`, `LIMIT` and `OFFSET` clauses, in that order; `last` becomes
        /// `base` plus the index of the last one present.
        mutating func parseFilterClauses(
            base: Int, last: inout Int, where whereClause: inout Expression?, orderBy: inout [OrderTerm],
            limit: inout Expression?, offset: inout Expression?
        ) throws(QueryError) {
            if accept(.where) {
                last = base
                whereClause = try parseExpression()
            }
            if accept(.order) {
                last = base + 1
                try expect(.by, "after ORDER")
                repeat {
                    let expression = try parseExpression()
                    let descending = accept(.desc)
                    if !descending { _ = accept(.asc) }
                    orderBy.append(OrderTerm(expression: expression, descending: descending))
                } while accept(.comma)
            }
            if accept(.limit) {
                last = base + 2
                limit = try parseExpression()
            }
            if accept(.offset) {
                last = base + 3
                offset = try parseExpression()
            }
        }

        mutating func parseInsert() throws(QueryError) -> InsertStatement {
            advance()
            try expect(.into, "after INSERT")
            let (collection, types) = try parseCollection(after: "INTO")
            let initial = accept(.initial)
            guard accept(.documents) || accept(.values) else {
                if initial {
                    throw unexpected("DOCUMENTS or VALUES after INITIAL", suggesting: [.documents, .values])
                }
                throw unexpected(
                    "DOCUMENTS, VALUES or INITIAL DOCUMENTS after the collection name",
                    suggesting: [.documents, .values, .initial])
            }
            var documents: [Expression] = []
            repeat {
                let open = current
                guard accept(.leftParen) else {
                    let hint =
                        current.is(.leftBrace)
                        ? "wrap each document in parentheses, as in DOCUMENTS ({...})"
                        : current.is(.initial) ? "INITIAL comes before DOCUMENTS, as in INITIAL DOCUMENTS (...)" : nil
                    throw unexpected("'(' before the document", hint: hint)
                }
                documents.append(try parseExpression())
                try expect(.rightParen, "to close the document opened at \(open.position)")
            } while accept(.comma)
            var insert = InsertStatement(
                collection: collection, documents: documents, initial: initial, declaredTypes: types)
            if initial, current.is(.on) {
                throw error(
                    "ON ID CONFLICT cannot be used with INITIAL DOCUMENTS: initial documents never replace "
                        + "existing ones, they merge with them as defaults; remove the ON ID CONFLICT clause",
                    at: current.position)
            }
            var last = -1
            if accept(.on) {
                last = 0
                try expect(.id, "after ON")
                try expect(.conflict, "after ON ID")
                insert.conflict = try parseConflictPolicy()
            }
            let clauses: [Keyword] = initial ? [] : [.on]
            try finish(clauses, last: last, after: "the documents", also: last < 0 ? ["','"] : [])
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

        /// What an UPDATE does to a field, for messages about overlapping targets.
        enum Change: Equatable {
            case counter, assignment, unset

            /// How messages name a change of this kind, and the preposition before its path.
            var noun: (String, String) {
                switch self {
                case .counter: ("counter operation", "on")
                case .assignment: ("assignment", "to")
                case .unset: ("UNSET", "of")
                }
            }

            /// Why `_id` cannot be the target.
            func idMessage(_ shown: String) -> String {
                let verb =
                    switch self {
                    case .counter: "apply a counter operation to"
                    case .assignment: "assign to"
                    case .unset: "unset"
                    }
                return "cannot \(verb) '\(shown)': the _id of a document never changes"
            }
        }

        mutating func parseUpdate() throws(QueryError) -> UpdateStatement {
            advance()
            let (collection, types) = try parseCollection(after: "UPDATE")
            var update = UpdateStatement(collection: collection, assignments: [], declaredTypes: types)
            guard current.is(.apply) || current.is(.set) || current.is(.unset) else {
                throw unexpected("APPLY, SET or UNSET after the collection name", suggesting: [.apply, .set, .unset])
            }
            var targets: [(FieldPath, Change)] = []
            var last = -1
            if accept(.apply) {
                last = 0
                repeat {
                    let target = try parseTarget("a counter field name after APPLY", .counter, targets: targets)
                    targets.append((target, .counter))
                    let shown = target.path.joined(separator: ".")
                    let kind: CounterOperation.Kind
                    if current.is(.increment) || current.is(.pnIncrement) {
                        let word = advance().text
                        try expect(.by, "after \(word)")
                        kind = .increment(try parseExpression())
                    } else if accept(.restart) {
                        if accept(.with) {
                            kind = .restart(try parseExpression())
                        } else {
                            kind = .restart(nil)
                        }
                    } else {
                        throw unexpected(
                            "INCREMENT BY, PN_INCREMENT BY or RESTART after the counter field '\(shown)'",
                            suggesting: [.increment, .pnIncrement, .restart],
                            hint: current.is(.equal)
                                ? "assign values with SET \(shown) = ..., or reset a counter with APPLY \(shown) "
                                    + "RESTART WITH ..." : nil)
                    }
                    update.counterOperations.append(
                        CounterOperation(path: target.path, kind: kind, position: target.position))
                } while accept(.comma)
            }
            if accept(.set) {
                last = 1
                repeat {
                    let target = try parseTarget("a field name to assign", .assignment, targets: targets)
                    targets.append((target, .assignment))
                    try expect(.equal, "after the field path '\(target.path.joined(separator: "."))'")
                    update.assignments.append(
                        Assignment(path: target.path, value: try parseExpression(), position: target.position))
                } while accept(.comma)
            }
            if accept(.unset) {
                last = 2
                repeat {
                    let target = try parseTarget("a field name to unset", .unset, targets: targets)
                    targets.append((target, .unset))
                    update.unsets.append(target)
                } while accept(.comma)
            }
            try parseFilterClauses(
                base: 3, last: &last, where: &update.whereClause, orderBy: &update.orderBy, limit: &update.limit,
                offset: &update.offset)
            let clauses: [Keyword] = [.apply, .set, .unset, .where, .order, .limit, .offset]
            let context =
                switch last {
                case 0: "the counter operations"
                case 1: "the assignments"
                case 2: "the fields to unset"
                default: Self.context(clauses, last: last, otherwise: "the collection name")
                }
            try finish(clauses, last: last, after: context, also: last < 3 ? ["','"] : [])
            return update
        }

        /// The field path an UPDATE changes, checked against `_id` and the earlier targets.
        mutating func parseTarget(_ expected: String, _ change: Change, targets: [(FieldPath, Change)])
            throws(QueryError) -> FieldPath
        {
            let position = current.position
            var path = [try parseName(expected)]
            while accept(.dot) { path.append(try parseName("a field name after '.'", allowReserved: true)) }
            let shown = path.joined(separator: ".")
            if current.is(.leftBracket) {
                throw error(
                    "brackets cannot be used in the fields an UPDATE changes: "
                        + "name nested fields with dots, as in \(shown).key",
                    at: current.position)
            }
            if path[0] == "_id" { throw error(change.idMessage(shown), at: position) }
            if let (other, otherChange) = targets.first(where: {
                $0.0.path.starts(with: path) || path.starts(with: $0.0.path)
            }) {
                let (noun, preposition) = change.noun
                let (otherNoun, otherPreposition) = otherChange.noun
                let otherShown = other.path.joined(separator: ".")
                let earlier = otherChange == change ? "one" : "\(otherNoun)"
                throw error(
                    "the \(noun) \(preposition) '\(shown)' overlaps the earlier \(earlier) \(otherPreposition) "
                        + "'\(otherShown)'; an UPDATE may change a field, or anything inside it, only once",
                    at: position)
            }
            return FieldPath(path: path, position: position)
        }

        mutating func parseDelete() throws(QueryError) -> DeleteStatement {
            let verb = advance().keyword?.rawValue ?? "DELETE"
            guard accept(.from) else {
                throw unexpected(
                    "FROM after \(verb)", suggesting: [.from],
                    hint: current.is(.star)
                        ? "\(verb) works on whole documents: write \(verb) FROM c WHERE ..." : nil)
            }
            let (collection, types) = try parseCollection(after: "FROM")
            var statement = DeleteStatement(collection: collection, declaredTypes: types)
            var last = -1
            if accept(.where) {
                last = 0
                statement.whereClause = try parseExpression()
            }
            try finish([.where], last: last, after: last < 0 ? "the collection name" : "the WHERE clause")
            return statement
        }

        /// A collection name, or a `COLLECTION name (field TYPE, ...)` declaring field types, after `keyword`.
        mutating func parseCollection(after keyword: String) throws(QueryError)
            -> (name: String, types: [String: FieldType])
        {
            guard current.is(.collection) else {
                return (try parseName("a collection name after \(keyword)"), [:])
            }
            let word = advance()
            switch current.kind {
            case .identifier: break
            case .keyword(let k) where !k.isReserved: break
            case .keyword where next.is(.leftParen):
                throw unexpected("a collection name after COLLECTION", hint: Self.reservedHint(current))
            default:
                throw unexpected(
                    "a collection name after COLLECTION",
                    hint: "to use a collection named '\(word.text)', quote it with backticks (`\(word.text)`)")
            }
            let name = try parseName("a collection name after COLLECTION")
            guard accept(.leftParen) else {
                throw unexpected(
                    "'(' after COLLECTION \(name)",
                    hint: "declare the field types in parentheses, as in COLLECTION \(name) (f MAP, n COUNTER)")
            }
            let typeNames = Self.list(Self.fieldTypes.map(\.rawValue))
            var types: [String: FieldType] = [:]
            repeat {
                let fieldToken = current
                let field = try parseName("a field name to declare in COLLECTION \(name)")
                if types[field] != nil {
                    throw error(
                        "field '\(field)' is declared twice in COLLECTION \(name): give each field one type",
                        at: fieldToken.position)
                }
                let typeToken = current
                let word: String
                switch typeToken.kind {
                case .identifier(let name): word = name
                case .keyword: word = typeToken.text
                default:
                    throw unexpected(
                        "a field type (\(typeNames)) after the field name '\(field)'",
                        hint: typeToken.is(.dot) ? "only top-level fields can be declared" : nil)
                }
                guard let type = FieldType(rawValue: word.uppercased()) else {
                    var message = "unknown field type '\(word)' for '\(field)': the field types are \(typeNames)"
                    if let guess = Self.fieldTypes.first(where: { Self.isTypo(word.uppercased(), of: $0.rawValue) }) {
                        message += "; did you mean \(guess.rawValue)?"
                    }
                    throw error(message, at: typeToken.position)
                }
                advance()
                types[field] = type
            } while accept(.comma)
            try expect(.rightParen, "or ',' after the field types of COLLECTION \(name)")
            return (name, types)
        }

        /// The field types a COLLECTION clause may declare, in the order messages list them.
        static let fieldTypes: [FieldType] = [.register, .map, .counter, .attachment]

        /// Checks the statement ends here, explaining misplaced or unknown clauses. `clauses` are
        /// the statement's optional clauses in order, `last` the index of the last one read (-1 for
        /// none), `context` what was read last and `also` what else may follow it.
        mutating func finish(_ clauses: [Keyword], last: Int, after context: String, also: [String] = [])
            throws(QueryError)
        {
            if atEnd || current.is(.semicolon) { return }
            if let k = current.keyword, let i = clauses.firstIndex(of: k), i <= last {
                var message =
                    i == last
                    ? "\(Self.clauseName(k)) can appear only once"
                    : "\(Self.clauseName(k)) must come before \(Self.clauseName(clauses[last]))"
                if i == last, [.apply, .set, .unset].contains(k) {
                    message += ": list all its items after one \(k.rawValue), separated by ','"
                }
                throw error(message, at: current.position)
            }
            let remaining = Array(clauses[(last + 1)...])
            let expected = also + remaining.map(Self.clauseName) + ["the end of the statement"]
            throw unexpected("\(Self.list(expected)) after \(context)", suggesting: remaining)
        }

        static func clauseName(_ k: Keyword) -> String {
            k == .order ? "ORDER BY" : k == .on ? "ON ID CONFLICT" : k.rawValue
        }

        /// "the WHERE clause" for the last clause read, or `otherwise` when none was.
        static func context(_ clauses: [Keyword], last: Int, otherwise: String) -> String {
            last < 0 ? otherwise : "the \(clauseName(clauses[last])) clause"
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

        /// An additive expression, optionally followed by one comparison: `a < b`, `a IS [NOT] NULL`,
        /// `a IS [NOT] MISSING`, `a [NOT] IN list` or `a [NOT] LIKE pattern`.
        mutating func parseComparison() throws(QueryError) -> Node {
            let left = try parseAdditive()
            guard let result = try parseComparisonOperator(after: left) else { return left }
            if atComparisonOperator {
                throw error(
                    "comparisons cannot be chained: combine them with AND, as in a < b AND b < c, "
                        + "or group them with parentheses",
                    at: current.position)
            }
            return result
        }

        /// Whether the current token starts a comparison operator.
        var atComparisonOperator: Bool {
            comparison(current) != nil || current.is(.is) || current.is(.in) || current.is(.like)
                || (current.is(.not) && (next.is(.in) || next.is(.like)))
        }

        /// The comparison of `left` with what follows, or `nil` when no comparison operator follows.
        mutating func parseComparisonOperator(after left: Node) throws(QueryError) -> Node? {
            if let op = comparison(current) {
                let token = advance()
                return try combine(op, left, try parseAdditive(), at: token)
            }
            if current.is(.is) {
                let token = advance()
                let negated = accept(.not)
                let op: UnaryOperator
                if accept(.null) {
                    op = negated ? .isNotNull : .isNull
                } else if accept(.missing) {
                    op = negated ? .isNotMissing : .isMissing
                } else {
                    let isWord: Bool
                    switch current.kind {
                    case .identifier, .keyword: isWord = true
                    default: isWord = false
                    }
                    throw unexpected(
                        "NULL or MISSING after \(negated ? "IS NOT" : "IS")", suggesting: [.null, .missing],
                        hint: isWord || atEnd ? nil : "IS only tests for NULL or MISSING: compare values with = or !=")
                }
                return try node(.unary(op, left.expression), height: left.height + 1, at: token)
            }
            let token = current
            var negated = false
            if current.is(.not) {
                advance()
                guard current.is(.in) || current.is(.like) else {
                    throw unexpected(
                        "IN or LIKE after NOT", suggesting: [.in, .like],
                        hint: "to negate a condition, put NOT in front of it, as in NOT a = 1")
                }
                negated = true
            }
            if accept(.in) {
                let right = try parseInList(after: negated ? "NOT IN" : "IN")
                return try combine(negated ? .notIn : .in, left, right, at: token)
            }
            if accept(.like) {
                let patternToken = current
                let right = try parseAdditive()
                if case .literal(let pattern) = right.expression {
                    guard case .string(let text) = pattern else {
                        throw error(
                            "LIKE needs a string pattern, as in a LIKE 'abc%', found \(patternToken)",
                            at: patternToken.position)
                    }
                    if text.reversed().prefix(while: { $0 == "\\" }).count % 2 == 1 {
                        throw error(
                            "the LIKE pattern ends with a lone '\\', which escapes nothing: "
                                + "write '\\\\' to match a backslash",
                            at: patternToken.position)
                    }
                }
                return try combine(negated ? .notLike : .like, left, right, at: token)
            }
            return nil
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

        /// The right side of IN: `(a, b, ...)` or `[a, b, ...]` as an array, or a parameter.
        mutating func parseInList(after word: String) throws(QueryError) -> Node {
            let open = current
            switch open.kind {
            case .parameter(let name):
                advance()
                return Node(expression: .parameter(name), height: 1)
            case .symbol(.leftParen), .symbol(.leftBracket):
                try enter()
                defer { nesting -= 1 }
                advance()
                let items = try parseList(until: open.is(.leftParen) ? .rightParen : .rightBracket, what: "list item")
                return try node(
                    .array(items.map(\.expression)), height: 1 + (items.map(\.height).max() ?? 0), at: open)
            default:
                throw unexpected("a list after \(word): (a, b, ...), [a, b, ...] or a :parameter")
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

        /// A primary expression with its postfix `[key]` accesses.
        mutating func parsePrimary() throws(QueryError) -> Node {
            var result = try parseAtom()
            var chained = false
            while true {
                if current.is(.leftBracket) {
                    let open = advance()
                    if current.is(.rightBracket) {
                        throw unexpected("a key or an index between '[' and ']', as in a['key'] or a[0]")
                    }
                    let key = try parseOr()
                    try expect(.rightBracket, "to close the '[' at \(open.position)")
                    result = try node(
                        .index(result.expression, key.expression), height: max(result.height, key.height) + 1,
                        at: open)
                    chained = true
                } else if chained, current.is(.dot) {
                    let dot = advance()
                    let name = try parseName("a field name after '.'", allowReserved: true)
                    result = try node(
                        .index(result.expression, .literal(.string(name))), height: result.height + 1, at: dot)
                } else {
                    return result
                }
            }
        }

        mutating func parseAtom() throws(QueryError) -> Node {
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
            case .keyword(.count) where next.is(.leftParen):
                return try parseCountAll()
            case .keyword(let k) where !k.isReserved:
                advance()
                return Node(expression: try parsePath(from: token.text), height: 1)
            case .keyword where next.is(.dot) || next.is(.leftBracket) || comparison(next) != nil:
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

        /// `COUNT(*)`, allowed only as a whole item of a SELECT list.
        mutating func parseCountAll() throws(QueryError) -> Node {
            let count = advance()
            advance()
            guard accept(.star) else {
                throw unexpected("'*' in COUNT(*)", hint: "COUNT counts the matching documents and takes only *")
            }
            try expect(.rightParen, "to close COUNT(*)")
            guard countAllAllowed else {
                throw error(
                    "COUNT(*) is only allowed as a whole item of the SELECT list, as in SELECT COUNT(*) FROM c",
                    at: count.position)
            }
            if countAllPosition == nil { countAllPosition = count.position }
            return Node(expression: .countAll, height: 1)
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

/// One lexical unit of DQL text, with the text as written and where it starts.
public struct Token: Sendable, Hashable, CustomStringConvertible {
    /// What kind of token this is, with its decoded value.
    public enum Kind: Sendable, Hashable {
        /// A name: bare (`title`, `_id`) or backtick-quoted (`` `odd name` ``), unquoted.
        case identifier(String)
        case keyword(Keyword)
        /// A string literal, with its escapes resolved.
        case string(String)
        case integer(Int64)
        case decimal(Double)
        /// `:name`, without the colon.
        case parameter(String)
        case symbol(Symbol)
        /// The end of the text.
        case end
    }

    /// The words DQL gives a meaning to; matched case-insensitively.
    public enum Keyword: String, Sendable, Hashable, CaseIterable {
        case select = "SELECT"
        case from = "FROM"
        case `where` = "WHERE"
        case and = "AND"
        case or = "OR"
        case not = "NOT"
        case insert = "INSERT"
        case into = "INTO"
        case documents = "DOCUMENTS"
        case values = "VALUES"
        case on = "ON"
        case id = "ID"
        case conflict = "CONFLICT"
        case fail = "FAIL"
        case `do` = "DO"
        case nothing = "NOTHING"
        case update = "UPDATE"
        case updateLocalDiff = "UPDATE_LOCAL_DIFF"
        case set = "SET"
        case order = "ORDER"
        case by = "BY"
        case asc = "ASC"
        case desc = "DESC"
        case limit = "LIMIT"
        case offset = "OFFSET"
        case `as` = "AS"
        case `true` = "TRUE"
        case `false` = "FALSE"
        case null = "NULL"
        case delete = "DELETE"
        case evict = "EVICT"
        case apply = "APPLY"
        case increment = "INCREMENT"
        case pnIncrement = "PN_INCREMENT"
        case restart = "RESTART"
        case with = "WITH"
        case unset = "UNSET"
        case initial = "INITIAL"
        case collection = "COLLECTION"
        case `is` = "IS"
        case missing = "MISSING"
        case `in` = "IN"
        case like = "LIKE"
        case count = "COUNT"
        case map = "MAP"
        case counter = "COUNTER"
        case attachment = "ATTACHMENT"
        case register = "REGISTER"
        case alter = "ALTER"
        case system = "SYSTEM"
        case show = "SHOW"
        case all = "ALL"
        case create = "CREATE"
        case drop = "DROP"
        case index = "INDEX"
        case indexes = "INDEXES"
        case `if` = "IF"
        case exists = "EXISTS"

        /// Whether the word must be backtick-quoted to be used as a collection or top-level field
        /// name. Statement and clause openers and operators are reserved. The others (ID, VALUES,
        /// DESC, MISSING, COUNT, MAP, ...) only mean something right after a particular keyword or
        /// before a '(', so they are read as names wherever a name or an expression is expected.
        ///
        /// COLLECTION is unreserved, so `SELECT collection FROM c` works, but where a collection
        /// name stands (after FROM, INTO and UPDATE) it always starts a `COLLECTION c (...)`
        /// declaration, so a collection named "collection" must be quoted there.
        ///
        /// ALTER, SYSTEM, SHOW and ALL (the system statements) are unreserved too, so that names
        /// written before those statements existed keep working: ALTER and SHOW only mean something
        /// at the start of a statement, where no name can stand.
        ///
        /// So are CREATE, DROP, INDEX, INDEXES, IF and EXISTS (the index statements): CREATE and DROP
        /// open a statement, and the others mean something only right after them or after SHOW.
        public var isReserved: Bool {
            switch self {
            case .id, .documents, .values, .conflict, .fail, .do, .nothing, .updateLocalDiff, .asc, .desc,
                .increment, .pnIncrement, .restart, .with, .initial, .collection, .missing, .count, .map, .counter,
                .attachment, .register, .alter, .system, .show, .all, .create, .drop, .index, .indexes, .if, .exists:
                false
            default: true
            }
        }
    }

    /// Punctuation and operators.
    public enum Symbol: String, Sendable, Hashable, CaseIterable {
        case leftParen = "("
        case rightParen = ")"
        case comma = ","
        case semicolon = ";"
        case dot = "."
        case leftBrace = "{"
        case rightBrace = "}"
        case leftBracket = "["
        case rightBracket = "]"
        case colon = ":"
        case star = "*"
        case equal = "="
        case doubleEqual = "=="
        case notEqual = "!="
        case lessGreater = "<>"
        case less = "<"
        case lessOrEqual = "<="
        case greater = ">"
        case greaterOrEqual = ">="
        case plus = "+"
        case minus = "-"
        case slash = "/"
        case percent = "%"
    }

    public var kind: Kind
    /// The token exactly as written in the query (quotes included); empty at the end.
    public var text: String
    /// Where the token starts.
    public var position: SourcePosition

    /// Creates a token.
    public init(kind: Kind, text: String, position: SourcePosition) {
        self.kind = kind
        self.text = text
        self.position = position
    }

    /// How error messages name the token: `'FORM'`, `string 'abc'`, `end of query`.
    public var description: String {
        let shown = text.count > 40 ? text.prefix(37) + "..." : Substring(text)
        switch kind {
        case .end: return "end of query"
        case .string: return "string \(shown)"
        default: return "'\(shown)'"
        }
    }

    /// The keyword, when this token is one.
    public var keyword: Keyword? {
        if case .keyword(let k) = kind { return k }
        return nil
    }

    /// The symbol, when this token is one.
    public var symbol: Symbol? {
        if case .symbol(let s) = kind { return s }
        return nil
    }

    /// Whether this token is the given keyword.
    public func `is`(_ keyword: Keyword) -> Bool { self.keyword == keyword }

    /// Whether this token is the given symbol.
    public func `is`(_ symbol: Symbol) -> Bool { self.symbol == symbol }
}

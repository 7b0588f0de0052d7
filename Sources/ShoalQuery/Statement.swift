public import ShoalCRDT

/// A parsed DQL statement.
public enum Statement: Sendable, Hashable {
    case select(SelectStatement)
    case insert(InsertStatement)
    case update(UpdateStatement)
    /// `DELETE FROM c [WHERE e]`: replicated tombstones.
    case delete(DeleteStatement)
    /// `EVICT FROM c [WHERE e]`: removes local copies only.
    case evict(DeleteStatement)
    /// `ALTER SYSTEM SET name = value`, `SHOW name`, `SHOW ALL`: the store's run-time
    /// parameters. It names no collection.
    case system(SystemStatement)
    /// `CREATE INDEX`, `DROP INDEX`, `SHOW INDEXES`: the JSON-path indexes queries use.
    case index(IndexStatement)

    /// Whether the statement writes to the database (and so needs a read-write transaction).
    ///
    /// A system statement is not a mutation: `ALTER SYSTEM SET` changes parameters the
    /// store keeps in memory, not its data. `CREATE INDEX` and `DROP INDEX` are: they
    /// change the database's schema, though no document.
    public var isMutation: Bool {
        switch self {
        case .select, .system, .index(.show): return false
        case .insert, .update, .delete, .evict, .index(.create), .index(.drop): return true
        }
    }

    /// Whether the statement writes documents, which observers and sync then see.
    public var writesDocuments: Bool {
        if case .index = self { return false }
        return isMutation
    }

    /// The collection the statement reads or writes, or `nil` for a system statement.
    public var targetCollection: String? {
        switch self {
        case .select(let s): return s.collection
        case .insert(let s): return s.collection
        case .update(let s): return s.collection
        case .delete(let s), .evict(let s): return s.collection
        case .index(.create(let definition, _)): return definition.collection
        case .system, .index: return nil
        }
    }

    /// The collection the statement reads or writes; `""` for a system statement, which
    /// names none (`targetCollection` is `nil` for it).
    public var collection: String { targetCollection ?? "" }

    /// Field types the statement declares with `COLLECTION c (f MAP, n COUNTER, ...)`.
    public var declaredTypes: [String: FieldType] {
        switch self {
        case .select(let s): return s.declaredTypes
        case .insert(let s): return s.declaredTypes
        case .update(let s): return s.declaredTypes
        case .delete(let s), .evict(let s): return s.declaredTypes
        case .system, .index: return [:]
        }
    }
}

/// A statement about the store's run-time parameters rather than its documents.
public enum SystemStatement: Sendable, Hashable {
    /// `ALTER SYSTEM SET name = value`
    case set(SystemSetting)
    /// `SHOW name`: one parameter, named as written, with where the name starts.
    case show(name: String, position: SourcePosition)
    /// `SHOW ALL`: every parameter.
    case showAll
}

/// A statement about the JSON-path indexes the SQL pre-filter can use.
public enum IndexStatement: Sendable, Hashable {
    /// `CREATE INDEX [IF NOT EXISTS] name ON collection (path, ...)`
    case create(IndexDefinition, ifNotExists: Bool)
    /// `DROP INDEX [IF EXISTS] name`, with where the name starts.
    case drop(name: String, ifExists: Bool, position: SourcePosition)
    /// `SHOW INDEXES`: the declared indexes and the automatic ones.
    case show
}

/// A user-declared index: its name, the collection it covers and the paths it
/// orders documents by, first path first.
public struct IndexDefinition: Sendable, Hashable {
    public var name: String
    public var collection: String
    public var paths: [FieldPath]
    public var namePosition: SourcePosition

    public init(name: String, collection: String, paths: [FieldPath], namePosition: SourcePosition) {
        self.name = name
        self.collection = collection
        self.paths = paths
        self.namePosition = namePosition
    }
}

/// `ALTER SYSTEM SET name = value`, with where the name and the value start, so that the
/// store can point at an unknown name or a value of the wrong type.
public struct SystemSetting: Sendable, Hashable {
    public var name: String
    /// A literal (a negative number included) or a `:parameter`.
    public var value: Expression
    public var namePosition: SourcePosition
    public var valuePosition: SourcePosition

    public init(name: String, value: Expression, namePosition: SourcePosition, valuePosition: SourcePosition) {
        self.name = name
        self.value = value
        self.namePosition = namePosition
        self.valuePosition = valuePosition
    }
}

/// A statement together with the text it was parsed from and where that text starts,
/// so that an error found when it runs can name it.
public struct ParsedStatement: Sendable, Hashable {
    public var statement: Statement
    /// The statement as written, without the `;` that ends it.
    public var text: String
    public var position: SourcePosition

    public init(statement: Statement, text: String, position: SourcePosition) {
        self.statement = statement
        self.text = text
        self.position = position
    }
}

/// The CRDT a field is, when a statement declares it.
public enum FieldType: String, Sendable, Hashable {
    case register = "REGISTER"
    case map = "MAP"
    case counter = "COUNTER"
    case attachment = "ATTACHMENT"
}

/// `DELETE FROM c [WHERE e]` and `EVICT FROM c [WHERE e]`.
public struct DeleteStatement: Sendable, Hashable {
    public var collection: String
    public var whereClause: Expression?
    public var declaredTypes: [String: FieldType]

    public init(collection: String, whereClause: Expression? = nil, declaredTypes: [String: FieldType] = [:]) {
        self.collection = collection
        self.whereClause = whereClause
        self.declaredTypes = declaredTypes
    }
}

/// `SELECT projection FROM collection [WHERE e] [ORDER BY e [ASC|DESC], ...] [LIMIT n] [OFFSET n]`
public struct SelectStatement: Sendable, Hashable {
    public var collection: String
    /// Empty means `*`.
    public var projection: [Projection]
    public var whereClause: Expression?
    public var orderBy: [OrderTerm]
    public var limit: Expression?
    public var offset: Expression?
    public var declaredTypes: [String: FieldType]

    public init(
        collection: String, projection: [Projection] = [], whereClause: Expression? = nil,
        orderBy: [OrderTerm] = [], limit: Expression? = nil, offset: Expression? = nil,
        declaredTypes: [String: FieldType] = [:]
    ) {
        self.collection = collection
        self.projection = projection
        self.whereClause = whereClause
        self.orderBy = orderBy
        self.limit = limit
        self.offset = offset
        self.declaredTypes = declaredTypes
    }
}

extension SelectStatement {
    /// Why the statement cannot be read in pages by key (`shoal export`, a `PageRequest`),
    /// or nil: pages come in key order, each as long as asked, and hold documents.
    public var pagingProblem: String? {
        if !orderBy.isEmpty || limit != nil || offset != nil {
            return "pages come in key order, each as long as asked: remove ORDER BY, LIMIT and OFFSET"
        }
        if projection.contains(where: { $0.expression == .countAll }) {
            return "pages hold documents, not COUNT(*): count with shoal exec"
        }
        return nil
    }
}

/// One item of a SELECT list: an expression and the name it is returned under.
public struct Projection: Sendable, Hashable {
    public var expression: Expression
    /// The `AS` name, or the last path component for a bare path, or else `$n` for the
    /// n-th item (1-based), `COUNT(*)` included. A `COUNT(*)` item is always the only one.
    public var name: String

    public init(expression: Expression, name: String) {
        self.expression = expression
        self.name = name
    }
}

public struct OrderTerm: Sendable, Hashable {
    public var expression: Expression
    public var descending: Bool

    public init(expression: Expression, descending: Bool) {
        self.expression = expression
        self.descending = descending
    }
}

/// `INSERT INTO collection DOCUMENTS (e), (e) ... [ON ID CONFLICT policy]`
public struct InsertStatement: Sendable, Hashable {
    public var collection: String
    /// Each expression evaluates to an object, or (a parameter) to an array of objects.
    public var documents: [Expression]
    public var conflict: ConflictPolicy
    /// `INSERT INTO c INITIAL DOCUMENTS (...)`: defaults "at time zero" that every
    /// peer may insert, that merge as one and never override a real write.
    public var initial: Bool
    public var declaredTypes: [String: FieldType]

    public init(
        collection: String, documents: [Expression], conflict: ConflictPolicy = .fail, initial: Bool = false,
        declaredTypes: [String: FieldType] = [:]
    ) {
        self.collection = collection
        self.documents = documents
        self.conflict = conflict
        self.initial = initial
        self.declaredTypes = declaredTypes
    }
}

/// What INSERT does when a document with the same `_id` exists.
public enum ConflictPolicy: Sendable, Hashable {
    /// The statement fails (the default).
    case fail
    case doNothing
    /// Every given field is written.
    case doUpdate
    /// Only fields whose value differs from the stored one are written.
    case doUpdateLocalDiff
}

/// `UPDATE collection [APPLY ...] [SET path = e, ...] [UNSET path, ...] [WHERE e] [ORDER BY ...] [LIMIT n] [OFFSET n]`
public struct UpdateStatement: Sendable, Hashable {
    public var collection: String
    public var assignments: [Assignment]
    public var whereClause: Expression?
    /// `APPLY f INCREMENT BY n, g PN_INCREMENT BY n, h RESTART [WITH v]`
    public var counterOperations: [CounterOperation]
    /// `UNSET a, b.c`
    public var unsets: [FieldPath]
    public var orderBy: [OrderTerm]
    public var limit: Expression?
    public var offset: Expression?
    public var declaredTypes: [String: FieldType]

    public init(
        collection: String, assignments: [Assignment], whereClause: Expression? = nil,
        counterOperations: [CounterOperation] = [], unsets: [FieldPath] = [], orderBy: [OrderTerm] = [],
        limit: Expression? = nil, offset: Expression? = nil, declaredTypes: [String: FieldType] = [:]
    ) {
        self.collection = collection
        self.assignments = assignments
        self.whereClause = whereClause
        self.counterOperations = counterOperations
        self.unsets = unsets
        self.orderBy = orderBy
        self.limit = limit
        self.offset = offset
        self.declaredTypes = declaredTypes
    }
}

/// A field path as written in a statement, with where it starts.
public struct FieldPath: Sendable, Hashable {
    public var path: [String]
    public var position: SourcePosition

    public init(path: [String], position: SourcePosition) {
        self.path = path
        self.position = position
    }
}

/// One `APPLY` item on a counter field.
public struct CounterOperation: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        /// `INCREMENT BY e` (and its synonym `PN_INCREMENT BY e`); e may be negative.
        case increment(Expression)
        /// `RESTART [WITH e]`: reset to e (0 when absent), last-writer-wins against increments.
        case restart(Expression?)
    }

    public var path: [String]
    public var kind: Kind
    public var position: SourcePosition

    public init(path: [String], kind: Kind, position: SourcePosition) {
        self.path = path
        self.kind = kind
        self.position = position
    }
}

public struct Assignment: Sendable, Hashable {
    /// The field path being set; `["a"]` for a top-level field.
    public var path: [String]
    public var value: Expression
    /// Where the path starts in the query text, for errors found at execution.
    public var position: SourcePosition

    public init(path: [String], value: Expression, position: SourcePosition) {
        self.path = path
        self.value = value
        self.position = position
    }
}

/// An expression in a WHERE clause, a projection, a SET or a document literal.
public indirect enum Expression: Sendable, Hashable {
    case literal(Value)
    /// `:name`, bound from the statement's arguments.
    case parameter(String)
    /// A field path: `title`, `a.b.c`, `_id`.
    case path([String])
    /// `{ "key": e, ... }` with keys in source order.
    case object([ObjectEntry])
    case array([Expression])
    case unary(UnaryOperator, Expression)
    case binary(BinaryOperator, Expression, Expression)
    /// `name(args...)`: a built-in function, name lowercased.
    case function(String, [Expression])
    /// `base[key]`: an object member by string or an array element by integer.
    case index(Expression, Expression)
    /// `COUNT(*)` in a projection: the number of matching documents.
    case countAll
}

public struct ObjectEntry: Sendable, Hashable {
    public var key: String
    public var value: Expression

    public init(key: String, value: Expression) {
        self.key = key
        self.value = value
    }
}

public enum UnaryOperator: String, Sendable, Hashable {
    case not = "NOT"
    case negate = "-"
    /// Postfix `IS NULL` (true only for a present null), `IS NOT NULL`.
    case isNull = "IS NULL"
    case isNotNull = "IS NOT NULL"
    /// Postfix `IS MISSING` (the path does not exist), `IS NOT MISSING`.
    case isMissing = "IS MISSING"
    case isNotMissing = "IS NOT MISSING"
}

public enum BinaryOperator: String, Sendable, Hashable {
    case equal = "="
    case notEqual = "!="
    case less = "<"
    case lessOrEqual = "<="
    case greater = ">"
    case greaterOrEqual = ">="
    case and = "AND"
    case or = "OR"
    case add = "+"
    case subtract = "-"
    case multiply = "*"
    case divide = "/"
    case remainder = "%"
    /// `e IN (a, b, ...)` / `e IN :array`; the right side is an array expression.
    case `in` = "IN"
    case notIn = "NOT IN"
    /// SQL `LIKE` with `%` and `_` wildcards, case-sensitive.
    case like = "LIKE"
    case notLike = "NOT LIKE"
}

/// A place in the query text: 1-based line and column (in characters), and the
/// 0-based character offset.
public struct SourcePosition: Sendable, Hashable, CustomStringConvertible {
    public var offset: Int
    public var line: Int
    public var column: Int

    public init(offset: Int, line: Int, column: Int) {
        self.offset = offset
        self.line = line
        self.column = column
    }

    public var description: String { "line \(line), column \(column)" }
}

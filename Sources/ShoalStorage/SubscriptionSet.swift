public import ShoalCRDT
public import ShoalQuery

/// A set of sync subscriptions: SELECT queries saying which documents a peer wants.
///
/// A document is wanted when any subscription on its collection matches its
/// current body. The `key` names the set, so a receiver can keep one resume
/// cursor per peer and set: a different set starts from a different cursor.
public struct SubscriptionSet: Sendable, Hashable {
    public struct Entry: Sendable, Hashable {
        public var id: String
        public var query: String
        public var arguments: [String: Value]
        public var statement: SelectStatement
        /// The top-level fields the WHERE clause reads.
        public var fieldsRead: Set<String> {
            var fields: Set<String> = []
            statement.whereClause.map { Self.collectFields($0, into: &fields) }
            return fields
        }

        package static func collectFields(_ e: Expression, into fields: inout Set<String>) {
            switch e {
            case .path(let p): if let first = p.first { fields.insert(first) }
            case .literal, .parameter: break
            case .object(let entries): entries.forEach { collectFields($0.value, into: &fields) }
            case .array(let items): items.forEach { collectFields($0, into: &fields) }
            case .unary(_, let x): collectFields(x, into: &fields)
            case .binary(_, let l, let r):
                collectFields(l, into: &fields)
                collectFields(r, into: &fields)
            case .function(_, let args): args.forEach { collectFields($0, into: &fields) }
            case .index(let base, let key):
                collectFields(base, into: &fields)
                collectFields(key, into: &fields)
            case .countAll: break
            }
        }
    }

    public private(set) var entries: [Entry] = []
    /// Collections whose documents are sent only when a body this node holds shows they
    /// match: one a rule lets a peer read in part (`PeerRights.cut`). Elsewhere a
    /// document this node cannot judge (deleted with no body, evicted) is sent.
    package var withheldUnlessShown: Set<String> = []

    public init() {}

    /// Parses `query`, which must be one SELECT statement.
    @discardableResult
    public mutating func add(query: String, arguments: [String: Value] = [:]) throws(ShoalError) -> Entry {
        let select = try SelectStatement.parseOne(query, as: "a subscription")
        if !select.orderBy.isEmpty || select.limit != nil || select.offset != nil || !select.projection.isEmpty {
            throw ShoalError(
                .invalidQuery,
                "a subscription selects whole documents: use SELECT * FROM collection [WHERE ...] without ORDER BY, LIMIT, OFFSET or a projection: \(query)")
        }
        let id = Self.identifier(query: query, arguments: arguments)
        let entry = Entry(id: id, query: query, arguments: arguments, statement: select)
        if !entries.contains(where: { $0.id == id }) {
            entries.append(entry)
            entries.sort { $0.id < $1.id }
        }
        return entry
    }

    /// Removes the subscription with this ID, or with exactly this query text.
    @discardableResult
    public mutating func remove(idOrQuery: String) -> Entry? {
        guard let index = entries.firstIndex(where: { $0.id == idOrQuery || $0.query == idOrQuery }) else { return nil }
        return entries.remove(at: index)
    }

    public var isEmpty: Bool { entries.isEmpty }

    /// A stable name for the whole set, independent of the order it was built in.
    public var key: String {
        Self.hash(entries.map(\.id).joined(separator: ","))
    }

    /// Where the cursor of a stream that also carries this node's own transactions is
    /// kept for the set `key` (PROTOCOL.md §8.2, `include_own_transactions`), until the
    /// stream has caught up and it becomes the set's own (`DocumentStore.ownTransactionsBack`).
    public static func refillKey(_ key: String) -> String { key + "+own" }

    /// Whether any subscription on `collection` matches `document`.
    public func matches(collection: String, document: Value) -> Bool {
        for entry in entries where entry.statement.collection == collection {
            if (try? Evaluator.matches(entry.statement.whereClause, document: document, arguments: entry.arguments)) == true {
                return true
            }
        }
        return false
    }

    /// Whether some subscription takes every document of `collection` (it has no WHERE).
    public func takesWholeCollection(_ collection: String) -> Bool {
        entries.contains { $0.statement.collection == collection && $0.statement.whereClause == nil }
    }

    /// Whether a subscription names `collection`.
    public func names(collection: String) -> Bool {
        entries.contains { $0.statement.collection == collection }
    }

    /// Whether a subscription to `collection` has a WHERE clause.
    public func filters(collection: String) -> Bool {
        entries.contains { $0.statement.collection == collection && $0.statement.whereClause != nil }
    }

    /// Whether writing `field` of a document in `collection` can change whether
    /// the subscriptions match it: true when a WHERE clause reads that field.
    public func matchMayDependOn(collection: String, field: String) -> Bool {
        // Most subscriptions have no WHERE: nothing to look at (`fieldsRead` walks the clause).
        guard filters(collection: collection) else { return false }
        let name = (Counter.counterName(ofContribution: field) ?? field)
            .split(separator: RegisterName.pathSeparator, maxSplits: 1).first.map(String.init) ?? field
        return entries.contains { $0.statement.collection == collection && $0.fieldsRead.contains(name) }
    }

    /// The collections any subscription names.
    public var collections: Set<String> { Set(entries.map(\.statement.collection)) }

    package static func identifier(query: String, arguments: [String: Value]) -> String {
        hash(query + "\u{0}" + Value.object(arguments).canonicalJSON)
    }

    /// FNV-1a, 64 bits, as 16 hex digits: stable across runs and platforms.
    package static func hash(_ text: String) -> String { StableHash.fnv1a(text) }
}

extension SubscriptionSet {
    /// The set as plain data, as a `NOT_COVERED` verdict names it.
    public var filter: SubscriptionFilter {
        SubscriptionFilter(
            entries.map { .init(query: $0.query, argumentsJSON: ArgumentsJSON.encode($0.arguments)) })
    }

    /// Parses a filter received from a peer.
    public init(_ filter: SubscriptionFilter) throws(ShoalError) {
        self.init()
        for entry in filter.entries {
            let arguments: [String: Value]
            do {
                arguments = try ArgumentsJSON.parse(entry.argumentsJSON)
            } catch {
                throw ShoalError(.invalidQuery, "\(error.message(naming: "the arguments of subscription '\(entry.query)'"))")
            }
            try add(query: entry.query, arguments: arguments)
        }
    }

    /// Whether every document of `collection` that this set matches is also matched
    /// by `other`, as far as can be told from the queries alone.
    ///
    /// It is a proof, never a guess: true when this set has no query on the
    /// collection, or when each of its queries on it is implied by one of `other`'s:
    /// a query without WHERE, or one whose WHERE conjuncts (its top-level `AND`
    /// terms, parameters replaced by their values) are all among this query's.
    /// So `region = 'eu' AND kind = 'x'` is narrower than `region = 'eu'`, and
    /// `region = :r` with r = "eu" is the same as `region = 'eu'`. Anything else
    /// (`OR`, ranges that happen to nest) is not claimed.
    public func isProvablyNarrower(than other: SubscriptionSet, on collection: String) -> Bool {
        let mine = entries.filter { $0.statement.collection == collection }
        let theirs = other.entries.filter { $0.statement.collection == collection }.map { entry in
            entry.statement.whereClause.map { Self.conjuncts(Self.resolve($0, entry.arguments)) }
        }
        return mine.allSatisfy { entry in
            let needed = entry.statement.whereClause.map { Set(Self.conjuncts(Self.resolve($0, entry.arguments))) } ?? []
            return theirs.contains { conjuncts in
                guard let conjuncts else { return true }
                return conjuncts.allSatisfy(needed.contains)
            }
        }
    }

    package static func conjuncts(_ e: Expression) -> [Expression] {
        if case .binary(.and, let l, let r) = e { return conjuncts(l) + conjuncts(r) }
        return [e]
    }

    /// `e` with every parameter replaced by its value (a missing one stays a parameter).
    package static func resolve(_ e: Expression, _ arguments: [String: Value]) -> Expression {
        switch e {
        case .parameter(let name): return arguments[name].map(Expression.literal) ?? e
        case .literal, .path, .countAll: return e
        case .object(let entries): return .object(entries.map { ObjectEntry(key: $0.key, value: resolve($0.value, arguments)) })
        case .array(let items): return .array(items.map { resolve($0, arguments) })
        case .unary(let op, let x): return .unary(op, resolve(x, arguments))
        case .binary(let op, let l, let r): return .binary(op, resolve(l, arguments), resolve(r, arguments))
        case .function(let name, let args): return .function(name, args.map { resolve($0, arguments) })
        case .index(let base, let key): return .index(resolve(base, arguments), resolve(key, arguments))
        }
    }
}

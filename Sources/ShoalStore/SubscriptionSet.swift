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
    }

    public private(set) var entries: [Entry] = []

    public init() {}

    /// Parses `query`, which must be one SELECT statement.
    @discardableResult
    public mutating func add(query: String, arguments: [String: Value] = [:]) throws(StoreError) -> Entry {
        let statement: ShoalQuery.Statement
        do {
            statement = try Parser.parseStatement(query)
        } catch {
            throw StoreError(error)
        }
        guard case .select(let select) = statement else {
            throw StoreError(.invalidQuery, "a subscription must be a SELECT statement: \(query)")
        }
        if !select.orderBy.isEmpty || select.limit != nil || select.offset != nil || !select.projection.isEmpty {
            throw StoreError(
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

    public var isEmpty: Bool { entries.isEmpty }

    /// A stable name for the whole set, independent of the order it was built in.
    public var key: String {
        Self.hash(entries.map(\.id).joined(separator: ","))
    }

    /// Whether any subscription on `collection` matches `document`.
    public func matches(collection: String, document: Value) -> Bool {
        for entry in entries where entry.statement.collection == collection {
            if (try? Evaluator.matches(entry.statement.whereClause, document: document, arguments: entry.arguments)) == true {
                return true
            }
        }
        return false
    }

    /// The collections any subscription names.
    public var collections: Set<String> { Set(entries.map(\.statement.collection)) }

    static func identifier(query: String, arguments: [String: Value]) -> String {
        hash(query + "\u{0}" + Value.object(arguments).canonicalJSON)
    }

    /// FNV-1a, 64 bits, as 16 hex digits: stable across runs and platforms.
    static func hash(_ text: String) -> String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            h ^= UInt64(byte)
            h = h &* 0x0000_0100_0000_01b3
        }
        return SiteID(h).description
    }
}

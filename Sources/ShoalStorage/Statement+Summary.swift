package import ShoalCRDT
package import ShoalQuery

extension ShoalQuery.Statement {
    /// How messages name a statement when its text is not known: "INSERT INTO cars".
    package var summary: String {
        switch self {
        case .select(let s): "SELECT FROM \(s.collection)"
        case .insert(let s): "INSERT INTO \(s.collection)"
        case .update(let s): "UPDATE \(s.collection)"
        case .delete(let s): "DELETE FROM \(s.collection)"
        case .evict(let s): "EVICT FROM \(s.collection)"
        case .system(.set(let setting)): "ALTER SYSTEM SET \(setting.name)"
        case .system(.show(let name, _)): "SHOW \(name)"
        case .system(.showAll): "SHOW ALL"
        case .index(.create(let definition, _)): "CREATE INDEX \(definition.name)"
        case .index(.drop(let name, _, _)): "DROP INDEX \(name)"
        case .index(.show): "SHOW INDEXES"
        }
    }

    /// Whether the statement creates or drops a declared index.
    package var changesIndexes: Bool {
        switch self {
        case .index(.create), .index(.drop): true
        default: false
        }
    }
}

extension ShoalError {
    /// The error with the query text attached to its position, so its message shows
    /// the offending line with a caret under the mistake.
    package func locating(in text: String) -> ShoalError {
        guard var query = queryError, query.position != nil, query.query == nil else { return self }
        query.query = text
        return ShoalError(code, query.detailedDescription, queryError: query)
    }
}

/// The `_id`s a transaction's statements wrote, each once, in the order first written:
/// told apart by collection and the key's bytes, as stores tell documents apart (Swift's
/// `==` takes two canonically equivalent IDs, "é" composed and decomposed, for one).
package struct MutatedDocuments {
    package private(set) var ids: [Value] = []
    private var seen: Set<[UInt8]> = []

    package init() {}

    package mutating func add(_ written: [Value], collection: String) {
        let prefix = Array(collection.utf8) + [0]
        ids += written.filter { seen.insert(prefix + Array(DocumentKey.make($0).utf8)).inserted }
    }
}

package import ShoalCRDT
package import ShoalQuery

/// An index a user declared with `CREATE INDEX`: the documents of one collection,
/// ordered by the values at its paths. Each engine keeps the declaration and builds the
/// index its own way (SQLite: `DocumentStore+Indexes.swift`; a hub:
/// `PostgresStore+Indexes.swift`); what `CREATE INDEX`, `DROP INDEX` and `SHOW
/// INDEXES` answer and refuse is the same on both.
package struct UserIndex: Sendable, Hashable {
    package var name: String
    package var collection: String
    package var paths: [[String]]

    package init(name: String, collection: String, paths: [[String]]) {
        self.name = name
        self.collection = collection
        self.paths = paths
    }

    package init(_ definition: IndexDefinition) {
        self.init(name: definition.name, collection: definition.collection, paths: definition.paths.map(\.path))
    }

    /// Index names ignore case: `by_year` and `BY_YEAR` are one index.
    package var key: String { name.lowercased() }

    /// What `SHOW INDEXES`, `CREATE INDEX` and `DROP INDEX` return for it.
    package var row: Value {
        [
            "name": .string(name), "collection": .string(collection),
            "paths": .array(paths.map { .string($0.joined(separator: ".")) }), "automatic": false,
        ]
    }

    /// The paths as stored: `[["a", "b"], ["c"]]`.
    package var pathsJSON: String { Value.array(paths.map { .array($0.map(Value.string)) }).canonicalJSON }

    /// The paths stored as `pathsJSON` wrote them; none from a text that is not such a list.
    package static func paths(fromJSON text: String) -> [[String]] {
        guard case .array(let paths)? = try? JSON.parse(text) else { return [] }
        return paths.map { path in
            guard case .array(let names) = path else { return [] }
            return names.compactMap(\.stringValue)
        }
    }

    /// The error of a `CREATE INDEX` that names an index that exists.
    package func exists(at position: SourcePosition) -> ShoalError {
        Self.error(
            "an index named '\(name)' exists already, on \(collection) "
                + "(\(paths.map { $0.joined(separator: ".") }.joined(separator: ", "))): "
                + "DROP INDEX it first, or write CREATE INDEX IF NOT EXISTS",
            at: position)
    }

    /// The error of a `DROP INDEX` that names an automatic index, which the store keeps.
    package static func automatic(_ name: String, at position: SourcePosition) -> ShoalError {
        error(
            "'\(name)' is an automatic index: the store made it for a queried path and keeps it; "
                + "DROP INDEX removes the indexes made with CREATE INDEX",
            at: position)
    }

    /// How many automatic indexes a store makes for the paths its queries filter on
    /// (across the hubs of one database): each costs space and write time.
    package static let maximumAutomatic = 32

    /// What `SHOW INDEXES` shows of an automatic index: of no one collection.
    package static func automaticRow(name: String, path: [String]) -> Value {
        ["name": .string(name), "collection": .null, "paths": [.string(path.joined(separator: "."))], "automatic": true]
    }

    /// The error of a `DROP INDEX` that names no index.
    package static func missing(_ name: String, at position: SourcePosition) -> ShoalError {
        error("no index named '\(name)': SHOW INDEXES lists them", at: position)
    }

    package static func error(_ message: String, at position: SourcePosition) -> ShoalError {
        ShoalError(QueryError(message, position: position))
    }
}

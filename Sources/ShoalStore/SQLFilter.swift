import ShoalCRDT
import ShoalStorage
import ShoalQuery
import GRDB

/// A WHERE clause's pre-filter (`PreFilter`) as SQLite checks it on the stored JSON
/// bodies, with `json_extract` on the materialized body, within SQLite's limits
/// (`rules`). `_id = v` is a primary-key lookup instead.
struct SQLFilter {
    var sql: String
    var arguments: [any DatabaseValueConvertible]
    /// The JSON paths the filter reads, each an index candidate.
    var paths: [String]

    /// The expression SQLite indexes and matches: the path is inlined (not bound)
    /// so that the planner can use an index on exactly this expression.
    static func extract(_ path: String) -> String {
        "json_extract(body, \(literal(path)))"
    }

    /// An SQL string literal: single quotes doubled.
    static func literal(_ text: String) -> String {
        // Most texts hold no quote; `replacing` is slow enough to show in a point query.
        guard text.utf8.contains(UInt8(ascii: "'")) else { return "'" + text + "'" }
        var out = "'"
        for character in text.unicodeScalars {
            out.unicodeScalars.append(character)
            if character == "'" { out.unicodeScalars.append("'") }
        }
        return out + "'"
    }

    /// `collection = 'name'`, the name written into the SQL so that a partial index
    /// on the collection (a user index) can serve the query; bound instead when the
    /// name holds a NUL, which SQL text cannot.
    static func collectionCondition(_ collection: String) -> (sql: String, arguments: [any DatabaseValueConvertible]) {
        collection.utf8.contains(0) ? ("collection = ?", [collection]) : ("collection = \(literal(collection))", [])
    }

    /// The name of the automatic index of one path.
    static func automaticIndexName(_ path: String) -> String {
        "document_by_\(SubscriptionSet.hash(path))"
    }

    /// `CREATE INDEX` for one path: by collection, then the extracted value.
    static func indexStatement(_ path: String) -> String {
        "CREATE INDEX IF NOT EXISTS \"\(automaticIndexName(path))\" ON document (collection, \(extract(path)))"
    }

    /// The most AND and OR groups nested in one another. SQLite's parser holds each
    /// open bracket and what comes before it on a stack of 100 entries ("parser stack
    /// overflow"), about 28 groups nested to the right in SQLite 3.40; DQL nests 64.
    static let maximumDepth = 16
    /// The most comparisons in one filter. SQLite builds a chain of n ORs (or ANDs)
    /// n levels deep, and refuses an expression deeper than 1,000.
    static let maximumTerms = 500
    /// The most values one filter binds: SQLite's limit on host parameters was 999
    /// before 3.32 (32,766 since).
    static let maximumArguments = 999

    /// What SQLite's SQL can hold. SQLite compares an integer with a double exactly, so
    /// every finite double is taken.
    static let rules = PreFilter.Rules(
        maximumDepth: maximumDepth, maximumTerms: maximumTerms, maximumArguments: maximumArguments,
        accepts: { jsonPath($0) != nil })

    static func make(_ predicate: Expression?, arguments: [String: Value]) -> SQLFilter? {
        PreFilter.make(predicate, arguments: arguments, rules: rules).map(render)
    }

    /// `filter` in SQLite's SQL.
    static func render(_ filter: PreFilter) -> SQLFilter {
        switch filter {
        case .compare(let components, let op, let value):
            let path = jsonPath(components)!
            return SQLFilter(sql: "\(extract(path)) \(op.rawValue) ?", arguments: [bound(value)], paths: [path])
        case .among(let components, let values):
            let path = jsonPath(components)!
            let marks = Array(repeating: "?", count: values.count).joined(separator: ", ")
            return SQLFilter(sql: "\(extract(path)) IN (\(marks))", arguments: values.map(bound), paths: [path])
        case .all(let parts), .any(let parts):
            let joiner: String
            if case .all = filter { joiner = " AND " } else { joiner = " OR " }
            let rendered = parts.map(render)
            return SQLFilter(
                sql: "(" + rendered.map(\.sql).joined(separator: joiner) + ")", arguments: rendered.flatMap(\.arguments),
                paths: rendered.flatMap(\.paths))
        }
    }

    private static func bound(_ value: PreFilter.Scalar) -> any DatabaseValueConvertible {
        switch value {
        case .int(let i): i
        case .double(let d): d
        case .string(let s): s
        }
    }

    /// `$."a"."b"`, or nil for keys SQLite's JSON paths cannot quote.
    static func jsonPath(_ components: [String]) -> String? {
        guard !components.isEmpty else { return nil }
        var path = "$"
        for c in components {
            guard !c.contains("\"") && !c.contains("\\") else { return nil }
            path += ".\"\(c)\""
        }
        return path
    }
}

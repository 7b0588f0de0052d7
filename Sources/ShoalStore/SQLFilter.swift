import ShoalCRDT
import ShoalQuery
import GRDB

/// The part of a WHERE clause SQLite can check on the stored JSON bodies.
///
/// The translation is a pre-filter: it keeps every document the DQL predicate
/// could match (and maybe a few more), and the evaluator then decides exactly.
/// What runs in SQLite (with `json_extract` on the materialized body):
/// - `path = v` with a number or an ASCII string `v` (a literal or a parameter),
///   either side; `path < v`, `<=`, `>`, `>=` with a number;
/// - `path IN (v, ...)` with numbers and ASCII strings;
/// - `AND` of any of these (an untranslatable side is simply dropped);
/// - `OR` when both sides translate.
/// Everything else (NOT, LIKE, IS NULL/MISSING, arithmetic, functions) runs in
/// Swift over the candidates. `_id = v` is a primary-key lookup instead.
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

    static func make(_ predicate: Expression?, arguments: [String: Value]) -> SQLFilter? {
        guard let predicate else { return nil }
        return translate(predicate, arguments)
    }

    private static func translate(_ e: Expression, _ arguments: [String: Value]) -> SQLFilter? {
        switch e {
        case .binary(.and, let l, let r):
            switch (translate(l, arguments), translate(r, arguments)) {
            case (let a?, let b?):
                return SQLFilter(sql: "(\(a.sql) AND \(b.sql))", arguments: a.arguments + b.arguments, paths: a.paths + b.paths)
            case (let a?, nil): return a
            case (nil, let b?): return b
            case (nil, nil): return nil
            }
        case .binary(.or, let l, let r):
            guard let a = translate(l, arguments), let b = translate(r, arguments) else { return nil }
            return SQLFilter(sql: "(\(a.sql) OR \(b.sql))", arguments: a.arguments + b.arguments, paths: a.paths + b.paths)
        case .binary(let op, let l, let r) where comparison(op) != nil:
            let strings = op == .equal
            if case .path(let p) = l, let path = jsonPath(p), let v = scalar(r, arguments, strings: strings) {
                return SQLFilter(sql: "\(extract(path)) \(comparison(op)!) ?", arguments: [v], paths: [path])
            }
            if case .path(let p) = r, let path = jsonPath(p), let v = scalar(l, arguments, strings: strings) {
                return SQLFilter(sql: "\(extract(path)) \(comparison(flipped(op))!) ?", arguments: [v], paths: [path])
            }
            return nil
        case .binary(.in, .path(let p), .array(let items)):
            guard let path = jsonPath(p), !items.isEmpty else { return nil }
            var values: [any DatabaseValueConvertible] = []
            for item in items {
                guard let v = scalar(item, arguments, strings: true) else { return nil }
                values.append(v)
            }
            let marks = Array(repeating: "?", count: values.count).joined(separator: ", ")
            return SQLFilter(sql: "\(extract(path)) IN (\(marks))", arguments: values, paths: [path])
        default:
            return nil
        }
    }

    private static func comparison(_ op: BinaryOperator) -> String? {
        switch op {
        case .equal: return "="
        case .less: return "<"
        case .lessOrEqual: return "<="
        case .greater: return ">"
        case .greaterOrEqual: return ">="
        default: return nil
        }
    }

    private static func flipped(_ op: BinaryOperator) -> BinaryOperator {
        switch op {
        case .less: return .greater
        case .lessOrEqual: return .greaterOrEqual
        case .greater: return .less
        case .greaterOrEqual: return .lessOrEqual
        default: return op
        }
    }

    /// A number, or an ASCII string when `strings`, that SQLite compares as DQL does.
    /// Other strings stay in Swift, which compares them by canonical equivalence
    /// where SQLite compares bytes; booleans, null and containers stay in Swift too.
    private static func scalar(_ e: Expression, _ arguments: [String: Value], strings: Bool) -> (any DatabaseValueConvertible)? {
        let value: Value?
        switch e {
        case .literal(let v): value = v
        case .parameter(let name): value = arguments[name]
        default: return nil
        }
        switch value {
        case .string(let s)? where strings && s.utf8.allSatisfy({ $0 < 0x80 }): return s
        case .int(let i)?: return i
        case .double(let d)? where d.isFinite: return d
        default: return nil
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

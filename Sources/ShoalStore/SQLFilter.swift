import ShoalCRDT
import ShoalStorage
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
/// - `OR` when every side translates.
/// A chain of one operator becomes one bracketed group, however the parser nested
/// it, and the translation stays inside SQLite's limits (`maximumDepth`,
/// `maximumTerms`, `maximumArguments`) by dropping what goes past them: a dropped
/// condition only widens the filter.
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

    static func make(_ predicate: Expression?, arguments: [String: Value]) -> SQLFilter? {
        guard let predicate else { return nil }
        var translator = Translator(arguments: arguments)
        return translator.translate(predicate, depth: 0)
    }

    /// The translation of one predicate, within SQLite's limits: past them a condition
    /// is dropped, which only widens what the filter keeps (an AND keeps its other
    /// sides; an OR with a side dropped is dropped whole).
    private struct Translator {
        let arguments: [String: Value]
        /// Comparisons and bound values so far.
        var terms = 0
        var bound = 0

        /// `e` as SQL, `depth` groups down.
        mutating func translate(_ e: Expression, depth: Int) -> SQLFilter? {
            switch e {
            case .binary(let op, _, _) where op == .and || op == .or:
                // A chain of one operator is one group, however the parser nested it.
                var sides: [Expression] = []
                Self.flatten(e, op, into: &sides)
                return group(op, sides, depth: depth + 1)
            case .binary(let op, let l, let r) where comparison(op) != nil:
                let strings = op == .equal
                if case .path(let p) = l, let path = jsonPath(p), let v = scalar(r, arguments, strings: strings) {
                    return term(SQLFilter(sql: "\(extract(path)) \(comparison(op)!) ?", arguments: [v], paths: [path]))
                }
                if case .path(let p) = r, let path = jsonPath(p), let v = scalar(l, arguments, strings: strings) {
                    return term(SQLFilter(sql: "\(extract(path)) \(comparison(flipped(op))!) ?", arguments: [v], paths: [path]))
                }
                return nil
            case .binary(.in, .path(let p), .array(let items)):
                guard let path = jsonPath(p), !items.isEmpty, items.count <= maximumArguments else { return nil }
                var values: [any DatabaseValueConvertible] = []
                for item in items {
                    guard let v = scalar(item, arguments, strings: true) else { return nil }
                    values.append(v)
                }
                let marks = Array(repeating: "?", count: values.count).joined(separator: ", ")
                return term(SQLFilter(sql: "\(extract(path)) IN (\(marks))", arguments: values, paths: [path]))
            default:
                return nil
            }
        }

        /// The sides of a chain of `op`, left to right.
        static func flatten(_ e: Expression, _ op: BinaryOperator, into sides: inout [Expression]) {
            if case .binary(op, let l, let r) = e {
                flatten(l, op, into: &sides)
                flatten(r, op, into: &sides)
            } else {
                sides.append(e)
            }
        }

        /// `(a AND b AND …)` of the sides that translate, or `(a OR b OR …)` when every side does.
        mutating func group(_ op: BinaryOperator, _ sides: [Expression], depth: Int) -> SQLFilter? {
            guard depth <= maximumDepth else { return nil }
            let before = (terms, bound)
            var parts: [SQLFilter] = []
            for side in sides {
                if let part = translate(side, depth: depth) {
                    parts.append(part)
                } else if op == .or {
                    // Nothing of it goes into the filter, so none of its budget is spent.
                    (terms, bound) = before
                    return nil
                }
            }
            guard parts.count > 1 else { return parts.first }
            let joiner = op == .and ? " AND " : " OR "
            return SQLFilter(
                sql: "(" + parts.map(\.sql).joined(separator: joiner) + ")", arguments: parts.flatMap(\.arguments),
                paths: parts.flatMap(\.paths))
        }

        /// A comparison, if the budget has room for it.
        mutating func term(_ filter: SQLFilter) -> SQLFilter? {
            guard terms < maximumTerms, bound + filter.arguments.count <= maximumArguments else { return nil }
            terms += 1
            bound += filter.arguments.count
            return filter
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

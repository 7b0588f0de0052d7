import PostgresNIO
import ShoalCRDT
import ShoalQuery
import ShoalStorage

/// A WHERE clause's pre-filter (`PreFilter`) as PostgreSQL checks it on the stored
/// JSON bodies, so that a query reads the documents it may match rather than its
/// whole collection, through a declared index where one serves it.
///
/// A body is stored as TEXT. Each comparison reads its path with `shoal_at(body,
/// path)` (migration `v8-user-indexes`), the very expression a declared index holds
/// (`UserIndex.postgresCreate`), so that the planner can search that index; the path
/// and the collection are written into the SQL, not bound, for it to match them.
/// Values compare as `jsonb`, which compares numbers by value (`1 = 1.0`) and strings
/// byte by byte (so a string or key is put in a filter only where bytes decide as DQL
/// does, `PreFilter.comparesAsBytes`). Two more differences from DQL are kept out:
/// - `jsonb` refuses the escape `\u0000`, which a DQL string may hold: `shoal_at`
///   gives a body that holds the six characters the value `unfilterable`, which `=` and
///   `IN` keep, and a range keeps such a body by its text (`unreadable`); a string
///   holding U+0000 is not put in a filter;
/// - a body's double is stored as its shortest decimal, which PostgreSQL compares
///   exactly where DQL compares the double's own value: they order every number the
///   same only below 2^53, so larger numbers stay in Swift.
/// A range compares numbers only (`Writer.range`), and a path PostgreSQL reads as an
/// array index only widens what is kept.
enum PostgresFilter {
    /// What PostgreSQL's SQL holds here: as SQLite's, so that one predicate goes as far
    /// on either engine; numbers below 2^53; no U+0000, which TEXT cannot hold.
    static let rules = PreFilter.Rules(
        maximumDepth: 16, maximumTerms: 500, maximumArguments: 999, numbersBelow: 0x1p53,
        accepts: { !$0.contains { $0.utf8.contains(0) } }, holds: { !$0.utf8.contains(0) })

    /// What `shoal_at` gives for a body `jsonb` cannot hold, and for a value too long
    /// for an index entry.
    static let unfilterable = #"'{"shoal": "unfilterable"}'::jsonb"#

    /// A body `jsonb` cannot hold: one with the escape `\u0000`, as `shoal_at` tells
    /// it, and as the partial index `shoal_unfilterable` holds those bodies. Written as a
    /// LIKE (the pattern's `\\` is one backslash), which the planner estimates as rare,
    /// where `strpos(...) > 0` it takes for a third of the rows, and plans a range on an
    /// index as a parallel scan of them.
    static let unreadable = #"body LIKE E'%\\\\u0000%'"#

    /// The value at `path` of a row's body, as a declared index holds it.
    static func at(_ path: [String]) -> String {
        "shoal_at(body, ARRAY[" + path.map(literal).joined(separator: ", ") + "]::text[])"
    }

    /// An SQL string literal, read the same whatever `standard_conforming_strings` says:
    /// an `E''` string, its quotes and backslashes doubled. `text` holds no U+0000.
    static func literal(_ text: String) -> String {
        var out = "E'"
        for character in text.unicodeScalars {
            if character == "'" || character == "\\" { out.unicodeScalars.append(character) }
            out.unicodeScalars.append(character)
        }
        return out + "'"
    }

    /// `filter` as a condition on a row's `body`, its values appended to `binds`
    /// (numbered after those already there).
    static func condition(_ filter: PreFilter, binds: inout PostgresBindings) -> String {
        var writer = Writer(binds: binds)
        let condition = writer.write(filter)
        binds = writer.binds
        return condition
    }

    /// The SQL of a filter, its values appended to `binds`.
    private struct Writer {
        var binds: PostgresBindings

        mutating func write(_ filter: PreFilter) -> String {
            switch filter {
            case .compare(let path, .equal, let value):
                return "\(at(path)) IN (\(bind(value)), \(unfilterable))"
            case .compare(let path, let op, let value):
                return range(path, op.isLower ? (op, value) : nil, op.isLower ? nil : (op, value))
            case .among(let path, let values):
                var list: [String] = []
                for value in values { list.append(bind(value)) }
                return "\(at(path)) IN (\(list.joined(separator: ", ")), \(unfilterable))"
            case .all(let parts):
                // A lower and an upper bound on one path are one range, which one search
                // of an index reads.
                var sides: [String] = []
                var paired: Set<Int> = []
                for (i, part) in parts.enumerated() where !paired.contains(i) {
                    guard case .compare(let path, let op, let value) = part, op != .equal else {
                        sides.append(write(part))
                        continue
                    }
                    let other = parts.indices.first { j in
                        guard j > i, !paired.contains(j), case .compare(path, let second, _) = parts[j] else { return false }
                        return second != .equal && second.isLower != op.isLower
                    }
                    guard let other, case .compare(_, let op2, let value2) = parts[other] else {
                        sides.append(write(part))
                        continue
                    }
                    paired.insert(other)
                    sides.append(op.isLower ? range(path, (op, value), (op2, value2)) : range(path, (op2, value2), (op, value)))
                }
                return sides.count == 1 ? sides[0] : "(" + sides.joined(separator: " AND ") + ")"
            case .any(let parts):
                // Equalities ORed on one path are one IN: the body is cast once for them.
                var others: [PreFilter] = []
                var among: [[String]: [PreFilter.Scalar]] = [:]
                var order: [[String]] = []
                for part in parts {
                    switch part {
                    case .compare(let path, .equal, let value):
                        if among[path] == nil { order.append(path) }
                        among[path, default: []].append(value)
                    case .among(let path, let values):
                        if among[path] == nil { order.append(path) }
                        among[path, default: []] += values
                    default:
                        others.append(part)
                    }
                }
                var sides: [String] = []
                for path in order { sides.append(write(.among(path, among[path]!))) }
                for part in others { sides.append(write(part)) }
                return sides.count == 1 ? sides[0] : "(" + sides.joined(separator: " OR ") + ")"
            }
        }

        /// A range of numbers at `path`, bounded below, above or both; either bound
        /// missing is the end of the numbers in `jsonb`'s order (which sorts null and
        /// strings below them, booleans, arrays and objects above), so that the range
        /// holds numbers only and is one search of an index. Below, that end is
        /// `-1e1000`, less than any double; above, `false`, the least boolean.
        mutating func range(
            _ path: [String], _ lower: (PreFilter.Comparison, PreFilter.Scalar)?, _ upper: (PreFilter.Comparison, PreFilter.Scalar)?
        ) -> String {
            let x = at(path)
            let from = lower.map { "\(x) \($0.0.rawValue) \(bind($0.1))" } ?? "\(x) > '-1e1000'::jsonb"
            let to = upper.map { "\(x) \($0.0.rawValue) \(bind($0.1))" } ?? "\(x) < 'false'::jsonb"
            // The bodies `jsonb` cannot hold are found by their text, which costs no cast
            // of the body where no index serves the range, and with one is a search of
            // `shoal_unfilterable` beside the declared index's. (A value `shoal_at` gives
            // as `unfilterable` for its length is no number: no range holds it.)
            return "(\(unreadable) OR (\(from) AND \(to)))"
        }

        mutating func bind(_ value: PreFilter.Scalar) -> String {
            binds.append(JSON.encode(value.value))
            return "$\(binds.count)::jsonb"
        }
    }
}

extension PreFilter.Comparison {
    /// Whether it bounds a range from below (`>`, `>=`).
    fileprivate var isLower: Bool { self == .greater || self == .greaterOrEqual }
}

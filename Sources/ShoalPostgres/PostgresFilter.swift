import PostgresNIO
import ShoalCRDT
import ShoalQuery
import ShoalStorage

/// A WHERE clause's pre-filter (`PreFilter`) as PostgreSQL checks it on the stored
/// JSON bodies, so that a query reads the documents it may match rather than its
/// whole collection.
///
/// A body is stored as TEXT; the query casts it to `jsonb` once per row
/// (`bodyAsJSONB`) and compares values as `jsonb`, which compares numbers by value
/// (`1 = 1.0`) and strings byte by byte (so a string or key is put in a filter only
/// where bytes decide as DQL does, `PreFilter.comparesAsBytes`). Two more differences
/// from DQL are kept out:
/// - `jsonb` refuses the escape `\u0000`, which a DQL string may hold: a body that
///   holds the six characters is kept whatever the filter says, and a string holding
///   U+0000 is not put in a filter;
/// - a body's double is stored as its shortest decimal, which PostgreSQL compares
///   exactly where DQL compares the double's own value: they order every number the
///   same only below 2^53, so larger numbers stay in Swift.
/// A range compares numbers only (`jsonb` would order a string below every number),
/// and a path PostgreSQL reads as an array index only widens what is kept.
enum PostgresFilter {
    /// What PostgreSQL's SQL holds here: as SQLite's, so that one predicate goes as far
    /// on either engine; numbers below 2^53; no U+0000, which TEXT cannot hold.
    static let rules = PreFilter.Rules(
        maximumDepth: 16, maximumTerms: 500, maximumArguments: 999, numbersBelow: 0x1p53,
        accepts: { !$0.contains { $0.utf8.contains(0) } }, holds: { !$0.utf8.contains(0) })

    /// The join that gives each row its body as `jsonb` (`b.j`), once, or NULL for a
    /// body `jsonb` cannot hold; `OFFSET 0` keeps the planner from casting it again
    /// for each comparison.
    static let bodyAsJSONB =
        #"CROSS JOIN LATERAL (SELECT CASE WHEN strpos(body, E'\\u0000') = 0 THEN body::jsonb END AS j OFFSET 0) AS b"#

    /// `filter` as a condition on `b.j`, its values appended to `binds` (numbered after
    /// those already there); true for a body `b.j` cannot hold.
    static func condition(_ filter: PreFilter, binds: inout PostgresBindings) -> String {
        var writer = Writer(binds: binds)
        let condition = writer.write(filter)
        binds = writer.binds
        return "(b.j IS NULL OR \(condition))"
    }

    /// The SQL of a filter, its values appended to `binds`.
    private struct Writer {
        var binds: PostgresBindings

        mutating func write(_ filter: PreFilter) -> String {
            switch filter {
            case .compare(let path, let op, let value):
                let at = bind(path)
                let v = bind(value)
                guard op != .equal else { return "(b.j #> \(at)) = \(v)" }
                return "(jsonb_typeof(b.j #> \(at)) = 'number' AND (b.j #> \(at)) \(op.rawValue) \(v))"
            case .among(let path, let values):
                let at = bind(path)
                var list: [String] = []
                for value in values { list.append(bind(value)) }
                return "(b.j #> \(at)) IN (\(list.joined(separator: ", ")))"
            case .all(let parts), .any(let parts):
                let joiner: String
                if case .all = filter { joiner = " AND " } else { joiner = " OR " }
                var sides: [String] = []
                for part in parts { sides.append(write(part)) }
                return "(" + sides.joined(separator: joiner) + ")"
            }
        }

        mutating func bind(_ path: [String]) -> String {
            binds.append(path)
            return "$\(binds.count)::text[]"
        }

        mutating func bind(_ value: PreFilter.Scalar) -> String {
            binds.append(JSON.encode(value.value))
            return "$\(binds.count)::jsonb"
        }
    }
}

package import ShoalCRDT
package import ShoalQuery

/// The part of a DQL WHERE clause a store's SQL can check on the stored JSON bodies,
/// as a tree each engine writes in its own SQL (`SQLFilter` for SQLite, `PostgresFilter`
/// for PostgreSQL).
///
/// A pre-filter keeps every document the DQL predicate could match (and maybe a few
/// more), and `DocumentMatch` then decides exactly. What it holds:
/// - `path = v` with a number or a string `v` (a literal or a parameter), either
///   side; `path < v`, `<=`, `>`, `>=` with a number;
/// - `path IN (v, ...)` with numbers and strings;
/// - `AND` of any of these (an untranslatable side is simply dropped);
/// - `OR` when every side translates.
/// A chain of one operator becomes one group, however the parser nested it, and the
/// translation stays inside the engine's `Rules` by dropping what goes past them: a
/// dropped condition only widens the filter. Everything else (NOT, LIKE, IS
/// NULL/MISSING, arithmetic, functions) runs in Swift over the candidates.
///
/// Strings are compared only for equality, and keys named, only where bytes decide as
/// DQL does (`comparesAsBytes`): DQL compares strings, and finds an object's keys, by
/// canonical equivalence, where SQL compares bytes. Booleans, null and containers stay
/// in Swift too.
package indirect enum PreFilter: Hashable, Sendable {
    /// `path op value`, the path on the left.
    case compare([String], Comparison, Scalar)
    /// `path IN (values)`.
    case among([String], [Scalar])
    case all([PreFilter])
    case any([PreFilter])

    package enum Comparison: String, Sendable {
        case equal = "="
        case less = "<"
        case lessOrEqual = "<="
        case greater = ">"
        case greaterOrEqual = ">="
    }

    package enum Scalar: Hashable, Sendable {
        case int(Int64)
        case double(Double)
        /// ASCII only.
        case string(String)

        package var value: Value {
            switch self {
            case .int(let i): .int(i)
            case .double(let d): .double(d)
            case .string(let s): .string(s)
            }
        }
    }

    /// What one engine's SQL can hold.
    package struct Rules: Sendable {
        /// The most AND and OR groups nested in one another.
        package var maximumDepth: Int
        /// The most comparisons in one filter.
        package var maximumTerms: Int
        /// The most values one filter binds.
        package var maximumArguments: Int
        /// The magnitude a number must stay below for the engine to compare it with
        /// every stored number as DQL does (`.infinity`: any integer, any finite double).
        package var numbersBelow: Double
        /// Whether the engine can name the path.
        package var accepts: @Sendable ([String]) -> Bool
        /// Whether the engine can hold the string.
        package var holds: @Sendable (String) -> Bool

        package init(
            maximumDepth: Int, maximumTerms: Int, maximumArguments: Int, numbersBelow: Double = .infinity,
            accepts: @escaping @Sendable ([String]) -> Bool = { !$0.isEmpty },
            holds: @escaping @Sendable (String) -> Bool = { _ in true }
        ) {
            self.maximumDepth = maximumDepth
            self.maximumTerms = maximumTerms
            self.maximumArguments = maximumArguments
            self.numbersBelow = numbersBelow
            self.accepts = accepts
            self.holds = holds
        }
    }

    /// Whether comparing `text` byte by byte decides as DQL does: it is ASCII, and holds
    /// none of the three ASCII characters a non-ASCII one is canonically equivalent to
    /// (U+212A KELVIN SIGN is `K`, U+037E GREEK QUESTION MARK is `;`, U+1FEF GREEK
    /// VARIA is `` ` ``). Every other text equal to an ASCII one in DQL is that text.
    package static func comparesAsBytes(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 < 0x80 && $0 != UInt8(ascii: "K") && $0 != UInt8(ascii: ";") && $0 != UInt8(ascii: "`") }
    }

    /// The paths the filter reads, in order, each an index candidate.
    package var paths: [[String]] {
        switch self {
        case .compare(let path, _, _), .among(let path, _): [path]
        case .all(let parts), .any(let parts): parts.flatMap(\.paths)
        }
    }

    /// The pre-filter of `predicate` within `rules`; nil when no part of it translates.
    package static func make(_ predicate: Expression?, arguments: [String: Value], rules: Rules) -> PreFilter? {
        guard let predicate else { return nil }
        var translator = Translator(arguments: arguments, rules: rules)
        return translator.translate(predicate, depth: 0)
    }

    /// The translation of one predicate, within the rules: past them a condition is
    /// dropped, which only widens what the filter keeps (an AND keeps its other sides; an
    /// OR with a side dropped is dropped whole).
    private struct Translator {
        let arguments: [String: Value]
        let rules: Rules
        /// Comparisons and bound values so far.
        var terms = 0
        var bound = 0

        /// `e` as a filter, `depth` groups down.
        mutating func translate(_ e: Expression, depth: Int) -> PreFilter? {
            switch e {
            case .binary(let op, _, _) where op == .and || op == .or:
                // A chain of one operator is one group, however the parser nested it.
                var sides: [Expression] = []
                Self.flatten(e, op, into: &sides)
                return group(op, sides, depth: depth + 1)
            case .binary(.in, .path(let path), .array(let items)):
                return among(path, items)
            case .binary(let op, let l, let r):
                guard let comparison = PreFilter.comparison(op) else { return nil }
                let strings = op == .equal
                if case .path(let path) = l, accepts(path), let v = scalar(r, strings: strings) {
                    return term(.compare(path, comparison, v), values: 1)
                }
                if case .path(let path) = r, accepts(path), let v = scalar(l, strings: strings) {
                    return term(.compare(path, PreFilter.flipped(comparison), v), values: 1)
                }
                return nil
            default:
                return nil
            }
        }

        /// `path IN (items)` as a filter.
        mutating func among(_ path: [String], _ items: [Expression]) -> PreFilter? {
            guard accepts(path), !items.isEmpty, items.count <= rules.maximumArguments else { return nil }
            var values: [Scalar] = []
            for item in items {
                guard let v = scalar(item, strings: true) else { return nil }
                values.append(v)
            }
            return term(.among(path, values), values: values.count)
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

        /// `all` of the sides that translate, or `any` when every side does.
        mutating func group(_ op: BinaryOperator, _ sides: [Expression], depth: Int) -> PreFilter? {
            guard depth <= rules.maximumDepth else { return nil }
            let before = (terms, bound)
            var parts: [PreFilter] = []
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
            return op == .and ? .all(parts) : .any(parts)
        }

        /// A comparison, if the budget has room for it.
        mutating func term(_ filter: PreFilter, values: Int) -> PreFilter? {
            guard terms < rules.maximumTerms, bound + values <= rules.maximumArguments else { return nil }
            terms += 1
            bound += values
            return filter
        }

        /// Whether the engine can name `path` and finds the key DQL finds.
        func accepts(_ path: [String]) -> Bool {
            !path.isEmpty && path.allSatisfy(PreFilter.comparesAsBytes) && rules.accepts(path)
        }

        /// A number, or a string when `strings`, that the engine compares as DQL does.
        func scalar(_ e: Expression, strings: Bool) -> Scalar? {
            let value: Value?
            switch e {
            case .literal(let v): value = v
            case .parameter(let name): value = arguments[name]
            default: return nil
            }
            switch value {
            case .string(let s)? where strings && PreFilter.comparesAsBytes(s) && rules.holds(s): return .string(s)
            case .int(let i)? where Double(i.magnitude) < rules.numbersBelow: return .int(i)
            case .double(let d)? where d.isFinite && d.magnitude < rules.numbersBelow: return .double(d)
            default: return nil
            }
        }
    }

    private static func comparison(_ op: BinaryOperator) -> Comparison? {
        switch op {
        case .equal: .equal
        case .less: .less
        case .lessOrEqual: .lessOrEqual
        case .greater: .greater
        case .greaterOrEqual: .greaterOrEqual
        default: nil
        }
    }

    private static func flipped(_ op: Comparison) -> Comparison {
        switch op {
        case .less: .greater
        case .lessOrEqual: .greaterOrEqual
        case .greater: .less
        case .greaterOrEqual: .lessOrEqual
        case .equal: .equal
        }
    }
}

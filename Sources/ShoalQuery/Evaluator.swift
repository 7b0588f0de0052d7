public import ShoalCRDT

/// Evaluates expressions against a document.
///
/// `nil` stands for MISSING: a path the document does not have. MISSING propagates
/// through arithmetic and function calls, makes every comparison false, and counts
/// as false in AND, OR and NOT.
public enum Evaluator {
    /// The built-in functions and how many arguments each takes.
    static let functionArity: [String: Int] = ["deserialize_json": 1]

    /// The value of `e` for `document`, or `nil` when it is MISSING.
    public static func evaluate(_ e: Expression, document: Value, arguments: [String: Value]) throws(QueryError)
        -> Value?
    {
        func eval(_ e: Expression) throws(QueryError) -> Value? {
            try evaluate(e, document: document, arguments: arguments)
        }
        switch e {
        case .literal(let value):
            return value
        case .parameter(let name):
            guard let value = arguments[name] else { throw QueryError("missing argument :\(name)") }
            return value
        case .path(let path):
            var value: Value? = document
            for key in path { value = value?[key] }
            return value
        case .object(let entries):
            var fields: [String: Value] = [:]
            for entry in entries { fields[entry.key] = try eval(entry.value) }
            return .object(fields)
        case .array(let items):
            var values: [Value] = []
            for item in items { values.append(try eval(item) ?? .null) }
            return .array(values)
        case .unary(.not, let operand):
            return .bool(try eval(operand) != .bool(true))
        case .unary(.negate, let operand):
            switch try eval(operand) {
            case nil: return nil
            case .int(let i):
                let (negated, overflow) = Int64(0).subtractingReportingOverflow(i)
                if overflow { throw QueryError("integer overflow: -(\(i)) does not fit in 64 bits") }
                return .int(negated)
            case .double(let d): return .double(-d)
            default: return .null
            }
        case .binary(.and, let l, let r):
            guard try eval(l) == .bool(true) else { return .bool(false) }
            return .bool(try eval(r) == .bool(true))
        case .binary(.or, let l, let r):
            if try eval(l) == .bool(true) { return .bool(true) }
            return .bool(try eval(r) == .bool(true))
        case .binary(let op, let l, .array(let items)) where op == .in || op == .notIn:
            // A written list: MISSING items are skipped rather than read as null.
            let left = try eval(l)
            var values: [Value] = []
            for item in items {
                if let value = try eval(item) { values.append(value) }
            }
            return membership(op, left, values)
        case .binary(let op, let l, let r) where op == .in || op == .notIn:
            let left = try eval(l)
            let right = try eval(r)
            guard case .array(let values)? = right else {
                let what = if case .parameter(let name) = r { ":\(name)" } else { "the right side" }
                let found = right.map { "a \($0.typeName)" } ?? "missing"
                throw QueryError("IN needs a list, but \(what) is \(found): pass an array")
            }
            return membership(op, left, values)
        case .binary(let op, let l, let r) where op == .like || op == .notLike:
            let left = try eval(l)
            let right = try eval(r)
            guard case .string(let text)? = left, case .string(let pattern)? = right else { return .bool(false) }
            return .bool(matchLike(text, pattern: pattern) == (op == .like))
        case .binary(let op, let l, let r):
            let left = try eval(l)
            let right = try eval(r)
            switch op {
            case .equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual:
                guard let left, let right else { return .bool(false) }
                return .bool(compare(op, left, right))
            default:
                guard let left, let right else { return nil }
                return try arithmetic(op, left, right)
            }
        case .unary(.isNull, let operand):
            return .bool(try eval(operand) == .null)
        case .unary(.isNotNull, let operand):
            let value = try eval(operand)
            return .bool(value != nil && value != .null)
        case .unary(.isMissing, let operand):
            return .bool(try eval(operand) == nil)
        case .unary(.isNotMissing, let operand):
            return .bool(try eval(operand) != nil)
        case .index(let base, let key):
            let container = try eval(base)
            switch (container, try eval(key)) {
            case (.object(let fields)?, .string(let name)?):
                return fields[name]
            case (.array(let items)?, let position?):
                let i: Int
                switch position {
                case .int(let n): i = Int(n)
                case .double(let d) where d.rounded(.towardZero) == d && abs(d) < 0x1p53: i = Int(d)
                default: return nil
                }
                let resolved = i < 0 ? items.count + i : i
                // Not a ternary: Value is ExpressibleByNilLiteral, so `nil` there would be .null.
                guard items.indices.contains(resolved) else { return nil }
                return items[resolved]
            default:
                return nil
            }
        case .countAll:
            throw QueryError(
                "COUNT(*) is only allowed as a projection: it counts the matching documents, "
                    + "as in SELECT COUNT(*) FROM c")
        case .function(let name, let args):
            var values: [Value?] = []
            for arg in args { values.append(try eval(arg)) }
            return try call(name, values)
        }
    }

    /// `left IN values` or `left NOT IN values`, by structural equality; false for both when `left` is MISSING.
    static func membership(_ op: BinaryOperator, _ left: Value?, _ values: [Value]) -> Value {
        guard let left else { return .bool(false) }
        let found = values.contains { equal(left, $0) }
        return .bool(found == (op == .in))
    }

    /// Whether `text` matches the SQL LIKE `pattern`, case-sensitively and over Characters:
    /// `%` matches any run of characters (including none), `_` exactly one, and `\` makes
    /// the character after it literal (a `\` at the very end matches a backslash).
    ///
    /// Runs in O(text × pattern) at worst: on a mismatch it only ever backtracks to the most
    /// recent `%`, which is enough because an earlier `%` can never need to absorb more.
    public static func matchLike(_ text: String, pattern: String) -> Bool {
        enum Element: Equatable {
            case character(Character)
            case one
            case any
        }
        var elements: [Element] = []
        var escaped = false
        for c in pattern {
            if escaped {
                elements.append(.character(c))
                escaped = false
            } else if c == "\\" {
                escaped = true
            } else if c == "%" {
                if elements.last != .any { elements.append(.any) }
            } else if c == "_" {
                elements.append(.one)
            } else {
                elements.append(.character(c))
            }
        }
        if escaped { elements.append(.character("\\")) }

        let chars = Array(text)
        var t = 0
        var p = 0
        // The element after the last `%` seen, and the text position that `%` is tried up to.
        var star: (element: Int, text: Int)?
        while t < chars.count {
            if p < elements.count {
                switch elements[p] {
                case .any:
                    p += 1
                    star = (p, t)
                    continue
                case .one:
                    t += 1
                    p += 1
                    continue
                case .character(let c) where c == chars[t]:
                    t += 1
                    p += 1
                    continue
                case .character:
                    break
                }
            }
            // Mismatch (or pattern used up): let the last `%` absorb one more character.
            guard let s = star else { return false }
            star = (s.element, s.text + 1)
            p = s.element
            t = s.text + 1
        }
        while p < elements.count, elements[p] == .any { p += 1 }
        return p == elements.count
    }

    /// Whether `document` satisfies `predicate`: a missing predicate matches everything,
    /// otherwise only `true` matches.
    public static func matches(_ predicate: Expression?, document: Value, arguments: [String: Value]) throws(QueryError)
        -> Bool
    {
        guard let predicate else { return true }
        return try evaluate(predicate, document: document, arguments: arguments) == .bool(true)
    }

    /// The `_id` a predicate of the exact form `_id = constant` (either way round) selects,
    /// so the document can be looked up by primary key; `nil` for any other predicate.
    public static func constantIDEquality(_ predicate: Expression?, arguments: [String: Value]) -> Value? {
        guard case .binary(.equal, let l, let r)? = predicate else { return nil }
        func constant(_ e: Expression) -> Value? {
            switch e {
            case .literal(let value): value
            case .parameter(let name): arguments[name]
            default: nil
            }
        }
        let id = Expression.path(["_id"])
        if l == id { return constant(r) }
        if r == id { return constant(l) }
        return nil
    }

    /// The comparisons of `_id` with a constant (`_id > :after`, `'k' <= _id`) among the
    /// terms of a predicate's top-level AND, joined by AND; nil when there are none.
    ///
    /// A document for which they are not true does not match the predicate (AND is true
    /// only when both sides are), and they read nothing but `_id`, so a store can check
    /// them on a document's key before it reads the body: paging by `_id` then costs a
    /// body only for the documents past the cursor.
    public static func idComparisons(_ predicate: Expression?) -> Expression? {
        guard let predicate else { return nil }
        if case .binary(.and, let l, let r) = predicate {
            switch (idComparisons(l), idComparisons(r)) {
            case (let a?, let b?): return .binary(.and, a, b)
            case (let a, let b): return a ?? b
            }
        }
        guard case .binary(let op, let l, let r) = predicate,
            [.equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual].contains(op)
        else { return nil }
        func isConstant(_ e: Expression) -> Bool {
            switch e {
            case .literal, .parameter: true
            default: false
            }
        }
        let id = Expression.path(["_id"])
        return (l == id && isConstant(r)) || (r == id && isConstant(l)) ? predicate : nil
    }

    /// Structural equality in which numbers compare by value, so `1 = 1.0`.
    public static func equal(_ a: Value, _ b: Value) -> Bool {
        switch (a, b) {
        case (.array(let x), .array(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { equal($0, $1) }
        case (.object(let x), .object(let y)):
            return x.count == y.count && x.allSatisfy { key, value in y[key].map { equal(value, $0) } ?? false }
        case (.int, .double), (.double, .int), (.double, .double):
            return compareNumbers(a, b) == 0
        default:
            return a == b
        }
    }

    // MARK: Comparison

    static func compare(_ op: BinaryOperator, _ l: Value, _ r: Value) -> Bool {
        let order: Int?
        switch op {
        case .equal: return equal(l, r)
        case .notEqual: return !equal(l, r)
        default:
            switch (l, r) {
            case (.string(let a), .string(let b)): order = a < b ? -1 : (a == b ? 0 : 1)
            default: order = compareNumbers(l, r)
            }
        }
        guard let order else { return false }
        switch op {
        case .less: return order < 0
        case .lessOrEqual: return order <= 0
        case .greater: return order > 0
        default: return order >= 0
        }
    }

    /// Exact three-way comparison of two numbers; `nil` when either is not a number or is NaN.
    static func compareNumbers(_ l: Value, _ r: Value) -> Int? {
        func sign<T: Comparable>(_ a: T, _ b: T) -> Int { a < b ? -1 : (a == b ? 0 : 1) }
        /// Compares an integer with a double without rounding the integer to a double.
        func mixed(_ i: Int64, _ d: Double) -> Int? {
            if d.isNaN { return nil }
            if d >= 0x1p63 { return -1 }
            if d < -0x1p63 { return 1 }
            let whole = d.rounded(.towardZero)
            let c = sign(i, Int64(whole))
            return c != 0 ? c : sign(0, d - whole)
        }
        switch (l, r) {
        case (.int(let a), .int(let b)): return sign(a, b)
        case (.int(let a), .double(let b)): return mixed(a, b)
        case (.double(let a), .int(let b)): return mixed(b, a).map { -$0 }
        case (.double(let a), .double(let b)): return a.isNaN || b.isNaN ? nil : sign(a, b)
        default: return nil
        }
    }

    // MARK: Arithmetic

    static func arithmetic(_ op: BinaryOperator, _ l: Value, _ r: Value) throws(QueryError) -> Value {
        switch (l, r) {
        case (.int(let a), .int(let b)):
            return try integerArithmetic(op, a, b)
        case (.string(let a), .string(let b)) where op == .add:
            return .string(a + b)
        default:
            guard let a = l.numberValue, let b = r.numberValue else { return .null }
            let result: Double
            switch op {
            case .add: result = a + b
            case .subtract: result = a - b
            case .multiply: result = a * b
            case .divide: result = b == 0 ? .nan : a / b
            default: result = b == 0 ? .nan : a.truncatingRemainder(dividingBy: b)
            }
            return result.isFinite ? .double(result) : .null
        }
    }

    static func integerArithmetic(_ op: BinaryOperator, _ a: Int64, _ b: Int64) throws(QueryError) -> Value {
        let (result, overflow): (Int64, Bool)
        switch op {
        case .add: (result, overflow) = a.addingReportingOverflow(b)
        case .subtract: (result, overflow) = a.subtractingReportingOverflow(b)
        case .multiply: (result, overflow) = a.multipliedReportingOverflow(by: b)
        case .divide:
            if b == 0 { return .null }
            if a.remainderReportingOverflow(dividingBy: b).partialValue != 0 { return .double(Double(a) / Double(b)) }
            (result, overflow) = a.dividedReportingOverflow(by: b)
        default:
            if b == 0 { return .null }
            // Int64.min % -1 overflows in hardware but is 0, which is what partialValue holds.
            return .int(a.remainderReportingOverflow(dividingBy: b).partialValue)
        }
        if overflow {
            throw QueryError("integer overflow: \(a) \(op.rawValue) \(b) does not fit in 64 bits")
        }
        return .int(result)
    }

    // MARK: Functions

    static func call(_ name: String, _ args: [Value?]) throws(QueryError) -> Value? {
        guard let arity = functionArity[name] else { throw QueryError("unknown function '\(name)'") }
        guard args.count == arity else {
            throw QueryError("\(name) takes \(arity) argument\(arity == 1 ? "" : "s"), but \(args.count) were given")
        }
        switch (name, args[0]) {
        case (_, nil): return nil
        case ("deserialize_json", .null): return .null
        case ("deserialize_json", .string(let text)):
            do {
                return try JSON.parse(text)
            } catch {
                throw QueryError("deserialize_json: \(error)")
            }
        case (_, let value?):
            throw QueryError("\(name) expects a string, got a \(value.typeName)")
        }
    }
}

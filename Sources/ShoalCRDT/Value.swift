/// A JSON-like value: what a document field holds.
///
/// Objects keep their keys sorted, so that two replicas holding the same value
/// encode it to the same bytes; equality and ordering are structural.
public enum Value: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([Value])
    case object([String: Value])
}

extension Value {
    /// The field names of an object, sorted; empty for every other value.
    public var sortedKeys: [String] {
        guard case .object(let fields) = self else { return [] }
        return fields.keys.sorted()
    }

    /// The object's fields, or `nil` when this is not an object.
    public var objectValue: [String: Value]? {
        if case .object(let fields) = self { return fields }
        return nil
    }

    /// The string, or `nil` when this is not a string.
    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// A numeric view of ints and doubles, for comparisons and arithmetic; an int
    /// beyond ±2⁵³ comes out rounded (`doubleValue` says `nil` instead).
    public var numberValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }

    /// The number as an `Int`, when it is one exactly: an int, or a double with no
    /// fraction (`4.0`, which arithmetic with a double makes of a count) that fits.
    /// `nil` for `4.5`, for a string such as `"4"`, and for every other value.
    public var intValue: Int? {
        switch self {
        case .int(let i): return Int(exactly: i)
        case .double(let d): return Int(exactly: d)
        default: return nil
        }
    }

    /// The number as a `Double`, when a double holds it exactly: a double, or an int
    /// within ±2⁵³ (beyond it, `numberValue` gives the nearest double).
    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(exactly: i)
        case .double(let d): return d
        default: return nil
        }
    }

    /// The boolean, or `nil` when this is not a boolean (no number or string is one).
    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// The array's elements, or `nil` when this is not an array.
    public var arrayValue: [Value]? {
        if case .array(let items) = self { return items }
        return nil
    }

    /// Whether this is `null`. A field that is missing is no value at all: the
    /// subscript returns `nil` for it, and `.null` for a field that holds null.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// The member at `key` when this is an object.
    public subscript(key: String) -> Value? {
        guard case .object(let fields) = self else { return nil }
        return fields[key]
    }

    /// The element at `index` when this is an array and `index` is within it.
    public subscript(index: Int) -> Value? {
        guard case .array(let items) = self, items.indices.contains(index) else { return nil }
        return items[index]
    }

    /// The value's kind as a message names it: "null", "a boolean", "an array".
    public var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .int, .double: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// A short name of the value's type, for error messages.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .int, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

extension Value: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByFloatLiteral, ExpressibleByNilLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(nilLiteral: ()) { self = .null }
    public init(arrayLiteral elements: Value...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, Value)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension Value: CustomStringConvertible, CustomDebugStringConvertible {
    /// The value's canonical JSON, `{"_id":"a","doors":4}`, as `print` shows it.
    public var description: String { canonicalJSON }

    /// The canonical JSON too, so that `print(items)` shows an array of JSON objects.
    public var debugDescription: String { canonicalJSON }
}

extension Value: Comparable {
    /// A total order used by ORDER BY: null < booleans < numbers < strings < arrays < objects.
    public static func < (lhs: Value, rhs: Value) -> Bool {
        compare(lhs, rhs) < 0
    }

    private var typeRank: Int {
        switch self {
        case .null: return 0
        case .bool: return 1
        case .int, .double: return 2
        case .string: return 3
        case .array: return 4
        case .object: return 5
        }
    }

    /// Three-way comparison in the total order described on `<`.
    public static func compare(_ lhs: Value, _ rhs: Value) -> Int {
        if lhs.typeRank != rhs.typeRank { return lhs.typeRank < rhs.typeRank ? -1 : 1 }
        switch (lhs, rhs) {
        case (.bool(let a), .bool(let b)):
            return a == b ? 0 : (!a ? -1 : 1)
        case (.int(let a), .int(let b)):
            return a == b ? 0 : (a < b ? -1 : 1)
        case (.string(let a), .string(let b)):
            return a == b ? 0 : (a < b ? -1 : 1)
        case (.array(let a), .array(let b)):
            for (x, y) in zip(a, b) {
                let c = compare(x, y)
                if c != 0 { return c }
            }
            return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
        case (.object, .object):
            let a = lhs.canonicalJSON, b = rhs.canonicalJSON
            return a == b ? 0 : (a < b ? -1 : 1)
        default:
            let a = lhs.numberValue ?? 0, b = rhs.numberValue ?? 0
            return a == b ? 0 : (a < b ? -1 : 1)
        }
    }
}

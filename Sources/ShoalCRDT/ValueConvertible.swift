#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

/// A Swift value that is a `Value` as it stands: what lets a variable be a query
/// argument, `["doors": doors]`, where only literals could be before.
///
/// The standard types adopt it: `String`, `Bool`, `Double`, the integer types that
/// always fit in an `Int64` (`Int`, `Int8` to `Int64`, `UInt8` to `UInt32`), `Date`
/// (its ISO-8601 text, as `Value(encoding:)` writes it), `Optional` (`nil` is
/// `null`), and arrays and `[String: _]` dictionaries of adopters. `UInt` and
/// `UInt64` do not, as not all of theirs fit: `Value(exactly:)` takes them.
public protocol ValueConvertible: Sendable {
    /// The `Value` this stands for.
    var shoalValue: Value { get }
}

extension Value: ValueConvertible {
    public var shoalValue: Value { self }

    /// The value a Swift value stands for: `Value(doors)`, `Value(["a", "b"])`.
    public init(_ convertible: some ValueConvertible) {
        self = convertible.shoalValue
    }

    /// An integer of any type, or `nil` when it does not fit in an `Int64`.
    public init?(exactly integer: some BinaryInteger) {
        guard let i = Int64(exactly: integer) else { return nil }
        self = .int(i)
    }
}

extension String: ValueConvertible {
    public var shoalValue: Value { .string(self) }
}

extension Bool: ValueConvertible {
    public var shoalValue: Value { .bool(self) }
}

extension Double: ValueConvertible {
    /// The double; NaN and ±∞ are values too, written as `null` in JSON.
    public var shoalValue: Value { .double(self) }
}

extension Int: ValueConvertible {
    public var shoalValue: Value { .int(Int64(self)) }
}

extension Int8: ValueConvertible {
    public var shoalValue: Value { .int(Int64(self)) }
}

extension Int16: ValueConvertible {
    public var shoalValue: Value { .int(Int64(self)) }
}

extension Int32: ValueConvertible {
    public var shoalValue: Value { .int(Int64(self)) }
}

extension Int64: ValueConvertible {
    public var shoalValue: Value { .int(self) }
}

extension UInt8: ValueConvertible {
    public var shoalValue: Value { .int(Int64(self)) }
}

extension UInt16: ValueConvertible {
    public var shoalValue: Value { .int(Int64(self)) }
}

extension UInt32: ValueConvertible {
    public var shoalValue: Value { .int(Int64(self)) }
}

extension Date: ValueConvertible {
    /// The instant as UTC ISO-8601 text to the millisecond, `2024-05-01T12:00:00.000Z`.
    public var shoalValue: Value { .string(ISO8601Timestamp.string(from: self)) }
}

extension Optional: ValueConvertible where Wrapped: ValueConvertible {
    public var shoalValue: Value { self?.shoalValue ?? .null }
}

extension Array: ValueConvertible where Element: ValueConvertible {
    public var shoalValue: Value { .array(map(\.shoalValue)) }
}

extension Dictionary: ValueConvertible where Key == String, Value: ValueConvertible {
    // `Value` here is the dictionary's own: Shoal's is `ShoalCRDT.Value`.
    public var shoalValue: ShoalCRDT.Value { .object(mapValues(\.shoalValue)) }
}

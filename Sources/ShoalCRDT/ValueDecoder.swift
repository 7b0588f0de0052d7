#if canImport(FoundationEssentials)
import FoundationEssentials
#else
public import Foundation
#endif

extension Value {
    /// The app's type read from this value: a query result's document into a struct.
    ///
    /// Objects fill structs by their keys (keys a type does not name are ignored),
    /// arrays fill arrays, and a missing key or a `null` makes an optional `nil`.
    /// A number fills an integer type when it is an integer exactly (`4` or `4.0`, as
    /// `intValue` reads it) and a `Double` when a double holds it exactly. A `Date`
    /// is read from ISO-8601 text (`2024-05-01T12:00:00.000Z`, any fraction of a
    /// second or none, `Z` or `±HH:MM`), `Data` from base64 text, a `URL` from its
    /// text, and a `Value` field takes the value as it stands.
    ///
    /// Throws `DecodingError`, whose `codingPath` is where the value did not fit
    /// (`[2].owner.name`), saying what was expected and what was found there.
    public func decode<T: Decodable>(as type: T.Type = T.self) throws -> T {
        try ValueDecoder(value: self, codingPath: []).unbox(type)
    }
}

extension Array where Element == Value {
    /// Each value read as `type`, as `Value.decode(as:)` reads one: `result.items.decode(as: Car.self)`.
    /// An error's `codingPath` starts with the index of the value that did not fit.
    public func decode<T: Decodable>(as type: T.Type = T.self) throws -> [T] {
        try ValueDecoder(value: .array(self), codingPath: []).unbox([T].self)
    }
}

/// The `Decoder` behind `Value.decode(as:)`, over one value at one coding path; it is
/// also the single-value container of that value.
struct ValueDecoder: Decoder, SingleValueDecodingContainer {
    let value: Value
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// `type` read from this decoder's value, the Foundation types as documented on
    /// `Value.decode(as:)`, every other type by its own `init(from:)`.
    func unbox<T: Decodable>(_ type: T.Type) throws -> T {
        if type == Date.self {
            guard case .string(let text) = value, let date = ISO8601Timestamp.date(from: text) else {
                throw mismatch(Date.self, "an ISO-8601 date such as 2024-05-01T12:00:00.000Z")
            }
            return date as! T
        }
        if type == Data.self {
            guard case .string(let text) = value, let data = Data(base64Encoded: text) else {
                throw mismatch(Data.self, "base64 text")
            }
            return data as! T
        }
        if type == URL.self {
            guard case .string(let text) = value, let url = URL(string: text) else {
                throw mismatch(URL.self, "a URL")
            }
            return url as! T
        }
        return try T(from: self)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let fields) = value else { throw mismatch([String: Value].self, "an object", naming: false) }
        return KeyedDecodingContainer(KeyedContainer(fields: fields, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else { throw mismatch([Value].self, "an array", naming: false) }
        return UnkeyedContainer(items: items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    // MARK: Errors

    /// The error for a value that is not a `type`: "expected an integer (Int), found
    /// the string "four"", or `valueNotFound` when it is null. A container names no
    /// type: the one it would fill is the caller's.
    func mismatch(_ type: Any.Type, _ expected: String, naming: Bool = true) -> DecodingError {
        let context = DecodingError.Context(
            codingPath: codingPath,
            debugDescription: "expected \(expected)\(naming ? " (\(type))" : ""), found \(Self.describe(value))")
        return value.isNull ? .valueNotFound(type, context) : .typeMismatch(type, context)
    }

    /// A value as an error names it: its kind and, shortened, its JSON.
    static func describe(_ value: Value) -> String {
        let json = value.canonicalJSON
        let shown = json.count > 40 ? json.prefix(37) + "…" : Substring(json)
        switch value {
        case .null: return "null"
        case .bool: return "the boolean \(shown)"
        case .int, .double: return "the number \(shown)"
        case .string: return "the string \(shown)"
        case .array: return "an array \(shown)"
        case .object: return "an object \(shown)"
        }
    }

    // MARK: Single value

    func decodeNil() -> Bool { value.isNull }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard let b = value.boolValue else { throw mismatch(type, "a boolean") }
        return b
    }

    func decode(_ type: String.Type) throws -> String {
        guard let s = value.stringValue else { throw mismatch(type, "a string") }
        return s
    }

    func decode(_ type: Double.Type) throws -> Double {
        guard let d = value.doubleValue else {
            throw mismatch(type, value.numberValue == nil ? "a number" : "a number that a double holds exactly")
        }
        return d
    }

    func decode(_ type: Float.Type) throws -> Float {
        guard let d = value.doubleValue else { throw mismatch(type, "a number") }
        let f = Float(d)
        guard f.isFinite == d.isFinite else { throw mismatch(type, "a number within Float's range") }
        return f
    }

    /// An integer type read from a number that is an integer exactly and fits it.
    func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> I {
        let result: I?
        switch value {
        case .int(let i): result = I(exactly: i)
        case .double(let d) where d.isFinite && d.rounded(.towardZero) == d: result = I(exactly: d)
        default: throw mismatch(type, "an integer")
        }
        guard let result else { throw mismatch(type, "an integer from \(I.min) to \(I.max)") }
        return result
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try unbox(type) }
}

/// A key of Shoal's own in coding paths: an array index, or `super`.
struct ValueCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int?

    init(stringValue: String) {
        self.stringValue = stringValue
        self.intValue = nil
    }

    init(intValue: Int) {
        self.stringValue = String(intValue)
        self.intValue = intValue
    }

    static let `super` = ValueCodingKey(stringValue: "super")
}

extension ValueDecoder {
    struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let fields: [String: Value]
        let codingPath: [any CodingKey]

        var allKeys: [Key] { fields.keys.sorted().compactMap { Key(stringValue: $0) } }

        func contains(_ key: Key) -> Bool { fields[key.stringValue] != nil }

        /// The decoder of the field at `key`, which must be there.
        func decoder(for key: some CodingKey) throws -> ValueDecoder {
            guard let value = fields[key.stringValue] else {
                let keys = fields.keys.sorted()
                let present = keys.isEmpty ? "the object is empty" : "the object has "
                    + keys.prefix(10).map { "'\($0)'" }.joined(separator: ", ") + (keys.count > 10 ? ", …" : "")
                throw DecodingError.keyNotFound(
                    key, .init(codingPath: codingPath, debugDescription: "no field '\(key.stringValue)': \(present)"))
            }
            return ValueDecoder(value: value, codingPath: codingPath + [key])
        }

        func decodeNil(forKey key: Key) throws -> Bool { try decoder(for: key).decodeNil() }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try decoder(for: key).unbox(type) }

        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decoder(for: key).decode(type) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try decoder(for: key).decode(type) }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decoder(for: key).decode(type) }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try decoder(for: key).decode(type) }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decoder(for: key).decode(type) }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try decoder(for: key).decode(type) }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try decoder(for: key).decode(type) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try decoder(for: key).decode(type) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try decoder(for: key).decode(type) }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try decoder(for: key).decode(type) }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try decoder(for: key).decode(type) }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try decoder(for: key).decode(type) }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try decoder(for: key).decode(type) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try decoder(for: key).decode(type) }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
            -> KeyedDecodingContainer<NestedKey>
        {
            try decoder(for: key).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try decoder(for: key).unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder { try decoder(for: ValueCodingKey.super) }
        func superDecoder(forKey key: Key) throws -> any Decoder { try decoder(for: key) }
    }

    struct UnkeyedContainer: UnkeyedDecodingContainer {
        let items: [Value]
        let codingPath: [any CodingKey]
        private(set) var currentIndex = 0

        init(items: [Value], codingPath: [any CodingKey]) {
            self.items = items
            self.codingPath = codingPath
        }

        var count: Int? { items.count }
        var isAtEnd: Bool { currentIndex >= items.count }

        /// The decoder of the next element, which must be there; it is taken.
        mutating func next(_ type: Any.Type) throws -> ValueDecoder {
            let key = ValueCodingKey(intValue: currentIndex)
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(
                    type,
                    .init(codingPath: codingPath + [key], debugDescription: "expected \(type), found the end of an array of \(items.count)"))
            }
            defer { currentIndex += 1 }
            return ValueDecoder(value: items[currentIndex], codingPath: codingPath + [key])
        }

        mutating func decodeNil() throws -> Bool {
            guard !isAtEnd, items[currentIndex].isNull else { return false }
            currentIndex += 1
            return true
        }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(type).unbox(type) }

        mutating func decode(_ type: Bool.Type) throws -> Bool { try next(type).decode(type) }
        mutating func decode(_ type: String.Type) throws -> String { try next(type).decode(type) }
        mutating func decode(_ type: Double.Type) throws -> Double { try next(type).decode(type) }
        mutating func decode(_ type: Float.Type) throws -> Float { try next(type).decode(type) }
        mutating func decode(_ type: Int.Type) throws -> Int { try next(type).decode(type) }
        mutating func decode(_ type: Int8.Type) throws -> Int8 { try next(type).decode(type) }
        mutating func decode(_ type: Int16.Type) throws -> Int16 { try next(type).decode(type) }
        mutating func decode(_ type: Int32.Type) throws -> Int32 { try next(type).decode(type) }
        mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(type).decode(type) }
        mutating func decode(_ type: UInt.Type) throws -> UInt { try next(type).decode(type) }
        mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next(type).decode(type) }
        mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next(type).decode(type) }
        mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next(type).decode(type) }
        mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next(type).decode(type) }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
            -> KeyedDecodingContainer<NestedKey>
        {
            try next([String: Value].self).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            try next([Value].self).unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder { try next(Value.self) }
    }
}

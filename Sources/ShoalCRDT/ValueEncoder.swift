#if canImport(FoundationEssentials)
import FoundationEssentials
#else
public import Foundation
#endif

extension Value {
    /// The value an app's `Encodable` type encodes to: a struct as an object, to
    /// insert as a document or pass as an argument.
    ///
    /// Integers become ints and must fit in an `Int64`; `Double`s become doubles and
    /// must be finite (JSON has no NaN or infinity); a `Float` becomes the double it
    /// prints as (`0.1`, not `0.10000000149011612`). A `nil` optional property is left
    /// out, as `JSONEncoder` leaves it. A `Date` becomes UTC ISO-8601 text to the
    /// millisecond (`2024-05-01T12:00:00.000Z`: such strings sort as the instants
    /// do), `Data` base64 text, a `URL` its text, and a `Value` property itself.
    ///
    /// Throws `EncodingError.invalidValue`, whose `codingPath` is where the value was.
    public init(encoding encodable: some Encodable) throws {
        self = try ValueEncoder.box(encodable, at: []).resolved()
    }
}

/// The `Encoder` behind `Value(encoding:)`: it writes into a tree of nodes, since a
/// container asked for can be written after its parent goes on to the next key.
final class ValueEncoder: Encoder {
    /// What one coding path holds: a value set whole, or the fields or elements a
    /// container writes into.
    final class Node {
        var value: Value?
        var fields: [String: Node]?
        var items: [Node]?

        init(_ value: Value? = nil) { self.value = value }

        func set(_ value: Value) {
            self.value = value
            fields = nil
            items = nil
        }

        /// The value written here; a type that wrote nothing is an empty object.
        func resolved() -> Value {
            if let fields { return .object(fields.mapValues { $0.resolved() }) }
            if let items { return .array(items.map { $0.resolved() }) }
            return value ?? .object([:])
        }
    }

    let node: Node
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(node: Node = Node(), codingPath: [any CodingKey]) {
        self.node = node
        self.codingPath = codingPath
    }

    /// The node `value` encodes to at `path`, the Foundation types as documented on
    /// `Value(encoding:)`, every other type by its own `encode(to:)`.
    static func box<T: Encodable>(_ value: T, at path: [any CodingKey]) throws -> Node {
        switch value {
        case let date as Date: return Node(date.shoalValue)
        case let data as Data: return Node(.string(data.base64EncodedString()))
        case let url as URL: return Node(.string(url.absoluteString))
        default:
            let encoder = ValueEncoder(codingPath: path)
            try value.encode(to: encoder)
            return encoder.node
        }
    }

    static func integer(_ value: some FixedWidthInteger, at path: [any CodingKey]) throws -> Value {
        guard let i = Int64(exactly: value) else {
            throw EncodingError.invalidValue(
                value,
                .init(codingPath: path, debugDescription: "\(value) does not fit in an Int64, which Shoal keeps integers in: encode it as a string"))
        }
        return .int(i)
    }

    static func double(_ value: Double, at path: [any CodingKey]) throws -> Value {
        guard value.isFinite else {
            throw EncodingError.invalidValue(
                value, .init(codingPath: path, debugDescription: "\(value) is not a number JSON can hold"))
        }
        return .double(value)
    }

    static func float(_ value: Float, at path: [any CodingKey]) throws -> Value {
        // The shortest text of a finite Float reads back as a Double: 0.1, not 0.10000000149011612.
        guard value.isFinite, let d = Double(value.description) else { return try double(Double(value), at: path) }
        return .double(d)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if node.fields == nil {
            node.value = nil
            node.items = nil
            node.fields = [:]
        }
        return KeyedEncodingContainer(KeyedContainer(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if node.items == nil {
            node.value = nil
            node.fields = nil
            node.items = []
        }
        return UnkeyedContainer(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleValueContainer(node: node, codingPath: codingPath) }
}

extension ValueEncoder {
    struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let node: Node
        let codingPath: [any CodingKey]

        func set(_ value: Value, forKey key: some CodingKey) { node.fields![key.stringValue] = Node(value) }

        /// A new node at `key`, for a nested container or encoder.
        func child(at key: some CodingKey) -> Node {
            let child = Node()
            node.fields![key.stringValue] = child
            return child
        }

        mutating func encodeNil(forKey key: Key) { set(.null, forKey: key) }
        mutating func encode(_ value: Bool, forKey key: Key) { set(.bool(value), forKey: key) }
        mutating func encode(_ value: String, forKey key: Key) { set(.string(value), forKey: key) }
        mutating func encode(_ value: Double, forKey key: Key) throws { set(try ValueEncoder.double(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: Float, forKey key: Key) throws { set(try ValueEncoder.float(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: Int, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: Int8, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: Int16, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: Int32, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: Int64, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: UInt, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: UInt8, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: UInt16, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: UInt32, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }
        mutating func encode(_ value: UInt64, forKey key: Key) throws { set(try ValueEncoder.integer(value, at: codingPath + [key]), forKey: key) }

        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            node.fields![key.stringValue] = try ValueEncoder.box(value, at: codingPath + [key])
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
            -> KeyedEncodingContainer<NestedKey>
        {
            ValueEncoder(node: child(at: key), codingPath: codingPath + [key]).container(keyedBy: keyType)
        }

        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            ValueEncoder(node: child(at: key), codingPath: codingPath + [key]).unkeyedContainer()
        }

        mutating func superEncoder() -> any Encoder {
            ValueEncoder(node: child(at: ValueCodingKey.super), codingPath: codingPath + [ValueCodingKey.super])
        }

        mutating func superEncoder(forKey key: Key) -> any Encoder {
            ValueEncoder(node: child(at: key), codingPath: codingPath + [key])
        }
    }

    struct UnkeyedContainer: UnkeyedEncodingContainer {
        let node: Node
        let codingPath: [any CodingKey]

        var count: Int { node.items!.count }

        /// The coding path of the next element.
        var nextPath: [any CodingKey] { codingPath + [ValueCodingKey(intValue: count)] }

        func append(_ value: Value) { node.items!.append(Node(value)) }

        /// A new node at the end, for a nested container or encoder.
        func child() -> Node {
            let child = Node()
            node.items!.append(child)
            return child
        }

        mutating func encodeNil() { append(.null) }
        mutating func encode(_ value: Bool) { append(.bool(value)) }
        mutating func encode(_ value: String) { append(.string(value)) }
        mutating func encode(_ value: Double) throws { append(try ValueEncoder.double(value, at: nextPath)) }
        mutating func encode(_ value: Float) throws { append(try ValueEncoder.float(value, at: nextPath)) }
        mutating func encode(_ value: Int) throws { append(try ValueEncoder.integer(value, at: nextPath)) }
        mutating func encode(_ value: Int8) throws { append(try ValueEncoder.integer(value, at: nextPath)) }
        mutating func encode(_ value: Int16) throws { append(try ValueEncoder.integer(value, at: nextPath)) }
        mutating func encode(_ value: Int32) throws { append(try ValueEncoder.integer(value, at: nextPath)) }
        mutating func encode(_ value: Int64) throws { append(try ValueEncoder.integer(value, at: nextPath)) }
        mutating func encode(_ value: UInt) throws { append(try ValueEncoder.integer(value, at: nextPath)) }
        mutating func encode(_ value: UInt8) throws { append(try ValueEncoder.integer(value, at: nextPath)) }
        mutating func encode(_ value: UInt16) throws { append(try ValueEncoder.integer(value, at: nextPath)) }
        mutating func encode(_ value: UInt32) throws { append(try ValueEncoder.integer(value, at: nextPath)) }
        mutating func encode(_ value: UInt64) throws { append(try ValueEncoder.integer(value, at: nextPath)) }

        mutating func encode<T: Encodable>(_ value: T) throws {
            node.items!.append(try ValueEncoder.box(value, at: nextPath))
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
            let path = nextPath
            return ValueEncoder(node: child(), codingPath: path).container(keyedBy: keyType)
        }

        mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
            let path = nextPath
            return ValueEncoder(node: child(), codingPath: path).unkeyedContainer()
        }

        mutating func superEncoder() -> any Encoder {
            let path = nextPath
            return ValueEncoder(node: child(), codingPath: path)
        }
    }

    struct SingleValueContainer: SingleValueEncodingContainer {
        let node: Node
        let codingPath: [any CodingKey]

        mutating func encodeNil() { node.set(.null) }
        mutating func encode(_ value: Bool) { node.set(.bool(value)) }
        mutating func encode(_ value: String) { node.set(.string(value)) }
        mutating func encode(_ value: Double) throws { node.set(try ValueEncoder.double(value, at: codingPath)) }
        mutating func encode(_ value: Float) throws { node.set(try ValueEncoder.float(value, at: codingPath)) }
        mutating func encode(_ value: Int) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }
        mutating func encode(_ value: Int8) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }
        mutating func encode(_ value: Int16) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }
        mutating func encode(_ value: Int32) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }
        mutating func encode(_ value: Int64) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }
        mutating func encode(_ value: UInt) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }
        mutating func encode(_ value: UInt8) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }
        mutating func encode(_ value: UInt16) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }
        mutating func encode(_ value: UInt32) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }
        mutating func encode(_ value: UInt64) throws { node.set(try ValueEncoder.integer(value, at: codingPath)) }

        mutating func encode<T: Encodable>(_ value: T) throws {
            node.set(try ValueEncoder.box(value, at: codingPath).resolved())
        }
    }
}

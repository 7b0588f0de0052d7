/// Reads protobuf's wire format by hand: what the decoder of the hot message uses
/// where SwiftProtobuf would build a message, an array and a `Data` at every level
/// before the caller looks at a field.
///
/// ```
/// field := tag (field number << 3 | wire type, a varint of at most 5 bytes) · value
/// varint (0):      7 bits a byte, low first, high bit set on all but the last (≤ 10 bytes)
/// fixed64 (1):     8 bytes, little-endian
/// length (2):      varint byte count · the bytes (a string, bytes, or a nested message)
/// start group (3): fields · end group (4) with the same field number (skipped, never read)
/// fixed32 (5):     4 bytes, little-endian
/// ```
///
/// It accepts and refuses what SwiftProtobuf's `BinaryDecoder` does: a field of a
/// number the caller does not read, or of a wire type other than the one it reads
/// that number as, is skipped as an unknown field; a later value of a scalar field
/// replaces an earlier one; a tag of field 0, of wire type 6 or 7, or longer than 5
/// bytes (inside a group, as any varint: 2^32 or more), a varint longer than 10 bytes,
/// a length past the end or of 2 GiB or more, and an end group without its start are
/// malformed.
///
/// The reader only borrows `bytes`: it must not outlive the `withUnsafeBytes` call
/// that lent them.
public struct ProtobufReader {
    /// A field's tag.
    public struct Field: Sendable, Hashable {
        public var number: UInt32
        public var wireType: UInt8

        @inlinable
        public init(number: UInt32, wireType: UInt8) {
            self.number = number
            self.wireType = wireType
        }
    }

    public static let varint: UInt8 = 0
    public static let fixed64: UInt8 = 1
    public static let length: UInt8 = 2
    public static let startGroup: UInt8 = 3
    public static let endGroup: UInt8 = 4
    public static let fixed32: UInt8 = 5

    public let bytes: UnsafeRawBufferPointer
    public var position: Int
    public let end: Int
    /// The message read, for errors: "DeltaBatch".
    public let what: String
    /// How many more levels of messages and groups may nest inside this message:
    /// SwiftProtobuf's recursion budget (`BinaryDecodingOptions.messageDepthLimit`, 100)
    /// less the levels above, so that the same bytes nest too deep for both or neither.
    public let depthBudget: Int

    /// SwiftProtobuf's default `messageDepthLimit`.
    public static let depthLimit = 100

    @inlinable
    public init(_ bytes: UnsafeRawBufferPointer, range: Range<Int>? = nil, what: String, depthBudget: Int = depthLimit - 1) {
        self.bytes = bytes
        self.position = range?.lowerBound ?? 0
        self.end = range?.upperBound ?? bytes.count
        self.what = what
        self.depthBudget = depthBudget
    }

    /// A reader of the nested message at `range` of the same bytes.
    @inlinable
    public func nested(_ range: Range<Int>) throws(WireError) -> ProtobufReader {
        guard depthBudget > 0 else { throw malformed("messages nest too deep") }
        return ProtobufReader(bytes, range: range, what: what, depthBudget: depthBudget - 1)
    }

    public func malformed(_ why: String) -> WireError {
        WireError(.malformedPayload, "\(what) frame: payload is not a valid \(what) message (\(why))")
    }

    /// The next field's tag, or nil at the end of the message.
    @inlinable
    public mutating func next() throws(WireError) -> Field? {
        guard position < end else { return nil }
        let first = bytes[position]
        let wireType = first & 7
        guard wireType <= 5 else { throw malformed("wire type \(wireType)") }
        var number = UInt32(first & 0x7F) >> 3
        position += 1
        if first & 0x80 != 0 {
            var shift: UInt32 = 4
            var more = true
            var count = 1
            while more {
                guard position < end, count < 5 else { throw malformed("a tag is cut off or too long") }
                let byte = bytes[position]
                position += 1
                count += 1
                if count == 5, byte > 15 { throw malformed("a tag is too large or too long") }
                number |= UInt32(byte & 0x7F) << shift
                shift += 7
                more = byte & 0x80 != 0
            }
        }
        guard number != 0 else { throw malformed("a field has number 0") }
        guard wireType != Self.endGroup else { throw malformed("an end group without its start") }
        return Field(number: number, wireType: wireType)
    }

    @inlinable
    public mutating func varint() throws(WireError) -> UInt64 {
        guard position < end else { throw malformed("a varint is cut off") }
        let first = bytes[position]
        position += 1
        if first < 0x80 { return UInt64(first) }
        var value = UInt64(first & 0x7F)
        var shift: UInt64 = 7
        while true {
            guard position < end, shift <= 63 else { throw malformed("a varint is cut off or too long") }
            let byte = bytes[position]
            position += 1
            value |= UInt64(byte & 0x7F) &<< shift
            if byte < 0x80 { return value }
            shift += 7
        }
    }

    @inlinable
    public mutating func fixed64() throws(WireError) -> UInt64 {
        guard end - position >= 8 else { throw malformed("a fixed64 is cut off") }
        let value = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: UInt64.self))
        position += 8
        return value
    }

    /// A length-delimited field's bytes, as a range of `bytes`.
    @inlinable
    public mutating func delimited() throws(WireError) -> Range<Int> {
        let length = try varint()
        guard length < 0x7FFF_FFFF else { throw malformed("a length of \(length) bytes") }
        guard UInt64(end - position) >= length else { throw malformed("a length-delimited field is cut off") }
        let start = position
        position += Int(length)
        return start..<position
    }

    /// A length-delimited field as a reader of the message it holds.
    @inlinable
    public mutating func message() throws(WireError) -> ProtobufReader {
        let range = try delimited()
        return try nested(range)
    }

    /// A length-delimited field's bytes.
    @inlinable
    public mutating func delimitedBytes() throws(WireError) -> UnsafeRawBufferPointer {
        let range = try delimited()
        return slice(range)
    }

    @inlinable
    public static func zigZag64(_ value: UInt64) -> Int64 { Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1) }

    /// A `sint32`: the varint's low 32 bits, zigzag-decoded, as SwiftProtobuf reads it.
    @inlinable
    public static func zigZag32(_ value: UInt64) -> Int32 {
        let low = UInt32(truncatingIfNeeded: value)
        return Int32(bitPattern: low >> 1) ^ -Int32(bitPattern: low & 1)
    }

    /// The bytes at `range`.
    @inlinable
    public func slice(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: bytes[range])
    }

    /// Skips the value of `field`, which the caller does not read.
    public mutating func skip(_ field: Field) throws(WireError) {
        try skip(field, budget: depthBudget)
    }

    mutating func skip(_ field: Field, budget: Int) throws(WireError) {
        switch field.wireType {
        case Self.varint:
            _ = try varint()
        case Self.fixed64:
            guard end - position >= 8 else { throw malformed("a fixed64 is cut off") }
            position += 8
        case Self.length:
            _ = try delimited()
        case Self.fixed32:
            guard end - position >= 4 else { throw malformed("a fixed32 is cut off") }
            position += 4
        case Self.startGroup:
            guard budget > 0 else { throw malformed("groups nest too deep") }
            while true {
                guard position < end else { throw malformed("a group is cut off") }
                // Inside a group SwiftProtobuf reads a tag as any varint below 2^32.
                let tag = try varint()
                guard tag < UInt64(UInt32.max), tag >> 3 != 0, tag & 7 <= 5 else { throw malformed("a bad tag in a group") }
                let inner = Field(number: UInt32(tag >> 3), wireType: UInt8(tag & 7))
                if inner.wireType == Self.endGroup {
                    guard inner.number == field.number else { throw malformed("an end group of another field") }
                    return
                }
                try skip(inner, budget: budget - 1)
            }
        default:
            throw malformed("wire type \(field.wireType)")
        }
    }
}

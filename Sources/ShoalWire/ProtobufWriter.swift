/// Writes protobuf's wire format by hand: what the encoders of the hot messages use
/// where SwiftProtobuf would build and size a message again at every level.
///
/// ```
/// field := tag (field number << 3 | wire type, one byte below field 16) · value
/// varint (0):   7 bits a byte, low first, high bit set on all but the last
/// fixed64 (1):  8 bytes, little-endian
/// length (2):   varint byte count · the bytes (a string, bytes, or a nested message)
/// ```
///
/// Every field number written here is below 16, so a tag is one byte.
public struct ProtobufWriter {
    /// What has been written.
    public var bytes: [UInt8] = []

    public init(capacity: Int = 0) {
        bytes.reserveCapacity(capacity)
    }

    // MARK: Sizes

    /// The bytes `value` takes as a varint.
    @inlinable
    public static func varintSize(_ value: UInt64) -> Int {
        value == 0 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7
    }

    /// A length-delimited field of `count` bytes, its one-byte tag included.
    @inlinable
    public static func delimited(_ count: Int) -> Int { 1 + varintSize(UInt64(count)) + count }

    /// A varint field holding `value`, its tag included; 0 when `value` is 0 (proto3
    /// leaves a default value out).
    @inlinable
    public static func varintField(_ value: UInt64) -> Int { value == 0 ? 0 : 1 + varintSize(value) }

    @inlinable
    public static func zigZag(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }

    @inlinable
    public static func zigZag(_ value: Int32) -> UInt64 { UInt64(UInt32(bitPattern: (value << 1) ^ (value >> 31))) }

    // MARK: Writing

    @inlinable
    public mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    @inlinable
    public mutating func tag(_ field: UInt8, _ wireType: UInt8) { bytes.append(field << 3 | wireType) }

    /// A varint field, written even when `value` is 0.
    @inlinable
    public mutating func varint(_ field: UInt8, _ value: UInt64) {
        tag(field, 0)
        varint(value)
    }

    /// A varint field, left out when `value` is 0.
    @inlinable
    public mutating func varintUnlessZero(_ field: UInt8, _ value: UInt64) {
        if value != 0 { varint(field, value) }
    }

    @inlinable
    public mutating func fixed64(_ field: UInt8, _ value: UInt64) {
        tag(field, 1)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// The tag and length of a length-delimited field whose `count` bytes follow.
    @inlinable
    public mutating func lengthDelimited(_ field: UInt8, count: Int) {
        tag(field, 2)
        varint(UInt64(count))
    }

    @inlinable
    public mutating func string(_ field: UInt8, _ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            lengthDelimited(field, count: utf8.count)
            bytes.append(contentsOf: utf8)
        }
    }

    @inlinable
    public mutating func data(_ field: UInt8, _ value: some Collection<UInt8>) {
        lengthDelimited(field, count: value.count)
        bytes.append(contentsOf: value)
    }

    /// Bytes already in the wire format (a message serialized whole, unknown fields).
    @inlinable
    public mutating func raw(_ value: some Collection<UInt8>) {
        bytes.append(contentsOf: value)
    }
}

/// Text from bytes that must be UTF-8, refused when they are not.
///
/// The standard library's `String(validating:as:)` is generic over the bytes'
/// sequence type and is not specialized for callers outside it: each call looks up
/// generic metadata at run time, which made it 2% of a node applying received values.
/// Bytes that are all ASCII, as JSON text and field names nearly always are, are
/// valid UTF-8 as they stand and become a string through `String(decoding:as:)`'s
/// fast path; only others take the general check.
public enum UTF8Text {
    public static func string(validating bytes: UnsafeBufferPointer<UInt8>) -> String? {
        if !bytes.contains(where: { $0 >= 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        return String(validating: bytes, as: UTF8.self)
    }

    public static func string(validating bytes: UnsafeRawBufferPointer) -> String? {
        bytes.withMemoryRebound(to: UInt8.self) { string(validating: $0) }
    }
}

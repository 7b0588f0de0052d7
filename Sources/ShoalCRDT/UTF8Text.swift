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

    /// The offset of the first byte that does not begin a well-formed UTF-8 sequence
    /// (a stray continuation byte, a sequence cut short, an overlong form, a surrogate,
    /// beyond U+10FFFF), or nil when they all do: to say where text is not UTF-8.
    public static func firstInvalidByte(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        var i = 0
        while i < bytes.count {
            let lead = bytes[i]
            if lead < 0x80 {
                i += 1
                continue
            }
            // The sequence's length and the range its second byte must be in (Unicode 15, table 3-7).
            let length: Int
            let second: ClosedRange<UInt8>
            switch lead {
            case 0xC2...0xDF: (length, second) = (2, 0x80...0xBF)
            case 0xE0: (length, second) = (3, 0xA0...0xBF)
            case 0xE1...0xEC, 0xEE...0xEF: (length, second) = (3, 0x80...0xBF)
            case 0xED: (length, second) = (3, 0x80...0x9F)
            case 0xF0: (length, second) = (4, 0x90...0xBF)
            case 0xF1...0xF3: (length, second) = (4, 0x80...0xBF)
            case 0xF4: (length, second) = (4, 0x80...0x8F)
            default: return i
            }
            guard i + length <= bytes.count, second.contains(bytes[i + 1]) else { return i }
            for k in 2..<length where !(0x80...0xBF).contains(bytes[i + k]) { return i }
            i += length
        }
        return nil
    }
}

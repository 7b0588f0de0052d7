import ShoalCRDT
import Testing

/// `UTF8Text` accepts exactly the byte strings that are UTF-8, as the standard
/// library's check does, ASCII or not.
@Suite struct UTF8TextTests {
    static let cases: [[UInt8]] = [
        [], Array("plain ascii {\"k\":[1,2]}".utf8), Array("nämé ✓ 𝄞".utf8), [0x7F], [0xC3, 0xA4],
        // Not UTF-8: a lone continuation byte, a truncated sequence, an overlong
        // encoding, an encoded surrogate, a code point above U+10FFFF, 0xFF.
        [0x80], [0x61, 0xC3], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0x61, 0xFF, 0x62],
        // ASCII ahead of a bad byte, far enough in to pass any fast path.
        Array(repeating: 0x61, count: 40) + [0xE2, 0x82],
    ]

    @Test(arguments: cases)
    func acceptsExactlyUTF8(bytes: [UInt8]) {
        let expected = String(validating: bytes, as: UTF8.self)
        #expect(bytes.withUnsafeBufferPointer { UTF8Text.string(validating: $0) } == expected)
        #expect(bytes.withUnsafeBytes { UTF8Text.string(validating: $0) } == expected)
    }

    @Test func badBytesAreRefusedAndGoodOnesKeptWhole() {
        #expect([UInt8]([0x61, 0xFF]).withUnsafeBufferPointer { UTF8Text.string(validating: $0) } == nil)
        let text = "nämé ✓ 𝄞 and ascii"
        #expect(Array(text.utf8).withUnsafeBufferPointer { UTF8Text.string(validating: $0) } == text)
    }
}

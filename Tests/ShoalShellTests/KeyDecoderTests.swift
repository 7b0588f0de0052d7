import ShoalShell
import Testing

@Suite struct KeyDecoderTests {
    static func keys(_ bytes: [UInt8]) -> [Key] {
        var decoder = KeyDecoder()
        return bytes.compactMap { decoder.feed($0) }
    }

    @Test(arguments: [
        ([0x1B, 0x5B, 0x41], Key.up), ([0x1B, 0x5B, 0x42], .down), ([0x1B, 0x5B, 0x43], .right), ([0x1B, 0x5B, 0x44], .left),
        ([0x1B, 0x4F, 0x41], .up), ([0x1B, 0x5B, 0x48], .home), ([0x1B, 0x5B, 0x46], .end),
        ([0x1B, 0x5B, 0x31, 0x7E], .home), ([0x1B, 0x5B, 0x34, 0x7E], .end), ([0x1B, 0x5B, 0x33, 0x7E], .delete),
        ([0x1B, 0x5B, 0x31, 0x3B, 0x35, 0x43], .right), ([0x1B, 0x5B, 0x32, 0x7E], .ignored),
        ([0x0D], .enter), ([0x7F], .backspace), ([0x03], .interrupt), ([0x04], .endOfInput), ([0x01], .home),
        ([0x05], .end), ([0x0B], .killToEnd), ([0x15], .killToStart), ([0x17], .deleteWord), ([0x10], .up), ([0x0E], .down),
    ] as [([UInt8], Key)])
    func decodesControlKeysAndEscapeSequences(bytes: [UInt8], key: Key) {
        #expect(Self.keys(bytes) == [key])
    }

    @Test func decodesTextWholeAcrossItsUTF8Bytes() {
        #expect(Self.keys(Array("aé🚗".utf8)) == [.text("a"), .text("é"), .text("🚗")])
        #expect(Self.keys([0x1B, 0x5B, 0x44, 0x78]) == [.left, .text("x")])
    }
}

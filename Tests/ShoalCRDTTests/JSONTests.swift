import ShoalCRDT
import ShoalTesting
import Testing

@Suite struct JSONTests {
    @Test(arguments: [
        ("{\"b\":1,\"a\":[true,null,\"x\"]}", "{\"a\":[true,null,\"x\"],\"b\":1}"),
        (" { \"k\" : -12.5e1 } ", "{\"k\":-125.0}"),
        ("\"tab\\tquote\\\"\\u00e9\\ud83d\\ude00\"", "\"tab\\tquote\\\"é😀\""),
        ("[1, 2.5, -0, 9223372036854775807]", "[1,2.5,0,9223372036854775807]"),
        ("\"\\u0001\"", "\"\\u0001\""),
        ("[123456789012345678,-123456789012345678,1234567890123456789,-9223372036854775808,-0,0,-42]",
         "[123456789012345678,-123456789012345678,1234567890123456789,-9223372036854775808,0,0,-42]"),
        ("{\"plain\":\"\u{e9}t\u{e9}\",\"after\":\"abc\\ndef\",\"k\":[true,false,null]}",
         "{\"after\":\"abc\\ndef\",\"k\":[true,false,null],\"plain\":\"\u{e9}t\u{e9}\"}"),
    ])
    func canonicalEncoding(input: String, canonical: String) throws {
        let value = try JSON.parse(input)
        #expect(value.canonicalJSON == canonical)
        #expect(try JSON.parse(canonical) == value)
    }

    @Test(arguments: [
        ("", 0), ("{", 1), ("[1,]", 3), ("{\"a\" 1}", 5), ("tru", 0), ("\"abc", 4), ("1 2", 2), ("\"\\x\"", 3),
        ("{\"a\":1,}", 7), ("-", 1), ("01x", 1),
    ])
    func rejectsMalformed(input: String, offset: Int) {
        #expect(throws: JSON.ParseError.self) { try JSON.parse(input) }
        do {
            _ = try JSON.parse(input)
        } catch {
            #expect(error.offset == offset, "\(input): \(error)")
        }
    }

    /// The quick look that keeps a received value unparsed says yes only to text that
    /// parses and encodes back to itself, and to the common scalars.
    @Test func aCanonicalScalarIsOnlyEverCanonical() {
        let yes = [
            "null", "true", "false", "0", "7", "-7", "123456789012345678", "-123456789012345678", "\"\"", "\"plain\"",
            "\"\u{e9}t\u{e9} \u{1F600}\"", "\"a string long enough to be kept on the heap\"",
        ]
        for text in yes {
            #expect(JSON.isCanonicalScalar(text), "\(text)")
            #expect((try? JSON.parse(text))?.canonicalJSON == text, "\(text)")
        }
        let no = [
            "", "-", "-0", "00", "01", "1.0", "1e3", "1234567890123456789", "nul", "nulls", "True", " 1", "1 ", "\"",
            "\"a\\\"b\"", "\"tab\\t\"", "\"raw\ttab\"", "\"x\"y\"", "\"x\" ", "[1]", "{}", "\"a\"\"b\"",
        ]
        for text in no { #expect(!JSON.isCanonicalScalar(text), "\(text)") }
        // Random texts over the bytes that matter: a yes always parses back to itself.
        var rng = SplitMix(state: 0xC0FFEE)
        let alphabet = Array("\"\\-0123456789.eE ntrufals\t\u{e9}x")
        var said = 0
        for _ in 0..<20_000 {
            let length = Int(rng.next() % 8)
            let text = String((0..<length).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] })
            guard JSON.isCanonicalScalar(text) else { continue }
            said += 1
            #expect((try? JSON.parse(text))?.canonicalJSON == text, "\(text)")
        }
        #expect(said > 100)
    }

    @Test func rejectsDeepNesting() {
        let deep = String(repeating: "[", count: JSON.maximumDepth + 1) + String(repeating: "]", count: JSON.maximumDepth + 1)
        #expect(throws: JSON.ParseError.self) { try JSON.parse(deep) }
        let ok = String(repeating: "[", count: JSON.maximumDepth) + String(repeating: "]", count: JSON.maximumDepth)
        #expect((try? JSON.parse(ok)) != nil)
    }

    @Test func orderIsTotalAcrossTypes() {
        let ascending: [Value] = [.null, false, true, -3, 2.5, 3, "a", "b", [1], [1, 2], ["a": 1]]
        for (i, a) in ascending.enumerated() {
            for (j, b) in ascending.enumerated() {
                #expect((Value.compare(a, b) < 0) == (i < j), "\(a) vs \(b)")
            }
        }
    }
}

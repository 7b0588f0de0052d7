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

    /// A number is kept as written or refused: an integer beyond 64 bits, or a number
    /// whose double is another number, would merge distinct values (two `_id`s into one
    /// document) and change what a round trip gives back.
    @Test(arguments: [
        ("12345678901234567890", 0, "integer 12345678901234567890 does not fit in 64 bits"),
        ("[1, -9223372036854775809]", 4, "integer -9223372036854775809 does not fit in 64 bits"),
        ("{\"n\": 1e400}", 6, "number 1e400 is beyond the largest double"),
        ("-1e400", 0, "number -1e400 is beyond the largest double"),
        ("1e-400", 0, "number 1e-400 is closer to 0 than a double can be"),
        ("0.30000000000000001", 0, "number 0.30000000000000001 has more digits than a double keeps: it would be read as 0.3"),
        ("12345678901234567890.0", 0, "would be read as 1.2345678901234567e+19"),
        ("4.9406564584124654e-324", 0, "would be read as 5e-324"),
    ])
    func refusesANumberItCannotKeepExactly(input: String, offset: Int, message: String) {
        Self.expectRefused(input, at: offset, saying: message)
    }

    /// `input` is refused at byte `offset`, with a message that says `message`.
    static func expectRefused(_ input: String, at offset: Int, saying message: String) {
        let error = #expect(throws: JSON.ParseError.self) { try JSON.parse(input) }
        #expect(error?.offset == offset, "\(input): \(String(describing: error))")
        #expect(error?.message.contains(message) == true, "\(input): \(String(describing: error))")
    }

    /// What a double holds exactly, however it is written, is taken as that double.
    @Test(arguments: [
        ("0.1", 0.1), ("1.50", 1.5), ("1E2", 100.0), ("-0.0", -0.0), ("0e999999999999", 0.0), ("5e-324", 5e-324),
        ("1.7976931348623157e308", 1.7976931348623157e308), ("0.30000000000000004", 0.30000000000000004),
        ("12345678901234567000.0", 1.2345678901234567e19), ("2.2250738585072014e-308", 2.2250738585072014e-308),
        ("123456789012345.6", 123456789012345.6), ("0.000001", 0.000001),
    ])
    func takesEveryNumberADoubleHoldsExactly(input: String, value: Double) throws {
        #expect(try JSON.parse(input) == .double(value))
    }

    /// Every canonical double parses back to itself, the 16- and 17-digit ones included.
    @Test func everyCanonicalDoubleParsesBack() throws {
        var rng = SplitMix(state: 0xD0_0B1E)
        for _ in 0..<20_000 {
            let d = Double(bitPattern: rng.next())
            guard d.isFinite else { continue }
            let text = Value.double(d).canonicalJSON
            #expect(try JSON.parse(text) == .double(d), "\(text)")
        }
    }

    /// An object never loses a member: a key given twice is refused where it is
    /// written, as DQL refuses it in an object literal, and so are two keys that are
    /// one key as Swift compares text (the same letters in two Unicode forms).
    @Test(arguments: [
        ("{\"a\": 1, \"a\": 2}", 9, "key 'a' appears twice in an object"),
        ("[{\"x\": {\"b\": 1, \"c\": 2, \"b\": 3}}]", 24, "key 'b' appears twice"),
        ("{\"\u{e9}\": 1, \"e\u{301}\": 2}", 10, "are one key to Shoal"),
    ])
    func refusesAKeyGivenTwice(input: String, offset: Int, message: String) {
        Self.expectRefused(input, at: offset, saying: message)
    }

    /// Bytes that are not UTF-8 are refused, in a string and outside one, never
    /// replaced by U+FFFD (which would make distinct texts one).
    @Test func refusesBytesThatAreNotUTF8() {
        for (bytes, offset) in [([0x22, 0x61, 0xFF, 0x22], 2), ([0x7B, 0x22, 0xC3, 0x22, 0x3A, 0x31, 0x7D], 2), ([0xFE], 0)] as [([UInt8], Int)] {
            let error = #expect(throws: JSON.ParseError.self) { try JSON.parse(bytes: bytes) }
            #expect(error?.offset == offset && error?.message.contains("UTF-8") == true, "\(bytes): \(String(describing: error))")
        }
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

import ShoalCRDT
import Testing

@Suite struct JSONTests {
    @Test(arguments: [
        ("{\"b\":1,\"a\":[true,null,\"x\"]}", "{\"a\":[true,null,\"x\"],\"b\":1}"),
        (" { \"k\" : -12.5e1 } ", "{\"k\":-125.0}"),
        ("\"tab\\tquote\\\"\\u00e9\\ud83d\\ude00\"", "\"tab\\tquote\\\"é😀\""),
        ("[1, 2.5, -0, 9223372036854775807]", "[1,2.5,0,9223372036854775807]"),
        ("\"\\u0001\"", "\"\\u0001\""),
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

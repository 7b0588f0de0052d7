import ShoalCRDT
import Testing

/// The one reader of named arguments: `--args`, admin requests' `arguments_json`, and
/// the subscriptions peers send, each refusing the same text with the same words.
@Suite struct ArgumentsJSONTests {
    @Test func argumentsAreAnObjectOrNothing() throws {
        #expect(try ArgumentsJSON.parse("").isEmpty)
        #expect(try ArgumentsJSON.parse(bytes: []).isEmpty)
        #expect(try ArgumentsJSON.parse("{\"id\": \"a\", \"n\": [1, 1.0]}") == ["id": "a", "n": [1, 1.0]])
        #expect(ArgumentsJSON.encode([:]) == "")
        #expect(ArgumentsJSON.encode(["b": 1, "a": "x"]) == "{\"a\":\"x\",\"b\":1}")
    }

    @Test(arguments: [
        ("[1]", "arguments: an array, not a JSON object like {\"id\": \"a\"}"),
        ("null", "arguments: null, not a JSON object like {\"id\": \"a\"}"),
        ("{\"id\": 1, \"id\": 2}", "arguments: invalid JSON at byte 10: key 'id' appears twice in an object"),
        ("{\"id\": ", "arguments: invalid JSON at byte 7: unexpected end of input"),
        ("{\"id\": 1} x", "arguments: invalid JSON at byte 10: unexpected text after the value"),
        ("{\"id\": 1e400}", "arguments: invalid JSON at byte 7: number 1e400 is beyond the largest double"),
    ])
    func eachMistakeHasItsOwnMessageAndByte(text: String, message: String) {
        let error = #expect(throws: ArgumentsJSON.Error.self) { try ArgumentsJSON.parse(text) }
        #expect(error?.message().hasPrefix(message) == true, "\(String(describing: error))")
        #expect(error?.message(naming: "--args").hasPrefix("--args: ") == true)
    }

    @Test func bytesThatAreNotUTF8AreRefusedWhereTheyAre() {
        let error = #expect(throws: ArgumentsJSON.Error.self) { try ArgumentsJSON.parse(bytes: Array("{\"id\":\"a".utf8) + [0xFF, 0x22, 0x7D]) }
        #expect(error?.problem == "invalid JSON at byte 8: invalid UTF-8 in a string")
    }
}

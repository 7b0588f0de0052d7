@testable import ShoalNode
import Testing

/// Shoal's TOML reader: the whole of TOML 1.0 that a config or permissions file may
/// hold, and every malformed document refused with its line and column, never a crash.
@Suite struct TOMLTests {
    @Test func aDocumentOfEveryKindReads() throws {
        let table = try TOML.parse(
            """
            \u{FEFF}# a comment
            title = "Shoal"   # after a value
            'literal key' = 'C:\\path\\no escapes'
            "quoted.key" = "tab\\there \\u00e9 \\U0001F41F \\"q\\" \\\\"
            count = 1_000
            negative = -17
            hex = 0xDEAD_beef
            octal = 0o755
            binary = 0b1101
            ratio = 6.5e-3
            whole = 2E2
            infinite = -inf
            yes = true
            no = false
            when = 1979-05-27T07:32:00.5-07:00
            day = 1979-05-27
            spaced = 1979-05-27 07:32:00Z
            clock = 07:32:00
            list = [
              1, 2,   # comments inside arrays
              3,
            ]
            nested = [[1, 2], ["a"], []]
            point = { x = 1, y.z = "deep" }
            site.name = "north"
            site.tills = 3
            multi = \"\"\"
            first \\
               second
            third""\"\"\"
            raw = '''
            C:\\raw ''text'''''

            [server]
            port = 7470

            [server.tls.files]
            cert = "a.pem"

            [[peer]]
            name = "a"

            [[peer]]
            name = "b"
            [peer.extra]
            more = 1
            """)
        #expect(table.keys.first == "title")
        #expect(table["title"] == .string("Shoal"))
        #expect(table["literal key"] == .string("C:\\path\\no escapes"))
        #expect(table["quoted.key"] == .string("tab\there é 🐟 \"q\" \\"))
        #expect(table["count"] == .integer(1000))
        #expect(table["negative"] == .integer(-17))
        #expect(table["hex"] == .integer(0xDEAD_BEEF))
        #expect(table["octal"] == .integer(0o755))
        #expect(table["binary"] == .integer(13))
        #expect(table["ratio"] == .float(0.0065))
        #expect(table["whole"] == .float(200))
        #expect(table["infinite"] == .float(-.infinity))
        #expect(table["yes"] == .boolean(true) && table["no"] == .boolean(false))
        #expect(table["when"] == .dateTime("1979-05-27T07:32:00.5-07:00"))
        #expect(table["day"] == .dateTime("1979-05-27"))
        #expect(table["spaced"] == .dateTime("1979-05-27 07:32:00Z"))
        #expect(table["clock"] == .dateTime("07:32:00"))
        #expect(table["list"] == .array([.integer(1), .integer(2), .integer(3)]))
        #expect(table["nested"] == .array([.array([.integer(1), .integer(2)]), .array([.string("a")]), .array([])]))
        #expect(table["point"]?.table?["x"] == .integer(1))
        #expect(table["point"]?.table?["y"]?.table?["z"] == .string("deep"))
        #expect(table["site"]?.table?["name"] == .string("north"))
        #expect(table["site"]?.table?["tills"] == .integer(3))
        #expect(table["multi"] == .string("first second\nthird\"\""))
        #expect(table["raw"] == .string("C:\\raw ''text''"))
        #expect(table["server"]?.table?["port"] == .integer(7470))
        #expect(table["server"]?.table?["tls"]?.table?["files"]?.table?["cert"] == .string("a.pem"))
        let peers = try #require(table["peer"]?.array)
        #expect(peers.count == 2)
        #expect(peers[0].table?["name"] == .string("a"))
        #expect(peers[1].table?["extra"]?.table?["more"] == .integer(1))
        #expect(table.line(of: "title") == 2)
        #expect(table.line(of: "server") == 34)
        #expect(table.line(of: "peer") == 40)
    }

    @Test func extremesAndCarriageReturns() throws {
        let table = try TOML.parse("a = 9223372036854775807\r\nb = -9223372036854775808\r\nc = nan\r\nd = +1.5\r\n\"\" = 0\r\n")
        #expect(table["a"] == .integer(Int.max))
        #expect(table["b"] == .integer(Int.min))
        #expect(table["c"]?.double?.isNaN == true)
        #expect(table["d"] == .float(1.5))
        #expect(table[""] == .integer(0))
        #expect(table.line(of: "d") == 4)
        // A header may add a sub-table to a table a dotted key made (TOML 1.0's own example).
        let fruit = try TOML.parse("[fruit]\napple.color = \"red\"\n[fruit.apple.texture]\nsmooth = true\n")
        #expect(fruit["fruit"]?.table?["apple"]?.table?["texture"]?.table?["smooth"] == .boolean(true))
    }

    /// Each malformed document with the line, the column and the words of its refusal.
    /// The first is the input on which the C++ reader Shoal used aborted the process.
    @Test(arguments: [
        ("[[= [\"orderme = \"ar\n", "1:3: expected a key"),
        ("a = 1\nb = \n", "2:5: expected a value, found the end of the line"),
        ("a = 1\na = 2\n", "2:1: the key a is defined twice"),
        ("[t]\n[t]\n", "2:1: the table [t] is defined twice"),
        ("[[t]]\n[t]\n", "2:1: [t] names an array of tables, not a table"),
        ("[t]\n[[t]]\n", "2:1: [[t]] names a table, not an array of tables"),
        ("t = 1\n[t.u]\n", "2:1: the header [t.u] reaches into t, which is already an integer"),
        ("t = { a = 1 }\n[t]\n", "2:1: the header [t] reaches into t, which is already a table"),
        ("t = { a = 1 }\nt.b = 2\n", "2:1: the dotted key reaches into t, which is already a table"),
        ("[t]\na.b = 1\n[t.a]\n", "3:1: the table [t.a] was already defined by a dotted key"),
        ("[t.u]\n[t]\nu.v = 1\n", "3:1: the dotted key reaches into u, a table defined by a header"),
        ("a = \"open\n", "1:5: the string has no closing '\"' on its line"),
        ("a = 'open\n", "1:5: the string has no closing \"'\" on its line"),
        ("a = \"\"\"never closed\n", "1:5: the string has no closing '\"\"\"'"),
        ("a = \"\\q\"\n", "1:6: '\\q' is not an escape"),
        // A backslash before a character that needs words, last in the file or not:
        // the first was an input on which the reader read past the end of its bytes.
        ("a = \"\\\u{0B}", "1:6: a backslash before the control character U+000B is not an escape"),
        ("a = \"\\\u{0B}\"\n", "1:6: a backslash before the control character U+000B is not an escape"),
        ("a = \"\\é\"\n", "1:6: a backslash before 'é' is not an escape"),
        ("a = \"\\u12\"\n", "1:6: \\u takes 4 hexadecimal digits"),
        ("a = \"\\uD800\"\n", "1:6: \\u names no Unicode scalar value"),
        ("a = \"\u{01}\"\n", "1:6: a string may not hold the control character U+0001"),
        ("a = localhost\n", "1:5: 'localhost' is not a value: strings are quoted"),
        ("a = 012\n", "1:5: '012': a decimal integer may not start with 0"),
        ("a = 1__0\n", "1:5: '1__0' is not a value"),
        ("a = 9223372036854775808\n", "1:5: '9223372036854775808' does not fit in 64 bits"),
        ("a = 1.\n", "1:5: '1.' is not a value"),
        ("a = 1 2\n", "1:7: expected the end of the line after a value, found '2'"),
        ("a = [1 2]\n", "1:8: expected ',' or ']' in the array, found '2'"),
        ("a = { b = 1,\n c = 2 }\n", "1:13: expected a key"),
        ("a = { b = 1, }\n", "1:14: expected a key"),
        ("a = { b = 1 c = 2 }\n", "1:13: expected ',' or '}' in the inline table"),
        ("= 1\n", "1:1: expected a key"),
        ("a\n", "1:2: expected '=' after the key a, found the end of the line"),
        ("[a\n", "1:3: expected ']' to close the header, found the end of the line"),
        ("[[a]\n", "1:4: expected ']]' to close the header"),
        ("[a] x\n", "1:5: expected the end of the line after the header, found 'x'"),
        ("a = \"\"\"x\"\"\" = 1\n", "1:13: expected the end of the line after a value, found '='"),
        ("\"\"\"k\"\"\" = 1\n", "1:1: a key may not be a multi-line string"),
        ("a = 1 # bell \u{07}\n", "1:14: a comment may not hold the control character U+0007"),
        ("a = 1\rb = 2\n", "1:6: expected the end of the line after a value, found a carriage return"),
        ("a = 1979-13-01\n", "1:5: '1979-13-01' is not a value"),
        ("a = 0x-1\n", "1:5: '0x-1' is not a value"),
        ("a = +0x1\n", "1:5: '+0x1' is not a value"),
        ("é = 1\n", "1:1: expected a key (letters, digits, '_' and '-', or a quoted string), found 'é'"),
    ])
    func aMalformedDocumentIsRefusedWithWhereAndWhy(text: String, expected: String) {
        do {
            let table = try TOML.parse(text)
            Issue.record("read \(text.debugDescription) as \(table.keys)")
        } catch {
            #expect(error.description.hasPrefix(expected), "\(text.debugDescription): \(error.description)")
        }
    }

    @Test func nestingDeeperThanTheLimitIsRefusedNotOverflowed() throws {
        let depth = TOML.maximumDepth
        let fits = "a = " + String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        #expect(throws: Never.self) { try TOML.parse(fits) }
        for open in ["[", "{ b = "] {
            let deep = "a = " + String(repeating: open, count: 100_000)
            let error = #expect(throws: TOMLError.self) { try TOML.parse(deep) }
            #expect(error?.message == "arrays and inline tables nest more than \(depth) deep")
        }
    }

    /// Arbitrary bytes, and every prefix of a real file, are read or refused: never a crash.
    @Test func everyPrefixOfAFileAndRandomTextAreReadOrRefused() {
        let file = """
            [[peer]]
            name = "till-*"
            read = ["menu", "orders"]
            where = { orders = "store = 'north'", "x.y" = '''z''' }
            write = ["orders"]   # a comment
            admin = "read"
            n = [1.5e3, -0x1, 0b1, 1979-05-27T07:32:00Z, { a = [ ] }]
            s = \"\"\"a\\
              b\"\"\"
            """
        let scalars = Array(file.unicodeScalars)
        var refused = 0
        for end in 0...scalars.count {
            var prefix = String.UnicodeScalarView()
            prefix.append(contentsOf: scalars[..<end])
            if (try? TOML.parse(String(prefix))) == nil { refused += 1 }
        }
        #expect(refused > 0 && refused < scalars.count, "some prefixes end mid-token, others at a line's end")
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("[]{}\"'=.,#\n\r\t \\uU0123456789abcxyz-+_:eEé\u{0B}".unicodeScalars)
        for _ in 0..<2000 {
            var text = String.UnicodeScalarView()
            for _ in 0..<Int.random(in: 0..<40, using: &generator) {
                text.append(alphabet.randomElement(using: &generator)!)
            }
            let lines = text.reduce(1) { $1 == "\n" ? $0 + 1 : $0 }
            do {
                _ = try TOML.parse(String(text))
            } catch {
                #expect((1...lines).contains(error.line) && error.column >= 1, "\(String(text).debugDescription): \(error)")
            }
        }
    }
}

import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
/// `--args @FILE` and `--args -`: arguments larger than the 128 KiB a single
/// command-line argument may hold on Linux.
@Suite(.serialized) struct ProcessArgumentsTests {
    /// 200 000 characters: more than `MAX_ARG_STRLEN` (131 072 bytes).
    static let blob = String(repeating: "0123456789", count: 20_000)

    static func items(_ output: ShoalBinary.Output) throws -> [[String: Any]] {
        guard output.status == 0,
            let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any],
            let items = object["items"] as? [[String: Any]]
        else { throw NodeProcessError(message: "exec failed (\(output.status)): \(output.stderr)") }
        return items
    }

    /// `--args` is read as strictly as a DQL literal, wherever it comes from: text that
    /// is not UTF-8 is refused rather than made U+FFFD (two ids would become one), a key
    /// given twice rather than the last kept, and each mistake is named with its byte.
    @Test func argumentsAreReadAsStrictlyAsDQLLiterals() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let node = try NodeProcess(name: "args-strict", dataDirectory: dirs.path + "/n")
        let query = "SELECT * FROM cars WHERE _id = :id"
        let deep = String(repeating: "[", count: 129) + String(repeating: "]", count: 129)
        let cases: [(String, String)] = [
            ("{\"id\": 1, \"id\": 2}", "--args: invalid JSON at byte 10: key 'id' appears twice in an object"),
            ("{\"id\": ", "--args: invalid JSON at byte 7: unexpected end of input"),
            ("{\"id\": 1} x", "--args: invalid JSON at byte 10: unexpected text after the value"),
            ("{\"id\": \(deep)}", "--args: invalid JSON at byte 134: nesting deeper than 128 levels"),
            ("{\"id\": 12345678901234567890}", "--args: invalid JSON at byte 7: integer 12345678901234567890 does not fit in 64 bits"),
        ]
        for (arguments, message) in cases {
            let refused = try ShoalBinary.run(["exec", "--node", node.address, "--args", arguments, query])
            #expect(refused.status == 1 && refused.stderr.contains(message), "\(arguments): \(refused.stderr)")
        }

        // Bytes that are not UTF-8, from standard input, a file and the command line.
        let invalid = Data([0x7B, 0x22, 0x69, 0x64, 0x22, 0x3A, 0x22, 0x61, 0xFF, 0x22, 0x7D])
        let piped = try ShoalBinary.run(["exec", "--node", node.address, "--args", "-", query], input: invalid)
        #expect(piped.status == 1, "\(piped.stderr)")
        #expect(piped.stderr.contains("--args (from standard input): invalid JSON at byte 8: invalid UTF-8"), "\(piped.stderr)")
        let file = dirs.path + "/invalid.json"
        #expect(FileManager.default.createFile(atPath: file, contents: invalid))
        let fromFile = try ShoalBinary.run(["exec", "--node", node.address, "--args", "@" + file, query])
        #expect(fromFile.status == 1 && fromFile.stderr.contains("--args (in \(file)): invalid JSON at byte 8: invalid UTF-8"), "\(fromFile.stderr)")
        let inline = try ChildProcess.run(
            "/bin/sh", ["-c", #"exec "$0" exec --node "$1" --args "$(printf '{"id":"a\377"}')" "$2""#, ShoalBinary.path, node.address, query])
        let inlineError = String(decoding: inline.stderr, as: UTF8.self)
        #expect(inline.status == 1 && inlineError.contains("--args: invalid JSON at byte 8: invalid UTF-8"), "\(inlineError)")
        // A U+FFFD written as such is text like any other.
        let replacement = try ShoalBinary.run(["exec", "--node", node.address, "--args", "{\"id\": \"a\u{FFFD}\"}", query])
        #expect(replacement.status == 0, "\(replacement.stderr)")
    }

    @Test func argumentsLargerThanOneCommandLineArgumentComeFromAFileOrStandardInput() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let node = try NodeProcess(name: "args", dataDirectory: dirs.path + "/n")
        let file = dirs.path + "/car.json"
        let fromFile = "{\"car\": {\"_id\": \"file\", \"blob\": \"\(Self.blob)\"}}"
        #expect(fromFile.utf8.count > 128 * 1024)
        try fromFile.write(toFile: file, atomically: false, encoding: .utf8)

        let written = try ShoalBinary.run(["exec", "--node", node.address, "--json", "--args", "@" + file, "INSERT INTO cars DOCUMENTS (:car)"])
        #expect(written.status == 0, "\(written.stderr)")
        let fromStdin = Data("{\"car\": {\"_id\": \"stdin\", \"blob\": \"\(Self.blob)x\"}}".utf8)
        let piped = try ShoalBinary.run(
            ["exec", "--node", node.address, "--json", "--args", "-", "INSERT INTO cars DOCUMENTS (:car)"], input: fromStdin)
        #expect(piped.status == 0, "\(piped.stderr)")

        // Both arrived whole; a query whose argument is the large value finds each.
        let byFile = try Self.items(
            ShoalBinary.run(
                ["exec", "--node", node.address, "--json", "--args", "-", "SELECT _id FROM cars WHERE blob = :b"],
                input: Data("{\"b\": \"\(Self.blob)\"}".utf8)))
        #expect(byFile.map { $0["_id"] as? String } == ["file"])
        let all = try Self.items(node.exec("SELECT * FROM cars ORDER BY _id"))
        #expect(all.map { ($0["blob"] as? String)?.count } == [Self.blob.count, Self.blob.count + 1])

        // subscribe takes them the same way.
        let subscribed = try ShoalBinary.run(
            ["subscribe", "--node", node.address, "--json", "--args", "@" + file, "SELECT * FROM boats WHERE car = :car"])
        #expect(subscribed.status == 0, "\(subscribed.stderr)")
        #expect(subscribed.stdout.contains("SELECT * FROM boats WHERE car = :car"))

        // observe too: its first line is the result for the large argument.
        let observer = try ChildProcess(
            ShoalBinary.path, ["observe", "--node", node.address, "--json", "--args", "-", "SELECT _id FROM cars WHERE blob = :b"],
            stdin: .pipe, stdout: .pipe)
        defer {
            observer.send(SIGTERM)
            observer.wait()
        }
        let lines = LineCollector(observer.output!)
        #expect(observer.input!.write(Data("{\"b\": \"\(Self.blob)x\"}".utf8)))
        observer.input!.close()
        #expect(eventually { lines.lines.count >= 1 })
        #expect(lines.lines.first == "{\"items\":[{\"_id\":\"stdin\"}],\"transactionIDs\":[]}")

        // What cannot be read, or is not an object, is refused before anything is sent.
        let missing = try ShoalBinary.run(["exec", "--node", node.address, "--args", "@" + dirs.path + "/none.json", "SELECT * FROM cars"])
        #expect(missing.status == 1 && missing.stderr.contains("cannot read --args file \(dirs.path)/none.json"))
        let notObject = try ShoalBinary.run(["exec", "--node", node.address, "--args", "-", "SELECT * FROM cars"], input: Data("[1]".utf8))
        #expect(notObject.status == 1 && notObject.stderr.contains("--args (from standard input): an array, not a JSON object like {\"id\": \"a\"}"), "\(notObject.stderr)")
    }
}
}

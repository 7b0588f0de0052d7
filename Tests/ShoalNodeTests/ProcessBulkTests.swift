import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
/// `shoal import` and `shoal export` through the real CLI against a real node.
@Suite(.serialized) struct ProcessBulkTests {
    static func object(_ text: String) throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
            throw NodeProcessError(message: "not a JSON object: \(text)")
        }
        return object
    }

    static func items(_ output: ShoalBinary.Output) throws -> [[String: Any]] {
        guard output.status == 0, let items = try object(output.stdout)["items"] as? [[String: Any]] else {
            throw NodeProcessError(message: "exec failed (\(output.status)): \(output.stderr)")
        }
        return items
    }

    static func count(_ node: NodeProcess, _ query: String) throws -> Int {
        try items(node.exec(query)).first?["$1"] as? Int ?? -1
    }

    /// `{"_id": "car-0007", "n": 7, ...}`, every tenth without an `_id`.
    static func ndjson(_ range: Range<Int>) -> String {
        range.map { i in
            let id = i % 10 == 0 ? "" : "\"_id\": \"car-\(String(format: "%05d", i))\", "
            return "{\(id)\"n\": \(i), \"color\": \"c\(i % 7)\", \"tags\": [\"x\", \(i)], \"spec\": {\"doors\": \(i % 5)}}\n"
        }.joined()
    }

    @Test func importLoadsNDJSONAndCSVAndExportRoundTrips() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let node = try NodeProcess(name: "bulk", dataDirectory: dirs.path + "/n")
        let cars = dirs.path + "/cars.ndjson"
        try Self.ndjson(0..<3000).write(toFile: cars, atomically: false, encoding: .utf8)

        // NDJSON: the collection is named after the file; 3 000 documents in 6 batches.
        let imported = try ShoalBinary.run(["import", "--node", node.address, "--batch", "500", "--json", cars])
        #expect(imported.status == 0, "\(imported.stderr)")
        let report = try Self.object(imported.stdout)
        #expect(Set(report.keys) == ["documents", "records", "batches", "skipped", "seconds"])
        #expect(report["documents"] as? Int == 3000 && report["batches"] as? Int == 6)
        #expect((report["skipped"] as? [Any])?.isEmpty == true && report["seconds"] is Double)
        #expect(try Self.count(node, "SELECT COUNT(*) FROM cars") == 3000)
        #expect(try Self.count(node, "SELECT COUNT(*) FROM cars WHERE NOT (_id LIKE 'car-%')") == 300)
        let one = try Self.items(node.exec("SELECT * FROM cars WHERE _id = 'car-01234'"))
        #expect(one.count == 1)
        #expect(one.first?["n"] as? Int == 1234 && one.first?["color"] as? String == "c2")
        #expect((one.first?["spec"] as? [String: Any])?["doors"] as? Int == 4)
        #expect((one.first?["tags"] as? [Any])?.last as? Int == 1234)

        // Importing again upserts: the same documents, the fields given overwritten.
        let again = dirs.path + "/again.ndjson"
        try "{\"_id\": \"car-00001\", \"color\": \"red\"}\n".write(toFile: again, atomically: false, encoding: .utf8)
        #expect(try ShoalBinary.run(["import", "--node", node.address, "--collection", "cars", again]).status == 0)
        let upserted = try Self.items(node.exec("SELECT * FROM cars WHERE _id = 'car-00001'"))
        #expect(upserted.first?["color"] as? String == "red" && upserted.first?["n"] as? Int == 1)

        // CSV: quoting, numbers, booleans, and empty cells left out.
        let csv = dirs.path + "/parts.csv"
        try """
            _id,name,price,stock,active,note
            p1,"Bolt, M6",0.25,100,true,"says ""hi""
            twice"
            p2,Nut,1e1,,false,
            p3,"007",7,-3,TRUE,""

            """.write(toFile: csv, atomically: false, encoding: .utf8)
        let parts = try ShoalBinary.run(["import", "--node", node.address, csv])
        #expect(parts.status == 0, "\(parts.stderr)")
        #expect(parts.stdout.contains("imported 3 document(s) into parts in 1 batch(es)"))
        let rows = try Self.items(node.exec("SELECT * FROM parts ORDER BY _id"))
        #expect(rows.count == 3)
        #expect(rows[0]["name"] as? String == "Bolt, M6" && rows[0]["price"] as? Double == 0.25 && rows[0]["active"] as? Bool == true)
        #expect(rows[0]["note"] as? String == "says \"hi\"\ntwice" && rows[0]["stock"] as? Int == 100)
        #expect(rows[1]["stock"] == nil && rows[1]["note"] == nil && rows[1]["price"] as? Double == 10)
        #expect(rows[2]["name"] as? String == "007" && rows[2]["active"] as? String == "TRUE" && rows[2]["note"] as? String == "")

        // Export prints every document once, in _id order, across pages; imported into
        // another collection and exported again, it is the same text.
        let exported = try ShoalBinary.run(["export", "--node", node.address, "--batch", "700", "SELECT * FROM cars"])
        #expect(exported.status == 0, "\(exported.stderr)")
        let lines = exported.stdout.split(separator: "\n")
        #expect(lines.count == 3000)
        #expect(Set(lines).count == 3000)
        let copied = try ShoalBinary.run(
            ["import", "--node", node.address, "--collection", "copy", "--json", "-"], input: Data(exported.stdout.utf8))
        #expect(copied.status == 0, "\(copied.stderr)")
        #expect(try Self.object(copied.stdout)["documents"] as? Int == 3000)
        let reexported = try ShoalBinary.run(["export", "--node", node.address, "SELECT * FROM copy"])
        #expect(reexported.status == 0 && reexported.stdout == exported.stdout)
        let collections = try node.status()["collections"] as? [String: [String: Any]]
        #expect(collections?["cars"]?["digest"] as? String == collections?["copy"]?["digest"] as? String)

        // A WHERE and a SELECT list carry through the pages.
        let some = try ShoalBinary.run(
            ["export", "--node", node.address, "--batch", "3", "SELECT _id, n FROM cars WHERE n > 100 AND n < 110"])
        #expect(some.status == 0, "\(some.stderr)")
        #expect(some.stdout.split(separator: "\n").count == 9)
        #expect(some.stdout.hasPrefix("{\"_id\":\"car-00101\",\"n\":101}\n"))

        // Anything but one pageable SELECT is refused before it runs.
        let insert = try ShoalBinary.run(["export", "--node", node.address, "INSERT INTO cars DOCUMENTS ({'_id': 'no'})"])
        #expect(insert.status == 1 && insert.stderr.contains("export takes one SELECT statement"))
        #expect(try Self.count(node, "SELECT COUNT(*) FROM cars WHERE _id = 'no'") == 0)
        let ordered = try ShoalBinary.run(["export", "--node", node.address, "SELECT * FROM cars ORDER BY n"])
        #expect(ordered.status == 1 && ordered.stderr.contains("remove ORDER BY, LIMIT and OFFSET"))
    }

    /// `_id`s that DQL compares as equal or cannot order against each other (1 and
    /// 1.0, 0 and 0.0, "é" in its two Unicode forms, a boolean, an array, an object) are
    /// distinct documents: export prints each once however small its pages, and import
    /// writes each back, so the copy has the same count, the same digest and the same
    /// export.
    @Test func exportThenImportGivesBackEveryDocumentWhateverItsID() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let node = try NodeProcess(name: "bulk-ids", dataDirectory: dirs.path + "/n")
        var ids = [
            "1", "1.0", "2", "0", "0.0", "-0.0", "-1", "1.5", "\"\u{e9}\"", "\"e\u{301}\"", "\"\u{e9}t\u{e9}\"", "\"e\u{301}te\u{301}\"",
            "9223372036854775807", "-9223372036854775808", "9007199254740993", "9007199254740992", "9007199254740992.0",
            "1.2345678901234567e+19", "1e+300", "5e-324", "\"1\"", "\"\"", "\"a\"", "true", "false", "[1,2]", "[1.0,2]",
            "{\"k\":1}", "{\"k\":1.0}",
        ]
        ids += (0..<20).map { "\"s-\($0)\"" } + (0..<20).map { "\(100 + $0)" } + (0..<20).map { "\(100 + $0).25" }
        // Written through arguments, which keep each `_id` exactly as given.
        let documents = ids.enumerated().map { "\"d\($0.offset)\":{\"_id\":\($0.element),\"i\":\($0.offset)}" }
        let list = ids.indices.map { "(:d\($0))" }.joined(separator: ", ")
        let written = try node.exec("INSERT INTO ids DOCUMENTS \(list)", args: "{" + documents.joined(separator: ",") + "}")
        #expect(written.status == 0, "\(written.stderr)")
        #expect(try Self.count(node, "SELECT COUNT(*) FROM ids") == ids.count)

        var exports: [String] = []
        for batch in ["1", "2", "3", "7", "1000"] {
            let exported = try ShoalBinary.run(["export", "--node", node.address, "--batch", batch, "SELECT * FROM ids"])
            #expect(exported.status == 0 && exported.stderr.isEmpty, "--batch \(batch): \(exported.stderr)")
            let lines = exported.stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            #expect(lines.count == ids.count, "--batch \(batch)")
            #expect(Set(lines.map { Array($0.utf8) }).count == ids.count, "--batch \(batch)")
            exports.append(exported.stdout)
        }
        #expect(Set(exports).count == 1)

        let copied = try ShoalBinary.run(
            ["import", "--node", node.address, "--collection", "copy", "--batch", "2", "--json", "-"], input: Data(exports[1].utf8))
        #expect(copied.status == 0, "\(copied.stderr)")
        #expect(try Self.object(copied.stdout)["documents"] as? Int == ids.count)
        #expect(try Self.count(node, "SELECT COUNT(*) FROM copy") == ids.count)
        let collections = try node.status()["collections"] as? [String: [String: Any]]
        #expect(collections?["ids"]?["digest"] as? String != nil)
        #expect(collections?["ids"]?["digest"] as? String == collections?["copy"]?["digest"] as? String)
        let again = try ShoalBinary.run(["export", "--node", node.address, "--batch", "2", "SELECT * FROM copy"])
        #expect(again.status == 0 && again.stdout == exports[0])
    }

    /// Import writes what it reads or says why not: a number a document cannot hold as
    /// written stops it at that line (never becoming another number, or null), and its
    /// report counts the documents written, so records that name one `_id` count once.
    @Test func importRefusesNumbersItCannotKeepAndCountsTheDocumentsItWrites() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let node = try NodeProcess(name: "bulk-numbers", dataDirectory: dirs.path + "/n")
        let csv = dirs.path + "/big.csv"
        try "_id,n\n12345678901234567890,1\n12345678901234567891,2\nsmall,3\n".write(toFile: csv, atomically: false, encoding: .utf8)
        let stopped = try ShoalBinary.run(["import", "--node", node.address, csv])
        #expect(stopped.status == 1)
        #expect(stopped.stderr.contains("line 2: field '_id': integer 12345678901234567890 does not fit in 64 bits"), "\(stopped.stderr)")
        #expect(try Self.count(node, "SELECT COUNT(*) FROM big") == 0)
        let skipped = try ShoalBinary.run(["import", "--node", node.address, "--skip-bad", "--json", csv])
        #expect(skipped.status == 0, "\(skipped.stderr)")
        let report = try Self.object(skipped.stdout)
        #expect(report["documents"] as? Int == 1 && (report["skipped"] as? [Any])?.count == 2)
        #expect(try Self.count(node, "SELECT COUNT(*) FROM big") == 1)

        let huge = dirs.path + "/huge.ndjson"
        try "{\"_id\": \"h\", \"n\": 1e400}\n".write(toFile: huge, atomically: false, encoding: .utf8)
        let refused = try ShoalBinary.run(["import", "--node", node.address, huge])
        #expect(refused.status == 1 && refused.stderr.contains("number 1e400 is beyond the largest double"), "\(refused.stderr)")
        #expect(try Self.count(node, "SELECT COUNT(*) FROM huge") == 0)

        // Four records, three documents: two records name "a", and the two forms of "é" are two.
        let twice = dirs.path + "/twice.ndjson"
        try "{\"_id\": \"a\", \"x\": 1}\n{\"_id\": \"a\", \"y\": 2}\n{\"_id\": \"\u{e9}\"}\n{\"_id\": \"e\u{301}\"}\n"
            .write(toFile: twice, atomically: false, encoding: .utf8)
        let merged = try ShoalBinary.run(["import", "--node", node.address, twice])
        #expect(merged.status == 0, "\(merged.stderr)")
        #expect(merged.stdout.contains("imported 3 document(s) from 4 record(s) into twice in 1 batch(es)"), "\(merged.stdout)")
        let mergedJSON = try ShoalBinary.run(["import", "--node", node.address, "--json", twice])
        let mergedReport = try Self.object(mergedJSON.stdout)
        #expect(mergedReport["documents"] as? Int == 3 && mergedReport["records"] as? Int == 4)
        #expect(try Self.count(node, "SELECT COUNT(*) FROM twice") == 3)
        let a = try Self.items(node.exec("SELECT * FROM twice WHERE _id = 'a'"))
        #expect(a.first?["x"] as? Int == 1 && a.first?["y"] as? Int == 2)
    }

    @Test func aBadLineStopsTheImportAfterEveryDocumentBeforeItAndSkipBadGoesOn() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let node = try NodeProcess(name: "bulk-bad", dataDirectory: dirs.path + "/n")
        let file = dirs.path + "/broken.ndjson"
        // Line 1 234 is not JSON: 1 233 documents come before it, 2 batches of 500 and part of a third.
        try (Self.ndjson(0..<1233) + "{\"_id\": \"bad\", \n" + Self.ndjson(1233..<1500)).write(toFile: file, atomically: false, encoding: .utf8)

        let stopped = try ShoalBinary.run(["import", "--node", node.address, "--batch", "500", "--json", file])
        #expect(stopped.status == 1)
        #expect(stopped.stderr.contains("shoal: line 1234: invalid JSON"), "\(stopped.stderr)")
        #expect(stopped.stderr.contains("import stopped: 1233 document(s) committed in 3 batch(es), every one before line 1234"))
        let report = try Self.object(stopped.stdout)
        #expect(report["documents"] as? Int == 1233)
        #expect((report["failed"] as? [String: Any])?["line"] as? Int == 1234)
        #expect(try Self.count(node, "SELECT COUNT(*) FROM broken") == 1233)
        #expect(try Self.count(node, "SELECT COUNT(*) FROM broken WHERE n < 1233") == 1233)

        // --skip-bad reports the line and loads the rest; the second run upserts the first's.
        let skipped = try ShoalBinary.run(["import", "--node", node.address, "--batch", "500", "--skip-bad", "--json", file])
        #expect(skipped.status == 0, "\(skipped.stderr)")
        let skippedReport = try Self.object(skipped.stdout)
        #expect(skippedReport["documents"] as? Int == 1500)
        let problems = skippedReport["skipped"] as? [[String: Any]]
        #expect(problems?.count == 1 && problems?.first?["line"] as? Int == 1234)
        #expect((problems?.first?["error"] as? String)?.contains("invalid JSON") == true)
        #expect(skipped.stderr.contains("shoal: line 1234 skipped: invalid JSON"))
        // The documents with an _id are upserted; every tenth has none and is added again.
        #expect(try Self.count(node, "SELECT COUNT(*) FROM broken WHERE _id LIKE 'car-%'") == 1350)
        #expect(try Self.count(node, "SELECT COUNT(*) FROM broken WHERE n >= 1233") == 267)

        // A document the node refuses (a reserved field) is skipped with the node's words.
        let reserved = dirs.path + "/reserved.ndjson"
        try "{\"_id\": 1}\n{\"_id\": 2, \"_secret\": true}\n{\"_id\": 3}\n".write(toFile: reserved, atomically: false, encoding: .utf8)
        let refused = try ShoalBinary.run(["import", "--node", node.address, "--skip-bad", "--json", reserved])
        #expect(refused.status == 0, "\(refused.stderr)")
        let refusedReport = try Self.object(refused.stdout)
        #expect(refusedReport["documents"] as? Int == 2)
        #expect(((refusedReport["skipped"] as? [[String: Any]])?.first?["line"]) as? Int == 2)
        #expect(try Self.count(node, "SELECT COUNT(*) FROM reserved") == 2)
    }
}
}

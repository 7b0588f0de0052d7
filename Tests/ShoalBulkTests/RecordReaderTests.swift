import ShoalBulk
import ShoalCRDT
import Testing

/// The records of `text` read in chunks of `size` bytes, to cross every boundary.
func records(_ text: String, format: ImportFormat? = nil, chunk size: Int) -> [ImportRecord] {
    var reader = RecordReader(format: format)
    let bytes = Array(text.utf8)
    var out: [ImportRecord] = []
    var start = 0
    while start < bytes.count {
        out += reader.read(bytes[start..<min(bytes.count, start + size)])
        start += size
    }
    return out + reader.finish()
}

struct RecordReaderTests {
    @Test(arguments: [1, 2, 7, 4096])
    func ndjsonHasOneObjectPerLineAndSkipsBlankLines(chunk: Int) {
        let text = "{\"_id\": \"a\", \"n\": 1}\r\n\n   \n{\"b\": [1, {\"c\": null}]}\n{\"x\": \"y\"}"
        #expect(
            records(text, chunk: chunk) == [
                .document(line: 1, ["_id": "a", "n": 1]),
                .document(line: 4, ["b": [1, ["c": nil]]]),
                .document(line: 5, ["x": "y"]),
            ])
    }

    @Test func ndjsonNamesTheLineOfEachBadRecordAndGoesOn() {
        let text = "{\"a\": 1}\n{\"a\": \n[1, 2]\n\"text\"\n{\"a\": 2}\n"
        let got = RecordReader.records(text)
        #expect(got.map(\.line) == [1, 2, 3, 4, 5])
        #expect(got[0] == .document(line: 1, ["a": 1]))
        guard case .bad(2, let message) = got[1] else { Issue.record("\(got[1])"); return }
        #expect(message.contains("invalid JSON"))
        #expect(got[2] == .bad(line: 3, message: "expected a JSON object, found an array"))
        #expect(got[3] == .bad(line: 4, message: "expected a JSON object, found a string"))
        #expect(got[4] == .document(line: 5, ["a": 2]))
    }

    @Test(arguments: [1, 3, 4096])
    func aJSONArrayIsReadElementByElementWithTheLineEachStartsOn(chunk: Int) {
        let text = """
            \u{FEFF}[
              {"_id": 1, "s": "a,]}\\"["},
              {"nested": {"deep": [1, [2, {"x": "]"}]]}},

              {"last": true}
            ]

            """
        #expect(
            records(text, chunk: chunk) == [
                .document(line: 2, ["_id": 1, "s": "a,]}\"["]),
                .document(line: 3, ["nested": ["deep": [1, [2, ["x": "]"]]]]]),
                .document(line: 5, ["last": true]),
            ])
        #expect(RecordReader.records("[]").isEmpty)
        #expect(RecordReader.records("  [ ]  \n").isEmpty)
    }

    @Test func aJSONArrayReportsBadElementsWithTheirLines() {
        let text = "[{\"a\": 1},\n 5,\n {\"a\": }, {\"b\": 2}}\n, {\"c\": 3},\n]"
        let got = RecordReader.records(text)
        #expect(got.map(\.line) == [1, 2, 3, 3, 4, 5])
        #expect(got[0] == .document(line: 1, ["a": 1]))
        #expect(got[1] == .bad(line: 2, message: "expected a JSON object, found a number"))
        guard case .bad(3, _) = got[2], case .bad(3, _) = got[3] else { Issue.record("\(got)"); return }
        #expect(got[4] == .document(line: 4, ["c": 3]))
        #expect(got[5] == .bad(line: 5, message: "expected an object after ',', found ']'"))
    }

    @Test func aTruncatedArrayAndTextAfterItAreReported() {
        #expect(
            RecordReader.records("[{\"a\": 1},\n{\"b\": 2}") == [
                .document(line: 1, ["a": 1]), .document(line: 2, ["b": 2]),
                .bad(line: 2, message: "the file ends before the array's closing ']'"),
            ])
        let cut = RecordReader.records("[{\"a\": 1},\n{\"b\": \"unfinished")
        #expect(cut.count == 3 && cut[1].line == 2)
        #expect(
            RecordReader.records("[{\"a\": 1}]\n{\"b\": 2}") == [
                .document(line: 1, ["a": 1]), .bad(line: 2, message: "text after the array's closing ']'"),
            ])
        #expect(
            RecordReader.records("{\"a\": 1}", format: .json) == [.fatal(line: 1, message: "a JSON array must start with '['")])
    }

    @Test(arguments: [1, 2, 5, 4096])
    func csvTurnsCellsIntoValuesAndKeepsQuotedOnesAsText(chunk: Int) {
        let text = #"""
            _id,name,n,ratio,ok,note,zip
            a,"Smith, Jane",42,0.5,true,"line one
            line two",007
            b,"say ""hi""",-3e2,,false,"",
            "c",x,"12",1.0,TRUE,plain,0

            """#
        #expect(
            records(text, format: .csv, chunk: chunk) == [
                .document(
                    line: 2,
                    ["_id": "a", "name": "Smith, Jane", "n": 42, "ratio": 0.5, "ok": true, "note": "line one\nline two", "zip": "007"]),
                .document(line: 4, ["_id": "b", "name": "say \"hi\"", "n": -300.0, "ok": false, "note": ""]),
                .document(line: 5, ["_id": "c", "name": "x", "n": "12", "ratio": 1.0, "ok": "TRUE", "note": "plain", "zip": 0]),
            ])
    }

    @Test func csvWithCRLFAndNoFinalNewline() {
        #expect(
            RecordReader.records("a,b\r\n1,\"x\"\r\n\r\n2,y", format: .csv) == [
                .document(line: 2, ["a": 1, "b": "x"]), .document(line: 4, ["a": 2, "b": "y"]),
            ])
    }

    @Test func csvNamesTheLineOfEachBadRow() {
        let text = "a,b\n1,2\n3\n4,5,6\n\"x\"y,7\n8,\"open\n9,10\n"
        let got = RecordReader.records(text, format: .csv)
        #expect(
            got == [
                .document(line: 2, ["a": 1, "b": 2]),
                .bad(line: 3, message: "1 fields, but the header on line 1 names 2"),
                .bad(line: 4, message: "3 fields, but the header on line 1 names 2"),
                .bad(line: 5, message: "text after the closing quote of field 1"),
                .bad(line: 6, message: "the quoted field opened on line 6 is not closed at the end of the file"),
            ])
    }

    /// A CSV number that a document cannot hold as written makes its row bad, naming
    /// the field: taken as the nearest double, two distinct `_id`s would become one.
    @Test func aCSVNumberThatCannotBeKeptExactlyMakesItsRowBad() {
        let text = "_id,n\n12345678901234567890,1\n12345678901234567891,2\n\"12345678901234567892\",1e400\n7,0.1\n"
        let got = RecordReader.records(text, format: .csv)
        #expect(got.map(\.line) == [2, 3, 4, 5])
        guard case .bad(_, let first) = got[0], case .bad(_, let second) = got[1], case .bad(_, let third) = got[2] else {
            Issue.record("\(got)")
            return
        }
        #expect(first.hasPrefix("field '_id': integer 12345678901234567890 does not fit in 64 bits"), "\(first)")
        #expect(first.contains("quote the cell to keep it as text"), "\(first)")
        #expect(second.contains("12345678901234567891"), "\(second)")
        #expect(third.hasPrefix("field 'n': number 1e400 is beyond the largest double"), "\(third)")
        #expect(got[3] == .document(line: 5, ["_id": 7, "n": 0.1]))
    }

    /// A record whose object names a key twice is bad, not the last of the two.
    @Test func aKeyGivenTwiceMakesTheRecordBad() {
        let got = RecordReader.records("{\"_id\": 1, \"n\": 1, \"n\": 2}\n{\"_id\": 2, \"m\": {\"b\": 1, \"b\": 1}}\n")
        guard got.count == 2, case .bad(1, let first) = got[0], case .bad(2, let second) = got[1] else {
            Issue.record("\(got)")
            return
        }
        #expect(first.contains("key 'n' appears twice"), "\(first)")
        #expect(second.contains("key 'b' appears twice"), "\(second)")
    }

    @Test func aCSVHeaderWithoutNamesStopsTheImport() {
        #expect(RecordReader.records("a,,c\n1,2,3\n", format: .csv) == [.fatal(line: 1, message: "the CSV header names no field in column 2")])
        #expect(RecordReader.records("a,b,a\n1,2,3\n", format: .csv) == [.fatal(line: 1, message: "the CSV header names 'a' twice")])
    }

    @Test func theFormatComesFromTheExtensionOrTheFirstCharacter() {
        #expect(ImportFormat.fromExtension("/tmp/cars.ndjson") == .ndjson)
        #expect(ImportFormat.fromExtension("cars.JSONL") == .ndjson)
        #expect(ImportFormat.fromExtension("cars.csv") == .csv)
        #expect(ImportFormat.fromExtension("cars.json") == nil)
        #expect(ImportFormat.fromExtension("dir.csv/cars") == nil)
        var reader = RecordReader()
        #expect(reader.read(Array("\n  ".utf8)).isEmpty && reader.format == nil)
        #expect(reader.read(Array("[{\"a\": 1}]".utf8)) == [.document(line: 2, ["a": 1])])
        #expect(reader.format == .json)
        #expect(RecordReader.records("{\"a\": 1}\n{\"a\": 2}").count == 2)
        #expect(RecordReader.records("a\n1\n") == [.document(line: 2, ["a": 1])])
    }
}

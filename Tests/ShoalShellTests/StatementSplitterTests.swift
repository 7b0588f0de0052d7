import ShoalShell
import Testing

@Suite struct StatementSplitterTests {
    /// Lines in, the statements they complete out, line by line.
    @Test(arguments: [
        (["SELECT * FROM cars;"], [["SELECT * FROM cars"]]),
        (["BEGIN; INSERT INTO cars DOCUMENTS ({'_id': 'a'}); COMMIT;"], [["BEGIN", "INSERT INTO cars DOCUMENTS ({'_id': 'a'})", "COMMIT"]]),
        (["SELECT *", "FROM cars", "WHERE a = 1;"], [[], [], ["SELECT *\nFROM cars\nWHERE a = 1"]]),
        (["SELECT 'a;b' FROM c;"], [["SELECT 'a;b' FROM c"]]),
        (["SELECT 'it''s; here' FROM c;"], [["SELECT 'it''s; here' FROM c"]]),
        (["SELECT * FROM `odd;name`;"], [["SELECT * FROM `odd;name`"]]),
        (["SELECT \"a\\\";b\" FROM c;"], [["SELECT \"a\\\";b\" FROM c"]]),
        (["SELECT 'multi", "line;' FROM c;"], [[], ["SELECT 'multi\nline;' FROM c"]]),
        (["SELECT 1 FROM c -- a comment; not the end", ";"], [[], ["SELECT 1 FROM c -- a comment; not the end"]]),
        ([";;  ;", "-- only a comment;"], [[], []]),
    ])
    func splitsAtSemicolonsOutsideQuotesAndComments(lines: [String], expected: [[String]]) {
        var splitter = StatementSplitter()
        #expect(lines.map { splitter.add(line: $0) } == expected)
        #expect(splitter.isEmpty)
    }

    @Test func textAfterTheLastSemicolonWaitsAndFinishTakesIt() {
        var splitter = StatementSplitter()
        #expect(splitter.add(line: "SELECT 1 FROM a; SELECT * ") == ["SELECT 1 FROM a"])
        #expect(!splitter.isEmpty)
        #expect(splitter.add(line: "FROM b") == [])
        #expect(splitter.finish() == "SELECT * \nFROM b")
        #expect(splitter.isEmpty)
        #expect(splitter.finish() == nil)
    }

    @Test func anOpenQuoteIsReportedAndResetForgetsIt() {
        var splitter = StatementSplitter()
        #expect(splitter.add(line: "SELECT 'open; still") == [])
        #expect(splitter.isInsideQuotes)
        splitter.reset()
        #expect(splitter.isEmpty && !splitter.isInsideQuotes)
        #expect(splitter.add(line: "SELECT 1 FROM a;") == ["SELECT 1 FROM a"])
    }

    @Test func aCommentEndsWithItsLine() {
        var splitter = StatementSplitter()
        #expect(splitter.add(line: "-- 'not a quote") == [])
        #expect(splitter.isEmpty)
        #expect(splitter.add(line: "SELECT 1 FROM a;") == ["-- 'not a quote\nSELECT 1 FROM a"])
    }
}

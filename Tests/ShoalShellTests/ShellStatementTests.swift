import ShoalShell
import Testing

@Suite struct ShellStatementTests {
    @Test(arguments: [
        ("BEGIN", ShellStatement.begin(readOnly: false, hint: nil)),
        ("begin transaction", .begin(readOnly: false, hint: nil)),
        ("BEGIN READ ONLY", .begin(readOnly: true, hint: nil)),
        ("BEGIN HINT 'nightly fix'", .begin(readOnly: false, hint: "nightly fix")),
        ("Begin read only hint 'it''s mine'", .begin(readOnly: true, hint: "it's mine")),
        ("BEGIN HINT 'x;y' READ ONLY", .begin(readOnly: true, hint: "x;y")),
        ("COMMIT", .commit),
        ("commit transaction", .commit),
        ("ROLLBACK", .rollback),
        ("SELECT * FROM cars", .dql("SELECT * FROM cars")),
        ("INSERT INTO begin DOCUMENTS ({'_id': 1})", .dql("INSERT INTO begin DOCUMENTS ({'_id': 1})")),
        ("  -- x\nSELECT 1 FROM a", .dql("  -- x\nSELECT 1 FROM a")),
    ])
    func readsTransactionCommandsAndPassesDQLOn(text: String, expected: ShellStatement) throws {
        #expect(try ShellStatement.parse(text) == expected)
    }

    @Test(arguments: [
        ("BEGIN READ", "READ must be followed by ONLY"),
        ("BEGIN HINT nightly", "HINT takes a quoted string"),
        ("BEGIN HINT 'open", "no closing quote"),
        ("BEGIN HINT 'a' HINT 'b'", "each at most once"),
        ("BEGIN WORK NOW", "each at most once"),
        ("COMMIT now", "COMMIT takes nothing after it"),
        ("ROLLBACK TO x", "ROLLBACK takes nothing after it"),
    ])
    func refusesWhatItCannotReadSayingWhy(text: String, problem: String) {
        #expect {
            try ShellStatement.parse(text)
        } throws: { error in
            let message = (error as? ShellError)?.message ?? ""
            return message.contains(problem) && message.contains(text)
        }
    }
}

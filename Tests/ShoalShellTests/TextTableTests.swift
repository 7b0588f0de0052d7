import ShoalCRDT
import ShoalShell
import Testing

@Suite struct TextTableTests {
    @Test func documentsBecomeColumnsWithTheIDFirst() throws {
        let documents = try ["{\"_id\":\"a\",\"color\":\"blue\",\"doors\":4}", "{\"_id\":\"bb\",\"owner\":{\"n\":1}}"].map { try JSON.parse($0) }
        #expect(
            TextTable.render(documents: documents) == """
                  _id  color  doors  owner
                  a    blue   4      
                  bb                 {"n":1}
                (2 rows)

                """)
    }

    @Test func noDocumentsIsZeroRowsAndBareValuesGetAColumn() {
        #expect(TextTable.render(documents: []) == "(0 rows)\n")
        #expect(TextTable.render(documents: [.int(3)]) == "  value\n  3\n(1 row)\n")
    }
}

import ShoalBulk
import ShoalCRDT
import ShoalNode
import Testing

struct ExportQueryTests {
    @Test func pagesAddAnIDBoundToTheWhereClause() throws {
        let query = try ExportQuery("SELECT * FROM cars WHERE color = 'blue' OR doors > 2;")
        #expect(query.page(.start, limit: 10) == ("SELECT * FROM cars WHERE (color = 'blue' OR doors > 2) ORDER BY _id LIMIT 10", ""))
        #expect(
            query.page(.after("k"), limit: 10)
                == (
                    "SELECT * FROM cars WHERE (color = 'blue' OR doors > 2) AND _id > :shoal_after ORDER BY _id LIMIT 10",
                    "{\"shoal_after\":\"k\"}"
                ))
        #expect(query.countStatement == "SELECT COUNT(*) FROM cars WHERE color = 'blue' OR doors > 2")

        let all = try ExportQuery("select _id, color from `my cars`")
        #expect(all.page(.from(""), limit: 5) == ("select _id, color from `my cars` WHERE _id >= :shoal_after ORDER BY _id LIMIT 5", "{\"shoal_after\":\"\"}"))
        #expect(all.countStatement == "SELECT COUNT(*) from `my cars`")
    }

    @Test(arguments: [
        ("INSERT INTO cars DOCUMENTS ({'a': 1})", "export takes one SELECT statement"),
        ("SELECT * FROM a; SELECT * FROM b", "export takes one SELECT statement"),
        ("SELECT * FROM cars ORDER BY color", "remove ORDER BY, LIMIT and OFFSET"),
        ("SELECT * FROM cars LIMIT 5", "remove ORDER BY, LIMIT and OFFSET"),
        ("SELECT COUNT(*) FROM cars", "use shoal exec"),
        ("SELECT color FROM cars", "add _id to the SELECT list"),
        ("SELECT FROM", "expected"),
    ])
    func whatCannotBePagedIsRefused(statement: String, message: String) {
        let error = #expect(throws: BulkError.self) { try ExportQuery(statement) }
        #expect(error?.message.contains(message) == true, "\(String(describing: error))")
    }

    @Test func theCursorGoesThroughNumbersThenStrings() {
        // A full page continues after its last _id; a short one moves on to the next kind.
        #expect(ExportQuery.next(after: .start, count: 3, limit: 3, lastID: 7) == .after(7))
        #expect(ExportQuery.next(after: .start, count: 2, limit: 3, lastID: 7) == nil)
        #expect(ExportQuery.next(after: .after(7), count: 1, limit: 3, lastID: 9) == .from(""))
        #expect(ExportQuery.next(after: .after(7), count: 0, limit: 3, lastID: nil) == .from(""))
        #expect(ExportQuery.next(after: .from(""), count: 3, limit: 3, lastID: "c") == .after("c"))
        #expect(ExportQuery.next(after: .after("c"), count: 2, limit: 3, lastID: "e") == nil)
        #expect(ExportQuery.next(after: .start, count: 3, limit: 3, lastID: true) == .from(.double(-Double.greatestFiniteMagnitude)))
    }

    /// Pages over a sorted list of IDs as the node would answer them.
    @Test func anExportOfMixedIDsPrintsEachDocumentOnce() async throws {
        let ids: [Value] = [false, true] + (0..<7).map { .int(Int64($0)) } + [2.5] + ["", "a", "b", "c", "d"]
        let exporter = Exporter(query: try ExportQuery("SELECT * FROM c"), pageSize: 3)
        var printed: [String] = []
        let report = try await exporter.run(
            exec: { (statement: String, arguments: String) throws(NodeError) -> [String] in
                if statement.hasPrefix("SELECT COUNT(*)") { return ["{\"$1\":\(ids.count)}"] }
                let bound = (try? JSON.parse(arguments))?["shoal_after"]
                let inclusive = statement.contains(">=")
                let matching = ids.sorted().filter { id in
                    guard let bound else { return true }
                    switch (id, bound) {
                    case (.string(let a), .string(let b)): return inclusive ? a >= b : a > b
                    case (.int, .int), (.int, .double), (.double, .int), (.double, .double):
                        let a = id.numberValue!, b = bound.numberValue!
                        return inclusive ? a >= b : a > b
                    default: return false
                    }
                }
                return matching.prefix(3).map { Value.object(["_id": $0]).canonicalJSON }
            },
            write: { printed += $0 })
        #expect(printed.count == ids.count)
        #expect(Set(printed).count == printed.count)
        #expect(report.matching == ids.count && report.documents == ids.count)
    }
}

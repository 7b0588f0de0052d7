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

    @Test func theCursorGoesThroughNumbersThenStringsAndOffsetsForTheRest() {
        // A full page continues after its last _id; a short one moves on to the next kind.
        #expect(ExportQuery.next(after: .start, count: 3, limit: 3, lastID: 7, printed: 3) == .after(7))
        #expect(ExportQuery.next(after: .start, count: 2, limit: 3, lastID: 7, printed: 2) == nil)
        #expect(ExportQuery.next(after: .after(7), count: 1, limit: 3, lastID: 9, printed: 4) == .from(""))
        #expect(ExportQuery.next(after: .after(7), count: 0, limit: 3, lastID: nil, printed: 3) == .from(""))
        #expect(ExportQuery.next(after: .from(""), count: 3, limit: 3, lastID: "c", printed: 6) == .after("c"))
        #expect(ExportQuery.next(after: .after("c"), count: 2, limit: 3, lastID: "e", printed: 8) == .offset(8))
        #expect(ExportQuery.next(after: .offset(8), count: 0, limit: 3, lastID: nil, printed: 8) == nil)
        // Booleans, arrays and objects have no `>`: they are paged by OFFSET.
        #expect(ExportQuery.next(after: .start, count: 3, limit: 3, lastID: true, printed: 3) == .offset(3))
        #expect(ExportQuery.next(after: .offset(3), count: 3, limit: 3, lastID: 2, printed: 6) == .after(2))
        #expect(ExportQuery.next(after: .offset(8), count: 3, limit: 3, lastID: ["k": 1], printed: 11) == .offset(11))
        let query = try? ExportQuery("SELECT * FROM c")
        #expect(query?.page(.offset(8), limit: 3).statement == "SELECT * FROM c ORDER BY _id LIMIT 3 OFFSET 8")
    }

    /// Pages over a sorted list of IDs as the node would answer them.
    @Test func anExportOfMixedIDsPrintsEachDocumentOnce() async throws {
        let ids: [Value] = [nil, false, true] + (0..<7).map { .int(Int64($0)) } + [2.5] + ["", "a", "b", "c", "d"]
            + [[1], [1, 2], ["k": 1], ["k": 2]]
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
                let words = statement.split(separator: " ")
                let offset = words.firstIndex(of: "OFFSET").map { Int(words[$0 + 1]) ?? 0 } ?? 0
                let limit = words.firstIndex(of: "LIMIT").map { Int(words[$0 + 1]) ?? 0 } ?? 0
                #expect(limit <= 3)
                return matching.dropFirst(offset).prefix(limit).map { Value.object(["_id": $0]).canonicalJSON }
            },
            write: { printed += $0 })
        #expect(printed.count == ids.count)
        #expect(Set(printed).count == printed.count)
        #expect(report.matching == ids.count && report.documents == ids.count)
    }

    /// Pages shrink to what fits in a frame, and grow back.
    @Test func pagesAreSizedByTheLargestDocumentOfTheLastPage() async throws {
        let exporter = Exporter(query: try ExportQuery("SELECT * FROM c"), pageSize: 1000, pageBytes: 1000)
        var limits: [Int] = []
        var printed = 0
        _ = try await exporter.run(
            exec: { (statement: String, arguments: String) throws(NodeError) -> [String] in
                if statement.hasPrefix("SELECT COUNT(*)") { return ["{\"$1\":0}"] }
                let words = statement.split(separator: " ")
                let limit = words.firstIndex(of: "LIMIT").map { Int(words[$0 + 1]) ?? 0 } ?? 0
                limits.append(limit)
                let bound = (try? JSON.parse(arguments))?["shoal_after"]
                if case .string? = bound { return [] }
                let offset = words.firstIndex(of: "OFFSET").map { Int(words[$0 + 1]) ?? 0 }
                let after = offset ?? bound?.numberValue.map { Int($0) + 1 } ?? 0
                // Documents 0..<300: the first 100 of 300 bytes, then 10 bytes.
                return (after..<min(300, after + limit)).map { i in
                    Value.object(["_id": .int(Int64(i)), "p": .string(String(repeating: "x", count: i < 100 ? 290 : 0))]).canonicalJSON
                }
            },
            write: { printed += $0.count })
        #expect(printed == 300)
        #expect(limits.prefix(4) == [1, 3, 3, 3])
        // {"_id":100,"p":""} is 18 bytes: 55 of them fit in 1 000.
        #expect(limits.max() == 55)
    }
}

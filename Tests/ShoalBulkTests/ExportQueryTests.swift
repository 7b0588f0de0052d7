import ShoalBulk
import ShoalStore
import ShoalStorage
import ShoalCRDT
import ShoalNode
import Testing

/// A node stand-in holding documents under their keys: pages as a node reads them,
/// in the keys' byte order after the key asked for.
struct FakeCollection {
    /// (key, canonical JSON), in key order.
    let documents: [(key: String, json: String)]

    init(_ bodies: [Value]) {
        documents = bodies.map { (($0["_id"] ?? .null).canonicalJSON, $0.canonicalJSON) }
            .sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
    }

    func page(after key: String, limit: Int) -> (itemsJSON: [String], lastKey: String) {
        let page = documents.filter { key.utf8.lexicographicallyPrecedes($0.key.utf8) }.prefix(limit)
        return (page.map(\.json), page.last?.key ?? "")
    }

    func count(_ statement: String) -> [String] {
        #expect(statement.hasPrefix("SELECT COUNT(*) FROM"))
        return ["{\"$1\":\(documents.count)}"]
    }
}

struct ExportQueryTests {
    @Test func theStatementIsKeptAndItsCountHasItsWhereClause() throws {
        let query = try ExportQuery("SELECT * FROM cars WHERE color = 'blue' OR doors > 2;")
        #expect(query.statement == "SELECT * FROM cars WHERE color = 'blue' OR doors > 2")
        #expect(query.countStatement == "SELECT COUNT(*) FROM cars WHERE color = 'blue' OR doors > 2")
        let some = try ExportQuery("select color from `my cars`")
        #expect(some.countStatement == "SELECT COUNT(*) from `my cars`")
    }

    @Test(arguments: [
        ("INSERT INTO cars DOCUMENTS ({'a': 1})", "export takes one SELECT statement"),
        ("SELECT * FROM a; SELECT * FROM b", "export takes one SELECT statement"),
        ("SELECT * FROM cars ORDER BY color", "remove ORDER BY, LIMIT and OFFSET"),
        ("SELECT * FROM cars LIMIT 5", "remove ORDER BY, LIMIT and OFFSET"),
        ("SELECT COUNT(*) FROM cars", "count with shoal exec"),
        ("SELECT FROM", "expected"),
    ])
    func whatCannotBePagedIsRefused(statement: String, message: String) {
        let error = #expect(throws: BulkError.self) { try ExportQuery(statement) }
        #expect(error?.message.contains(message) == true, "\(String(describing: error))")
    }

    /// Every `_id` the store can hold comes once, whatever the page size: among them
    /// pairs DQL finds equal (1 and 1.0, "é" in two forms) and kinds it cannot order.
    @Test(arguments: [1, 2, 3, 1000])
    func anExportOfEveryKindOfIDPrintsEachDocumentOnce(pageSize: Int) async throws {
        let ids: [Value] = [false, true, 0, 0.0, -0.0, 1, 1.0, 2, 2.5, -3, 12, 9_223_372_036_854_775_807, 1.2345678901234567e19]
            + ["", "a", "\u{e9}", "e\u{301}", "b"] + [[1], [1.0], [1, 2], ["k": 1], ["k": 1.0]]
        let collection = FakeCollection(ids.enumerated().map { .object(["_id": $0.element, "i": .int(Int64($0.offset))]) })
        let exporter = Exporter(query: try ExportQuery("SELECT * FROM c"), pageSize: pageSize)
        var printed: [String] = []
        let report = try await exporter.run(
            page: { (after: String, limit: Int) throws(ShoalError) -> (itemsJSON: [String], lastKey: String) in
                #expect(limit <= pageSize)
                return collection.page(after: after, limit: limit)
            },
            exec: { (statement: String) throws(ShoalError) -> [String] in collection.count(statement) },
            write: { printed += $0 })
        #expect(printed == collection.documents.map(\.json))
        #expect(report.matching == ids.count && report.documents == ids.count)
    }

    /// A node whose page does not move past the last one (one that ignores the key)
    /// ends the export with an error instead of printing the same page forever.
    @Test func aPageThatDoesNotMoveOnEndsTheExport() async throws {
        let exporter = Exporter(query: try ExportQuery("SELECT * FROM c"), pageSize: 2)
        var pages = 0
        await #expect(throws: ShoalError.self) {
            _ = try await exporter.run(
                page: { (_: String, limit: Int) throws(ShoalError) -> (itemsJSON: [String], lastKey: String) in
                    pages += 1
                    return (Array(repeating: "{\"_id\":1}", count: limit), "1")
                },
                exec: { (_: String) throws(ShoalError) -> [String] in [] },
                write: { _ in })
        }
        #expect(pages == 2)
    }

    /// Pages shrink to what fits in a frame, and grow back.
    @Test func pagesAreSizedByTheLargestDocumentOfTheLastPage() async throws {
        // Documents 0..<300: the first 100 of 301 bytes, then 21.
        let collection = FakeCollection(
            (0..<300).map { i in
                .object(["_id": .string("\(1000 + i)"), "p": .string(String(repeating: "x", count: i < 100 ? 280 : 0))])
            })
        let exporter = Exporter(query: try ExportQuery("SELECT * FROM c"), pageSize: 1000, pageBytes: 1000)
        var limits: [Int] = []
        var printed = 0
        _ = try await exporter.run(
            page: { (after: String, limit: Int) throws(ShoalError) -> (itemsJSON: [String], lastKey: String) in
                limits.append(limit)
                return collection.page(after: after, limit: limit)
            },
            exec: { (statement: String) throws(ShoalError) -> [String] in collection.count(statement) },
            write: { printed += $0.count })
        #expect(printed == 300)
        #expect(limits.prefix(4) == [1, 3, 3, 3])
        // {"_id":"1100","p":""} is 21 bytes: 47 of them fit in 1 000.
        #expect(limits.max() == 47)
    }
}

import ShoalBulk
import ShoalStore
import ShoalStorage
import ShoalCRDT
import ShoalNode
import Testing

/// A node stand-in: records each batch, refuses the ones `refuse` says, and answers
/// with the documents a batch wrote as the node counts them: one per `_id` (by its
/// canonical JSON's bytes), and one for each document without an `_id`.
final class FakeNode: Sendable {
    let batches = Locked<[(statement: String, arguments: Value)]>([])
    let refuse: @Sendable (Value) -> String?

    init(refuse: @escaping @Sendable (Value) -> String? = { _ in nil }) {
        self.refuse = refuse
    }

    func exec(_ statement: String, _ argumentsJSON: String) throws(ShoalError) -> Int {
        let arguments = (try? JSON.parse(argumentsJSON)) ?? .null
        guard case .object(let documents) = arguments else { return 0 }
        for document in documents.values {
            if let message = refuse(document) { throw ShoalError(.requestFailed, message) }
        }
        batches.withLock { $0.append((statement, arguments)) }
        let ids = documents.values.compactMap { $0["_id"].map { Array($0.canonicalJSON.utf8) } }
        return Set(ids).count + documents.values.filter { $0["_id"] == nil }.count
    }

    /// The documents committed, in order.
    var documents: [Value] {
        batches.withLock { batches in
            batches.flatMap { batch -> [Value] in
                guard case .object(let arguments) = batch.arguments else { return [] }
                return (0..<arguments.count).compactMap { arguments["d\($0)"] }
            }
        }
    }
}

/// Runs an import of `text` into `FakeNode`, reading it `chunk` bytes at a time.
func runImport(_ text: String, _ importer: Importer, node: FakeNode, chunk: Int = 5) async -> ImportReport {
    var rest = Array(text.utf8)[...]
    return await importer.run(
        read: {
            guard !rest.isEmpty else { return nil }
            defer { rest = rest.dropFirst(chunk) }
            return Array(rest.prefix(chunk))
        },
        exec: { (statement: String, arguments: String) throws(ShoalError) -> Int in try node.exec(statement, arguments) })
}

struct ImporterTests {
    static func ndjson(_ range: Range<Int>) -> String {
        range.map { "{\"_id\": \($0), \"n\": \($0 * 2)}\n" }.joined()
    }

    @Test func documentsGoInBatchesOfOneUpsertEach() async {
        let node = FakeNode()
        let report = await runImport(Self.ndjson(0..<25), Importer(collection: "cars", batchSize: 10), node: node)
        #expect(report.documents == 25 && report.batches == 3 && report.failure == nil && report.skipped.isEmpty)
        let statements = node.batches.withLock { $0.map(\.statement) }
        #expect(statements.count == 3)
        #expect(
            statements[2] == "INSERT INTO `cars` DOCUMENTS (:d0), (:d1), (:d2), (:d3), (:d4) ON ID CONFLICT DO UPDATE")
        #expect(node.documents == (0..<25).map { ["_id": .int(Int64($0)), "n": .int(Int64($0 * 2))] })
    }

    /// The report counts what the node wrote: records of a batch that name one `_id`
    /// are one document, and the forms of a text Swift finds equal are not one `_id`.
    @Test func theReportCountsDocumentsWrittenNotRecordsRead() async {
        let node = FakeNode()
        let text = "{\"_id\": \"a\", \"x\": 1}\n{\"_id\": \"a\", \"y\": 2}\n{\"_id\": 1}\n{\"_id\": 1.0}\n"
            + "{\"_id\": \"\u{e9}\"}\n{\"_id\": \"e\u{301}\"}\n{\"n\": 1}\n"
        let report = await runImport(text, Importer(collection: "c", batchSize: 100), node: node)
        #expect(report.failure == nil)
        #expect(report.records == 7 && report.documents == 6 && report.batches == 1)
        #expect(report.json["documents"] == 6 && report.json["records"] == 7)
    }

    @Test func aBadLineStopsTheImportOnceEveryDocumentBeforeItIsCommitted() async {
        let node = FakeNode()
        let text = Self.ndjson(0..<13) + "{oops\n" + Self.ndjson(13..<20)
        let report = await runImport(text, Importer(collection: "c", batchSize: 5), node: node)
        #expect(report.failure?.line == 14)
        #expect(report.failure?.error.contains("invalid JSON") == true)
        #expect(report.documents == 13 && report.batches == 3)
        #expect(node.documents.count == 13)
        #expect(report.json["failed"]?["line"] == 14)
    }

    @Test func skipBadReportsBadLinesAndDocumentsTheNodeRefusesAndGoesOn() async {
        let node = FakeNode(refuse: { $0["_bad"] != nil ? "reserved field '_bad'" : nil })
        let text = Self.ndjson(0..<6) + "[1]\n" + "{\"_id\": 6, \"_bad\": 1}\n" + Self.ndjson(7..<10)
        let report = await runImport(text, Importer(collection: "c", batchSize: 4, skipBad: true), node: node)
        #expect(report.failure == nil)
        #expect(
            report.skipped == [
                .init(line: 7, error: "expected a JSON object, found an array"), .init(line: 8, error: "reserved field '_bad'"),
            ])
        #expect(report.documents == 9)
        #expect(node.documents.compactMap { $0["_id"] } == [0, 1, 2, 3, 4, 5, 7, 8, 9])
        guard case .object(let json) = report.json else { Issue.record("not an object"); return }
        #expect(Set(json.keys) == ["documents", "records", "batches", "skipped", "seconds"])
        #expect(json["skipped"] == [["line": 7, "error": "expected a JSON object, found an array"], ["line": 8, "error": "reserved field '_bad'"]])
    }

    @Test func aBatchTheNodeRefusesStopsTheImportWithoutSkipBad() async {
        let node = FakeNode(refuse: { $0["_id"] == 7 ? "too large" : nil })
        let report = await runImport(Self.ndjson(0..<12), Importer(collection: "c", batchSize: 5), node: node)
        #expect(report.documents == 5 && report.batches == 1)
        #expect(report.failure == .init(line: 6, error: "the node refused the batch of lines 6–10: too large"))
    }

    @Test func batchesStayUnderTheArgumentAndStatementLimits() {
        var batcher = ImportBatcher(maximumDocuments: 1000, maximumArgumentBytes: 1000)
        let document = "{\"blob\":\"\(String(repeating: "x", count: 90))\"}"
        var sizes: [Int] = []
        for line in 1...25 {
            for batch in batcher.add(line: line, json: document) {
                #expect(batch.argumentsJSON.utf8.count <= 1000)
                sizes.append(batch.count)
            }
        }
        sizes += batcher.flush().map { [$0.count] } ?? []
        #expect(sizes == [9, 9, 7])

        var short = ImportBatcher(maximumDocuments: 10_000, maximumStatementLength: 100)
        var statements: [String] = []
        for line in 1...30 { statements += short.add(line: line, json: "{}").map { $0.statement(collection: "c") } }
        statements += short.flush().map { [$0.statement(collection: "c")] } ?? []
        #expect(statements.count > 1)
        #expect(statements.allSatisfy { $0.count < 100 + 60 })

        var one = ImportBatcher(maximumDocuments: 1)
        #expect(one.add(line: 1, json: "{}").count == 1)
        #expect(one.flush() == nil)
    }

    @Test func theDefaultLimitsKeepAThousandDocumentBatchUnderTheNodesLimits() {
        var batcher = ImportBatcher(maximumDocuments: 10_000)
        var batches: [ImportBatch] = []
        for line in 1...20_000 { batches += batcher.add(line: line, json: "{\"i\":\(line)}") }
        #expect(batches.allSatisfy { $0.statement(collection: "cars").utf8.count <= 64 << 10 })
        #expect(batches.count >= 3)
    }

    @Test func aDocumentTooLargeForOneRequestIsABadRecord() async {
        let node = FakeNode()
        let huge = "{\"blob\": \"\(String(repeating: "y", count: ImportBatcher.maximumArgumentBytes))\"}\n"
        let report = await runImport(Self.ndjson(0..<2) + huge + Self.ndjson(2..<3), Importer(collection: "c", skipBad: true), node: node, chunk: 1 << 16)
        #expect(report.documents == 3)
        #expect(report.skipped.map(\.line) == [3])
        #expect(report.skipped.first?.error.contains("more than the 8 MiB") == true)
    }
}

import ArgumentParser
import ShoalStorage
import Foundation
import ShoalBulk
import ShoalNode
import ShoalSync

struct ExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Print the documents a SELECT matches as NDJSON, page by page.",
        discussion: """
            One canonical JSON document per line on stdout, in the order of their keys (the \
            canonical JSON of _id, byte by byte), read at most --batch at a time (each page \
            a snapshot of its own, so memory holds one page), over one connection; pages \
            also stay under 8 MiB of documents, sized by the largest of the page before. \
            Every document comes once, whatever its _id: 1 and 1.0, or the two Unicode forms \
            of a letter, are two documents and two lines. The statement may have a WHERE \
            and a SELECT list, not ORDER BY, LIMIT or OFFSET. If the query matches more \
            documents at the end than were printed (writes during the export), a warning \
            says so. Examples:
              shoal export "SELECT * FROM cars" > cars.ndjson
              shoal export --batch 200 "SELECT _id, color FROM cars WHERE doors > 2" > doors.ndjson
            """
    )

    @OptionGroup var client: ClientOptions

    @Option(name: .long, help: "Documents per page at most.")
    var batch = 1000

    @Argument(help: "A SELECT statement.")
    var query: String

    func validate() throws {
        if batch <= 0 { throw ValidationError("--batch must be a positive number of documents") }
    }

    func run() async throws {
        let exporter: Exporter
        do throws(BulkError) {
            exporter = Exporter(query: try ExportQuery(query), pageSize: batch)
        } catch {
            throw fail(error.message)
        }
        let report: Exporter.Report
        do {
            report = try await client.client().withSession { session in
                try await exporter.run(
                    page: { (afterKey: String, limit: Int) async throws(ShoalError) -> (itemsJSON: [String], lastKey: String) in
                        let page = try await session.page(exporter.query.statement, after: afterKey, limit: limit)
                        return (page.itemsJSON, page.lastKey)
                    },
                    exec: { (statement: String) async throws(ShoalError) -> [String] in
                        try await session.exec(statement, hint: "shoal export", readOnly: true).itemsJSON
                    },
                    write: { items in
                        try FileHandle.standardOutput.write(contentsOf: Data((items.joined(separator: "\n") + "\n").utf8))
                    })
            }
        } catch {
            throw fail(connectionMessage(error, node: client.node))
        }
        if let matching = report.matching, matching > report.documents {
            printError(
                "shoal: warning: exported \(report.documents) document(s), but the query matches \(matching) now: "
                    + "documents written during the export may be left out")
        }
    }
}

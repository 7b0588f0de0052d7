import ShoalCRDT
public import ShoalStorage
import ShoalNode
import ShoalQuery
import Foundation

/// What `shoal import` and `shoal export` refuse before they send anything.
public struct BulkError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A SELECT that `shoal export` reads page by page, in the order of the documents'
/// keys (`AdminSession.page`, PROTOCOL.md §10), so that a result of any size streams
/// with one page in memory at a time.
///
/// A page holds the documents after the last key of the page before. A key is the
/// canonical JSON of an `_id`, compared byte by byte, and each document has its own:
/// every document comes once, whatever its `_id` (`1` and `1.0`, "é" in its two
/// Unicode forms, booleans, arrays and objects), where DQL's `_id > :last` would find
/// some equal and cannot order others. Each page is its own snapshot: a document
/// written during the export may be in it or not; `countStatement` lets the caller
/// compare the count at the end.
public struct ExportQuery: Sendable, Hashable {
    /// The statement, as given.
    public let statement: String
    /// `SELECT COUNT(*) FROM ...` with the statement's WHERE.
    public let countStatement: String

    /// Checks that `text` is one SELECT that can be paged (`SelectStatement.pagingProblem`):
    /// no ORDER BY, LIMIT, OFFSET or COUNT(*).
    public init(_ text: String) throws(BulkError) {
        let parsed: [ParsedStatement]
        do throws(QueryError) {
            parsed = try Parser.parseStatements(text)
        } catch {
            throw BulkError(error.detailedDescription)
        }
        guard parsed.count == 1, case .select(let select) = parsed[0].statement else {
            throw BulkError("export takes one SELECT statement, as in \"SELECT * FROM cars WHERE color = 'blue'\"")
        }
        if let problem = select.pagingProblem { throw BulkError("export: \(problem)") }
        let characters = Array(parsed[0].text)
        let tokens: [Token]
        do {
            tokens = try Lexer.tokenize(parsed[0].text)
        } catch {
            throw BulkError("\(error)")
        }
        // Nothing before FROM (the SELECT list) can hold the keyword, so the first is the statement's own.
        guard let from = tokens.first(where: { $0.kind == .keyword(.from) }) else { throw BulkError("export needs SELECT ... FROM") }
        statement = parsed[0].text
        countStatement = "SELECT COUNT(*) " + String(characters[from.position.offset...]).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// Streams the documents a SELECT matches, page by page (`ExportQuery`).
///
/// A page's answer travels in one frame (16 MiB by default), so pages are sized by
/// what the last one held: the first asks for one document, each next one for at most
/// eight times as many, and never for more than `pageBytes` (8 MiB) of documents as
/// large as the largest of the last page, nor more than `pageSize`.
public struct Exporter: Sendable {
    public var query: ExportQuery
    public var pageSize: Int
    public var pageBytes: Int

    public init(query: ExportQuery, pageSize: Int = 1000, pageBytes: Int = 8 << 20) {
        self.query = query
        self.pageSize = pageSize
        self.pageBytes = pageBytes
    }

    public struct Report: Sendable, Hashable {
        public var documents = 0
        public var pages = 0
        /// How many documents the query matched after the last page.
        public var matching: Int?
    }

    /// Reads every page through `page` (the key to start after, "" for the first page,
    /// and the most documents to return; the documents' canonical JSON and the last
    /// one's key), hands each page's items to `write`, and counts the matches at the
    /// end through `exec` (a statement, returning its items' canonical JSON).
    public func run(
        page: (_ afterKey: String, _ limit: Int) async throws(ShoalError) -> (itemsJSON: [String], lastKey: String),
        exec: (_ statement: String) async throws(ShoalError) -> [String],
        write: ([String]) throws -> Void
    ) async throws -> Report {
        var report = Report()
        var after = ""
        var limit = 1
        while true {
            let (items, lastKey) = try await page(after, limit)
            if !items.isEmpty { try write(items) }
            report.documents += items.count
            report.pages += 1
            // A short page is the last.
            guard items.count >= limit else { break }
            // Each page must start past the one before, or the export would never end.
            guard after.utf8.lexicographicallyPrecedes(lastKey.utf8) else {
                throw ShoalError(.protocolError, "the node answered a page of \(items.count) document(s) whose last key does not follow the last page's")
            }
            after = lastKey
            if let largest = items.lazy.map(\.utf8.count).max() {
                limit = max(1, min(pageSize, limit * 8, pageBytes / max(1, largest)))
            }
        }
        let counted = try await exec(query.countStatement)
        if let first = counted.first, case .object(let fields) = try JSON.parse(first), case .int(let n)? = fields.values.first {
            report.matching = Int(n)
        }
        return report
    }
}

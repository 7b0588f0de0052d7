public import ShoalCRDT
public import ShoalNode
import ShoalQuery
import Foundation

/// What `shoal import` and `shoal export` refuse before they send anything.
public struct BulkError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A SELECT statement cut into pages in `_id` order, so that a result of any size
/// streams with one page in memory at a time.
///
/// Page after page adds `_id > :shoal_after` (the last `_id` of the page before) to
/// the statement's WHERE, with `ORDER BY _id LIMIT n`. DQL's `>` compares numbers
/// with numbers and strings with strings only, so the pages go through the numeric
/// `_id`s, then the string ones (`_id >= ''`), which is what INSERT gives. Where `_id`s
/// of other kinds sort (null and booleans before numbers, arrays and objects after
/// strings) the pages use `OFFSET` instead: the number of documents printed, all of
/// which sort before. Each page is its own snapshot: a document written during the
/// export may be in it or not, and one written before the cursor can shift an
/// `OFFSET` page; `countStatement` lets the caller compare the count at the end.
public struct ExportQuery: Sendable, Hashable {
    /// Where the next page starts.
    public enum Cursor: Sendable, Hashable {
        case start
        /// No `_id` bound: the documents after the first `n` in `_id` order.
        case offset(Int)
        /// Documents whose `_id` is greater than this one.
        case after(Value)
        /// Documents whose `_id` is this one or greater.
        case from(Value)
    }

    public static let argumentName = "shoal_after"
    /// Below every number's `_id`: the start of the numeric pages.
    static let lowestNumber = Value.double(-Double.greatestFiniteMagnitude)

    /// The statement up to its WHERE (or all of it).
    let selection: String
    /// The WHERE condition's text, if there is one.
    let condition: String?
    /// `SELECT COUNT(*) FROM ...` with the statement's WHERE.
    public let countStatement: String

    /// Checks that `text` is one SELECT that can be paged: no ORDER BY, LIMIT, OFFSET
    /// or COUNT(*), and `_id` in its SELECT list when it has one.
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
        if !select.orderBy.isEmpty || select.limit != nil || select.offset != nil {
            throw BulkError("export pages through the result in _id order itself: remove ORDER BY, LIMIT and OFFSET")
        }
        if select.projection.contains(where: { $0.expression == .countAll }) {
            throw BulkError("export prints documents: for COUNT(*), use shoal exec")
        }
        if !select.projection.isEmpty, !select.projection.contains(Projection(expression: .path(["_id"]), name: "_id")) {
            throw BulkError("export pages by _id: add _id to the SELECT list, as in SELECT _id, color FROM cars")
        }
        let characters = Array(parsed[0].text)
        let tokens: [Token]
        do {
            tokens = try Lexer.tokenize(parsed[0].text)
        } catch {
            throw BulkError("\(error)")
        }
        // Nothing before FROM or WHERE (the SELECT list, the collection and its
        // declarations) can hold either keyword, so the first of each is the statement's own.
        guard let from = tokens.first(where: { $0.kind == .keyword(.from) }) else { throw BulkError("export needs SELECT ... FROM") }
        func slice(_ range: Range<Int>) -> String {
            String(characters[range]).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if let keyword = tokens.first(where: { $0.kind == .keyword(.where) }) {
            let start = keyword.position.offset
            selection = slice(0..<start)
            condition = slice((start + keyword.text.count)..<characters.count)
        } else {
            selection = slice(0..<characters.count)
            condition = nil
        }
        countStatement = "SELECT COUNT(*) " + slice(from.position.offset..<characters.count)
    }

    /// The statement and arguments of the page that starts at `cursor`.
    public func page(_ cursor: Cursor, limit: Int) -> (statement: String, argumentsJSON: String) {
        let bound: (String, Value)?
        var offset = ""
        switch cursor {
        case .start: bound = nil
        case .offset(let n):
            bound = nil
            offset = " OFFSET \(n)"
        case .after(let id): bound = (">", id)
        case .from(let id): bound = (">=", id)
        }
        var conditions = condition.map { ["(\($0))"] } ?? []
        if let bound { conditions.append("_id \(bound.0) :\(Self.argumentName)") }
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        let arguments = bound.map { Value.object([Self.argumentName: $0.1]).canonicalJSON } ?? ""
        return ("\(selection)\(filter) ORDER BY _id LIMIT \(limit)\(offset)", arguments)
    }

    /// Where the page after one of `count` documents (of at most `limit`) ending
    /// with `lastID` starts, when `printed` documents are printed in all; nil when
    /// there is nothing more to read.
    public static func next(after cursor: Cursor, count: Int, limit: Int, lastID: Value?, printed: Int) -> Cursor? {
        if count >= limit, let lastID {
            switch lastID {
            case .int, .double, .string: return .after(lastID)
            case .null, .bool, .array, .object: return .offset(printed)
            }
        }
        switch cursor {
        case .start, .offset:
            // No bound: a short page is the end of the whole result.
            return nil
        case .after(let id), .from(let id):
            if case .string = id { return .offset(printed) }
            return .from("")
        }
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

    /// Runs every page through `exec` (a statement and its arguments' JSON, returning
    /// the items' canonical JSON) and hands each page's items to `write`.
    public func run(
        exec: (_ statement: String, _ argumentsJSON: String) async throws(NodeError) -> [String],
        write: ([String]) throws -> Void
    ) async throws -> Report {
        var report = Report()
        var cursor = ExportQuery.Cursor.start
        var limit = 1
        while true {
            let (statement, arguments) = query.page(cursor, limit: limit)
            let items = try await exec(statement, arguments)
            if !items.isEmpty { try write(items) }
            report.documents += items.count
            report.pages += 1
            let lastID = try items.last.map { try JSON.parse($0)["_id"] ?? .null }
            guard
                let next = ExportQuery.next(
                    after: cursor, count: items.count, limit: limit, lastID: lastID, printed: report.documents)
            else { break }
            cursor = next
            if let largest = items.lazy.map(\.utf8.count).max() {
                limit = max(1, min(pageSize, limit * 8, pageBytes / max(1, largest)))
            }
        }
        let counted = try await exec(query.countStatement, "")
        if let first = counted.first, case .object(let fields) = try JSON.parse(first), case .int(let n)? = fields.values.first {
            report.matching = Int(n)
        }
        return report
    }
}

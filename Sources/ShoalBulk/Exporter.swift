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
/// `_id`s, then the string ones (`_id >= ''`): every document whose `_id` is a number
/// or a string, which is what INSERT gives. The others (booleans, arrays, objects)
/// come only when they are in the first page; `countStatement` lets the caller see
/// that some were left out. Each page is its own snapshot: a document written during
/// the export may be in it or not.
public struct ExportQuery: Sendable, Hashable {
    /// Where the next page starts.
    public enum Cursor: Sendable, Hashable {
        case start
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
        switch cursor {
        case .start: bound = nil
        case .after(let id): bound = (">", id)
        case .from(let id): bound = (">=", id)
        }
        var conditions = condition.map { ["(\($0))"] } ?? []
        if let bound { conditions.append("_id \(bound.0) :\(Self.argumentName)") }
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        let arguments = bound.map { Value.object([Self.argumentName: $0.1]).canonicalJSON } ?? ""
        return ("\(selection)\(filter) ORDER BY _id LIMIT \(limit)", arguments)
    }

    /// Where the page after one of `count` documents (of at most `limit`) ending
    /// with `lastID` starts; nil when there is nothing more to read.
    public static func next(after cursor: Cursor, count: Int, limit: Int, lastID: Value?) -> Cursor? {
        if count >= limit, let lastID {
            switch lastID {
            case .int, .double, .string: return .after(lastID)
            case .null, .bool: return .from(lowestNumber)
            case .array, .object: return nil
            }
        }
        switch cursor {
        case .start:
            return nil
        case .after(let id), .from(let id):
            if case .string = id { return nil }
            return .from("")
        }
    }
}

/// Streams the documents a SELECT matches, page by page (`ExportQuery`).
public struct Exporter: Sendable {
    public var query: ExportQuery
    public var pageSize: Int

    public init(query: ExportQuery, pageSize: Int = 1000) {
        self.query = query
        self.pageSize = pageSize
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
        while true {
            let (statement, arguments) = query.page(cursor, limit: pageSize)
            let items = try await exec(statement, arguments)
            if !items.isEmpty { try write(items) }
            report.documents += items.count
            report.pages += 1
            let lastID = try items.last.map { try JSON.parse($0)["_id"] ?? .null }
            guard let next = ExportQuery.next(after: cursor, count: items.count, limit: pageSize, lastID: lastID) else { break }
            cursor = next
        }
        let counted = try await exec(query.countStatement, "")
        if let first = counted.first, case .object(let fields) = try JSON.parse(first), case .int(let n)? = fields.values.first {
            report.matching = Int(n)
        }
        return report
    }
}

public import ShoalCRDT
public import ShoalQuery
import GRDB

extension DocumentStore {
    /// Parses and runs one or more `;`-separated DQL statements as one transaction.
    ///
    /// Statements that only read run on a reader, concurrently with other work;
    /// as soon as one writes, all run in one serialized read-write transaction that
    /// commits or rolls back whole.
    public func execute(_ text: String, arguments: [String: Value] = [:]) async throws(StoreError) -> QueryResult {
        let statements: [ShoalQuery.Statement]
        do throws(QueryError) {
            statements = try Parser.parse(text)
        } catch {
            throw StoreError(error)
        }
        return try await execute(statements, arguments: arguments)
    }

    /// Runs parsed statements as one transaction; the result is the last statement's.
    public func execute(_ statements: [ShoalQuery.Statement], arguments: [String: Value] = [:]) async throws(StoreError)
        -> QueryResult
    {
        guard statements.contains(where: { $0.isMutation }) else {
            return try await read { db in
                var result = QueryResult()
                for case .select(let select) in statements {
                    result = QueryResult(items: try Self.select(select, arguments: arguments, db: db))
                }
                return result
            }
        }
        let site = siteID
        let clock = clock
        let (result, lastSequence) = try await write { db -> (QueryResult, UInt64?) in
            var transaction = try LocalTransaction(db: db, site: site, clock: clock)
            var last = QueryResult()
            for statement in statements {
                switch statement {
                case .select(let select):
                    last = QueryResult(items: try Self.select(select, arguments: arguments, db: db))
                case .insert(let insert):
                    last = QueryResult(mutatedDocumentIDs: try transaction.insert(insert, arguments: arguments))
                case .update(let update):
                    last = QueryResult(mutatedDocumentIDs: try transaction.update(update, arguments: arguments))
                }
            }
            let committed = try transaction.finish()
            last.transactionID = committed?.transaction
            return (last, committed?.lastSequence)
        }
        if let lastSequence { feed.publish(lastSequence) }
        return result
    }

    static func select(_ select: SelectStatement, arguments: [String: Value], db: Database) throws -> [Value] {
        var documents = try matchingDocuments(
            collection: select.collection, predicate: select.whereClause, arguments: arguments, db: db
        ).map(\.body)
        do {
            if !select.orderBy.isEmpty {
                let keyed = try documents.map { doc throws(QueryError) in
                    (doc, try select.orderBy.map { term throws(QueryError) in
                        try Evaluator.evaluate(term.expression, document: doc, arguments: arguments) ?? .null
                    })
                }
                documents = keyed.sorted { a, b in
                    for (i, term) in select.orderBy.enumerated() {
                        let c = Value.compare(a.1[i], b.1[i])
                        if c != 0 { return term.descending ? c > 0 : c < 0 }
                    }
                    return false
                }.map(\.0)
            }
            let offset = try count(select.offset, arguments: arguments, clause: "OFFSET") ?? 0
            let limit = try count(select.limit, arguments: arguments, clause: "LIMIT")
            documents = Array(documents.dropFirst(offset).prefix(limit ?? Int.max))
            guard !select.projection.isEmpty else { return documents }
            return try documents.map { doc throws(QueryError) in
                var out: [String: Value] = [:]
                for item in select.projection {
                    if let v = try Evaluator.evaluate(item.expression, document: doc, arguments: arguments) {
                        out[item.name] = v
                    }
                }
                return .object(out)
            }
        } catch {
            throw StoreError(error)
        }
    }

    static func count(_ expression: Expression?, arguments: [String: Value], clause: String) throws(QueryError) -> Int? {
        guard let expression else { return nil }
        let value = try Evaluator.evaluate(expression, document: .object([:]), arguments: arguments)
        guard case .int(let n)? = value, n >= 0 else {
            throw QueryError("\(clause) needs a non-negative integer, got \(value.map { $0.canonicalJSON } ?? "nothing")")
        }
        return Int(n)
    }

    /// The live documents of `collection` that satisfy `predicate`, looked up by
    /// key when the predicate is `_id = constant`.
    static func matchingDocuments(
        collection: String, predicate: Expression?, arguments: [String: Value], db: Database
    ) throws -> [(key: String, body: Value)] {
        let rows: [Row]
        if let id = Evaluator.constantIDEquality(predicate, arguments: arguments) {
            rows = try Row.fetchAll(
                db, sql: "SELECT doc_id, body FROM document WHERE collection = ? AND doc_id = ?",
                arguments: [collection, DocumentKey.make(id)])
        } else {
            rows = try Row.fetchAll(
                db, sql: "SELECT doc_id, body FROM document WHERE collection = ? ORDER BY doc_id",
                arguments: [collection])
        }
        var out: [(key: String, body: Value)] = []
        out.reserveCapacity(rows.count)
        for row in rows {
            let body = try parseBody(row[1])
            do {
                if try Evaluator.matches(predicate, document: body, arguments: arguments) {
                    out.append((row[0], body))
                }
            } catch {
                throw StoreError(error)
            }
        }
        return out
    }

    static func parseBody(_ text: String) throws -> Value {
        do {
            return try JSON.parse(text)
        } catch {
            throw StoreError(.database, "a stored document is not valid JSON: \(error)")
        }
    }
}

public import ShoalCRDT
public import ShoalQuery
import GRDB
import Synchronization
import Logging

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
        try await ensureIndexes(for: statements, arguments: arguments)
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
        let (result, lastSequence, evicted) = try await write { db -> (QueryResult, UInt64?, Bool) in
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
                case .delete(let delete):
                    last = QueryResult(mutatedDocumentIDs: try transaction.delete(delete, arguments: arguments))
                case .evict(let evict):
                    last = QueryResult(mutatedDocumentIDs: try transaction.evict(evict, arguments: arguments))
                }
            }
            let committed = try transaction.finish()
            last.transactionID = committed?.transaction
            var seen: Set<Value> = []
            last.mutatedDocumentIDs = last.mutatedDocumentIDs.filter { seen.insert($0).inserted }
            return (last, committed?.lastSequence, transaction.evicted)
        }
        if let lastSequence {
            localCommits.withLock { $0 += 1 }
            feed.publish(lastSequence)
        }
        if evicted {
            evictions.withLock { $0 = true }
            resets.publish(1)
        }
        if lastSequence != nil || evicted {
            let written = Set(statements.filter(\.isMutation).map(\.collection))
            commits.publish(
                Commit(transactions: result.transactionID.map { [$0] } ?? [], collections: written, sequence: lastSequence ?? 0))
        }
        return result
    }

    /// Creates, once, an expression index for each JSON path a query's pre-filter
    /// reads, up to `maximumAutomaticIndexes`; later queries on the same path use it.
    func ensureIndexes(for statements: [ShoalQuery.Statement], arguments: [String: Value]) async throws(StoreError) {
        var paths: [String] = []
        for statement in statements {
            let predicate: Expression?
            switch statement {
            case .select(let s): predicate = s.whereClause
            case .update(let s): predicate = s.whereClause
            case .delete(let s), .evict(let s): predicate = s.whereClause
            case .insert: predicate = nil
            }
            paths += SQLFilter.make(predicate, arguments: arguments)?.paths ?? []
        }
        let missing = indexedPaths.withLock { known -> [String] in
            let fresh = Set(paths).subtracting(known).sorted()
            let room = max(0, Self.maximumAutomaticIndexes - known.count)
            return Array(fresh.prefix(room))
        }
        guard !missing.isEmpty else { return }
        // Best effort: a query never fails because an index could not be made.
        do {
            try await write { db in
                for path in missing { try db.execute(sql: SQLFilter.indexStatement(path)) }
                // Statistics let the planner prefer the new index over the primary key.
                try db.execute(sql: "ANALYZE document")
            }
            indexedPaths.withLock { $0.formUnion(missing) }
        } catch {
            logger.warning("could not create an index for a queried path", metadata: ["shoal.error": "\(error)"])
        }
    }

    /// SQLite's plan for the candidate query of a SELECT's WHERE (for tests and diagnostics).
    func candidatePlan(_ query: String, arguments: [String: Value] = [:]) async throws(StoreError) -> String {
        guard case .select(let select)? = try? Parser.parseStatement(query),
            let filter = SQLFilter.make(select.whereClause, arguments: arguments)
        else { return "" }
        let sql = "EXPLAIN QUERY PLAN SELECT doc_id, body FROM document WHERE collection = ? AND deleted = 0 AND \(filter.sql)"
        let arguments = StatementArguments(([select.collection] + filter.arguments).map { $0 as (any DatabaseValueConvertible)? })
        return try await read { db in
            try Row.fetchAll(db, sql: sql, arguments: arguments).map { $0["detail"] as String? ?? "" }.joined(separator: "\n")
        }
    }

    /// How many JSON-path indexes the store creates by itself (each costs space and write time).
    public static let maximumAutomaticIndexes = 32

    static func select(_ select: SelectStatement, arguments: [String: Value], db: Database) throws -> [Value] {
        let isCount = select.projection.count == 1 && select.projection[0].expression == .countAll
        let documents = try matchingDocuments(
            collection: select.collection, predicate: select.whereClause,
            orderBy: isCount ? [] : select.orderBy, limit: isCount ? nil : select.limit,
            offset: isCount ? nil : select.offset, arguments: arguments, db: db
        ).map(\.body)
        if isCount {
            return [.object([select.projection[0].name: .int(Int64(documents.count))])]
        }
        guard !select.projection.isEmpty else { return documents }
        do {
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
    /// key when the predicate is `_id = constant`, then ordered and cut to
    /// `offset` and `limit`.
    static func matchingDocuments(
        collection: String, predicate: Expression?, orderBy: [OrderTerm] = [], limit: Expression? = nil,
        offset: Expression? = nil, arguments: [String: Value], db: Database
    ) throws -> [(key: String, body: Value)] {
        let rows: [Row]
        if let id = Evaluator.constantIDEquality(predicate, arguments: arguments) {
            rows = try Row.fetchAll(
                db, sql: "SELECT doc_id, body FROM document WHERE collection = ? AND doc_id = ? AND deleted = 0",
                arguments: [collection, DocumentKey.make(id)])
        } else if let filter = SQLFilter.make(predicate, arguments: arguments) {
            // SQLite narrows the candidates with JSON functions; Swift then applies the
            // exact DQL semantics to what is left.
            rows = try Row.fetchAll(
                db,
                sql: "SELECT doc_id, body FROM document WHERE collection = ? AND deleted = 0 AND \(filter.sql) ORDER BY doc_id",
                arguments: StatementArguments([collection] as [any DatabaseValueConvertible] + filter.arguments))
        } else {
            rows = try Row.fetchAll(
                db, sql: "SELECT doc_id, body FROM document WHERE collection = ? AND deleted = 0 ORDER BY doc_id",
                arguments: [collection])
        }
        var out: [(key: String, body: Value)] = []
        out.reserveCapacity(rows.count)
        var bodies: [(key: String, body: Value)] = []
        for row in rows { bodies.append((row[0], try parseBody(row[1]))) }
        do throws(QueryError) {
            for (key, body) in bodies {
                if try Evaluator.matches(predicate, document: body, arguments: arguments) {
                    out.append((key, body))
                }
            }
            if !orderBy.isEmpty {
                let keyed = try out.map { doc throws(QueryError) in
                    (doc, try orderBy.map { term throws(QueryError) in
                        try Evaluator.evaluate(term.expression, document: doc.body, arguments: arguments) ?? .null
                    })
                }
                out = keyed.sorted { a, b in
                    for (i, term) in orderBy.enumerated() {
                        let c = Value.compare(a.1[i], b.1[i])
                        if c != 0 { return term.descending ? c > 0 : c < 0 }
                    }
                    return false
                }.map(\.0)
            }
            let skip = try count(offset, arguments: arguments, clause: "OFFSET") ?? 0
            let take = try count(limit, arguments: arguments, clause: "LIMIT")
            if skip > 0 || take != nil { out = Array(out.dropFirst(skip).prefix(take ?? Int.max)) }
        } catch {
            throw StoreError(error)
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

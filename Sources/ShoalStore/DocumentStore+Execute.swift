public import ShoalCRDT
public import ShoalStorage
package import ShoalQuery
import GRDB
import Synchronization
import Logging
import Metrics

extension DocumentStore {
    /// Parses and runs one or more `;`-separated DQL statements as one transaction.
    ///
    /// Statements that only read run on a reader, on one snapshot, concurrently with
    /// other work; as soon as one writes, all run in one read-write transaction (an
    /// implicit `transaction`) that commits or rolls back whole, in one access to the
    /// writer. `hint` names the transaction in logs, as `transaction(hint:)` does;
    /// `isReadOnly` refuses the whole text, before anything runs, if a statement writes.
    ///
    /// With a `deadline`, statements that write wait for the writer until then at
    /// most and commit only before it; past it they fail with
    /// `ShoalError.Code.deadlineExceeded` and nothing is written. Reads ignore it.
    ///
    /// `DocumentDatabase.execute`, the call to use, comes here.
    public func perform(
        _ text: String, arguments: [String: Value], hint: String?, isReadOnly: Bool, deadline: Deadline?
    ) async throws(ShoalError) -> QueryResult {
        let statements = try parse(text)
        let info = TransactionInfo(
            id: LocalWriteRules.randomID(), hint: hint, isReadOnly: isReadOnly || !statements.contains(where: \.isMutation))
        do {
            if isReadOnly, statements.contains(where: \.isMutation) {
                // Parsed again with each statement's text, to name the one that writes.
                try StoreTransaction.refuseMutations(statements, sources: try? Parser.parseStatements(text), info: info)
            }
            return try await execute(statements, arguments: arguments, info: info, deadline: deadline)
        } catch {
            throw error.locating(in: text)
        }
    }

    /// Runs parsed statements as one transaction; the result is the last statement's.
    ///
    /// This is `transaction` made cheap for the common case: a read is one snapshot
    /// read, and a write takes the gate and runs in one database access from
    /// `BEGIN IMMEDIATE` to `COMMIT` (no SAVEPOINT: any failure rolls back the whole).
    package func execute(_ statements: [ShoalQuery.Statement], arguments: [String: Value] = [:]) async throws(ShoalError)
        -> QueryResult
    {
        let info = TransactionInfo(
            id: LocalWriteRules.randomID(), hint: nil, isReadOnly: !statements.contains(where: \.isMutation))
        return try await execute(statements, arguments: arguments, info: info)
    }

    private func execute(
        _ statements: [ShoalQuery.Statement], arguments: [String: Value], info: TransactionInfo, deadline: Deadline? = nil
    ) async throws(ShoalError) -> QueryResult {
        let mutates = !info.isReadOnly
        let marks = OpenTransactions.marks
        let nested = marks.contains { $0.store == ObjectIdentifier(self) }
        if mutates { try refuseWriteBesideOpenTransaction(marks) }
        guard let token = running.register(info, nested: nested) else { throw Self.shuttingDown }
        defer { running.unregister(token) }
        guard mutates else {
            await createIndexesIfWriterIsFree(for: statements, arguments: arguments)
            return try await read { db in
                var none: LocalTransaction?
                return try self.run(statements, arguments: arguments, db: db, local: &none).result
            }
        }
        try await acquireGate(nested: nested, deadline: deadline)
        defer { gate.release() }
        let missing = missingIndexPaths(for: statements, arguments: arguments)
        let site = siteID, counterSite = self.counterSite
        let clock = clock
        typealias Outcome = (
            result: QueryResult, lastSequence: UInt64?, appended: LogEnd.Appended?, evicted: Bool, written: Set<String>,
            indexes: [String]
        )
        let outcome: Outcome
        do {
            let work: @Sendable (Database) throws -> Outcome = { db in
                try Self.beginImmediate(db)
                do {
                    var local: LocalTransaction? = LocalTransaction(
                        db: db, site: site, counterSite: counterSite, clock: clock, progress: try LocalTransaction.begin(db: db))
                    let indexes = self.createIndexes(missing, db: db)
                    var (result, written) = try self.run(statements, arguments: arguments, db: db, local: &local)
                    let committing = ContinuousClock.now
                    let committed = try local?.finish()
                    self.refreshStatisticsIfGrown(db, logged: committed?.appended.documents ?? 0)
                    // The last moment the request can still be abandoned whole.
                    try deadline?.check(.beforeCommit)
                    try db.cachedStatement(sql: "COMMIT").execute()
                    // Timed as `Transaction.commit` is: logging the deltas and COMMIT.
                    if committed != nil { self.commitDuration?.record(duration: ContinuousClock.now - committing) }
                    result.transactionID = committed?.transaction
                    return (result, committed?.lastSequence, committed?.appended, local?.evicted ?? false, written, indexes)
                } catch {
                    // Fails too when the task was cancelled; rollBackOpenTransaction below covers that.
                    try? db.execute(sql: "ROLLBACK")
                    throw error
                }
            }
            // After a quick one, the next runs on this thread.
            outcome = try await quickWrite(work)
        } catch {
            rollBackOpenTransaction()
            throw ShoalError.wrapping(error, "database write")
        }
        indexedPaths.withLock { $0.formUnion(outcome.indexes) }
        if statements.contains(where: \.changesIndexes) { await reloadUserIndexes() }
        publish(
            transaction: outcome.result.transactionID, lastSequence: outcome.lastSequence, appended: outcome.appended,
            evicted: outcome.evicted, collections: outcome.written)
        return outcome.result
    }

    /// Runs statements on `db`, writing through `local` (nil in a read-only
    /// transaction, whose caller has refused every mutation already). Returns the
    /// last statement's items, the documents every statement wrote (each once, in
    /// the order first written), and the collections the mutations named.
    func run(
        _ statements: [ShoalQuery.Statement], arguments: [String: Value], db: Database, local: inout LocalTransaction?
    ) throws -> (result: QueryResult, written: Set<String>) {
        var last = QueryResult()
        var written: Set<String> = []
        var mutated = MutatedDocuments()
        for statement in statements {
            if statement.isMutation, local == nil {
                throw ShoalError(.readOnly, "\(statement.summary) writes, but this transaction is read-only")
            }
            switch statement {
            case .select(let select):
                var unreadable: [String] = []
                last = QueryResult(items: try Self.select(select, arguments: arguments, db: db) { unreadable.append($0) })
                reportUnreadable(unreadable, collection: select.collection)
            case .system(let system):
                last = QueryResult(items: try applySystem(system, arguments: arguments))
            case .index(let index):
                last = QueryResult(items: try runIndexStatement(index, db: db))
            case .insert(let insert):
                last = QueryResult(mutatedDocumentIDs: try local!.insert(insert, arguments: arguments))
                try checkDocumentSizes(local!.takeWrittenBodies())
            case .update(let update):
                last = QueryResult(mutatedDocumentIDs: try local!.update(update, arguments: arguments))
                try checkDocumentSizes(local!.takeWrittenBodies())
            case .delete(let delete):
                last = QueryResult(mutatedDocumentIDs: try local!.delete(delete, arguments: arguments))
            case .evict(let evict):
                let (evicted, kept) = try local!.evict(evict, arguments: arguments, holdings: peerHoldings)
                last = QueryResult(mutatedDocumentIDs: evicted)
                if !kept.isEmpty {
                    logger.notice(
                        "EVICT FROM \(evict.collection) kept \(kept.count) document(s) holding this node's own writes that no peer has acknowledged yet: evicted, they could not come back. Evict them again once a peer has them",
                        metadata: ["shoal.collection": "\(evict.collection)", "shoal.documents": "\(kept.prefix(10).map(\.canonicalJSON).joined(separator: ","))"])
                }
            }
            if statement.writesDocuments, let collection = statement.targetCollection {
                written.insert(collection)
                mutated.add(last.mutatedDocumentIDs, collection: collection)
            }
        }
        last.mutatedDocumentIDs = mutated.ids
        return (last, written)
    }

    /// `ALTER SYSTEM SET` or `SHOW` on this store's parameters: in memory, at once.
    func applySystem(_ statement: SystemStatement, arguments: [String: Value]) throws(ShoalError) -> [Value] {
        do throws(QueryError) {
            return try parameters.withLock { parameters throws(QueryError) in
                try parameters.apply(statement, arguments: arguments)
            }
        } catch {
            throw ShoalError(error)
        }
    }

    /// The JSON paths the statements' pre-filters read that have no index yet (nor in
    /// `besides`, the ones a running transaction created), up to `maximumAutomaticIndexes`.
    /// A path a declared index of the statement's collection leads with needs none.
    func missingIndexPaths(
        for statements: [ShoalQuery.Statement], arguments: [String: Value], besides: Set<String> = []
    ) -> [String] {
        var paths: [String] = []
        for statement in statements {
            let predicate: Expression?
            switch statement {
            case .select(let s): predicate = s.whereClause
            case .update(let s): predicate = s.whereClause
            case .delete(let s), .evict(let s): predicate = s.whereClause
            case .insert, .system, .index: predicate = nil
            }
            // A constant `_id` equality reads by primary key (`candidateQuery`): no index helps it.
            guard Evaluator.constantIDEquality(predicate, arguments: arguments) == nil,
                let filter = SQLFilter.make(predicate, arguments: arguments)
            else { continue }
            let declared = declaredLeadingPaths(of: statement.collection)
            paths += filter.paths.filter { !declared.contains($0) }
        }
        guard !paths.isEmpty else { return [] }
        return indexedPaths.withLock { known -> [String] in
            let fresh = Set(paths).subtracting(known).subtracting(besides).sorted()
            let room = max(0, Self.maximumAutomaticIndexes - known.count - besides.count)
            return Array(fresh.prefix(room))
        }
    }

    /// Creates an expression index for each path inside the open SQLite transaction,
    /// then refreshes the statistics so the planner prefers them to the primary key.
    /// Best effort: a query never fails because an index could not be made. Returns
    /// the paths indexed; they count as known once the transaction commits.
    func createIndexes(_ paths: [String], db: Database) -> [String] {
        guard !paths.isEmpty else { return [] }
        do {
            try db.execute(sql: "SAVEPOINT shoal_index")
            do {
                for path in paths { try db.execute(sql: SQLFilter.indexStatement(path)) }
                try Self.refreshStatistics(db)
                try db.execute(sql: "RELEASE SAVEPOINT shoal_index")
                return paths
            } catch {
                try? db.execute(sql: "ROLLBACK TO SAVEPOINT shoal_index")
                try? db.execute(sql: "RELEASE SAVEPOINT shoal_index")
                throw error
            }
        } catch {
            logger.warning("could not create an index for a queried path", metadata: ["shoal.error": "\(error)"])
            return []
        }
    }

    /// For reads: creates the missing indexes in a write of their own, but only if
    /// the writer is free this instant. A read never waits for a writer to make one;
    /// a later query on the same path will.
    func createIndexesIfWriterIsFree(for statements: [ShoalQuery.Statement], arguments: [String: Value]) async {
        let missing = missingIndexPaths(for: statements, arguments: arguments)
        guard !missing.isEmpty, gate.tryAcquire() else { return }
        defer { gate.release() }
        do {
            let created = try await pool.write { db in self.createIndexes(missing, db: db) }
            indexedPaths.withLock { $0.formUnion(created) }
        } catch {
            logger.warning("could not create an index for a queried path", metadata: ["shoal.error": "\(error)"])
        }
    }

    /// SQLite's plan for the candidate query of a SELECT (for tests and diagnostics).
    func candidatePlan(_ query: String, arguments: [String: Value] = [:]) async throws(ShoalError) -> String {
        guard case .select(let select)? = try? Parser.parseStatement(query) else { return "" }
        let keyOrder = !(select.orderBy.isEmpty && select.limit != nil)
        let candidates = Self.candidateQuery(
            collection: select.collection, predicate: select.whereClause, arguments: arguments, keyOrder: keyOrder)
        return try await read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + candidates.sql, arguments: candidates.arguments)
                .map { $0["detail"] as String? ?? "" }.joined(separator: "\n")
        }
    }

    /// How many JSON-path indexes the store creates by itself.
    package static let maximumAutomaticIndexes = UserIndex.maximumAutomatic

    /// A SELECT's answer. Documents whose stored body cannot be read are left out and
    /// their keys passed to `unreadable`.
    static func select(
        _ select: SelectStatement, arguments: [String: Value], db: Database, unreadable: (String) -> Void = { _ in }
    ) throws -> [Value] {
        let isCount = DocumentMatch.isCount(select)
        let documents = try withoutActuallyEscaping(unreadable) { unreadable in
            try matchingDocuments(
                collection: select.collection, predicate: select.whereClause,
                orderBy: isCount ? [] : select.orderBy, limit: isCount ? nil : select.limit,
                offset: isCount ? nil : select.offset, arguments: arguments, db: db, unreadable: unreadable
            ).map(\.body)
        }
        return try DocumentMatch.items(documents, select, arguments: arguments)
    }

    /// The live documents of `collection` that satisfy `predicate`, looked up by
    /// key when the predicate is `_id = constant`, then ordered and cut to
    /// `offset` and `limit`.
    ///
    /// Without ORDER BY, documents come in key order (`doc_id`, byte by byte), except
    /// when a LIMIT cuts a pre-filtered query: then they come in the order SQLite reads
    /// them (an index's, when one serves the filter), and reading stops at the last one
    /// needed. With `after`, only documents whose key sorts after it count, in key
    /// order whatever the LIMIT ("" for all of them): a page of `page`.
    ///
    /// A stored body that cannot be read (one an older version wrote past
    /// `DocumentLimits`) is seen as its `_id` alone, so that a statement naming the
    /// document by `_id` can still repair, delete or evict it. With `unreadable`, such
    /// a document is left out of the answer and its key passed to `unreadable` (what
    /// SELECT does, which has nothing true to show of it).
    static func matchingDocuments(
        collection: String, predicate: Expression?, orderBy: [OrderTerm] = [], limit: Expression? = nil,
        offset: Expression? = nil, after key: String? = nil, arguments: [String: Value], db: Database,
        unreadable: ((String) -> Void)? = nil
    ) throws -> [(key: String, body: Value)] {
        var match = try DocumentMatch(
            predicate: predicate, orderBy: orderBy, limit: limit, offset: offset, arguments: arguments)
        let query = candidateQuery(
            collection: collection, predicate: predicate, arguments: arguments, keyOrder: match.enough == nil || key != nil,
            after: key)
        let statement = query.reusable ? try db.cachedStatement(sql: query.sql) : try db.makeStatement(sql: query.sql)
        let columns = try CandidateColumns(statement)
        let rows = try Row.fetchCursor(statement, arguments: query.arguments)
        // The cursor reads a column only when asked: a key that fails the predicate's
        // own `_id` comparisons saves reading and parsing its body.
        while match.wantsMore, let row = try rows.next() {
            try match.offer(key: try columns.key(row), body: { try columns.body(row) }, unreadable: unreadable)
        }
        return try match.finish()
    }

    /// The SQL that reads the candidate rows (`doc_id`, `body`) of a predicate: a key
    /// lookup for `_id = constant`, the SQL pre-filter when part of the predicate
    /// translates, every live document otherwise; in key order when `keyOrder`, and
    /// only the keys after `after` when it is not empty.
    ///
    /// `reusable` marks the shapes whose SQL depends on the collection alone (all of
    /// it, or one `_id`, with or without a key bound): the writer and readers keep those
    /// prepared. Filtered shapes vary with the query, so they are prepared per use and
    /// not kept.
    static func candidateQuery(
        collection: String, predicate: Expression?, arguments: [String: Value], keyOrder: Bool = true, after: String? = nil
    ) -> (sql: String, arguments: StatementArguments, reusable: Bool) {
        // The collection is written into the SQL so that a user index, which is partial
        // on its collection, can serve the query.
        let (inCollection, collectionArguments) = SQLFilter.collectionCondition(collection)
        var select = "SELECT doc_id, body FROM document WHERE \(inCollection) AND deleted = 0"
        var bound: [any DatabaseValueConvertible] = []
        if let after, !after.isEmpty {
            // doc_id is TEXT in SQLite's BINARY collation: compared byte by byte, as the primary key orders it.
            select += " AND doc_id > ?"
            bound = [after]
        }
        if let id = Evaluator.constantIDEquality(predicate, arguments: arguments) {
            return ("\(select) AND doc_id = ?", StatementArguments(collectionArguments + bound + [DocumentKey.make(id)]), true)
        }
        let order = keyOrder ? " ORDER BY doc_id" : ""
        guard let filter = SQLFilter.make(predicate, arguments: arguments) else {
            return (select + " ORDER BY doc_id", StatementArguments(collectionArguments + bound), true)
        }
        // SQLite narrows the candidates with JSON functions; Swift then applies the
        // exact DQL semantics to what is left.
        return ("\(select) AND \(filter.sql)\(order)", StatementArguments(collectionArguments + bound + filter.arguments), false)
    }

    /// The statements of `text`, from the cache when it was parsed lately.
    func parse(_ text: String) throws(ShoalError) -> [ShoalQuery.Statement] {
        if let statements = parsed.withLock({ $0.statements(of: text) }) { return statements }
        let statements: [ShoalQuery.Statement]
        do throws(QueryError) {
            statements = try Parser.parse(text)
        } catch {
            throw ShoalError(error)
        }
        parsed.withLock { $0.remember(statements, of: text) }
        return statements
    }

    /// Logs the documents a query left out because their stored bodies cannot be read,
    /// and how to repair them.
    func reportUnreadable(_ keys: [String], collection: String) {
        guard !keys.isEmpty else { return }
        logger.warning(
            "\(keys.count) document(s) of \(collection) cannot be read (stored past the limits a document can hold, by an older version) and were left out of a query: repair each by _id with UPDATE ... UNSET of the field too deep, or DELETE or EVICT it",
            metadata: ["shoal.collection": "\(collection)", "shoal.documents": "\(keys.prefix(10).joined(separator: ","))"])
    }

    static func parseBody(_ text: String) throws -> Value {
        do {
            return try JSON.parse(text)
        } catch {
            throw ShoalError(.database, "a stored document is not valid JSON: \(error)")
        }
    }
}

/// The columns of the candidate rows a query reads (`candidateQuery`: `doc_id` and
/// `body` of `document`), their positions looked up by name once per statement: a
/// query reads many rows, and a row's body only once its key passes.
struct CandidateColumns {
    enum Columns {
        static let key = Column("doc_id")
        static let body = Column("body")
    }

    let key: Int
    let body: Int

    init(_ statement: GRDB.Statement) throws {
        guard let key = statement.index(ofColumn: Columns.key.name), let body = statement.index(ofColumn: Columns.body.name)
        else { throw ShoalError(.database, "a query's candidate rows have no doc_id or no body column: \(statement.sql)") }
        self.key = key
        self.body = body
    }

    func key(_ row: Row) throws -> String { try Self.text(row, at: key, Columns.key) }

    func body(_ row: Row) throws -> String { try Self.text(row, at: body, Columns.body) }

    private static func text(_ row: Row, at index: Int, _ column: Column) throws -> String {
        do {
            return try row.decode(String.self, atIndex: index)
        } catch {
            throw ShoalError(.database, "table document, column \(column.name) holds no String (\(error)): \(StoredInteger.damaged)")
        }
    }
}

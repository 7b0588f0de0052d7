import Logging
import Metrics
import NIOCore
import PostgresNIO
package import ShoalCRDT
package import ShoalQuery
package import ShoalStorage

/// What an app queries on a hub (`DocumentDatabase`): DQL, local and explicit
/// transactions, observers.
///
/// Reads run in `REPEATABLE READ READ ONLY` snapshots and never wait for a writer.
/// DQL is evaluated in Swift, by the rules every engine shares (`DocumentMatch`, and
/// `LocalWrites` for INSERT, UPDATE and DELETE), over the live bodies of a statement's
/// collection that its WHERE's pre-filter keeps (`PostgresFilter`), or of the one
/// document an `_id = constant` names.
///
/// A read-write transaction is the hubs' one writer (`withWriter`): it holds `log_end`'s
/// row lock from before its first read to its commit, so two hubs never commit
/// conflicting read-write transactions (they are serial: serializable). It takes its
/// number from `transaction_counter` and its clock from the `clock` row under that lock,
/// and writes both back at commit, with its rows as one apply
/// (`PostgresDocumentRows.appliedRows`).
///
/// Not on a hub: EVICT (a hub holds the data of the devices behind it), which says so
/// with an error. `ALTER SYSTEM SET` changes this hub process's parameters. Indexes are those declared with
/// `CREATE INDEX` (`PostgresStore+Indexes.swift`) and those the hubs make for the paths
/// queries filter on (`PostgresStore+AutomaticIndexes.swift`), as SQLite's store does.
extension PostgresStore: DocumentDatabase, QuerySnapshots {
    /// Every read goes to the pool: none runs on the caller's thread.
    package var shortAccess: Duration { .zero }

    package func perform(
        _ text: String, arguments: [String: Value], hint: String?, isReadOnly: Bool, deadline: Deadline?
    ) async throws(ShoalError) -> QueryResult {
        let statements = try parse(text)
        if isReadOnly, let first = statements.first(where: \.isMutation) {
            throw ShoalError(.readOnly, "\(first.summary) writes, but this transaction is read-only")
        }
        do {
            guard statements.contains(where: \.isMutation) else {
                // Listed while it runs, for the long-transaction log, as on a node.
                let token = try register(TransactionInfo(id: LocalWriteRules.randomID(), hint: hint, isReadOnly: true))
                defer { running.unregister(token) }
                // `ALTER SYSTEM` and `SHOW` alone need nothing of the database, which may be
                // out of reach when an operator most needs to change a limit.
                let systems = statements.compactMap { if case .system(let system) = $0 { system } else { nil } }
                if systems.count == statements.count {
                    var last = QueryResult()
                    for system in systems { last = QueryResult(items: try show(system, arguments: arguments)) }
                    return last
                }
                return try await snapshot("running a query") { connection in
                    try await self.read(statements, arguments: arguments, connection: connection)
                }
            }
            let info = TransactionInfo(id: LocalWriteRules.randomID(), hint: hint, isReadOnly: false)
            var result = QueryResult()
            let id = try await write(info, deadline: deadline) { transaction throws(ShoalError) in
                result = try await transaction.run(statements, arguments: arguments)
                return .commit
            }
            result.transactionID = id
            return result
        } catch {
            throw error.locating(in: text)
        }
    }

    nonisolated(nonsending) package func performTransaction<T>(
        hint: String?, isReadOnly: Bool, _ body: (any DocumentTransaction) async throws -> (T, TransactionCompletion)
    ) async throws(ShoalError) -> (value: T, info: TransactionInfo, transactionID: TransactionID?) {
        let info = TransactionInfo(id: LocalWriteRules.randomID(), hint: hint, isReadOnly: isReadOnly)
        var value: T?
        var failure: (any Error)?
        let id: TransactionID?
        if isReadOnly {
            let token = try register(info)
            defer { running.unregister(token) }
            try await snapshot("running \(info.described)") { connection in
                let transaction = PostgresDocumentTransaction(store: self, info: info, mode: .reading(connection))
                defer { transaction.end() }
                do {
                    value = try await body(transaction).0
                } catch {
                    failure = error
                }
            }
            id = nil
        } else {
            id = try await write(info, deadline: nil) { transaction throws(ShoalError) in
                do {
                    let (result, completion) = try await body(transaction)
                    value = result
                    return completion
                } catch {
                    failure = error
                    return .rollback
                }
            }
        }
        if let failure { throw ShoalError(thrownByTransactionBody: failure, info) }
        guard let value else { throw ShoalError(.database, "\(info.described) ended without a value") }
        return (value, info, id)
    }

    /// Lists a transaction as running (`runningTransactions`, the long-transaction log)
    /// until `running.unregister` is called with the token returned.
    func register(_ info: TransactionInfo) throws(ShoalError) -> Int {
        guard let token = running.register(info, nested: true) else { throw ShoalError(.closed, "the store is closed") }
        return token
    }

    /// Runs `body` as a read-write transaction, the hubs' one writer, and commits what it
    /// wrote unless it says `.rollback`; returns the ID it committed under (nil when it
    /// wrote nothing or rolled back).
    nonisolated(nonsending) func write(
        _ info: TransactionInfo, deadline: Deadline?,
        _ body: (PostgresDocumentTransaction) async throws(ShoalError) -> TransactionCompletion
    ) async throws(ShoalError) -> TransactionID? {
        let marks = OpenTransactions.marks
        try OpenTransactions.refuseWrite(beside: marks, of: self)
        let token = try register(info)
        defer { running.unregister(token) }
        do {
            try await gate.acquire(deadline: deadline?.instant)
        } catch WriteGate.Refusal.deadlinePassed {
            throw deadline?.exceeded(.waitingForWriter) ?? ShoalError(.closed, "the store is closed")
        } catch is WriteGate.Refusal {
            throw ShoalError(.closed, "the store is closed")
        } catch {
            throw ShoalError(.cancelled, "cancelled while waiting for the store's writer")
        }
        defer { gate.release() }
        let inside = marks + [OpenTransactions.Mark(store: ObjectIdentifier(self), info: info)]
        var committed: (id: TransactionID, collections: Set<String>)?
        var transaction: PostgresDocumentTransaction?
        var committing: ContinuousClock.Instant?
        let (_, writer) = try await withWriter("running \(info.described)", deadline: deadline) { writer in
            let running = try await PostgresDocumentTransaction.begin(store: self, info: info, writer: writer)
            transaction = running
            defer { running.end() }
            let completion = try await OpenTransactions.$marks.withValue(inside) { () async throws(ShoalError) in
                try await body(running)
            }
            guard completion == .commit else {
                writer.discarded = true
                return
            }
            try (running.deadline ?? deadline)?.check(.beforeCommit)
            // Closed meanwhile (`shutdown()` called inside the body): nothing is kept.
            guard !gate.isClosed else {
                throw ShoalError(.closed, "the store closed while \(info.described) ran: nothing of it was kept")
            }
            committing = ContinuousClock.now
            committed = try await running.commit()
        }
        guard let committed, let last = writer.lastSequence else { return nil }
        // Timed as on SQLite: logging the deltas and COMMIT.
        if let committing { commitDuration.withLock { $0 }?.record(duration: ContinuousClock.now - committing) }
        transaction?.committed(as: committed.id)
        localCommits.withLock { $0 += 1 }
        publish(LogEnd(sequence: last, appended: writer.appended))
        await announcer.committed(
            Commit(transactions: [committed.id], collections: committed.collections, sequence: last), after: writer.appended.after)
        return committed.id
    }

    // MARK: Reads

    /// Runs statements that only read, on one snapshot; the result is the last one's.
    func read(_ statements: [ShoalQuery.Statement], arguments: [String: Value], connection: HubConnection) async throws
        -> QueryResult
    {
        var last = QueryResult()
        for statement in statements {
            switch statement {
            case .select(let select):
                last = QueryResult(
                    items: try await Self.select(select, arguments: arguments, connection: connection, asking: self, logger: logger))
            case .system(let system):
                last = QueryResult(items: try show(system, arguments: arguments))
            case .index(.show):
                last = QueryResult(items: try await Self.showIndexes(connection, logger: logger))
            default:
                throw Self.notOnAHub(statement)
            }
        }
        return last
    }

    /// `ALTER SYSTEM SET` or `SHOW` on this hub's parameters: in memory, at once, as a
    /// node's. They are the hub process's own, as its `shoal run` flags are: a change
    /// lasts until it stops, and the other hubs keep theirs.
    func show(_ statement: SystemStatement, arguments: [String: Value]) throws(ShoalError) -> [Value] {
        do throws(QueryError) {
            return try parameters.withLock { parameters throws(QueryError) in
                try parameters.apply(statement, arguments: arguments)
            }
        } catch {
            throw ShoalError(error)
        }
    }

    /// A SELECT's answer, from the live bodies of its collection (or of the one document
    /// an `_id = constant` names), read in key order until enough match.
    static func select(
        _ select: SelectStatement, arguments: [String: Value], connection: HubConnection, asking store: PostgresStore? = nil,
        logger: Logger
    ) async throws -> [Value] {
        let isCount = DocumentMatch.isCount(select)
        var match = try DocumentMatch(
            predicate: select.whereClause, orderBy: isCount ? [] : select.orderBy, limit: isCount ? nil : select.limit,
            offset: isCount ? nil : select.offset, arguments: arguments)
        if match.wantsMore {
            let only = Evaluator.constantIDEquality(select.whereClause, arguments: arguments).map(DocumentKey.make)
            let filter = only == nil ? PreFilter.make(select.whereClause, arguments: arguments, rules: PostgresFilter.rules) : nil
            store?.askForIndexes(collection: select.collection, filter: filter)
            try await liveBodies(
                connection, of: select.collection, only: only, filter: filter,
                perQuery: Self.rowsPerQuery(enough: match.enough, filtered: filter != nil),
                unfilteredPerQuery: Self.rowsPerQuery(enough: match.enough, filtered: false), logger: logger
            ) { key, body in
                // A body stored past the limits (by an older version) is left out: it has nothing true to show.
                try match.offer(key: key, body: { body }, unreadable: { _ in })
                return match.wantsMore
            }
        }
        return try DocumentMatch.items(try match.finish().map(\.body), select, arguments: arguments)
    }

    /// How many live bodies one query of `liveBodies` reads: a reader that needs a few
    /// documents (a LIMIT, a page) reads a few, and no more than this many are read past
    /// what it needs. PostgresNIO reads a query's rows to its end even when its caller
    /// stopped, so a query per step is what bounds the reading.
    static let bodyRowsPerQuery = 128

    /// How many bodies a SELECT reads a query (nil: all in one), given the most matches
    /// that are `enough` (a LIMIT without ORDER BY) and whether a filter narrows it.
    ///
    /// - A LIMIT: as many rows as it needs, at least `bodyRowsPerQuery`, a query.
    /// - Else, unfiltered: pages of 1,024 along the primary key, so that the bodies of a
    ///   large collection are never all in memory at once.
    /// - Else, filtered: one query. A page PostgreSQL checks without an index scans the
    ///   collection from its cursor, and the planner, which cannot tell how much the
    ///   filter keeps, may sort the whole of what it keeps for each page: measured at
    ///   2.6 s for one document in 21 of 100,000 in pages of 128, 0.12–0.21 s in one query.
    ///   What a filter keeps the match holds anyway.
    static func rowsPerQuery(enough: Int?, filtered: Bool) -> Int? {
        if let enough { return max(enough, bodyRowsPerQuery) }
        return filtered ? nil : 1_024
    }

    /// Hands `take` the live bodies of `collection` (or of the one document `only`) whose
    /// key sorts after `after` and that `filter` keeps, in key order, `perQuery` a query
    /// (nil: all in one), until it returns false or none is left. Where no filter is
    /// used (none given, or the filter dropped), `unfilteredPerQuery` a query, if given.
    ///
    /// A filter is only a narrowing: should PostgreSQL fail to check it on some body (a
    /// data exception, SQLSTATE class 22), the rest is read without it, and the caller's
    /// exact match decides as it would have. So `connection` must be inside a database
    /// transaction, where a savepoint taken before the first filtered read lets the
    /// transaction go on after such a failure.
    static func liveBodies(
        _ connection: HubConnection, of collection: String, only: String? = nil, after: String = "", filter: PreFilter? = nil,
        perQuery: Int? = bodyRowsPerQuery, unfilteredPerQuery: Int?? = nil, logger: Logger,
        _ take: (_ key: String, _ body: String) throws -> Bool
    ) async throws {
        var cursor = after
        // SQL text cannot hold U+0000, nor so a collection name written into it.
        var filter = only == nil && !collection.utf8.contains(0) ? filter : nil
        // Read without a filter, a query is as many rows as `unfilteredPerQuery` says.
        var perQuery = filter == nil ? unfilteredPerQuery ?? perQuery : perQuery
        let saved = filter != nil
        if saved { try await connection.query("SAVEPOINT shoal_filter", logger: logger) }
        while true {
            let rows: [PostgresRow]
            do {
                rows = try await connection.query(
                    bodiesQuery(of: collection, only: only, after: cursor, filter: filter, perQuery: perQuery), logger: logger)
            } catch let error as PSQLError where filter != nil && error.serverInfo?[.sqlState]?.hasPrefix("22") == true {
                logger.warning(
                    "PostgreSQL could not check a query's filter on a document of \(collection); reading the rest of the collection unfiltered",
                    metadata: ["shoal.collection": "\(collection)", "shoal.error": "\(error.serverInfo?[.message] ?? "\(error)")"])
                try await connection.query("ROLLBACK TO SAVEPOINT shoal_filter", logger: logger)
                filter = nil
                perQuery = unfilteredPerQuery ?? perQuery
                continue
            }
            var read = 0
            var more = true
            for (key, body) in try rows.decode((String, String).self) {
                read += 1
                cursor = key
                more = try take(key, body)
                if !more { break }
            }
            guard more, let perQuery, read == perQuery, only == nil else { break }
        }
        // Each filtered read would otherwise leave a subtransaction open until its
        // transaction ends, and a transaction of many reads, a stack of them.
        if saved { try await connection.query("RELEASE SAVEPOINT shoal_filter", logger: logger) }
    }

    /// One query of `liveBodies`: the live bodies of `collection` (or of the one document
    /// `only`) whose key sorts after `after` and that `filter` keeps, in key order.
    static func bodiesQuery(of collection: String, only: String?, after: String, filter: PreFilter?, perQuery: Int?) -> PostgresQuery {
        var binds = PostgresBindings()
        binds.append(collection)
        binds.append(after)
        var conditions = "collection = $1 AND NOT deleted AND doc_id > $2"
        if let only {
            binds.append(only)
            conditions += " AND doc_id = $3"
        } else if let filter {
            // The collection written out too, for the planner to prove that a declared
            // index, which holds one collection's live documents, serves the query even
            // in a plan made for any value of $1.
            conditions += " AND collection = \(PostgresFilter.literal(collection)) AND "
                + PostgresFilter.condition(filter, binds: &binds)
        }
        return PostgresQuery(
            unsafeSQL: "SELECT doc_id, body FROM document WHERE \(conditions) ORDER BY doc_id"
                + (perQuery.map { " LIMIT \($0)" } ?? ""), binds: binds)
    }

    /// An observed query's result and the log's end it reflects, from one snapshot.
    package func snapshot(
        _ select: SelectStatement, arguments: [String: Value], inline: Bool
    ) async throws(ShoalError) -> ([Value], UInt64) {
        try await snapshot("reading an observed query") { connection in
            let items = try await Self.select(select, arguments: arguments, connection: connection, asking: self, logger: self.logger)
            return (items, try await Self.meta(connection, "log_end", logger: self.logger))
        }
    }

    // MARK: Observers

    package func observe(_ query: String, arguments: [String: Value]) throws(ShoalError) -> QueryUpdates {
        // What a hub refuses of any statement (a collection it cannot name), refused here too.
        _ = try parse(query)
        return try QueryUpdates(observing: query, arguments: arguments, on: self, commits: commits)
    }

    package func registerObserver(
        _ query: String, arguments: [String: Value], handler: @escaping @Sendable (QueryUpdate) -> Void
    ) throws(ShoalError) -> StoreObserver {
        try liveObservers.register(observe(query, arguments: arguments), query: query, arguments: arguments, handler: handler)
    }

    package var observers: [StoreObserver] { liveObservers.list }

    // MARK: Statements

    /// Refuses `text` (what `what` names) when it holds U+0000, which PostgreSQL's `TEXT`
    /// cannot hold: the one error for every such input a hub takes from a client.
    static func refuseNul(_ text: String, _ what: String) throws(ShoalError) {
        guard text.utf8.contains(0) else { return }
        throw ShoalError(.invalidQuery, "\(what) holds U+0000, which a hub on PostgreSQL cannot store (its text holds no U+0000)")
    }

    /// The statements of a DQL text, from the cache when it was parsed lately.
    func parse(_ text: String) throws(ShoalError) -> [ShoalQuery.Statement] {
        if let statements = parsed.withLock({ $0.statements(of: text) }) { return statements }
        let statements: [ShoalQuery.Statement]
        do throws(QueryError) {
            statements = try Parser.parse(text)
        } catch {
            throw ShoalError(error)
        }
        for statement in statements {
            // Such a collection can hold nothing here.
            try Self.refuseNul(statement.targetCollection ?? "", "a collection's name")
        }
        parsed.withLock { $0.remember(statements, of: text) }
        return statements
    }

    /// The error of a statement a hub does not run.
    static func notOnAHub(_ statement: ShoalQuery.Statement) -> ShoalError {
        switch statement {
        case .evict:
            ShoalError(
                .invalidQuery,
                "\(statement.summary): a hub does not evict, since the devices behind it count on it to hold what they sync; delete the documents, or evict them on a device")
        default:
            ShoalError(.invalidQuery, "\(statement.summary) is not offered on a hub (PostgreSQL) yet; run it on a device's node")
        }
    }
}

/// A transaction on a hub, handed to the body of `DocumentDatabase.transaction`: reads
/// on one snapshot, or writes as the hubs' one writer (`PostgresStore.write`).
///
/// Unchecked: `state` is behind its lock; `mode`'s connection or writer is used by one
/// `run` at a time (`calls`), and by the commit after the body returned.
final class PostgresDocumentTransaction: DocumentTransaction, @unchecked Sendable {
    enum Mode {
        case reading(HubConnection)
        case writing(PostgresInboundWriter, sequence: UInt64)
    }

    /// What the statements wrote so far.
    private struct Writes {
        var rows = PostgresDocumentRows()
        var pending: [LocalDelta] = []
        var mutated = MutatedDocuments()
        var collections: Set<String> = []
    }

    private struct State {
        var writes = Writes()
        var ended = false
        var committed: TransactionID?
        var deadline: Deadline?
    }

    let store: PostgresStore
    let info: TransactionInfo
    let mode: Mode
    private let state = Locked(State())
    /// One `run` at a time: a body may call `execute` from several tasks, and each call
    /// reads ahead on the one connection and carries the writes on from the last.
    private let calls = WriteGate()

    init(store: PostgresStore, info: TransactionInfo, mode: Mode) {
        self.store = store
        self.info = info
        self.mode = mode
    }

    /// A read-write transaction on `writer`: numbered after the last one any hub
    /// committed, its clock above every timestamp any hub wrote.
    static func begin(store: PostgresStore, info: TransactionInfo, writer: PostgresInboundWriter) async throws(ShoalError)
        -> PostgresDocumentTransaction
    {
        let counter = try await writer.meta("transaction_counter")
        // The hubs' own high-water, adopted however far ahead of this hub's wall clock.
        store.clock.restore(HybridTimestamp(rawValue: UInt64(bitPattern: try await writer.meta("clock"))))
        return PostgresDocumentTransaction(
            store: store, info: info, mode: .writing(writer, sequence: UInt64(bitPattern: counter) &+ 1))
    }

    var transactionID: TransactionID? { state.withLock { $0.committed } }

    /// The deadline `PostgresStore.write` checks right before the commit.
    func mustCommit(before deadline: Deadline) { state.withLock { $0.deadline = deadline } }

    var deadline: Deadline? { state.withLock { $0.deadline } }

    func end() {
        state.withLock { $0.ended = true }
        calls.close(admittingNested: false)
    }

    /// Its ID, once the database committed it.
    func committed(as id: TransactionID) { state.withLock { $0.committed = id } }

    func execute(_ dql: String, arguments: [String: Value]) async throws(ShoalError) -> QueryResult {
        do {
            return try await run(try store.parse(dql), arguments: arguments)
        } catch {
            throw error.locating(in: dql)
        }
    }

    /// Runs statements in this transaction; the result is the last one's. A statement
    /// that fails undoes what this call wrote, and nothing before it.
    func run(_ statements: [ShoalQuery.Statement], arguments: [String: Value]) async throws(ShoalError) -> QueryResult {
        let ended = ShoalError(.closed, "\(info.described) has ended: run statements inside its closure")
        guard !state.withLock({ $0.ended }) else { throw ended }
        do {
            try await calls.acquire(cancellable: false)
        } catch {
            throw ended
        }
        defer { calls.release() }
        switch mode {
        case .reading(let connection):
            if let first = statements.first(where: \.isMutation) {
                throw ShoalError(.readOnly, "\(first.summary) writes, but this transaction is read-only")
            }
            return try await store.failing("running a query") {
                try await store.read(statements, arguments: arguments, connection: connection)
            }
        case .writing(let writer, let sequence):
            // Refused before anything is read ahead under the writer's lock.
            if let refused = statements.first(where: { if case .evict = $0 { true } else { false } }) {
                throw PostgresStore.notOnAHub(refused)
            }
            // Document writes wait in `current` until the commit; what an index statement
            // does is in the database transaction at once, so a call that runs one takes a
            // savepoint, to undo only itself should it fail.
            let savepoint = statements.contains(where: \.changesIndexes)
            if savepoint { try await writer.savepoint("shoal_execute") }
            do {
                let result = try await write(statements, arguments: arguments, writer: writer, sequence: sequence, ended: ended)
                if savepoint { try await writer.release("shoal_execute") }
                return result
            } catch {
                // Whatever failed, the database transaction is as it was before the call; a
                // failure to undo leaves the writer aborted, so that it cannot commit.
                if savepoint { await writer.undo(to: "shoal_execute") }
                throw error
            }
        }
    }

    /// Refuses a statement whose writes name a document the hub cannot index
    /// (`DocumentLimits.keyBytes`): nothing of the statement is written.
    static func checkKeys(_ written: ArraySlice<LocalDelta>, limits: DocumentLimits) throws(ShoalError) {
        for delta in written {
            if let refusal = limits.keyRefusal(collection: delta.collection, id: delta.key, fields: [delta.field]) {
                throw ShoalError(
                    .tooLarge, "document \(delta.key) in \(delta.collection) cannot be written: \(refusal); nothing of the statement was written")
            }
        }
    }

    /// Runs statements as the hubs' one writer: document writes in memory until the
    /// commit (`state.writes`), index statements in the database transaction.
    private func write(
        _ statements: [ShoalQuery.Statement], arguments: [String: Value], writer: PostgresInboundWriter, sequence: UInt64,
        ended: ShoalError
    ) async throws(ShoalError) -> QueryResult {
        var current = state.withLock { $0.writes }
        var last = QueryResult()
        for statement in statements {
            let documents = try await current.rows.readAhead(statement, arguments: arguments, writer: writer)
            var writes = LocalWrites(
                rows: current.rows, site: store.siteID, counterSite: store.counterSite, clock: store.clock, sequence: sequence,
                pending: current.pending)
            switch statement {
            case .select(let select):
                last = QueryResult(items: try Self.select(select, arguments: arguments, rows: current.rows))
            case .insert(let insert):
                last = QueryResult(mutatedDocumentIDs: try Self.rethrowing { try writes.insert(insert, documents: documents) })
            case .update(let update):
                last = QueryResult(mutatedDocumentIDs: try Self.rethrowing { try writes.update(update, arguments: arguments) })
            case .delete(let delete):
                last = QueryResult(mutatedDocumentIDs: try Self.rethrowing { try writes.delete(delete, arguments: arguments) })
            case .system(let system):
                last = QueryResult(items: try store.show(system, arguments: arguments))
            case .index(let index):
                last = QueryResult(items: try await store.runIndexStatement(index, writer: writer))
            case .evict:
                throw PostgresStore.notOnAHub(statement)
            }
            try store.systemParameters.checkDocumentSizes(writes.takeWrittenBodies(), logger: store.logger)
            try Self.checkKeys(writes.pending[current.pending.count...], limits: store.documentLimits)
            if statement.writesDocuments, let collection = statement.targetCollection {
                current.collections.insert(collection)
                current.mutated.add(last.mutatedDocumentIDs, collection: collection)
            }
            current.rows = writes.rows
            current.pending = writes.pending
        }
        last.mutatedDocumentIDs = current.mutated.ids
        try state.withLock { s throws(ShoalError) in
            guard !s.ended else { throw ended }
            s.writes = current
        }
        return last
    }

    /// A SELECT inside a read-write transaction: over what it read and wrote, so that it
    /// sees its own writes.
    static func select(_ select: SelectStatement, arguments: [String: Value], rows: PostgresDocumentRows) throws(ShoalError) -> [Value] {
        let isCount = DocumentMatch.isCount(select)
        let matches = try rethrowing {
            try rows.matching(
                collection: select.collection, predicate: select.whereClause, orderBy: isCount ? [] : select.orderBy,
                limit: isCount ? nil : select.limit, offset: isCount ? nil : select.offset, arguments: arguments,
                unreadable: { _ in })
        }
        return try DocumentMatch.items(matches.map(\.body), select, arguments: arguments)
    }

    /// Writes what the transaction wrote, as one apply, with its number and clock;
    /// returns its ID and the collections it wrote, nil when it wrote nothing.
    func commit() async throws(ShoalError) -> (id: TransactionID, collections: Set<String>)? {
        guard case .writing(let writer, let sequence) = mode else { return nil }
        let current = state.withLock { $0.writes }
        guard !current.pending.isEmpty else { return nil }
        let id = TransactionID(origin: store.siteID, sequence: sequence)
        try await writer.write(try Self.rethrowing { try current.rows.appliedRows(id, pending: current.pending) })
        try await writer.setMeta("transaction_counter", Int64(bitPattern: sequence))
        try await writer.setMeta("clock", Int64(bitPattern: store.clock.current.rawValue), raising: true)
        return (id, current.collections)
    }

    /// Runs `body`, whose errors are the store's (`LocalRows` throws untyped).
    static func rethrowing<T>(_ body: () throws -> T) throws(ShoalError) -> T {
        do {
            return try body()
        } catch let error as ShoalError {
            throw error
        } catch {
            throw ShoalError(.database, "a hub's write failed: \(error)")
        }
    }
}

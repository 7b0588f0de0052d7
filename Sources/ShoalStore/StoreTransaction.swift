public import ShoalCRDT
public import ShoalStorage
public import ShoalQuery
import GRDB
import Metrics

/// An open transaction of a `DocumentStore`, handed to the body of `store.transaction`.
///
/// A read-write transaction holds the store's writer (an SQLite transaction begun
/// with `BEGIN IMMEDIATE`) from before the body runs until it commits or rolls back,
/// so it is serializable: nothing else writes in between. Every `execute` adds to
/// the same local transaction, which gets one `TransactionID` at commit, with all
/// of its deltas under that ID. A statement that fails undoes only its own
/// `execute` call (each runs in a SAVEPOINT): a body that catches the error may go
/// on and commit the rest. Only if the database itself abandoned the transaction
/// (an I/O error, or a cancelled task interrupting a statement) can it no longer
/// commit.
///
/// A read-only transaction reads one snapshot of the database, taken when it
/// starts, for its whole life, concurrently with the writer and with other
/// readers; a statement that writes is refused.
///
/// `execute` may be called from child tasks of the body (calls run one at a time,
/// in the order they reach the writer); calling it after the transaction ended
/// throws `ShoalError.Code.closed`.
public final class StoreTransaction: DocumentTransaction {
    public let info: TransactionInfo
    let store: DocumentStore

    enum Phase: Sendable {
        case open
        /// The database rolled the SQLite transaction back, or could not undo a statement.
        case aborted(ShoalError)
        case committed
        case rolledBack
    }

    struct State: Sendable {
        var phase = Phase.open
        /// A read-write transaction's writes so far (nil until `begin`).
        var progress: LocalTransaction.Progress?
        /// A read-only transaction's snapshot, released when it ends.
        var snapshot: DatabaseSnapshot?
        /// The collections that statements which completed wrote.
        var written: Set<String> = []
        /// Indexes created inside the transaction: the store knows of them once it commits.
        var newIndexes: Set<String> = []
        /// Whether a statement created or dropped a declared index.
        var changedIndexes = false
        var transactionID: TransactionID?
        /// The commit must happen before it (`mustCommit(before:)`).
        var deadline: Deadline?
    }

    let state: Locked<State>

    init(info: TransactionInfo, store: DocumentStore, snapshot: DatabaseSnapshot?) {
        self.info = info
        self.store = store
        self.state = Locked(State(snapshot: snapshot))
    }

    /// The ID this transaction committed under; nil until it commits, and nil for a
    /// read-only transaction or one that wrote nothing.
    public var transactionID: TransactionID? { state.withLock { $0.transactionID } }

    /// Lets this transaction commit only before `deadline`: checked right before
    /// COMMIT, where it can still be abandoned whole. Past it the commit throws
    /// `ShoalError.Code.deadlineExceeded` and the transaction rolls back.
    public func mustCommit(before deadline: Deadline) {
        state.withLock { $0.deadline = deadline }
    }

    /// Parses and runs one or more `;`-separated DQL statements in this transaction;
    /// the result is the last statement's.
    ///
    /// Results carry no `transactionID`: the transaction has none before it commits
    /// (see `transactionID` and `TransactionResult`).
    public func execute(_ dql: String, arguments: [String: Value]) async throws(ShoalError) -> QueryResult {
        let parsed: [ParsedStatement]
        do throws(QueryError) {
            parsed = try Parser.parseStatements(dql)
        } catch {
            throw ShoalError(error)
        }
        do {
            return try await run(parsed.map(\.statement), sources: parsed, arguments: arguments)
        } catch {
            throw error.locating(in: dql)
        }
    }

    /// Runs parsed statements in this transaction; the result is the last statement's.
    public func execute(_ statements: [ShoalQuery.Statement], arguments: [String: Value] = [:]) async throws(ShoalError)
        -> QueryResult
    {
        try await run(statements, sources: nil, arguments: arguments)
    }

    func run(_ statements: [ShoalQuery.Statement], sources: [ParsedStatement]?, arguments: [String: Value])
        async throws(ShoalError) -> QueryResult
    {
        if info.isReadOnly {
            try refuseMutations(statements, sources: sources)
            let snapshot = try state.withLock { s throws(ShoalError) -> DatabaseSnapshot in
                guard case .open = s.phase, let snapshot = s.snapshot else { throw unusable(s.phase) }
                return snapshot
            }
            await store.createIndexesIfWriterIsFree(for: statements, arguments: arguments)
            do {
                return try await snapshot.read { [store] db in
                    var none: LocalTransaction?
                    return try store.run(statements, arguments: arguments, db: db, local: &none).result
                }
            } catch {
                throw ShoalError.wrapping(error, "reading in \(info.described)")
            }
        }
        let missing = store.missingIndexPaths(
            for: statements, arguments: arguments, besides: state.withLock { $0.newIndexes })
        do {
            // The writer's queue runs one access at a time, so the progress read at the
            // start of this access is still current when it is stored back at its end.
            // After a quick one, the next runs on this thread (`DocumentStore.quickWrite`).
            let work: @Sendable (Database) throws -> QueryResult = { [store] db in
                let progress = try self.state.withLock { s throws(ShoalError) -> LocalTransaction.Progress in
                    guard case .open = s.phase, let progress = s.progress else { throw self.unusable(s.phase) }
                    return progress
                }
                try db.execute(sql: "SAVEPOINT shoal_execute")
                var local: LocalTransaction? = LocalTransaction(
                    db: db, site: store.siteID, counterSite: store.counterSite, clock: store.clock, progress: progress)
                do {
                    let created = store.createIndexes(missing, db: db)
                    let (result, written) = try store.run(statements, arguments: arguments, db: db, local: &local)
                    try db.execute(sql: "RELEASE SAVEPOINT shoal_execute")
                    self.state.withLock { s in
                        s.progress = local?.progress
                        s.written.formUnion(written)
                        s.newIndexes.formUnion(created)
                        s.changedIndexes = s.changedIndexes || statements.contains(where: \.changesIndexes)
                    }
                    return result
                } catch {
                    self.undoStatements(db, after: error)
                    throw error
                }
            }
            return try await store.quickWrite(work)
        } catch {
            throw ShoalError.wrapping(error, "running a statement in \(info.described)")
        }
    }

    /// Undoes what the failed `execute` did, and only that; if the database already
    /// abandoned the whole transaction (or refuses to undo), the transaction is aborted.
    private func undoStatements(_ db: Database, after error: any Error) {
        do {
            try db.execute(sql: "ROLLBACK TO SAVEPOINT shoal_execute")
            try db.execute(sql: "RELEASE SAVEPOINT shoal_execute")
            if db.isInsideTransaction { return }
        } catch {}
        let reason = ShoalError.wrapping(error, "running a statement")
        state.withLock { s in
            if case .open = s.phase { s.phase = .aborted(reason) }
        }
    }

    /// A read-only transaction refuses the whole request when any statement writes,
    /// naming the first that does.
    private func refuseMutations(_ statements: [ShoalQuery.Statement], sources: [ParsedStatement]?) throws(ShoalError) {
        try Self.refuseMutations(statements, sources: sources, info: info)
    }

    /// Throws, naming the first statement that writes, if any does (see the method).
    static func refuseMutations(
        _ statements: [ShoalQuery.Statement], sources: [ParsedStatement]?, info: TransactionInfo
    ) throws(ShoalError) {
        guard let index = statements.firstIndex(where: \.isMutation) else { return }
        let source = sources.map { $0[index] }
        let named = source?.text ?? statements[index].summary
        let message =
            "\(named) writes, but it runs in \(info.described); "
            + "nothing ran: run it in a read-write transaction"
        guard let source else { throw ShoalError(.readOnly, message) }
        let error = QueryError(message, position: source.position)
        throw ShoalError(.readOnly, error.description, queryError: error)
    }

    /// Why this transaction takes no more statements.
    private func unusable(_ phase: Phase) -> ShoalError {
        switch phase {
        case .open:
            return ShoalError(.closed, "\(info.described) has no database access (it never began)")
        case .aborted(let reason):
            return ShoalError(
                reason.code,
                "\(info.described) was abandoned by the database after an error and can only roll back: \(reason.message)")
        case .committed:
            return ShoalError(
                .closed, "\(info.described) has already \(info.isReadOnly ? "ended" : "committed"): start a new one")
        case .rolledBack:
            return ShoalError(
                .closed, "\(info.described) has already \(info.isReadOnly ? "ended" : "rolled back"): start a new one")
        }
    }

    /// `BEGIN IMMEDIATE`, and the number the transaction will commit under: two short
    /// statements, run on this thread (the gate is held, so the writer's queue is idle).
    func begin() throws(ShoalError) {
        do {
            let progress = try DocumentStore.writeHere(store.pool, transaction: false) { db in
                try DocumentStore.beginImmediate(db)
                return try LocalTransaction.begin(db: db)
            }
            state.withLock { $0.progress = progress }
        } catch {
            // BEGIN may have run before the access failed.
            store.rollBackOpenTransaction()
            throw ShoalError.wrapping(error, "beginning a read-write transaction")
        }
    }

    /// Logs the deltas under one transaction ID, commits, and tells observers.
    func commit() async throws(ShoalError) {
        let (progress, written, newIndexes, changedIndexes, deadline) = try state.withLock { s throws(ShoalError) in
            guard case .open = s.phase, let progress = s.progress else { throw unusable(s.phase) }
            return (progress, s.written, s.newIndexes, s.changedIndexes, s.deadline)
        }
        let committed: (transaction: TransactionID, lastSequence: UInt64, appended: LogEnd.Appended)?
        let started = ContinuousClock.now
        // Logging what the statements wrote takes about as long as writing it did: when
        // they were quick, the commit runs on this thread too.
        do {
            let work: @Sendable (Database) throws -> (transaction: TransactionID, lastSequence: UInt64, appended: LogEnd.Appended)? = {
                [store] db in
                let local = LocalTransaction(db: db, site: store.siteID, counterSite: store.counterSite, clock: store.clock, progress: progress)
                let committed = try local.finish()
                store.refreshStatisticsIfGrown(db, logged: committed?.appended.documents ?? 0)
                try deadline?.check(.beforeCommit)
                try db.cachedStatement(sql: "COMMIT").execute()
                return committed
            }
            committed = try await store.quickWrite(timed: false, work)
        } catch {
            throw ShoalError.wrapping(error, "committing \(info.described)")
        }
        if committed != nil { store.commitDuration?.record(duration: ContinuousClock.now - started) }
        state.withLock { s in
            s.phase = .committed
            s.transactionID = committed?.transaction
        }
        store.indexedPaths.withLock { $0.formUnion(newIndexes) }
        if changedIndexes { await store.reloadUserIndexes() }
        store.publish(
            transaction: committed?.transaction, lastSequence: committed?.lastSequence, appended: committed?.appended,
            evicted: progress.evicted, collections: written)
    }

    /// Rolls back whatever is still open. Never suspends, so a cancelled task cannot skip it.
    func rollBack() {
        let wasWriting = state.withLock { s -> Bool in
            s.snapshot = nil
            switch s.phase {
            case .committed, .rolledBack: return false
            case .open, .aborted:
                s.phase = .rolledBack
                return s.progress != nil
            }
        }
        if wasWriting { store.rollBackOpenTransaction() }
    }

    /// Ends a read-only transaction: its snapshot is released.
    func endReading(_ completion: TransactionCompletion) {
        state.withLock { s in
            s.snapshot = nil
            s.phase = completion == .commit ? .committed : .rolledBack
        }
    }
}

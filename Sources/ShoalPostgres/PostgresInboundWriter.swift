import Logging
import NIOCore
package import ShoalCRDT
package import ShoalStorage
import PostgresNIO

extension PostgresStore {
    /// Takes this hub's write gate, waiting as long as it takes; `gate.release()` after.
    func acquireGate() async throws(ShoalError) {
        do {
            try await gate.acquire()
        } catch is WriteGate.Refusal {
            throw ShoalError(.closed, "the store is closed")
        } catch {
            throw ShoalError(.cancelled, "cancelled while waiting for the store's writer")
        }
    }

    package func writeInbound<T: Sendable>(
        short: Bool, claim: InboundClaim?, _ body: @escaping @Sendable (any InboundWriting) async throws(ShoalError) -> T
    ) async throws(ShoalError) -> (T, ApplyOutcome) {
        let marks = OpenTransactions.marks
        try OpenTransactions.refuseWrite(beside: marks, of: self)
        try await acquireGate()
        defer { gate.release() }
        let inside = marks + [
            OpenTransactions.Mark(
                store: ObjectIdentifier(self), info: TransactionInfo(id: "inbound", hint: "received transactions", isReadOnly: false))
        ]
        // Side by side with the other hubs' batches when it names what it writes (a commit
        // of the coverage timer names nothing), and not so much that its locks would crowd
        // the server's lock table; as the one writer when it does not, or when it found it
        // must write more than it named.
        let sideBySide = claim.flatMap { $0.count <= mostClaimed ? $0 : nil }
        let needsOneWriter = Locked(false)
        let (result, writer): (T, PostgresInboundWriter)
        do {
            (result, writer) = try await withWriter("applying received transactions", claim: sideBySide, needsOneWriter: needsOneWriter) {
                writer in try await OpenTransactions.$marks.withValue(inside) { try await body(writer) }
            }
        } catch where needsOneWriter.withLock({ $0 }) {
            logger.debug(
                "a received batch could not commit beside the other hubs' (it had to write what it did not name, or the server's lock table was full): committed again as the one writer")
            (result, writer) = try await withWriter("applying received transactions") { writer in
                try await OpenTransactions.$marks.withValue(inside) { try await body(writer) }
            }
        }
        if let last = writer.lastSequence {
            publish(LogEnd(sequence: last, appended: writer.appended))
            await announcer.committed(
                Commit(transactions: writer.appended.transactions, collections: writer.appended.collections, sequence: last),
                after: writer.appended.after)
        }
        return (result, writer.outcome)
    }

    /// The most names a received batch may lock to commit beside other hubs' batches
    /// (`InboundClaim`), from the size of the server's lock table, which every session
    /// shares: `max_locks_per_transaction` (64 by default) times `max_connections` (100)
    /// and `max_prepared_transactions`, an eighth of it, so that several hubs' batches at
    /// their largest leave the rest to every other lock. A larger batch is the one writer.
    static func mostClaimed(lockTable: Int) -> Int { lockTable / 8 }

    /// The advisory lock of the hubs' writers: the one writer takes it exclusively, a
    /// received batch committing beside others shares it ("shoalWR" in ASCII).
    static let writersLock: Int64 = 0x73_68_6F_61_6C_57_52

    /// Runs `body` with a writer in one database transaction, and commits it; rolls it
    /// back when `body` or the commit throws.
    ///
    /// Without a `claim`, as the hubs' one writer: it holds the writers' advisory lock
    /// exclusively and `log_end`'s row lock from its start to its commit. With one, beside
    /// other hubs' received batches: it shares the writers' lock, locks the names the
    /// claim holds (sorted, in one statement, so that two such writers never wait on each
    /// other in a cycle), may write nothing else (it sets `needsOneWriter` and fails), and
    /// takes `log_end`'s lock only to number and insert its log rows, just before COMMIT,
    /// so that sequences are still committed in order.
    ///
    /// With a `deadline`, it waits for another hub's writer until then at most (the
    /// server's `lock_timeout`), and fails as `Deadline.exceeded(.waitingForWriter)`
    /// says: nothing written.
    nonisolated(nonsending) func withWriter<T: Sendable>(
        _ doing: String, deadline: Deadline? = nil, claim: InboundClaim? = nil, needsOneWriter: Locked<Bool> = Locked(false),
        _ body: (PostgresInboundWriter) async throws -> T
    ) async throws(ShoalError) -> (T, PostgresInboundWriter) {
        try await failing(doing) {
            try await database.withConnection { connection in
                let writer = PostgresInboundWriter(store: self, connection: connection, claim: claim, needsOneWriter: needsOneWriter)
                defer { writer.end() }
                do {
                    // Inside: a BEGIN whose answer was lost leaves the connection rolled back or closed.
                    try await connection.query("BEGIN ISOLATION LEVEL READ COMMITTED", logger: logger)
                    if let deadline {
                        let left = deadline.instant - ContinuousClock.now
                        guard left > .zero else { throw deadline.exceeded(.waitingForWriter) }
                        try await connection.query(
                            PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = '\(min(Int64(Int32.max), max(1, left.wholeMilliseconds)))ms'"),
                            logger: logger)
                    }
                    do {
                        // The writers' lock, and with it (no round trip of their own) the
                        // transaction's ID, its backend and the server's start: what a COMMIT
                        // whose answer is lost asks about (`commit`).
                        if let claim {
                            try writer.name(try await connection.query(PostgresTransactionName.taking("pg_advisory_xact_lock_shared", Self.writersLock), logger: logger))
                            // The two-key form: a key space of its own, which no name's hash can
                            // share with the writers' lock or the migrations'.
                            let keys = Array(Set(claim.lockKeys)).sorted()
                            if !keys.isEmpty {
                                try await connection.query(
                                    """
                                    SELECT count(pg_advisory_xact_lock(a, b))
                                    FROM UNNEST(\(keys.map(\.high))::integer[], \(keys.map(\.low))::integer[]) AS t(a, b)
                                    """, logger: logger)
                            }
                        } else {
                            try writer.name(try await connection.query(PostgresTransactionName.taking("pg_advisory_xact_lock", Self.writersLock), logger: logger))
                            let knew = known.withLock { $0 }
                            let found = try await writer.lockLogEnd(witness: knew.witness)
                            writer.logEnd = found.end
                            // Another hub's repair, heard or not yet (or a database that
                            // went back to an older epoch): what this write increments is
                            // named anew (DATA_MODEL.md §7).
                            if found.epoch != cursorEpoch.withLock({ $0 }) { forgotCursors(epoch: found.epoch, current: true) }
                            if knew.wentBack(end: found.end, there: found.there) { try await writer.repairWentBack(known: knew) }
                        }
                    } catch let error as PSQLError where deadline != nil && error.serverInfo?[.sqlState] == "55P03" {
                        // lock_not_available: another hub's writer held the lock past the deadline.
                        throw deadline!.exceeded(.waitingForWriter)
                    }
                    if deadline != nil { try await connection.query("SET LOCAL lock_timeout TO DEFAULT", logger: logger) }
                    let result = try await body(writer)
                    if writer.discarded {
                        // Nothing of it is kept: rolled back, whether or not a statement failed.
                        await connection.rollBack(logger: logger)
                        return (result, writer)
                    }
                    try await writer.settle()
                    if writer.aborted {
                        throw ShoalError(.database, "\(doing): a statement failed, and PostgreSQL rolled the write back; nothing of it was kept")
                    }
                    try await writer.insertLog()
                    if let last = writer.lastSequence {
                        // One round trip. The announcement is delivered when the transaction
                        // commits, and only then, in commit order.
                        try await connection.query(
                            """
                            WITH e AS (UPDATE shoal_meta SET value = \(Int64(last)) WHERE key = 'log_end' RETURNING value)
                            SELECT pg_notify(\(PostgresHubDatabase.logChannel), \(String(last))) FROM e
                            """, logger: logger)
                    }
                    try await commit(writer, on: connection, doing)
                    writer.keepMarks()
                    if let newest = writer.newest { known.withLock { $0.saw(newest, checked: writer.checked) } }
                    if let wentBack = writer.wentBack { repaired(wentBack, by: writer) }
                    return (result, writer)
                } catch {
                    // out_of_shared_memory: the server's lock table is full (many hubs'
                    // batches at once); a batch beside others waits its turn as the one writer.
                    if claim != nil, (error as? PSQLError)?.serverInfo?[.sqlState] == "53200" || writer.outOfLocks {
                        needsOneWriter.withLock { $0 = true }
                    }
                    await connection.rollBack(logger: logger)
                    throw error
                }
            }
        }
    }
}

extension PostgresStore {
    /// Sends the write's COMMIT. When the connection ends after it was sent and before
    /// PostgreSQL answered, the write may have committed or not: it returns if the
    /// database says it did, and fails as rolled back if it did not. A write reported
    /// failed that committed is written again by a caller that retries (an increment
    /// counted twice). Where the database cannot say, or cannot be asked, it fails as
    /// `.timedOut`: unknown.
    private func commit(_ writer: PostgresInboundWriter, on connection: HubConnection, _ doing: String) async throws {
        do {
            try await connection.query("COMMIT", logger: logger)
        } catch where Self.answerLost(error) {
            let lost = "the connection to \(database.location) ended before PostgreSQL answered the COMMIT (\(PostgresHubDatabase.describe(error)))"
            // Its server side then rolls back a transaction the COMMIT never reached.
            try? await connection.close()
            let outcome: Bool?
            do {
                outcome = try await committed(writer)
            } catch {
                throw ShoalError(
                    .timedOut,
                    "\(doing): \(lost), and the database could not be asked since (\(PostgresHubDatabase.describe(error))): whether the write committed is unknown; read what it wrote before writing it again"
                )
            }
            switch outcome {
            case true?:
                logger.notice("\(doing): \(lost); PostgreSQL says the write committed")
            case false?:
                throw ShoalError(.database, "\(doing): \(lost), and the write was rolled back: nothing of it was kept")
            case nil:
                throw ShoalError(
                    .timedOut,
                    "\(doing): \(lost): whether the write committed is unknown (PostgreSQL could not tell); read what it wrote before writing it again"
                )
            }
        }
    }

    /// Whether a statement's `error` may hide what the server did with it: no answer came
    /// (the connection ended after the statement was sent), or the answer ended the
    /// session (a FATAL or PANIC, a shutdown or crash, SQLSTATE classes 08, 57 and XX),
    /// which may come after a commit was made durable. An error the server answered and
    /// went on from rolled the transaction back; a statement never sent
    /// (`HubConnection.Closed`) never reached it, and its connection's end rolls it back.
    static func answerLost(_ error: any Error) -> Bool {
        if error is HubConnection.Closed { return false }
        guard let error = error as? PSQLError else { return true }
        guard let info = error.serverInfo else { return true }
        if let severity = info[.severity] ?? info[.localizedSeverity], severity == "FATAL" || severity == "PANIC" { return true }
        let state = info[.sqlState] ?? ""
        return state.hasPrefix("08") || state.hasPrefix("57") || state.hasPrefix("XX")
    }

    /// Whether the write whose COMMIT answer was lost committed, by what PostgreSQL says of
    /// its transaction (`pg_xact_status`); nil when it cannot tell. While the write's
    /// backend still holds it open and idle (the COMMIT never arrived, and the server has
    /// not yet found the connection gone, which across a network can take it a minute),
    /// that backend is ended, which rolls it back; one running its COMMIT (waiting for a
    /// synchronous standby, say) is left to finish it. A failover that lost the commit
    /// gives its ID again: "committed" counts only with the write's last log row where it
    /// put it, or, for a write that logged nothing, on the server that gave the ID.
    private func committed(_ writer: PostgresInboundWriter) async throws -> Bool? {
        guard let transaction = writer.transaction else { return nil }
        let asked = ContinuousClock.now
        while true {
            let (status, started): (String?, String?) = try await database.withConnection { connection in
                var found: (String?, String?) = (nil, nil)
                for row in try await connection.query(
                    "SELECT pg_xact_status(\(String(transaction.id))::xid8), pg_postmaster_start_time()::text", logger: logger
                ).decode((String?, String?).self) {
                    found = row
                }
                return found
            }
            switch status {
            case "committed":
                guard let newest = writer.newest else { return started == transaction.serverStarted ? true : nil }
                let found = try await database.withConnection { connection in
                    try await PostgresStore.readLogEnd(connection, witness: newest, lock: false, logger: logger)
                }
                if found.there == newest { return true }
                // Another row there, or a log that ends below it: never written. No row
                // (compacted, or moved by a repair since): the log cannot say.
                return found.there != nil || found.end < newest.sequence ? false : nil
            case "aborted":
                return false
            case "in progress":
                guard ContinuousClock.now - asked < .seconds(90) else { return nil }
                // Only while that backend still runs this transaction (a process ID is
                // reused) and waits for a statement that will never come.
                _ = try await database.withConnection { connection in
                    try await connection.query(
                        """
                        SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                        WHERE pid = \(transaction.backend) AND backend_xid::text = \(String(transaction.id & 0xFFFF_FFFF))
                        AND state IN ('idle in transaction', 'idle in transaction (aborted)')
                        """, logger: logger)
                }
                try await Task.sleep(for: .milliseconds(100))
            default:
                return nil
            }
        }
    }
}

/// A hub's database transaction as the server names it, read with the writers' lock
/// (`PostgresStore.withWriter`): what a COMMIT whose answer is lost asks about.
struct PostgresTransactionName: Sendable {
    /// Its ID (`xid8`).
    var id: UInt64
    /// The process of the backend that runs it.
    var backend: Int32
    /// When the server started (`pg_postmaster_start_time()`), as text: a server started
    /// since, a failover's, may have given the same ID to another transaction.
    var serverStarted: String

    /// Takes the advisory lock `key` with `function`, and reads the name, in one statement.
    static func taking(_ function: String, _ key: Int64) -> PostgresQuery {
        PostgresQuery(
            unsafeSQL: "SELECT \(function)(\(key)), pg_current_xact_id()::text, pg_backend_pid(), pg_postmaster_start_time()::text")
    }
}

/// The store operations of one inbound commit on PostgreSQL (`InboundWriting`), all in
/// the one database transaction `withWriter` began on `connection`.
///
/// Unchecked: its state is guarded by the store's write gate, which the writing task
/// holds for the writer's whole life, and by the contract's rule
/// that a body makes its calls one at a time, each awaited; after the write ends every
/// call throws (`ended`).
final class PostgresInboundWriter: InboundWriting, @unchecked Sendable {
    let store: PostgresStore
    let connection: HubConnection
    var logger: Logger { store.logger }
    /// What a received batch committing beside others locked, and all it may write; nil
    /// for the one writer, which may write anything (`withWriter`).
    let claim: InboundClaim?
    /// Set when the write had to write what its claim did not name.
    let needsOneWriter: Locked<Bool>
    /// The log's last sequence given out when the write began (`log_end`): for a write
    /// beside others, when it took `log_end`'s lock to insert its log rows.
    var logEnd: UInt64 = 0
    /// The log rows this write appends, numbered and inserted just before it commits
    /// (`insertLog`): their transaction, how many documents and the packed entries.
    private var pendingLog: [(id: TransactionID, deltaCount: UInt32, documents: Int, entries: [UInt8])] = []
    /// The deltas of each transaction in `pendingLog`, by document, for `loggedIndexes`.
    private var pendingIndexes: [TransactionID: [DocumentRef: Set<UInt32>]] = [:]
    /// The last sequence this write appended, nil before its first row.
    var lastSequence: UInt64?
    /// The database transaction of this write, as read with the writers' lock: what
    /// `commit` asks PostgreSQL about when COMMIT's answer is lost.
    var transaction: PostgresTransactionName?

    /// Reads the transaction's name from the rows of `PostgresTransactionName.taking`.
    func name(_ rows: [PostgresRow]) throws {
        for (_, id, backend, started) in try rows.decode((String, String, Int32, String).self) {
            transaction = UInt64(id).map { PostgresTransactionName(id: $0, backend: backend, serverStarted: started) }
        }
    }
    /// The cursor epoch this write moved to (`forgetPeerCursors`); 0 when it forgot none.
    var cursorEpoch: UInt64 = 0
    /// Set when this write found the database went back under the running hub and
    /// repaired it first (`repairWentBack`).
    var wentBack: WentBack?
    /// The last row this write appended (its entries hashed once it committed, outside
    /// the locks), and what the hub knew of the log when it checked it.
    private var appendedLast: (sequence: UInt64, id: TransactionID, entries: [UInt8])?
    private(set) var checked: LogWitness?
    /// The last row this write appended, for what the hub knows of the log.
    var newest: LogWitness? {
        appendedLast.map { last in last.entries.withUnsafeBytes { LogWitness(sequence: last.sequence, transaction: last.id, entries: $0) } }
    }
    /// What this write appended to the change log.
    var appended = LogEnd.Appended(after: 0, collections: [], transactions: [])
    private(set) var outcome = ApplyOutcome()
    private let ended = Locked(false)
    /// The registers this write knows each document it read holds (`registers(of:)`, then
    /// what it wrote): a register not among them is new, and is inserted rather than
    /// upserted. The writers' locks keep every other writer from the documents this write
    /// may write (all of them for the one writer, those it named for a batch beside
    /// others), so none can appear meanwhile; a document this write never read is upserted.
    private var held: [DocumentRef: Set<String>] = [:]
    /// The documents it read that had a body row (live or deleted).
    private var bodied: Set<DocumentRef> = []
    /// The marks of `txn` rows this write read or wrote (`states(of:)`, `mark(_:)`).
    private var marksRead: [TransactionID: Int64] = [:]
    /// The marks of the records the hub holds as this write leaves them (nil: forgotten),
    /// made the hub's when it commits (`keepMarks`).
    private var marksHeld: [TransactionID: Int64?] = [:]
    /// Registers read ahead (`readAhead(registersOf:)`), of documents this write has not
    /// written since: what the database holds of them (none: an empty list), without
    /// asking it again.
    private var ahead: [DocumentRef: [FieldRecord]] = [:]

    init(store: PostgresStore, connection: HubConnection, claim: InboundClaim? = nil, needsOneWriter: Locked<Bool> = Locked(false)) {
        self.store = store
        self.connection = connection
        self.claim = claim
        self.needsOneWriter = needsOneWriter
    }

    /// `log_end`'s value, under its row lock until the write ends, and the row of
    /// `witness`'s sequence as the log holds it (`PostgresStore.readLogEnd`). A write
    /// beside others may wait for that lock, on another hub's commit that wrote the row:
    /// READ COMMITTED reads the locked row again after the wait, not the joined one, so
    /// it reads the row again in a statement of its own.
    func lockLogEnd(witness: LogWitness?) async throws -> (end: UInt64, there: LogWitness?, epoch: UInt64) {
        checked = witness
        // A write beside others reads the witnessed row after the lock, in its own statement
        // below; reading it in the locking statement too would do the work twice.
        let found = try await PostgresStore.readLogEnd(connection, witness: claim == nil ? witness : nil, lock: true, logger: logger)
        guard claim != nil, witness != nil else { return found }
        return (found.end, try await PostgresStore.rows(connection, at: 0, witness: witness, logger: logger).there, found.epoch)
    }

    /// Fails unless the write may write these: the one writer may write anything, a
    /// write beside others only what its claim named.
    private func mayWrite(_ id: TransactionID? = nil, documents: [DocumentRef] = [], cursor: InboundClaim.Cursor? = nil) throws {
        guard let claim else { return }
        let unnamed =
            id.map { !claim.transactions.contains($0) } ?? false || documents.contains { !claim.documents.contains($0) }
            || cursor.map { !claim.cursors.contains($0) } ?? false
        guard unnamed else { return }
        needsOneWriter.withLock { $0 = true }
        throw ShoalError(.database, "a received batch must write what it did not name: it is committed again as the one writer")
    }

    /// Numbers the log rows this write appended on from `log_end` and inserts them, in
    /// one statement; a write beside others takes `log_end`'s lock for it now.
    func insertLog() async throws {
        guard !pendingLog.isEmpty else { return }
        if claim != nil {
            let knew = store.known.withLock { $0 }
            let found = try await lockLogEnd(witness: knew.witness)
            logEnd = found.end
            if knew.wentBack(end: found.end, there: found.there) {
                // Numbered from here, its rows would take sequences devices' cursors passed.
                needsOneWriter.withLock { $0 = true }
                throw ShoalError(
                    .database, "the change log went back under this hub: it is committed again as the one writer, which repairs the database first")
            }
        }
        let first = (lastSequence ?? logEnd) + 1
        let sequences = pendingLog.indices.map { Int64(first) + Int64($0) }
        try await query(
            """
            INSERT INTO change_log (seq, txn_site, txn_seq, txn_count, documents, entries)
            SELECT * FROM UNNEST(\(sequences)::bigint[], \(pendingLog.map { Int64(bitPattern: $0.id.origin.rawValue) })::bigint[],
                \(pendingLog.map { Int64(bitPattern: $0.id.sequence) })::bigint[], \(pendingLog.map { Int64($0.deltaCount) })::bigint[],
                \(pendingLog.map { Int64($0.documents) })::bigint[], \(pendingLog.map { ByteBuffer(bytes: $0.entries) })::bytea[])
            """)
        if lastSequence == nil { appended.after = first - 1 }
        lastSequence = UInt64(sequences.last!)
        let last = pendingLog[pendingLog.count - 1]
        appendedLast = (UInt64(sequences.last!), last.id, last.entries)
        pendingLog.removeAll()
        pendingIndexes.removeAll()
    }

    func end() { ended.withLock { $0 = true } }

    /// Set once a statement of this write failed: PostgreSQL has aborted the transaction,
    /// whose COMMIT would then roll back without an error. The write must not report it
    /// committed, even when its body caught the error and went on.
    private(set) var aborted = false
    /// Set by a body that keeps nothing (a local transaction rolled back): `withWriter`
    /// rolls back rather than commit, and does not fail for a statement that failed.
    var discarded = false

    /// Takes savepoint `name`, before statements that may fail and be undone alone
    /// (`undo(to:)`).
    func savepoint(_ name: String) async throws(ShoalError) {
        try await access("taking a savepoint") { try await query(PostgresQuery(unsafeSQL: "SAVEPOINT \(name)")) }
    }

    /// Releases savepoint `name`: what followed it stays.
    func release(_ name: String) async throws(ShoalError) {
        try await access("releasing a savepoint") { try await query(PostgresQuery(unsafeSQL: "RELEASE SAVEPOINT \(name)")) }
    }

    /// Undoes what followed savepoint `name` (taken by `savepoint`, and so while the write
    /// was not aborted), whether or not a statement since failed, and releases it: the
    /// write may go on, and commit. If PostgreSQL refuses, the write stays aborted.
    func undo(to name: String) async {
        guard !ended.withLock({ $0 }) else { return }
        do {
            try await query(PostgresQuery(unsafeSQL: "ROLLBACK TO SAVEPOINT \(name)"))
            try await query(PostgresQuery(unsafeSQL: "RELEASE SAVEPOINT \(name)"))
            aborted = false
        } catch {
            aborted = true
        }
    }

    /// Runs `body` inside the write, unless the write has ended or its transaction was aborted.
    func access<T>(_ doing: String, _ body: () async throws -> T) async throws(ShoalError) -> T {
        guard !ended.withLock({ $0 }) else {
            throw ShoalError(.closed, "the inbound write has ended: nothing more can be written in it")
        }
        guard !aborted else {
            throw ShoalError(.database, "\(doing): an earlier statement of this write failed, and PostgreSQL rolled it back")
        }
        do {
            return try await store.failing(doing) {
                do {
                    return try await body()
                } catch let error as PSQLError where error.serverInfo?[.sqlState] == "53200" {
                    outOfLocks = true
                    throw error
                }
            }
        } catch {
            aborted = true
            // A statement sent before that failed aborted the transaction, and this one
            // failed for that: the earlier failure is the one that says what went wrong.
            if let earlier = await unansweredFailure() { throw earlier }
            throw error
        }
    }

    /// Set when a statement of this write failed for want of room in the server's lock table.
    private(set) var outOfLocks = false

    /// Statements sent and not yet awaited (`send`), oldest first, with what each does.
    private var unanswered: [(doing: String, answer: EventLoopFuture<PostgresQueryResult>)] = []

    /// Sends `query` without waiting for its answer, so that the server runs it while the
    /// hub goes on (planning the next apply, as a rule). Whatever is sent after it runs
    /// after it and sees what it wrote (`HubConnection.send`); its failure is reported by
    /// the next statement that fails, or by `settle()`, which the commit calls first.
    private func send(_ query: PostgresQuery, doing: String) {
        unanswered.append((doing, connection.send(query, logger: logger)))
    }

    /// Waits for the answers of every statement sent and not yet awaited; throws the
    /// first one's failure as `access` would have thrown it, and leaves the write aborted.
    func settle() async throws(ShoalError) {
        if let failure = await unansweredFailure() {
            aborted = true
            throw failure
        }
    }

    /// Waits for the answers of the statements sent and not yet awaited, and forgets them;
    /// the first one's failure, nil when all of them succeeded.
    private func unansweredFailure() async -> ShoalError? {
        let sent = unanswered
        unanswered.removeAll()
        var failure: ShoalError?
        for (doing, answer) in sent {
            do {
                _ = try await answer.get()
            } catch {
                guard failure == nil else { continue }
                if (error as? PSQLError)?.serverInfo?[.sqlState] == "53200" { outOfLocks = true }
                failure = ShoalError(.database, "\(doing) on \(store.database.location): \(PostgresHubDatabase.describe(error))")
            }
        }
        return failure
    }

    @discardableResult
    func query(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await connection.query(query, logger: logger)
    }

    private static func key(_ id: TransactionID) -> (Int64, Int64) {
        (Int64(bitPattern: id.origin.rawValue), Int64(bitPattern: id.sequence))
    }

    func states(of ids: [TransactionID], rests: Bool) async throws(ShoalError) -> TransactionStates {
        guard !ids.isEmpty else { return TransactionStates() }
        return try await access("reading transaction states") {
            let (sites, sequences) = PostgresStore.columns(ids)
            let applied = Int64(TransactionRecord.State.applied.rawValue)
            // The rest of those applied comes in the same rows: no round trip of its own.
            let rows = try await query(
                """
                SELECT origin, seq, state, mark, CASE WHEN \(rests) AND state = \(applied) AND rest <> '' THEN rest END FROM txn
                WHERE (origin, seq) IN (SELECT * FROM UNNEST(\(sites)::bigint[], \(sequences)::bigint[]))
                """)
            var read = TransactionStates()
            for (origin, sequence, state, mark, rest) in try rows.decode((Int64, Int64, Int64, Int64, String?).self) {
                let id = TransactionID(origin: SiteID(UInt64(bitPattern: origin)), sequence: try Stored.unsigned(sequence, "txn", "seq"))
                guard let value = Int(exactly: state).flatMap(TransactionRecord.State.init(rawValue:)) else {
                    throw ShoalError(.database, "table txn, column state holds \(state) for transaction \(id), where 0 to 3 belongs")
                }
                read.states[id] = value
                if let rest { read.rests[id] = Verdict.decode(rest) }
                marksRead[id] = mark
                if value == .applied || value == .refused { marksHeld[id] = .some(nil) }
            }
            return read
        }
    }

    func writtenElsewhere(_ ids: [TransactionID]) async throws(ShoalError) -> Set<TransactionID> {
        guard !ids.isEmpty else { return [] }
        let unread = ids.filter { marksRead[$0] == nil }
        if !unread.isEmpty { _ = try await states(of: unread) }
        let known = store.recordMarks.withLock { $0 }
        return Set(ids.filter { id in marksRead[id].map { $0 != (marksHeld[id] ?? known[id]) } ?? false })
    }

    /// A new mark for a record this write writes, this hub's once the write commits.
    private func mark(_ id: TransactionID) -> Int64 {
        let mark = Int64.random(in: .min ... .max)
        marksRead[id] = mark
        marksHeld[id] = mark
        return mark
    }

    /// Forgets the mark of a record this write finishes (applied or refused).
    private func finished(_ id: TransactionID) {
        marksRead[id] = nil
        marksHeld[id] = .some(nil)
    }

    /// Makes the marks this write wrote or read the hub's: called once it committed, as
    /// only then does the hub hold the records as the write left them (a write rolled
    /// back, or run again as the one writer, leaves the hub's memory as it was).
    func keepMarks() {
        guard !marksHeld.isEmpty else { return }
        store.recordMarks.withLock { marks in
            for (id, mark) in marksHeld { marks[id] = mark }
        }
    }

    func save(_ record: TransactionRecord) async throws(ShoalError) {
        let (origin, seq) = Self.key(record.id)
        try await access("saving a waiting transaction") {
            try mayWrite(record.id)
            try await query(
                """
                INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen, mark)
                VALUES (\(origin), \(seq), \(Int64(record.deltaCount)), \(Int64(record.documentCount)),
                    \(CollectionCount.encode(record.collections)), \(Int64(record.state.rawValue)), '',
                    \(TransactionRecord.Report.encode(record.reports)), \(Int64(bitPattern: record.firstSeen)), \(mark(record.id)))
                ON CONFLICT (origin, seq) DO UPDATE SET state = excluded.state, reports = excluded.reports, mark = excluded.mark
                WHERE txn.state = 0 OR (txn.state = 2 AND excluded.state = 2)
                """)
        }
    }

    func buffer(
        _ deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32], context: [ContextField], of id: TransactionID
    ) async throws(ShoalError) {
        let (origin, seq) = Self.key(id)
        try await access("buffering a waiting transaction's pieces") {
            try mayWrite(id)
            if !deltas.isEmpty {
                let counts = deltas.map { Int64(documentDeltaCounts[DocumentRef(collection: $0.collection, id: $0.documentID)] ?? 1) }
                try await query(
                    """
                    INSERT INTO txn_piece (origin, seq, idx, collection, doc_id, doc_deltas, name, value, ts)
                    SELECT \(origin), \(seq), * FROM UNNEST(
                        \(deltas.map { Int64($0.index) })::bigint[], \(deltas.map(\.collection))::text[],
                        \(deltas.map(\.documentID))::text[], \(counts)::bigint[], \(deltas.map { Stored.bytes($0.field) })::bytea[],
                        \(deltas.map(\.valueJSON))::text[], \(deltas.map { Int64(bitPattern: $0.timestamp.rawValue) })::bigint[])
                    ON CONFLICT DO NOTHING
                    """)
            }
            // The last of each field wins, as one statement may not update a row twice
            // (keyed by bytes: canonically equivalent names are two fields).
            var latest: [RegisterKey: ContextField] = [:]
            var order: [RegisterKey] = []
            for field in context {
                let key = RegisterKey(field.document.collection, field.document.id, field.field)
                if latest.updateValue(field, forKey: key) == nil { order.append(key) }
            }
            let fields = order.map { latest[$0]! }
            guard !fields.isEmpty else { return }
            try await query(
                """
                INSERT INTO txn_context (origin, seq, collection, doc_id, name, value, ts, src_origin, src_seq)
                SELECT \(origin), \(seq), * FROM UNNEST(
                    \(fields.map(\.document.collection))::text[], \(fields.map(\.document.id))::text[],
                    \(fields.map { Stored.bytes($0.field) })::bytea[],
                    \(fields.map(\.valueJSON))::text[], \(fields.map { Int64(bitPattern: $0.timestamp.rawValue) })::bigint[],
                    \(fields.map { Int64(bitPattern: $0.transaction.origin.rawValue) })::bigint[],
                    \(fields.map { Int64(bitPattern: $0.transaction.sequence) })::bigint[])
                ON CONFLICT (origin, seq, collection, doc_id, name) DO UPDATE SET value = excluded.value, ts = excluded.ts,
                    src_origin = excluded.src_origin, src_seq = excluded.src_seq
                """)
        }
    }

    func buffered(of id: TransactionID, deltaCount: UInt32) async throws(ShoalError) -> BufferedPieces {
        try await access("reading the durable buffer") {
            var pieces = BufferedPieces()
            for row in try await PostgresStore.bufferedDeltas(connection, of: id, deltaCount: deltaCount, logger: logger) {
                pieces.documentDeltaCounts[row.document] = row.documentDeltas
                pieces.deltas.append(row.delta)
            }
            pieces.context = try await PostgresStore.bufferedContext(connection, of: id, logger: logger)
            return pieces
        }
    }

    func loggedIndexes(of id: TransactionID) async throws(ShoalError) -> [DocumentRef: Set<UInt32>] {
        try await access("reading what the change log holds of a transaction") {
            // What this write logged of it, not inserted yet, and what the log holds.
            var logged = pendingIndexes[id] ?? [:]
            for row in try await PostgresStore.logRows(connection, PostgresStore.ofTransaction(id), logger: logger) {
                try row.entries.withUnsafeReadableBytes { entries in
                    try LogEntries.forEach(entries) { collection, key, _, deltas in
                        logged[DocumentRef(collection: collection, id: key), default: []].formUnion(try PackedDeltas.indexes(deltas))
                    }
                }
            }
            return logged
        }
    }

    var readsRegistersAhead: Bool { true }

    func readAhead(registersOf documents: [DocumentRef]) async throws(ShoalError) {
        guard !documents.isEmpty else { return }
        try await access("reading registers ahead") {
            let rows = try await PostgresStore.registerRows(connection, of: documents, logger: logger)
            for document in documents { ahead[document] = rows[document] ?? [] }
        }
    }

    func registers(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRegisters] {
        guard !documents.isEmpty else { return [] }
        return try await access("reading registers") {
            // What is decided on them is written, or refused, under their locks only.
            try mayWrite(documents: documents)
            let unread = documents.filter { ahead[$0] == nil }
            let rows = unread.isEmpty ? [:] : try await PostgresStore.registerRows(connection, of: unread, logger: logger)
            return documents.map { document in
                var registers: [String: RegisterState] = [:]
                for field in ahead[document] ?? rows[document] ?? [] { registers[field.name] = field.state }
                held[document] = Set(registers.keys)
                // A document with no register has no body row either (RegisterRows' rule).
                if !registers.isEmpty { bodied.insert(document) }
                return DocumentRegisters(registers)
            }
        }
    }

    func write(_ rows: AppliedRows) async throws(ShoalError) {
        // What it writes is read from the database from now on (within this transaction).
        for document in rows.documents { ahead[document.document] = nil }
        try await access("writing an applied transaction") {
            try mayWrite(rows.record.id, documents: rows.documents.filter { !$0.won.isEmpty }.map(\.document))
            var statement = Statement()
            let id = rows.record.id
            let origin = try statement.bind(Int64(bitPattern: id.origin.rawValue))
            let seq = try statement.bind(Int64(bitPattern: id.sequence))
            if rows.dropBuffer {
                statement.add("DELETE FROM txn_piece WHERE origin = \(origin) AND seq = \(seq)")
                statement.add("DELETE FROM txn_context WHERE origin = \(origin) AND seq = \(seq)")
            }
            try appendLog(rows)
            try saveRegisters(rows, to: &statement)
            let record = rows.record
            if let state = rows.state, let rest = rows.rest {
                let mark: Int64
                if state == .partial { mark = self.mark(id) } else { mark = 0; finished(id) }
                statement.add(
                    """
                    INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen, mark)
                    VALUES (\(origin), \(seq), \(try statement.bind(Int64(record.deltaCount))),
                        \(try statement.bind(Int64(record.documentCount))), \(try statement.bind(CollectionCount.encode(record.collections))),
                        \(try statement.bind(Int64(state.rawValue))), \(try statement.bind(Verdict.encode(rest))),
                        \(try statement.bind(state == .applied ? "" : TransactionRecord.Report.encode(record.reports))),
                        \(try statement.bind(Int64(bitPattern: record.firstSeen))), \(try statement.bind(mark)))
                    ON CONFLICT (origin, seq) DO UPDATE SET state = excluded.state, rest = excluded.rest,
                        reports = excluded.reports, delta_count = excluded.delta_count,
                        document_count = excluded.document_count, collections = excluded.collections, mark = excluded.mark
                    WHERE txn.state IN (0, 2)
                    """)
            }
            // Sent, not awaited: the server writes it while the hub plans the next apply.
            if let query = statement.query { send(query, doing: "writing an applied transaction") }
        }
    }

    /// The statements of one apply as one (data-modifying `WITH`): one round trip. Each
    /// touches rows no other of them does (their documents and registers are disjoint,
    /// `saveRegisters`), as one statement's parts must.
    struct Statement {
        private var parts: [String] = []
        private var binds = PostgresBindings()

        /// The placeholder of `value`, bound.
        mutating func bind<Value: PostgresThrowingDynamicTypeEncodable>(_ value: Value) throws -> String {
            try binds.append(value)
            return "$\(binds.count)"
        }

        mutating func add(_ sql: String) { parts.append(sql) }

        /// All of it as one query; nil when there is nothing to run.
        var query: PostgresQuery? {
            guard let last = parts.last else { return nil }
            let with = parts.dropLast().enumerated().map { "w\($0.offset) AS (\($0.element))" }
            let sql = with.isEmpty ? last : "WITH " + with.joined(separator: ",\n") + "\n" + last
            return PostgresQuery(unsafeSQL: sql, binds: binds)
        }
    }

    /// The columns of a multi-row insert from `UNNEST` of arrays, where a column whose
    /// rows all hold one value (an apply's collection, site and transaction, as a rule)
    /// is bound once instead of as an array: the server decodes each element of an array.
    struct UnnestedColumns {
        /// The indices of the rows inserted, into each column given.
        let rows: [Int]
        /// Each array's placeholder and type, in the order of `UNNEST`'s alias (`c0`, ...).
        private var arrays: [String] = []

        init(rows: [Int]) { self.rows = rows }

        /// What the SELECT list says for `column` (of every row, picked by `rows`): a
        /// bound scalar when every row holds the same value, byte for byte, and `varies`
        /// is false, else the name of its bound array in `UNNEST`'s alias.
        mutating func add<E: UnnestedValue>(
            _ column: [E], as type: String, varies: Bool = false, to statement: inout Statement
        ) throws -> String {
            let first = column[rows[0]]
            if !varies && rows.allSatisfy({ column[$0].isIdentical(to: first) }) { return "\(try statement.bind(first))::\(type)" }
            arrays.append("\(try statement.bind(rows.map { column[$0] }))::\(type)[]")
            return "c\(arrays.count - 1)"
        }

        /// The FROM item: `UNNEST` of the arrays (at least one must have been added).
        var from: String {
            "UNNEST(\(arrays.joined(separator: ", "))) AS t(\(arrays.indices.map { "c\($0)" }.joined(separator: ", ")))"
        }
    }

    /// A value of a column `UnnestedColumns` binds once when every row holds it.
    protocol UnnestedValue: PostgresArrayEncodable {
        /// Whether the two are stored as the same bytes. Not `==`: two strings
        /// canonically equivalent ("é" composed and decomposed) are equal to Swift, and
        /// are two collections, two keys and two values to the store.
        func isIdentical(to other: Self) -> Bool
    }

    /// Logs what `rows` says to log: runs of the transaction's documents, a row each
    /// (`LogEntries.documentsPerRow`, `bytesPerRow`), numbered and inserted just before
    /// the write commits (`insertLog`).
    private func appendLog(_ rows: AppliedRows) throws {
        let id = rows.record.id
        var run: [UInt8] = []
        var runDocuments = 0
        var pack = PackedDeltas()
        var logged = false
        func flush() {
            pendingLog.append((id, rows.record.deltaCount, runDocuments, run))
            run.removeAll(keepingCapacity: true)
            runDocuments = 0
        }
        for document in rows.documents where !document.logged.isEmpty {
            pack.removeAll()
            for position in document.logged {
                let delta = rows.deltas[position]
                pack.append(index: delta.index, timestamp: delta.timestamp.rawValue, name: delta.field, value: delta.valueJSON)
                pendingIndexes[id, default: [:]][document.document, default: []].insert(delta.index)
            }
            LogEntries.append(document.document, documentDeltas: Int(document.deltaCount), deltas: pack.bytes, to: &run)
            runDocuments += 1
            logged = true
            appended.collections.insert(document.document.collection)
            appended.documents += 1
            outcome.logged += pack.count
            if runDocuments == LogEntries.documentsPerRow || run.count >= LogEntries.bytesPerRow { flush() }
        }
        if runDocuments > 0 { flush() }
        if logged && appended.transactions.last != id { appended.transactions.append(id) }
    }

    /// Upserts the registers that won and saves each changed document's body.
    private func saveRegisters(_ rows: AppliedRows, to statement: inout Statement) throws {
        let id = rows.record.id
        var collections: [String] = [], keys: [String] = [], names: [String] = [], values: [String] = []
        var timestamps: [Int64] = [], sites: [Int64] = [], transactionSites: [Int64] = [], transactionSequences: [Int64] = []
        var indexes: [Int64] = []
        var live: [DocumentRef: String] = [:]
        var gone: [DocumentRef: Bool] = [:]  // true: deleted, keeps its last body; false: absent, no row
        var changed: [DocumentRef] = []
        var seen = Set<DocumentRef>(minimumCapacity: rows.documents.count)
        // Each document's registers, as a range of the columns: its lookups are made once.
        var runs: [(document: DocumentRef, registers: Range<Int>)] = []
        for document in rows.documents where !document.won.isEmpty {
            let ref = document.document
            guard let body = document.body else {
                throw ShoalError(.database, "an apply of \(id) changed registers of \(ref.id) in \(ref.collection) without a body to save")
            }
            runs.append((ref, names.count..<(names.count + document.won.count)))
            for (name, write) in document.won {
                collections.append(ref.collection)
                keys.append(ref.id)
                names.append(name)
                values.append(write.state.json)
                timestamps.append(Int64(bitPattern: write.state.version.timestamp.rawValue))
                sites.append(Int64(bitPattern: write.state.version.site.rawValue))
                transactionSites.append(Int64(bitPattern: write.state.transaction.origin.rawValue))
                transactionSequences.append(Int64(bitPattern: write.state.transaction.sequence))
                indexes.append(Int64(write.index))
            }
            outcome.won += document.won.count
            switch body {
            case .live(let json):
                live[ref] = json
                gone[ref] = nil
            case .deleted:
                live[ref] = nil
                gone[ref] = true
            case .absent:
                live[ref] = nil
                gone[ref] = false
            }
            if seen.insert(ref).inserted { changed.append(ref) }
        }
        guard !changed.isEmpty else { return }
        // A register this write knows is new is inserted, the rest upserted: PostgreSQL's
        // upsert costs about twice an insert.
        var inserts: [Int] = [], upserts: [Int] = []
        inserts.reserveCapacity(names.count)
        if runs.count == changed.count {
            // Each document once, so each register once (a document's are keyed by name).
            for (document, registers) in runs {
                guard var known = held.removeValue(forKey: document) else {
                    upserts.append(contentsOf: registers)
                    continue
                }
                for i in registers {
                    if known.insert(names[i]).inserted { inserts.append(i) } else { upserts.append(i) }
                }
                held[document] = known
            }
        } else {
            // A document listed twice: a register named twice keeps its last write, since
            // one statement may not update a row twice.
            var last: [RegisterKey: Int] = [:]
            for i in names.indices { last[RegisterKey(collections[i], keys[i], names[i])] = i }
            for i in last.values.sorted() {
                let document = DocumentRef(collection: collections[i], id: keys[i])
                if let known = held[document], !known.contains(names[i]) { inserts.append(i) } else { upserts.append(i) }
                held[document]?.insert(names[i])
            }
        }
        let nameBytes = names.map(Stored.bytes)
        for (rows, upsert) in [(inserts, false), (upserts, true)] where !rows.isEmpty {
            let conflict =
                upsert
                ? """
                ON CONFLICT (collection, doc_id, name) DO UPDATE SET value = excluded.value, ts = excluded.ts,
                    site = excluded.site, txn_site = excluded.txn_site, txn_seq = excluded.txn_seq, txn_index = excluded.txn_index
                """ : ""
            // The keys always as an array: the insert unnests one at least.
            var columns = UnnestedColumns(rows: rows)
            let select = [
                try columns.add(collections, as: "text", to: &statement), try columns.add(keys, as: "text", varies: true, to: &statement),
                try columns.add(nameBytes, as: "bytea", to: &statement), try columns.add(values, as: "text", to: &statement),
                try columns.add(timestamps, as: "bigint", to: &statement), try columns.add(sites, as: "bigint", to: &statement),
                try columns.add(transactionSites, as: "bigint", to: &statement),
                try columns.add(transactionSequences, as: "bigint", to: &statement), try columns.add(indexes, as: "bigint", to: &statement),
            ]
            statement.add(
                """
                INSERT INTO field (collection, doc_id, name, value, ts, site, txn_site, txn_seq, txn_index)
                SELECT \(select.joined(separator: ", ")) FROM \(columns.from)
                \(conflict)
                """)
        }
        if !live.isEmpty {
            let refs = Array(live.keys)
            let (new, old) = (refs.filter { held[$0] != nil && !bodied.contains($0) }, refs.filter { held[$0] == nil || bodied.contains($0) })
            for (batch, upsert) in [(new, false), (old, true)] where !batch.isEmpty {
                let conflict = upsert ? "ON CONFLICT (collection, doc_id) DO UPDATE SET body = excluded.body, deleted = false" : ""
                var columns = UnnestedColumns(rows: Array(batch.indices))
                let select = [
                    try columns.add(batch.map(\.collection), as: "text", to: &statement),
                    try columns.add(batch.map(\.id), as: "text", varies: true, to: &statement),
                    try columns.add(batch.map { live[$0]! }, as: "text", to: &statement),
                ]
                statement.add(
                    """
                    INSERT INTO document (collection, doc_id, body, deleted)
                    SELECT \(select.joined(separator: ", ")), false FROM \(columns.from)
                    \(conflict)
                    """)
            }
            bodied.formUnion(refs)
        }
        let deleted = gone.filter(\.value).map(\.key), absent = gone.filter { !$0.value }.map(\.key)
        if !deleted.isEmpty {
            statement.add(
                """
                UPDATE document SET deleted = true
                WHERE (collection, doc_id) IN (
                    SELECT * FROM UNNEST(\(try statement.bind(deleted.map(\.collection)))::text[], \(try statement.bind(deleted.map(\.id)))::text[]))
                """)
        }
        if !absent.isEmpty {
            statement.add(
                """
                DELETE FROM document
                WHERE (collection, doc_id) IN (
                    SELECT * FROM UNNEST(\(try statement.bind(absent.map(\.collection)))::text[], \(try statement.bind(absent.map(\.id)))::text[]))
                """)
        }
        bodied.subtract(absent)
        outcome.changedDocuments += changed.count
    }

    func refuse(_ record: TransactionRecord, reason: String) async throws(ShoalError) {
        let (origin, seq) = Self.key(record.id)
        finished(record.id)
        try await access("recording a refused transaction") {
            try mayWrite(record.id)
            try await query("DELETE FROM txn_piece WHERE origin = \(origin) AND seq = \(seq)")
            try await query("DELETE FROM txn_context WHERE origin = \(origin) AND seq = \(seq)")
            try await query(
                """
                INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen, refusal)
                VALUES (\(origin), \(seq), \(Int64(record.deltaCount)), \(Int64(record.documentCount)),
                    \(CollectionCount.encode(record.collections)), \(Int64(TransactionRecord.State.refused.rawValue)), '', '',
                    \(Int64(bitPattern: record.firstSeen)), \(reason.escapingNul))
                ON CONFLICT (origin, seq) DO UPDATE SET state = excluded.state, reports = '', refusal = excluded.refusal
                """)
        }
    }

    func markApplied(_ id: TransactionID, rest: [Verdict]) async throws(ShoalError) {
        let (origin, seq) = Self.key(id)
        finished(id)
        try await access("marking a partial transaction whole") {
            try mayWrite(id)
            try await query(
                """
                UPDATE txn SET state = \(Int64(TransactionRecord.State.applied.rawValue)), rest = \(Verdict.encode(rest)), reports = ''
                WHERE origin = \(origin) AND seq = \(seq)
                """)
        }
    }

    func recordRest(_ id: TransactionID, rest: [Verdict]) async throws(ShoalError) {
        let (origin, seq) = Self.key(id)
        try await access("recording what an applied transaction leaves out") {
            try mayWrite(id)
            try await query(
                """
                UPDATE txn SET rest = \(Verdict.encode(rest))
                WHERE origin = \(origin) AND seq = \(seq) AND state = \(Int64(TransactionRecord.State.applied.rawValue))
                """)
        }
    }

    func recordCursor(peer: SiteID, subscriptionKey: String, through: UInt64, epoch: UInt64?) async throws(ShoalError) {
        try await access("recording a peer's cursor") {
            try mayWrite(cursor: InboundClaim.Cursor(peer: peer, key: subscriptionKey))
            // A cursor read before the epoch moved (cursors reset) is not recorded: the
            // check is part of the insert, one round trip.
            let current = epoch.map { Int64(clamping: $0) }
            try await query(
                """
                INSERT INTO peer_cursor (peer, subscription_key, through)
                SELECT \(Int64(bitPattern: peer.rawValue)), \(subscriptionKey), \(Int64(clamping: through))
                WHERE \(current)::bigint IS NULL
                    OR \(current)::bigint = COALESCE((SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'), 0)
                ON CONFLICT (peer, subscription_key) DO UPDATE SET through = GREATEST(peer_cursor.through, excluded.through)
                """)
        }
    }

    func loadRecord(_ id: TransactionID) async throws(ShoalError) -> TransactionRecord? {
        if marksRead[id] == nil { _ = try await states(of: [id]) }
        return try await access("reading a transaction's record") {
            guard let stored = try await PostgresStore.storedTransactions(connection, [id], logger: logger)[id],
                stored.state == .waiting || stored.state == .partial
            else { return nil }
            // This hub holds the record as the mark read in this write names it, once it commits.
            if let mark = marksRead[id] { marksHeld[id] = mark }
            return try await PostgresStore.record(connection, stored, logger: logger)
        }
    }
}

extension InboundClaim {
    /// The advisory lock keys of its names: a 64-bit FNV-1a hash of each, tagged by kind,
    /// as two 32-bit keys. Two names with one key only wait on each other (a peer that
    /// makes names collide on purpose slows only its own batches and those it collides with).
    var lockKeys: [LockKey] {
        var keys: [LockKey] = []
        keys.reserveCapacity(count)
        for document in documents { keys.append(Self.key("d", document.collection, document.id)) }
        for id in transactions { keys.append(Self.key("t", String(id.origin.rawValue), String(id.sequence))) }
        for cursor in cursors { keys.append(Self.key("c", String(cursor.peer.rawValue), cursor.key)) }
        return keys
    }

    /// An advisory lock's two keys (`pg_advisory_xact_lock(integer, integer)`).
    struct LockKey: Hashable, Comparable {
        var high: Int32
        var low: Int32

        static func < (a: Self, b: Self) -> Bool { (a.high, a.low) < (b.high, b.low) }
    }

    static func key(_ kind: String, _ first: String, _ second: String) -> LockKey {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for part in [kind, first, second] {
            for byte in part.utf8 {
                hash ^= UInt64(byte)
                hash &*= 0x0000_0100_0000_01b3
            }
            // A separator no UTF-8 text holds.
            hash ^= 0xFF
            hash &*= 0x0000_0100_0000_01b3
        }
        return LockKey(high: Int32(truncatingIfNeeded: hash >> 32), low: Int32(truncatingIfNeeded: hash))
    }
}

extension String: PostgresInboundWriter.UnnestedValue {
    func isIdentical(to other: String) -> Bool { utf8.elementsEqual(other.utf8) }
}

extension Int64: PostgresInboundWriter.UnnestedValue {
    func isIdentical(to other: Int64) -> Bool { self == other }
}

extension ByteBuffer: PostgresInboundWriter.UnnestedValue {
    func isIdentical(to other: ByteBuffer) -> Bool { self == other }
}

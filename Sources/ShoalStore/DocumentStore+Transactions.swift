public import ShoalCRDT
public import ShoalStorage
import ShoalQuery
import GRDB
import Logging
import Synchronization

extension DocumentStore {
    /// Runs `body` in a transaction (`runTransaction`): `DocumentDatabase.transaction`,
    /// the call to use, comes here.
    nonisolated(nonsending) public func performTransaction<T>(
        hint: String?, isReadOnly: Bool, _ body: (any DocumentTransaction) async throws -> (T, TransactionCompletion)
    ) async throws(ShoalError) -> (value: T, info: TransactionInfo, transactionID: TransactionID?) {
        let (value, transaction) = try await runTransaction(hint: hint, isReadOnly: isReadOnly) { tx in try await body(tx) }
        return (value, transaction.info, transaction.transactionID)
    }

    nonisolated(nonsending) func runTransaction<T>(
        hint: String?, isReadOnly: Bool, _ body: (StoreTransaction) async throws -> (T, TransactionCompletion)
    ) async throws(ShoalError) -> (T, StoreTransaction) {
        let info = TransactionInfo(id: LocalWriteRules.randomID(), hint: hint, isReadOnly: isReadOnly)
        let marks = OpenTransactions.marks
        let nested = marks.contains { $0.store == ObjectIdentifier(self) }
        if !isReadOnly { try refuseWriteBesideOpenTransaction(marks) }
        guard let token = running.register(info, nested: nested) else { throw Self.shuttingDown }
        defer { running.unregister(token) }
        let inside = marks + [OpenTransactions.Mark(store: ObjectIdentifier(self), info: info)]

        if isReadOnly {
            let snapshot: DatabaseSnapshot
            do {
                snapshot = try pool.makeSnapshot()
            } catch {
                throw ShoalError.wrapping(error, "taking a snapshot for a read-only transaction")
            }
            let transaction = StoreTransaction(info: info, store: self, snapshot: snapshot)
            do {
                let (value, completion) = try await OpenTransactions.$marks.withValue(inside) {
                    try await body(transaction)
                }
                transaction.endReading(completion)
                return (value, transaction)
            } catch {
                transaction.endReading(.rollback)
                throw ShoalError(thrownByTransactionBody: error, info)
            }
        }

        try await acquireGate(nested: nested)
        defer { gate.release() }
        let transaction = StoreTransaction(info: info, store: self, snapshot: nil)
        do {
            try transaction.begin()
            let (value, completion) = try await OpenTransactions.$marks.withValue(inside) {
                try await body(transaction)
            }
            switch completion {
            case .commit: try await transaction.commit()
            case .rollback: transaction.rollBack()
            }
            return (value, transaction)
        } catch {
            // Before the gate is released (the deferred release runs after this).
            transaction.rollBack()
            throw ShoalError(thrownByTransactionBody: error, info)
        }
    }

    /// The transactions running now, oldest first (for diagnostics and tests).
    package var runningTransactions: [TransactionInfo] { running.transactions }

    /// The store's run-time parameters (`ALTER SYSTEM SET` changes them).
    package var systemParameters: SystemParameters { parameters.withLock { $0 } }

    /// Logs the transactions that stay open too long (`TransactionRegistry.monitor`),
    /// until the task is cancelled or the store closes. `ShoalNode.run` runs it; a tool
    /// that opens a `DocumentStore` on its own runs it in a task of its own.
    package func monitorTransactions() async {
        await running.monitor(parameters: { systemParameters }, logger: logger)
    }

    /// Refuses new transactions and writes, waits for the running ones to finish
    /// (however long they take; they are logged as long transactions meanwhile),
    /// lets the writes already queued go, then closes the store. Work nested in a
    /// running transaction is still admitted.
    ///
    /// Called inside one of this store's transactions, it cannot wait for that one:
    /// it waits for the others, closes, and that transaction then fails to commit.
    package func shutdown() async {
        running.close(completely: false)
        await gate.shutDown(of: self, logger: logger, drain: { await running.waitUntilIdle(besides: $0) }, closeStore: close)
    }

    static let shuttingDown = ShoalError(
        .closed, "the store is shutting down or closed: it accepts no new transactions or writes")

    /// Throws when a read-write transaction of this store is open in this task: a write
    /// here would wait for the gate that transaction holds.
    func refuseWriteBesideOpenTransaction(_ marks: [OpenTransactions.Mark]) throws(ShoalError) {
        try OpenTransactions.refuseWrite(beside: marks, of: self)
    }

    /// Waits for the write gate, until `deadline` at most; a refusal, a deadline
    /// passed or cancellation becomes a store error.
    func acquireGate(nested: Bool, deadline: Deadline? = nil) async throws(ShoalError) {
        do {
            try await gate.acquire(nested: nested, deadline: deadline?.instant)
        } catch WriteGate.Refusal.deadlinePassed {
            throw deadline?.exceeded(.waitingForWriter) ?? Self.shuttingDown
        } catch is WriteGate.Refusal {
            throw Self.shuttingDown
        } catch {
            throw ShoalError(.cancelled, "cancelled while waiting for the store's writer")
        }
    }

    /// `BEGIN IMMEDIATE`: takes SQLite's write lock now, so nothing can fail for
    /// want of it later in the transaction.
    static func beginImmediate(_ db: Database) throws {
        try db.cachedStatement(sql: "BEGIN IMMEDIATE").execute()
    }

    /// Rolls back the writer's open SQLite transaction, if any, without suspending:
    /// the synchronous access does not watch for cancellation, so a cancelled task
    /// still leaves no transaction open. Call it holding the gate.
    func rollBackOpenTransaction() {
        do {
            try pool.writeWithoutTransaction { db in
                if db.isInsideTransaction { try db.execute(sql: "ROLLBACK") }
            }
        } catch {
            logger.error("could not roll back a transaction", metadata: ["shoal.error": "\(error)"])
        }
    }

    /// Tells the change feed, the cursor-reset feed and observers about a commit.
    /// Called before the gate is released, so commits are published in commit order.
    func publish(
        transaction: TransactionID?, lastSequence: UInt64?, appended: LogEnd.Appended?, evicted: Bool, collections: Set<String>
    ) {
        if let lastSequence {
            localCommits.withLock { $0 += 1 }
            feed.publish(LogEnd(sequence: lastSequence, appended: appended))
        }
        if evicted {
            evictions.withLock { $0 = true }
            resets.publish(1)
        }
        if lastSequence != nil || evicted {
            let commit = Commit(
                transactions: transaction.map { [$0] } ?? [], collections: collections, sequence: lastSequence ?? 0)
            commits.publish(commit)
        }
    }
}

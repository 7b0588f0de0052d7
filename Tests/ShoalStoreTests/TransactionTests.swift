import Logging
import ShoalCRDT
import ShoalQuery
@testable import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// Lines appended from several tasks, read in the order they were appended.
final class EventLog: Sendable {
    private let lines = Locked<[String]>([])

    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

@Suite struct TransactionTests {
    static func withStore<T>(
        logger: Logger = Logger(label: "shoal.test"), _ body: (DocumentStore) async throws -> T
    ) async throws -> T {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path, logger: logger)
        defer { store.close() }
        return try await body(store)
    }

    static func everything(_ collection: String) throws -> SubscriptionSet {
        var set = SubscriptionSet()
        try set.add(query: "SELECT * FROM \(collection)")
        return set
    }

    // MARK: Commit, rollback, errors

    @Test func everyExecuteOfATransactionCommitsUnderOneTransactionID() async throws {
        try await Self.withStore { store in
            var commits = store.commits.updates().makeAsyncIterator()
            let result = try await store.transaction(hint: "two steps") { tx in
                #expect(tx.info.hint == "two steps" && !tx.info.isReadOnly)
                #expect(tx.info.id.count == 32 && tx.info.id.allSatisfy(\.isHexDigit))
                let first = try await tx.execute(
                    "INSERT INTO c DOCUMENTS ({'_id': 'a', 'n': 1}); INSERT INTO c DOCUMENTS ({'_id': 'b', 'n': 2})")
                #expect(first.transactionID == nil, "nothing is committed before the body returns")
                let second = try await tx.execute("UPDATE c SET n = n + 10 WHERE _id = 'a'; DELETE FROM c WHERE _id = 'b'")
                #expect(second.mutatedDocumentIDs == ["a", "b"], "the documents of every statement of the execute")
                #expect(try await tx.execute("SELECT * FROM c").items == [["_id": "a", "n": 11]], "it reads its own writes")
                #expect(try await store.execute("SELECT * FROM c").items.isEmpty, "others see nothing before the commit")
                return .commit
            }
            #expect(result.completion == .commit && result.info.hint == "two steps")
            let id = try #require(result.transactionID)
            #expect(id == TransactionID(origin: store.siteID, sequence: 1))
            #expect(try await store.execute("SELECT * FROM c").items == [["_id": "a", "n": 11]])

            let page = try await store.changes(after: 0, limit: 100, subscriptions: try Self.everything("c"))
            #expect(page.pieces.map(\.id) == [id])
            let deltas = page.deltas
            #expect(deltas.map(\.field) == ["_id", "n", "_id", "n", "n", "_deleted"])
            #expect(deltas.allSatisfy { $0.transaction == id && $0.count == 6 })
            #expect(deltas.map(\.index) == Array(0..<6))

            // Observers hear of it once, with its ID; the next commit is the next one.
            #expect(await commits.next()?.transactions == [id])
            let later = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'z'})")
            #expect(await commits.next()?.transactions == [later.transactionID!])
        }
    }

    @Test func rollbackLeavesNothingAndTellsNobody() async throws {
        try await Self.withStore { store in
            var commits = store.commits.updates().makeAsyncIterator()
            let result = try await store.transaction { tx in
                _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'gone'})")
                return .rollback
            }
            #expect(result.completion == .rollback && result.transactionID == nil)
            #expect(try await store.execute("SELECT * FROM c").items.isEmpty)
            #expect(try await store.lastSequence() == 0)
            // The rolled-back transaction used no number, and published nothing.
            let next = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'kept'})")
            #expect(next.transactionID?.sequence == 1)
            #expect(await commits.next()?.transactions == [next.transactionID!])
        }
    }

    struct Abandon: Error {}

    /// A body that throws rolls the transaction back, and `transaction` throws one
    /// typed error: `.aborted` carrying the app's own error, a `ShoalError` as it was.
    @Test func throwingFromTheBodyRollsBackAndThrowsTheAppsErrorInside() async throws {
        try await Self.withStore { (store: DocumentStore) async throws in
            let aborted = await #expect(throws: ShoalError.self) {
                try await store.transaction(hint: "doomed") { tx in
                    _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'gone'})")
                    throw Abandon()
                }
            }
            #expect(aborted?.code == .aborted)
            #expect(aborted?.underlyingError is Abandon)
            #expect(aborted?.message.contains("transaction 'doomed'") == true, "\(aborted?.message ?? "")")
            let generic = await #expect(throws: ShoalError.self) {
                let _: Int = try await store.transaction { tx in
                    _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'gone too'})")
                    throw Abandon()
                }
            }
            #expect(generic?.underlyingError is Abandon)
            // A store error the body lets through is thrown as it is.
            let own = await #expect(throws: ShoalError.self) {
                try await store.transaction { tx in
                    _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'gone three'})")
                    _ = try await tx.execute("SELEKT")
                    return .commit
                }
            }
            #expect(own?.code == .invalidQuery)
            #expect(own?.underlyingError == nil)
            #expect(try await store.execute("SELECT * FROM c").items.isEmpty)
            #expect(try await store.lastSequence() == 0)
            #expect(store.runningTransactions.isEmpty)
        }
    }

    @Test func aCaughtErrorUndoesOnlyItsOwnExecute() async throws {
        try await Self.withStore { store in
            let result = try await store.transaction { tx in
                _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'a'})")
                let error = await #expect(throws: ShoalError.self) {
                    // b is inserted, then the duplicate a fails: the whole call is undone.
                    try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'b'}); INSERT INTO c DOCUMENTS ({'_id': 'a'})")
                }
                #expect(error?.code == .documentExists)
                #expect(try await tx.execute("SELECT * FROM c").items == [["_id": "a"]])
                _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'c'})")
                return .commit
            }
            let id = try #require(result.transactionID)
            #expect(try await store.execute("SELECT _id FROM c").items == [["_id": "a"], ["_id": "c"]])
            let deltas = try await store.changes(after: 0, limit: 100, subscriptions: try Self.everything("c")).deltas
            #expect(deltas.map(\.documentID) == ["\"a\"", "\"c\""], "nothing of the undone call is logged")
            #expect(deltas.map(\.index) == [0, 1] && deltas.allSatisfy { $0.transaction == id && $0.count == 2 })
        }
    }

    @Test func theValueFormCommitsWhenTheBodyReturns() async throws {
        try await Self.withStore { store in
            var captured: (any DocumentTransaction)?
            let count = try await store.transaction(hint: "value") { tx in
                captured = tx
                _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'a'}), ({'_id': 'b'})")
                return try await tx.execute("SELECT COUNT(*) AS n FROM c").items
            }
            #expect(count == [["n": 2]])
            let tx = try #require(captured)
            let id = try #require(tx.transactionID)
            #expect(try await store.changes(after: 0, limit: 100, subscriptions: try Self.everything("c")).pieces.map(\.id) == [id])
            let late = await #expect(throws: ShoalError.self) { try await tx.execute("SELECT * FROM c") }
            #expect(late?.code == .closed && late?.message.contains("has already committed") == true)
            // A body that writes nothing commits nothing.
            let idle = try await store.transaction { tx in try await tx.execute("SELECT * FROM c").items.count }
            #expect(idle == 2)
            #expect(try await store.lastSequence() == 1, "one row: the one transaction's two documents")
        }
    }

    /// A view model on the main actor, as an app would have: its bodies touch its own state.
    @MainActor final class CarList {
        var names: [String] = []
        var loads = 0

        func add(_ name: String, to store: DocumentStore) async throws {
            try await store.transaction(hint: "add a car") { tx in
                _ = try await tx.execute("INSERT INTO cars DOCUMENTS ({'_id': :n})", arguments: ["n": .string(name)])
                self.names.append(name)
                return .commit
            }
        }

        func reload(from store: DocumentStore) async throws {
            names = try await store.transaction(isReadOnly: true) { tx in
                self.loads += 1
                return try await tx.execute("SELECT _id FROM cars").items.compactMap { $0["_id"]?.stringValue }
            }
        }
    }

    @MainActor @Test func aBodyRunsInItsCallersIsolation() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        let list = CarList()
        try await list.add("a", to: store)
        try await list.add("b", to: store)
        list.names = []
        try await list.reload(from: store)
        #expect(list.names == ["a", "b"] && list.loads == 1)
    }

    /// The README's example, as written there.
    static func transfer(_ store: DocumentStore) async throws -> TransactionResult {
        try await store.transaction(hint: "transfer") { tx in
            let from = try await tx.execute("SELECT balance FROM accounts WHERE _id = 'a'").items
            guard let balance = from.first?["balance"]?.numberValue, balance >= 10 else { return .rollback }
            _ = try await tx.execute("UPDATE accounts SET balance = balance - 10 WHERE _id = 'a'")
            _ = try await tx.execute("UPDATE accounts SET balance = balance + 10 WHERE _id = 'b'")
            return .commit
        }
    }

    @Test func theReadmeTransferMovesMoneyOnlyWhenThereIsEnough() async throws {
        try await Self.withStore { store in
            _ = try await store.execute(
                "INSERT INTO accounts DOCUMENTS ({'_id': 'a', 'name': 'Ann', 'balance': 15}), ({'_id': 'b', 'name': 'Bo', 'balance': 0})")
            let first = try await Self.transfer(store)
            #expect(first.completion == .commit && first.transactionID?.sequence == 2)
            let second = try await Self.transfer(store)
            #expect(second.completion == .rollback && second.transactionID == nil)
            let names = try await store.transaction(isReadOnly: true) { tx in
                try await tx.execute("SELECT name FROM accounts").items
            }
            #expect(names == [["name": "Ann"], ["name": "Bo"]])
            #expect(try await store.execute("SELECT balance FROM accounts").items == [["balance": 5], ["balance": 10]])
        }
    }

    // MARK: Read-only transactions

    @Test func aReadOnlyTransactionReadsOneSnapshotWhileAWriterCommits() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'n': 1})")
            let readerHasRead = Latch(), writerCommitted = Latch()
            // reader (read-only transaction)            writer
            // ─────────────────────────────────          ──────────────────────────────
            // SELECT -> [a: 1]
            // signals readerHasRead ───────────────────► waits for readerHasRead
            //                                            UPDATE a SET n = 2; INSERT b
            //                                            commits (does not wait for the reader)
            // waits for writerCommitted ◄──────────────  signals writerCommitted
            // SELECT -> [a: 1] still: the same snapshot
            // ends
            // a new read -> [a: 2, b]
            try await withHangGuard {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        let result = try await store.transaction(hint: "report", isReadOnly: true) { tx in
                            #expect(tx.info.isReadOnly)
                            let before = try await tx.execute("SELECT * FROM c").items
                            #expect(before == [["_id": "a", "n": 1]])
                            readerHasRead.open()
                            try await writerCommitted.wait()
                            #expect(try await tx.execute("SELECT * FROM c").items == before)
                            #expect(try await tx.execute("SELECT COUNT(*) AS n FROM c").items == [["n": 1]])
                            return .commit
                        }
                        #expect(result.transactionID == nil, "a read-only transaction commits nothing")
                    }
                    group.addTask {
                        try await readerHasRead.wait()
                        let write = try await store.execute("UPDATE c SET n = 2 WHERE _id = 'a'; INSERT INTO c DOCUMENTS ({'_id': 'b'})")
                        #expect(write.transactionID?.sequence == 2)
                        writerCommitted.open()
                    }
                    try await group.waitForAll()
                }
            }
            #expect(try await store.execute("SELECT * FROM c").items == [["_id": "a", "n": 2], ["_id": "b"]])
        }
    }

    @Test func readOnlyTransactionsRunBesideEachOtherAndBesideTheWriter() async throws {
        try await Self.withStore { store in
            let writerInside = Latch(), firstInside = Latch(), secondInside = Latch()
            // writer: holds the writer until both readers have been inside at the same time.
            // first reader ──► signals, waits for the second ──► ends
            // second reader ─► signals, waits for the first ──► ends
            try await withHangGuard {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        try await store.transaction { tx in
                            _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'pending'})")
                            writerInside.open()
                            try await firstInside.wait()
                            try await secondInside.wait()
                            return .commit
                        }
                    }
                    for (mine, other) in [(firstInside, secondInside), (secondInside, firstInside)] {
                        group.addTask {
                            try await writerInside.wait()
                            try await store.transaction(isReadOnly: true) { tx in
                                #expect(try await tx.execute("SELECT * FROM c").items.isEmpty, "the writer has not committed")
                                mine.open()
                                try await other.wait()
                                return .commit
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            #expect(try await store.execute("SELECT * FROM c").items == [["_id": "pending"]])
        }
    }

    @Test func aReadOnlyTransactionRefusesStatementsThatWrite() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a'})")
            let result = try await store.transaction(hint: "report", isReadOnly: true) { tx in
                let error = try await #require(throws: ShoalError.self) {
                    try await tx.execute("SELECT * FROM c;\n  UPDATE c SET n = 1")
                }
                #expect(error.code == .readOnly)
                #expect(
                    error.message.hasPrefix(
                        "line 2, column 3: UPDATE c SET n = 1 writes, but it runs in read-only transaction 'report'; nothing ran"),
                    "\(error.message)")
                #expect(error.message.hasSuffix("UPDATE c SET n = 1\n  ^"), "the offending line is shown")
                for statement in ["INSERT INTO c DOCUMENTS ({'_id': 'b'})", "DELETE FROM c", "EVICT FROM c"] {
                    let refused = await #expect(throws: ShoalError.self) { try await tx.execute(statement) }
                    #expect(refused?.code == .readOnly && refused?.message.contains(statement) == true)
                }
                #expect(try await tx.execute("SELECT * FROM c").items == [["_id": "a"]], "it can still read")
                return .commit
            }
            #expect(result.transactionID == nil)
            #expect(try await store.execute("SELECT * FROM c").items == [["_id": "a"]])
            #expect(try await store.lastSequence() == 1)
        }
    }

    // MARK: One writer at a time

    @Test func readWriteTransactionsRunOneAfterAnotherInOrderOfArrival() async throws {
        try await Self.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'n': 0})")
            let events = EventLog()
            let firstInside = Latch()
            // first                       second (transaction)           third (execute)
            // ─────                       ────────────────────           ───────────────
            // begins, reads n = 0
            // signals firstInside ──────► waits for the writer
            //                                                            waits behind second
            // (the test sees two waiters)
            // sets n = 1, commits
            //                             begins, reads n = 1, sets 2
            //                             commits
            //                                                            n = n + 100, commits
            try await withHangGuard {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    let proceed = Latch()
                    group.addTask {
                        try await store.transaction(hint: "first") { tx in
                            events.append("first begins")
                            #expect(try await tx.execute("SELECT n FROM c").items == [["n": 0]])
                            firstInside.open()
                            try await proceed.wait()
                            _ = try await tx.execute("UPDATE c SET n = 1")
                            events.append("first ends")
                            return .commit
                        }
                    }
                    try await firstInside.wait()
                    group.addTask {
                        try await store.transaction(hint: "second") { tx in
                            events.append("second begins")
                            #expect(try await tx.execute("SELECT n FROM c").items == [["n": 1]], "it sees the first's commit")
                            _ = try await tx.execute("UPDATE c SET n = n + 1")
                            events.append("second ends")
                            return .commit
                        }
                    }
                    #expect(await InProcessMesh.eventually { store.gate.waiterCount == 1 })
                    group.addTask {
                        _ = try await store.execute("UPDATE c SET n = n + 100")
                        events.append("third committed")
                    }
                    #expect(await InProcessMesh.eventually { store.gate.waiterCount == 2 })
                    proceed.open()
                    try await group.waitForAll()
                }
            }
            #expect(
                events.all == ["first begins", "first ends", "second begins", "second ends", "third committed"])
            #expect(try await store.execute("SELECT n FROM c").items == [["n": 102]])
            let ids = try await store.changes(after: 0, limit: 100, subscriptions: try Self.everything("c")).pieces.map(\.id.sequence)
            #expect(ids == [1, 2, 3, 4], "the insert, then one transaction each, in the order they ran")
        }
    }

    @Test func writingBesideAnOpenReadWriteTransactionThrowsAtOnce() async throws {
        try await Self.withStore { store in
            try await withHangGuard {
                let result = try await store.transaction(hint: "outer") { tx in
                    _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'a'})")
                    let expected =
                        "a read-write transaction 'outer' is open in this task; "
                        + "write through that transaction (the `tx` its closure was given), or finish it first"
                    let nested = await #expect(throws: ShoalError.self) {
                        try await store.transaction(hint: "inner") { _ in .commit }
                    }
                    #expect(nested?.code == .nestedTransaction && nested?.message == expected)
                    let misuses: [(String, @Sendable () async throws -> Void)] = [
                        ("execute", { _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'b'})") }),
                        ("putAttachment", { _ = try await store.putAttachment([1, 2, 3]) }),
                        ("saveSubscription", {
                            try await store.saveSubscription(SavedSubscription(id: "s", query: "SELECT * FROM c", arguments: [:]))
                        }),
                        ("value transaction", { _ = try await store.transaction { _ in 1 } }),
                    ]
                    for (name, misuse) in misuses {
                        let error = await #expect(throws: ShoalError.self, "\(name)") { try await misuse() }
                        #expect(error?.code == .nestedTransaction, "\(name)")
                    }
                    // Child tasks inherit the mark, so they are refused too instead of waiting.
                    let fromChild = await #expect(throws: ShoalError.self) {
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask { _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'c'})") }
                            try await group.waitForAll()
                        }
                    }
                    #expect(fromChild?.code == .nestedTransaction)
                    // Reading beside it is allowed, and sees the last committed state.
                    #expect(try await store.execute("SELECT * FROM c").items.isEmpty)
                    let seen = try await store.transaction(isReadOnly: true) { ro in try await ro.execute("SELECT * FROM c").items }
                    #expect(seen.isEmpty)
                    return .commit
                }
                #expect(result.transactionID != nil)
            }
            #expect(try await store.execute("SELECT * FROM c").items == [["_id": "a"]])
            #expect(try await store.savedSubscriptions().isEmpty)
        }
    }

    @Test func aCancelledTaskReleasesTheWriterAndLeavesNothingOpen() async throws {
        try await Self.withStore { store in
            let inside = Latch()
            try await withHangGuard {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        try await store.transaction(hint: "cancelled") { tx in
                            _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'never'})")
                            inside.open()
                            try await Task.sleep(for: .seconds(3600))
                            return .commit
                        }
                    }
                    try await inside.wait()
                    // A second writer waits for the first and is cancelled while it waits.
                    group.addTask { _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'waiter'})") }
                    #expect(await InProcessMesh.eventually { store.gate.waiterCount == 1 })
                    group.cancelAll()
                    var failures: [any Error] = []
                    while let result = await group.nextResult() {
                        if case .failure(let error) = result { failures.append(error) }
                    }
                    #expect(failures.count == 2)
                    // Both as `.cancelled`: the body's own CancellationError and the waiter's.
                    #expect(failures.allSatisfy { ($0 as? ShoalError)?.code == .cancelled }, "\(failures)")
                }
            }
            #expect(store.gate.waiterCount == 0)
            #expect(store.runningTransactions.isEmpty)
            #expect(try await store.execute("SELECT * FROM c").items.isEmpty)
            // The writer is free and no SQLite transaction was left open.
            let after = try await withHangGuard { try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'after'})") }
            #expect(after.transactionID?.sequence == 1)
            let next = try await withHangGuard { try await store.transaction { tx in try await tx.execute("SELECT * FROM c").items } }
            #expect(next == [["_id": "after"]])
        }
    }

    // MARK: Long transactions, parameters, shutdown

    @Test func systemParametersAreShownAndChangedPerStore() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        let defaults: [Value] = [
            ["name": "document_size_hard_limit_bytes", "value": 4_194_304],
            ["name": "document_size_soft_limit_bytes", "value": 262_144],
            ["name": "transaction_duration_before_logging_ms", "value": 10_000],
            ["name": "transaction_trace_interval_ms", "value": 5_000],
        ]
        #expect(try await store.execute("SHOW ALL").items == defaults)
        let set = try await store.execute(
            "ALTER SYSTEM SET TRANSACTION_TRACE_INTERVAL_MS = :ms", arguments: ["ms": 250])
        #expect(set.items == [["name": "transaction_trace_interval_ms", "value": 250]], "names ignore case")
        #expect(set.transactionID == nil, "ALTER SYSTEM writes no document")
        #expect(try await store.execute("SHOW transaction_trace_interval_ms").items == [["name": "transaction_trace_interval_ms", "value": 250]])
        #expect(store.systemParameters.transactionTraceIntervalMilliseconds == 250)
        // In a read-only transaction too, and a rollback does not undo it.
        _ = try await store.transaction(isReadOnly: true) { tx in
            _ = try await tx.execute("ALTER SYSTEM SET transaction_duration_before_logging_ms = 60000")
            return .rollback
        }
        #expect(store.systemParameters.transactionDurationBeforeLoggingMilliseconds == 60_000)

        // Another store keeps its own, and a reopened store starts from its initial values again.
        let otherDir = TemporaryDirectory()
        defer { otherDir.remove() }
        let other = try DocumentStore(
            directory: otherDir.path, parameters: SystemParameters(transactionTraceIntervalMilliseconds: 1_000))
        defer { other.close() }
        #expect(try await other.execute("SHOW ALL").items.last == ["name": "transaction_trace_interval_ms", "value": 1_000])
        store.close()
        let reopened = try DocumentStore(directory: dir.path)
        defer { reopened.close() }
        #expect(try await reopened.execute("SHOW ALL").items == defaults)
    }

    static let known =
        "the parameters are document_size_hard_limit_bytes (a whole number of bytes, at least 1), "
        + "document_size_soft_limit_bytes (a whole number of bytes, at least 1), "
        + "transaction_duration_before_logging_ms (a whole number of milliseconds, at least 1) "
        + "and transaction_trace_interval_ms (a whole number of milliseconds, at least 1)"

    @Test(arguments: [
        ("ALTER SYSTEM SET transaction_timeout_ms = 5", 18, "unknown system parameter 'transaction_timeout_ms': \(known)"),
        ("SHOW nope", 6, "unknown system parameter 'nope': \(known)"),
        (
            "ALTER SYSTEM SET transaction_trace_interval_ms = 'fast'", 50,
            "transaction_trace_interval_ms takes a whole number of milliseconds, at least 1, got string \"fast\"; \(known)"
        ),
        (
            "ALTER SYSTEM SET transaction_trace_interval_ms = 0", 50,
            "transaction_trace_interval_ms takes a whole number of milliseconds, at least 1, got number 0; \(known)"
        ),
        (
            "SHOW ALL;\nALTER SYSTEM SET transaction_duration_before_logging_ms = 2.5", 59,
            "transaction_duration_before_logging_ms takes a whole number of milliseconds, at least 1, got number 2.5; \(known)"
        ),
        (
            "ALTER SYSTEM SET transaction_trace_interval_ms = TRUE", 50,
            "transaction_trace_interval_ms takes a whole number of milliseconds, at least 1, got boolean true; \(known)"
        ),
    ])
    func systemParameterErrorsNameTheKnownParameters(text: String, column: Int, message: String) async throws {
        try await Self.withStore { store in
            let error = try await #require(throws: ShoalError.self) { try await store.execute(text) }
            #expect(error.code == .invalidQuery)
            #expect(error.queryError?.message == message)
            #expect(error.queryError?.position?.column == column)
            #expect(error.message.contains("column \(column): \(message)\n"), "the message shows the line: \(error.message)")
            #expect(store.systemParameters == SystemParameters(), "nothing changed")
        }
    }

    @Test func shutdownWaitsForTheRunningTransactionThenCloses() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        let inside = Latch(), finish = Latch(), shutDown = Latch()
        try await withHangGuard {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await store.transaction(hint: "last words") { tx in
                        _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'first'})")
                        inside.open()
                        try await finish.wait()
                        _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'second'})")
                        return .commit
                    }
                }
                try await inside.wait()
                group.addTask {
                    await store.shutdown()
                    shutDown.open()
                }
                // Once shutdown has begun, new work is refused with a clear error.
                #expect(await InProcessMesh.eventually { (try? await store.execute("SELECT * FROM c")) == nil })
                let refused = await #expect(throws: ShoalError.self) { try await store.transaction { _ in .commit } }
                #expect(refused?.code == .closed && refused?.message.contains("shutting down") == true)
                let write = await #expect(throws: ShoalError.self) { try await store.putAttachment([1]) }
                #expect(write?.code == .closed)
                #expect(!shutDown.isOpen, "shutdown waits while a transaction runs")
                #expect(store.runningTransactions.map(\.hint) == ["last words"])
                finish.open()
                try await group.waitForAll()
            }
        }
        #expect(shutDown.isOpen)
        let reopened = try DocumentStore(directory: dir.path)
        defer { reopened.close() }
        #expect(try await reopened.execute("SELECT _id FROM c").items == [["_id": "first"], ["_id": "second"]])
    }

    @Test func shutdownInsideATransactionDoesNotWaitForItself() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        let error = try await withHangGuard {
            await #expect(throws: ShoalError.self) {
                try await store.transaction(hint: "closes its own store") { tx in
                    _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'lost'})")
                    await store.shutdown()
                    return .commit
                }
            }
        }
        #expect(error?.code == .database, "the commit fails on the closed store: \(String(describing: error))")
        #expect(store.runningTransactions.isEmpty)
        let refused = await #expect(throws: ShoalError.self) { try await store.execute("SELECT * FROM c") }
        #expect(refused?.code == .closed)
        let reopened = try DocumentStore(directory: dir.path)
        defer { reopened.close() }
        #expect(try await reopened.execute("SELECT * FROM c").items.isEmpty)
    }
}

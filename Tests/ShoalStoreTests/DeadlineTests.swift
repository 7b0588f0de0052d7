import ShoalCRDT
@testable import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// A request's budget (PROTOCOL.md §10.2): the decision with the time passed in, then
/// the store keeping it while it waits for the writer and right before COMMIT.
@Suite struct DeadlineTests {
    // MARK: The decision, no store

    @Test(arguments: [
        (elapsed: 0, passed: false), (elapsed: 1_999, passed: false), (elapsed: 2_000, passed: true), (elapsed: 60_000, passed: true),
    ])
    func aBudgetRunsOutAtItsInstantAndNotBefore(elapsed: Int, passed: Bool) {
        let read = ContinuousClock.now
        let deadline = Deadline(budget: .milliseconds(2_000), from: read)
        let now = read + .milliseconds(elapsed)
        #expect(deadline.hasPassed(at: now) == passed)
        var thrown: ShoalError?
        do { try deadline.check(.beforeCommit, at: now) } catch { thrown = error }
        #expect(thrown?.code == (passed ? .deadlineExceeded : nil))
    }

    @Test func theErrorSaysNothingWasWrittenAndWhereItStopped() {
        let deadline = Deadline(budget: .milliseconds(2_500))
        let waiting = deadline.exceeded(.waitingForWriter)
        #expect(waiting.code == .deadlineExceeded)
        #expect(
            waiting.message
                == "the request's budget of 2500 ms ran out while it waited for the node's writer (another transaction held it): nothing was written, so it was not applied and can be retried")
        #expect(deadline.exceeded(.beforeCommit).message.hasPrefix("the request's budget of 2500 ms ran out before it committed: nothing was written"))
    }

    // MARK: The writer

    @Test func aWaiterWhoseDeadlinePassesLeavesTheQueueAndNeverHoldsTheGate() async throws {
        let gate = WriteGate()
        try await gate.acquire()
        let started = ContinuousClock.now
        // A guard turns a wait that never ends into a failure.
        let refusal = await #expect(throws: WriteGate.Refusal.self) {
            try await withHangGuard(.seconds(10)) { try await gate.acquire(deadline: .now + .milliseconds(200)) }
        }
        #expect(refusal == .deadlinePassed)
        #expect(ContinuousClock.now - started >= .milliseconds(200))
        #expect(gate.waiterCount == 0, "the waiter left the queue")
        gate.release()
        #expect(gate.tryAcquire(), "the gate went to nobody: it is free")
        gate.release()

        // Past its deadline a caller is refused even when the gate is free.
        let late = await #expect(throws: WriteGate.Refusal.self) { try await gate.acquire(deadline: .now - .milliseconds(1)) }
        #expect(late == .deadlinePassed)
        #expect(gate.tryAcquire())
        gate.release()
    }

    @Test func aWaiterHandedTheGateBeforeItsDeadlineHoldsIt() async throws {
        let gate = WriteGate()
        try await gate.acquire()
        try await withHangGuard {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await gate.acquire(deadline: .now + .seconds(30)) }
                #expect(await InProcessMesh.eventually { gate.waiterCount == 1 })
                gate.release()
                try await group.waitForAll()
            }
        }
        #expect(!gate.tryAcquire(), "the waiter holds it")
        gate.release()
    }

    // MARK: The store

    static func counter(_ store: DocumentStore) async throws -> Value? {
        try await store.execute("SELECT n FROM c WHERE _id = 'k'").items.first?["n"]
    }

    /// The case in the store: an increment waits for a writer held by an open
    /// transaction; its budget runs out first, so it gives up, and it is not applied
    /// when the writer is released. Its retry is applied once.
    ///
    /// ```
    ///  holder:    BEGIN ─────────────────────────────────────── COMMIT (once it gave up)
    ///  increment:   waits for the writer ── 300 ms: gives up, nothing written
    ///  retry:                                                     INCREMENT, commits
    /// ```
    @Test func anIncrementWhoseBudgetRunsOutWhileTheWriterIsHeldIsNotApplied() async throws {
        try await TransactionTests.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'k'}); UPDATE c APPLY n INCREMENT BY 1 WHERE _id = 'k'")
            let holding = Latch()
            let release = Latch()
            let gaveUp = Locked<ShoalError?>(nil)
            try await withHangGuard {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        try await store.transaction(hint: "holder") { _ in
                            holding.open()
                            try await release.wait()
                            return .commit
                        }
                    }
                    try await holding.wait()
                    group.addTask {
                        do throws(ShoalError) {
                            _ = try await store.execute(
                                "UPDATE c APPLY n INCREMENT BY 1 WHERE _id = 'k'", deadline: Deadline(budget: .milliseconds(300)))
                        } catch {
                            gaveUp.withLock { $0 = error }
                        }
                    }
                    // The holder still holds the writer: the increment gives up all the same.
                    #expect(await InProcessMesh.eventually(timeout: .seconds(10)) { gaveUp.withLock { $0 } != nil })
                    let error = gaveUp.withLock { $0 }
                    #expect(error?.code == .deadlineExceeded, "the increment was still waiting for the writer")
                    #expect(error?.message.contains("while it waited for the node's writer") == true)
                    #expect(store.gate.waiterCount == 0)
                    release.open()
                    try await group.waitForAll()
                }
            }
            #expect(try await Self.counter(store) == 1, "the increment that gave up was applied all the same")
            _ = try await store.execute("UPDATE c APPLY n INCREMENT BY 1 WHERE _id = 'k'", deadline: Deadline(budget: .seconds(30)))
            #expect(try await Self.counter(store) == 2, "the retry is applied once")
        }
    }

    @Test func aWriteStillRunningWhenItsBudgetRunsOutRollsBackBeforeCommit() async throws {
        try await TransactionTests.withStore { store in
            let documents = (0..<5_000).map { "({'_id': \($0), 'n': 0})" }.joined(separator: ", ")
            _ = try await store.execute("INSERT INTO c DOCUMENTS \(documents)")
            let logged = try await store.lastSequence()
            // The writer is free: it starts at once, and 5,000 updates outlast 20 ms.
            let error = await #expect(throws: ShoalError.self) {
                try await store.execute("UPDATE c SET n = 1", deadline: Deadline(budget: .milliseconds(20)))
            }
            #expect(error?.code == .deadlineExceeded)
            #expect(error?.message.contains("ran out before it committed: nothing was written") == true)
            #expect(try await store.execute("SELECT COUNT(*) AS n FROM c WHERE n = 1").items == [["n": 0]])
            #expect(try await store.lastSequence() == logged, "only the insert is in the log")
            // Past its budget before it starts, a write is refused though the writer is free.
            let late = await #expect(throws: ShoalError.self) {
                try await store.execute(
                    "UPDATE c SET n = 2", deadline: Deadline(budget: .milliseconds(5), from: .now - .seconds(1)))
            }
            #expect(late?.code == .deadlineExceeded)
            // Reads ignore the budget.
            let read = try await store.execute("SELECT COUNT(*) AS n FROM c", deadline: Deadline(budget: .zero))
            #expect(read.items == [["n": 5_000]])
        }
    }

    @Test func aTransactionThatMustCommitBeforeAPassedDeadlineRollsBack() async throws {
        try await TransactionTests.withStore { store in
            let error = await #expect(throws: ShoalError.self) {
                try await store.transaction(hint: "late commit") { tx in
                    _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'a'})")
                    tx.mustCommit(before: Deadline(budget: .milliseconds(100), from: .now - .seconds(1)))
                    return .commit
                }
            }
            #expect(error?.code == .deadlineExceeded)
            #expect(try await store.execute("SELECT * FROM c").items.isEmpty)
            #expect(try await store.lastSequence() == 0)
            // The writer is free and the transaction counter was not used up.
            let next = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'b'})")
            #expect(next.transactionID?.sequence == 1)
        }
    }
}

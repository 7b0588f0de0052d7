import ShoalCRDT
import ShoalStorage
import ShoalSync

/// Holds the transaction of one admin connection across its requests.
///
/// `store.transaction` runs its body in one task for the transaction's whole life,
/// and a read-write one holds the store's writer all that time; an admin
/// connection's transaction spans several requests. So one child task of the
/// connection (`run`) takes the connection's commands from a stream: a `begin`
/// opens a real store transaction, whose body then takes the following commands
/// (statements) one by one until `end`, or until the stream finishes because the
/// connection ended, which rolls it back.
///
/// ```
///  request loop ── send(.begin) ──► stream ──► run: store.transaction { tx in
///               ◄─ reply (open) ─────────────────     reply(open)
///               ── send(.exec) ───► stream ──►       tx.execute … reply(result)
///               ── send(.end) ────► stream ──►       return .commit / .rollback
///               ◄─ reply (committed) ──────────── }  reply(committed)
///  connection ends: finish() ──────► stream ends ──►  return .rollback
/// ```
final class TransactionHolder: Sendable {
    enum Command: Sendable {
        case begin(hint: String?, readOnly: Bool)
        case exec(statements: String, arguments: [String: Value])
        /// A commit with a deadline commits only before it, or rolls back.
        case end(AdminTransactionStateMachine.Ending, deadline: Deadline?)
    }

    struct Envelope: Sendable {
        let command: Command
        let reply: Reply
    }

    /// Where the answer to one command goes, exactly once: a command dropped
    /// unanswered (the stream ended, the task was cancelled) answers on release.
    final class Reply: Sendable {
        private let continuation: Locked<CheckedContinuation<Result<AdminResponse, ShoalError>, Never>?>

        init(_ continuation: CheckedContinuation<Result<AdminResponse, ShoalError>, Never>) {
            self.continuation = Locked(continuation)
        }

        func resume(_ result: Result<AdminResponse, ShoalError>) {
            continuation.withLock { c in
                defer { c = nil }
                return c
            }?.resume(returning: result)
        }

        deinit {
            resume(.failure(ShoalError(.closed, "the connection's transaction ended before it answered")))
        }
    }

    let store: any DocumentDatabase
    let client: String
    let held: HeldTransactions
    private let commands: AsyncStream<Envelope>
    private let continuation: AsyncStream<Envelope>.Continuation

    init(store: any DocumentDatabase, client: String, held: HeldTransactions) {
        self.store = store
        self.client = client
        self.held = held
        (commands, continuation) = AsyncStream.makeStream(of: Envelope.self)
    }

    /// Hands `command` to `run` and waits for its answer.
    func send(_ command: Command) async -> Result<AdminResponse, ShoalError> {
        await withCheckedContinuation { c in
            let reply = Reply(c)
            if case .terminated = continuation.yield(Envelope(command: command, reply: reply)) {
                reply.resume(.failure(ShoalError(.closed, "the connection is closing")))
            }
        }
    }

    /// The connection ended: the open transaction, if any, rolls back and `run` returns.
    func finish() {
        continuation.finish()
    }

    /// Opens a transaction for each `begin` and holds it until its `end`, until `finish`.
    func run() async {
        var iterator = commands.makeAsyncIterator()
        while let envelope = await iterator.next() {
            guard case .begin(let hint, let readOnly) = envelope.command else {
                envelope.reply.resume(.failure(ShoalError(.closed, "this connection holds no transaction")))
                continue
            }
            await hold(hint: hint, readOnly: readOnly, begun: envelope.reply, commands: &iterator)
        }
    }

    /// One transaction, from its `begin` to its `end` or the end of the commands.
    private func hold(hint: String?, readOnly: Bool, begun: Reply, commands: inout AsyncStream<Envelope>.Iterator) async {
        var opened: SessionTransaction?
        var since = ContinuousClock.now
        var ending: Reply?
        do {
            let result = try await store.transaction(hint: hint, isReadOnly: readOnly) { tx in
                let open = SessionTransaction(
                    id: tx.info.id, hint: tx.info.hint, isReadOnly: tx.info.isReadOnly, state: .open, client: client)
                opened = open
                since = .now
                held.add(open, since: since)
                begun.resume(.success(.transaction(open)))
                while let envelope = await commands.next() {
                    switch envelope.command {
                    case .begin:
                        envelope.reply.resume(.failure(ShoalError(.closed, "this connection already holds a transaction")))
                    case .exec(let statements, let arguments):
                        do throws(ShoalError) {
                            let result = try await tx.execute(statements, arguments: arguments)
                            envelope.reply.resume(.success(.exec(ExecResult(result, transactionID: nil))))
                        } catch {
                            envelope.reply.resume(.failure(error))
                        }
                    case .end(let end, let deadline):
                        ending = envelope.reply
                        if let deadline { tx.mustCommit(before: deadline) }
                        return end == .commit ? .commit : .rollback
                    }
                }
                return .rollback  // the connection ended
            }
            var closed = opened!
            closed.state = result.completion == .commit ? .committed : .rolledBack
            closed.transactionID = result.transactionID?.description
            // Its whole life, as `status` counts it while it is open (PROTOCOL.md §10.1).
            closed.ageSeconds = HeldTransactions.age(since: since, now: .now)
            ending?.resume(.success(.transaction(closed)))
        } catch {
            (opened == nil ? begun : ending)?.resume(.failure(error))
        }
        if let opened { held.remove(opened.id) }
    }
}

/// The transactions admin connections hold open, for `status`.
final class HeldTransactions: Sendable {
    private let entries = Locked<[String: (transaction: SessionTransaction, since: ContinuousClock.Instant)]>([:])

    func add(_ transaction: SessionTransaction, since: ContinuousClock.Instant) {
        entries.withLock { $0[transaction.id] = (transaction, since) }
    }

    func remove(_ id: String) {
        _ = entries.withLock { $0.removeValue(forKey: id) }
    }

    /// Oldest first, each with its age now.
    var transactions: [SessionTransaction] {
        let now = ContinuousClock.now
        return entries.withLock { $0.values }.sorted { $0.since < $1.since }.map { entry in
            var transaction = entry.transaction
            transaction.ageSeconds = Self.age(since: entry.since, now: now)
            return transaction
        }
    }

    /// Seconds from `since` to `now`, to the millisecond.
    static func age(since: ContinuousClock.Instant, now: ContinuousClock.Instant) -> Double {
        Double((now - since) / .milliseconds(1)) / 1000
    }
}

package import Logging
package import ShoalCRDT
package import ShoalStorage

/// Tells a hub's observers of every commit to the shared change log, the hub's own and
/// the other hubs', in log order: each part of the log once, none skipped.
///
/// A hub hears of the others' commits only as a new end of the log (`heard`), and its
/// own commits come with what they appended: an own commit whose rows start past what
/// was told means another hub committed in between, and those commits are read from
/// the log (their transactions and collections) and told first. One call at a time
/// (`turn`): a read of the log in flight must not let a later commit be told before it.
/// A read that fails tells nothing and leaves the point where it was, so the next end
/// heard (the announcement, or the slow timer of `followOtherHubs`) reads it again.
package final class CommitAnnouncer: Sendable {
    private let feed: ChangeFeed<Commit>
    private let logger: Logger
    private let turn = WriteGate()
    /// How far the log was told to observers, and how to read it past there.
    private let state = Locked<(through: UInt64, read: (@Sendable (UInt64, UInt64) async throws -> Commit?)?)>((0, nil))

    package init(feed: ChangeFeed<Commit>, logger: Logger) {
        self.feed = feed
        self.logger = logger
    }

    /// Starts at the log's end `sequence`, reading what other hubs commit from `store`.
    func start(at sequence: UInt64, reading store: PostgresStore) {
        start(at: sequence) { [weak store] from, to in try await store?.commit(after: from, through: to) }
    }

    /// Starts at `sequence`, reading the commits of the log's rows after one sequence
    /// through another with `read`.
    package func start(at sequence: UInt64, read: @escaping @Sendable (UInt64, UInt64) async throws -> Commit?) {
        state.withLock { $0 = (sequence, read) }
    }

    /// This hub's own commit, which appended the log's rows after `after`. Told only
    /// when it is next: an end heard before it (this hub's own announcement, or the
    /// slow timer) may have told it already, and a read of the commits before it that
    /// failed leaves it to the next read, with them.
    package func committed(_ commit: Commit, after: UInt64) async {
        await inTurn {
            if after > state.withLock({ $0.through }) { await catchUp(to: after) }
            let next = state.withLock { s -> Bool in
                guard s.through == after else { return false }
                s.through = commit.sequence
                return true
            }
            if next { feed.publish(commit) }
        }
    }

    /// The log runs through `end` now, by other hubs' commits.
    package func heard(_ end: UInt64) async {
        await inTurn {
            if end > state.withLock({ $0.through }) { await catchUp(to: end) }
        }
    }

    private func catchUp(to end: UInt64) async {
        let (through, read) = state.withLock { $0 }
        guard let read else { return }
        // No observer listens: nothing to read. One that starts listening later reads
        // its first state after this, which holds these commits already.
        guard feed.hasListeners else {
            state.withLock { $0.through = max($0.through, end) }
            return
        }
        do {
            if let commit = try await read(through, end) { feed.publish(commit) }
            state.withLock { $0.through = max($0.through, end) }
        } catch {
            logger.warning(
                "reading the other hubs' commits for observers failed; read again at the next end heard: \(error)",
                metadata: ["shoal.log.from": "\(through)", "shoal.log.to": "\(end)"])
        }
    }

    private func inTurn(_ body: () async -> Void) async {
        do {
            try await turn.acquire(cancellable: false)
        } catch {
            return  // closed: the store is closing, and so is the feed
        }
        defer { turn.release() }
        await body()
    }

    func close() { turn.close(admittingNested: false) }
}

extension PostgresStore {
    /// The commits of the log's rows after `from` through `to`, as one: their
    /// transactions and collections; nil when there are none.
    func commit(after from: UInt64, through to: UInt64) async throws -> Commit? {
        let records = try await snapshot("reading the other hubs' commits") { connection in
            try await Self.logRows(connection, "seq > \(Int64(from)) AND seq <= \(Int64(to)) ORDER BY seq", logger: self.logger)
        }
        var transactions: [TransactionID] = []
        var collections: Set<String> = []
        var rows: [LogRow] = []
        for record in records {
            rows.removeAll(keepingCapacity: true)
            try record.decode(into: &rows)
            if transactions.last != record.transaction { transactions.append(record.transaction) }
            for row in rows { collections.insert(row.delta.collection) }
        }
        return transactions.isEmpty ? nil : Commit(transactions: transactions, collections: collections, sequence: to)
    }
}

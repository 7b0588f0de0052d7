package import ShoalCRDT
package import ShoalStorage

/// What a peer gets of this node's change log: the store's rows, turned into pieces of
/// transactions by `PiecePlanner`. The store reads, a batch at a time: a page of rows
/// with the records of its transactions (`SyncStore.logPage`), the bodies the planner
/// must judge (`bodies`; for a lazy origin's transaction, a chunk at a time until one
/// is wanted), and the current fields of the documents whose context goes along
/// (`currentFields`); following supersession out of the log asks `logHolds` and
/// `storedTransactions` for the first round of every transaction of the page at once,
/// then once per round of those not answered yet, each transaction asked about once per
/// page (`SupersessionMemo`). The planner decides.
extension SyncStore {
    /// Reads the change log after `sequence` for a peer with `subscriptions`.
    ///
    /// Reads about `limit` deltas (more, up to 4 times as many, to finish the
    /// transaction the limit falls in) and at most about `byteLimit` bytes of values (at
    /// least one row), and turns them into pieces of their transactions:
    /// - a piece carries the deltas of documents whose **current** body the
    ///   subscriptions match; rows of transactions that `peer` originated are left out
    ///   (it holds its own writes), and so are those `skipping` names (the peer sent
    ///   them here), before any piece of them is built;
    /// - a piece is the transaction's last when the transaction's run of rows ends in
    ///   this page (`resuming`: the page follows a resume point, so a run it starts in
    ///   the middle of counts as continuing); the last piece carries a verdict for each
    ///   collection of the manifest (`lastPieceVerdicts`). A transaction in `continuing`
    ///   (one that earlier pages sent part of) gets its last piece even when it carries
    ///   no delta; any other transaction with nothing to send is left out;
    /// - when a sent delta writes a field that a subscription's WHERE reads, the
    ///   document may have just started to match: the piece also carries the
    ///   document's other current fields as context;
    /// - a transaction whose origin `isLazy` is not sent but offered, if a piece of it
    ///   would carry a delta (PROTOCOL.md §8.11): once per stream (`offersOpen` holds
    ///   those offered whose rows go on), never one in `continuing` (begun eagerly, it
    ///   stays eager to its last piece).
    package func changes(
        after sequence: UInt64, limit: Int, byteLimit: Int = 4 << 20, subscriptions: SubscriptionSet,
        excludingOrigin peer: SiteID? = nil, skipping: (@Sendable (TransactionID) -> Bool)? = nil,
        continuing: Set<TransactionID> = [], resuming: Bool = false,
        isLazy: (@Sendable (SiteID) -> Bool)? = nil, offersOpen: Set<TransactionID> = []
    ) async throws(ShoalError) -> ChangeLogPage {
        // A page may run past `limit` deltas (up to 4 times as many) to finish the
        // transaction it is in, so that ordinary transactions travel whole; past that,
        // or past the byte budget, it ends inside the transaction.
        let read = try await logPage(
            after: sequence, limit: limit, stretch: limit * 4, byteLimit: byteLimit,
            records: { id in
                // Records only of what may make a piece: not of the peer's own transactions,
                // of those it sent here, or of a lazy origin's not begun (offered, or passed over).
                guard id.origin != peer, skipping?(id) != true else { return false }
                // A page after a resume point may find a lazy origin's transaction begun.
                guard let isLazy, !resuming, !continuing.contains(id) else { return true }
                return !(offersOpen.contains(id) || isLazy(id.origin))
            })
        let rows = read.rows
        guard let lastRow = rows.last else {
            return ChangeLogPage(pieces: [], through: sequence, offersOpen: offersOpen)
        }
        var continuing = continuing
        if resuming, sequence > 0, read.previous == rows[0].delta.transaction {
            // Resuming inside a transaction's run: its earlier pieces went out before.
            continuing.insert(rows[0].delta.transaction)
        }
        var planner = PiecePlanner(subscriptions: subscriptions, excluded: peer)
        var page = ChangeLogPage(pieces: [], through: lastRow.sequence, offersOpen: offersOpen)

        // The page's transactions in log order, each a run of rows; the lazy ones are
        // offered or passed over as they come, and the rest wait to be planned.
        var planned: [Run] = []
        var start = 0
        while start < rows.count {
            let id = rows[start].delta.transaction
            var end = start
            while end < rows.count, rows[end].delta.transaction == id { end += 1 }
            let run = Run(id: id, rows: rows[start..<end], isLast: end < rows.count || read.next != id)
            start = end
            if skipping?(id) == true { continue }
            if !continuing.contains(id), let isLazy, page.offersOpen.contains(id) || isLazy(id.origin) {
                // Lazy: offered at its first run with something for the peer, then passed over.
                if !page.offersOpen.contains(id),
                    try await planner.carries(id, rows: run.rows, bodies: { documents async throws(ShoalError) in
                        try await bodies(of: documents)
                    })
                {
                    page.offered.append(ChangeLogPage.Offer(id, at: run.rows.first!.sequence))
                    page.offersOpen.insert(id)
                }
                if run.isLast { page.offersOpen.remove(id) }
                continue
            }
            planned.append(run)
        }
        page.pieces = try await pieces(of: planned, planner: &planner, continuing: continuing, records: read.records)
        return page
    }

    /// Every piece this node holds of one transaction, for a peer with
    /// `subscriptions` that asked for it: what `changes` would have sent of it,
    /// restricted to `collections` (all when empty), cut into pieces of about
    /// `byteLimit` bytes. Empty when the transaction is not applied here.
    package func transactionPieces(
        _ id: TransactionID, subscriptions: SubscriptionSet, collections: Set<String> = [], byteLimit: Int = 4 << 20
    ) async throws(ShoalError) -> [TransactionPiece] {
        let logged = try await logPage(of: id)
        guard let stored = logged.records[id], stored.state == .applied || stored.state == .partial else { return [] }
        var rows = logged.rows
        rows.sort { $0.delta.index < $1.delta.index }
        if !collections.isEmpty { rows = rows.filter { collections.contains($0.delta.collection) } }
        var runs: [Run] = []
        var start = 0
        repeat {
            var end = start
            var bytes = 0
            while end < rows.count, end == start || bytes + rows[end].delta.valueJSON.utf8.count <= byteLimit {
                bytes += rows[end].delta.valueJSON.utf8.count
                end += 1
            }
            runs.append(Run(id: id, rows: rows[start..<end], isLast: end == rows.count))
            start = end
        } while start < rows.count
        var planner = PiecePlanner(subscriptions: subscriptions, excluded: nil, context: false)
        return try await pieces(of: runs, planner: &planner, continuing: [id], records: [id: stored])
    }

    /// The pieces `runs` make, in order: the bodies the planner must judge read in one
    /// batch, then the current fields of the documents whose context goes along.
    /// `records`: what this node recorded of the runs' transactions, read with their rows.
    private func pieces(
        of runs: [Run], planner: inout PiecePlanner, continuing: Set<TransactionID>,
        records: [TransactionID: StoredTransaction]
    ) async throws(ShoalError) -> [TransactionPiece] {
        var needed: [DocumentRef] = []
        var listed: Set<DocumentRef> = []
        for run in runs {
            for document in planner.bodiesNeeded(run.rows) where listed.insert(document).inserted {
                needed.append(document)
            }
        }
        let bodies = try await bodies(of: needed)
        for document in needed { planner.judge(document, body: bodies[document]) }

        var planned: [PiecePlanner.PlannedPiece] = []
        var contextDocuments: [DocumentRef] = []
        // The transactions every run's verdicts name, asked about together: a page of a
        // compacted log holds hundreds whose verdicts name the same few, and asking run by
        // run took a round trip or two each (seconds a page on a hub, its session silent).
        let memo = SupersessionMemo()
        var named: Set<TransactionID> = []
        for run in runs {
            for verdict in records[run.id]?.rest ?? [] {
                if case .superseded(let ids) = verdict.coverage { named.formUnion(ids) }
            }
        }
        try await memo.held(Array(named), store: self)
        let superseding: ([Verdict]) async throws(ShoalError) -> [Verdict] = { verdicts async throws(ShoalError) in
            try await PiecePlanner.latestSuperseding(
                verdicts, limit: StoredTransaction.supersessionLimit,
                inLog: { ids async throws(ShoalError) in try await memo.held(ids, store: self) },
                recorded: { ids async throws(ShoalError) in try await memo.recorded(ids, store: self) })
        }
        for run in runs {
            let record: () throws(ShoalError) -> StoredTransaction? = { records[run.id] }
            guard
                let piece = try await planner.plan(
                    run.id, rows: run.rows, isLast: run.isLast, continuing: continuing.contains(run.id), record: record,
                    superseding: superseding)
            else { continue }
            contextDocuments += piece.contextDocuments
            planned.append(piece)
        }
        guard !contextDocuments.isEmpty else { return planned.map(\.piece) }
        let fields = try await currentFields(of: Array(Set(contextDocuments)))
        return planned.map { piece in
            var piece = piece
            for document in piece.contextDocuments {
                planner.addContext(to: &piece, document: document, fields: fields[document] ?? [])
            }
            return piece.piece
        }
    }

}

/// What following supersession asked the store during one page, so that no transaction
/// is asked about twice: whether the log holds it, and, for one it does not, what was
/// recorded of it (`rest`; empty when there is no record). A page's answers are as
/// fresh as asking each time, since the log may change between any two of those reads.
///
/// Not Sendable: one page's task uses it, one call at a time.
private final class SupersessionMemo {
    private var inLog: [TransactionID: Bool] = [:]
    private var rests: [TransactionID: [Verdict]] = [:]

    /// Those of `ids` the log holds; of those it does not, the records are read too, in
    /// the same step, since following supersession asks for them next.
    func held(_ ids: [TransactionID], store: some SyncStore) async throws(ShoalError) -> Set<TransactionID> {
        let unasked = Array(Set(ids.filter { inLog[$0] == nil }))
        if !unasked.isEmpty {
            let held = try await store.logHolds(unasked)
            for id in unasked { inLog[id] = held.contains(id) }
            try await recorded(unasked.filter { !held.contains($0) }, store: store)
        }
        return Set(ids.filter { inLog[$0] == true })
    }

    /// What was recorded of each of `ids` that the log does not hold (`rest`).
    @discardableResult
    func recorded(_ ids: [TransactionID], store: some SyncStore) async throws(ShoalError) -> [TransactionID: [Verdict]] {
        let unasked = Array(Set(ids.filter { rests[$0] == nil }))
        if !unasked.isEmpty {
            let stored = try await store.storedTransactions(unasked)
            for id in unasked { rests[id] = stored[id]?.rest ?? [] }
        }
        var recorded: [TransactionID: [Verdict]] = [:]
        for id in ids { recorded[id] = rests[id] }
        return recorded
    }
}

/// One transaction's run of rows in a page, and whether the run is its last.
private struct Run {
    var id: TransactionID
    var rows: ArraySlice<LogRow>
    var isLast: Bool
}

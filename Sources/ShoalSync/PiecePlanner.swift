import ShoalCRDT
import ShoalStorage

/// The rules that turn rows of the change log into the pieces one peer gets, with no
/// database: which documents the peer's subscriptions want, which transactions are
/// its own, what a piece's manifest and verdicts say, which current fields go along
/// as context. The store reads what the planner asks for and hands it over; the
/// planner decides (PROTOCOL.md §8.3, §8.8).
///
/// It is driven one transaction's rows at a time, in three steps:
///
///     bodiesNeeded(rows) ──► judge(document, body:) for each
///            │
///            ▼
///     plan(id, rows, record:) ──► PlannedPiece { piece, contextDocuments }
///            │
///            ▼
///     addContext(to:, document:, fields:) for each context document
///
/// A document's verdict, once judged, holds for the planner's life (one page).
struct PiecePlanner {
    let subscriptions: SubscriptionSet
    /// The peer's own site: its transactions are never sent back to it.
    let excluded: SiteID?
    /// Whether pieces carry context fields (live pages do; answers to a request do not).
    let context: Bool
    private(set) var matched: [DocumentRef: Bool] = [:]

    init(subscriptions: SubscriptionSet, excluded: SiteID?, context: Bool = true) {
        self.subscriptions = subscriptions
        self.excluded = excluded
        self.context = context
    }

    /// A piece the planner built, and the documents whose current fields the store
    /// must read for its context (`addContext`).
    struct PlannedPiece {
        var piece: TransactionPiece
        var contextDocuments: [DocumentRef]
        /// The deltas the piece carries, as "document, field, timestamp", so that
        /// context never repeats one.
        fileprivate var sent: Set<String>
    }

    func isExcluded(_ id: TransactionID) -> Bool { id.origin == excluded }

    /// The documents of `rows` whose bodies decide whether the peer wants them and
    /// that are not judged yet: those of a collection its subscriptions name with a
    /// WHERE. Nothing for a transaction of the peer's own.
    func bodiesNeeded(_ rows: ArraySlice<LogRow>) -> [DocumentRef] {
        guard let first = rows.first, !isExcluded(first.delta.transaction) else { return [] }
        var needed: [DocumentRef] = []
        // Rows come grouped by document, but not always (a transaction's rows sorted by
        // delta index): a set keeps the check linear in the rows.
        var listed: Set<DocumentRef> = []
        var last: DocumentRef?
        for row in rows {
            if let last, last.is(collection: row.delta.collection, id: row.delta.documentID) { continue }
            let document = DocumentRef(collection: row.delta.collection, id: row.delta.documentID)
            last = document
            guard subscriptions.names(collection: document.collection), !subscriptions.takesWholeCollection(document.collection),
                matched[document] == nil, listed.insert(document).inserted
            else { continue }
            needed.append(document)
        }
        return needed
    }

    /// Records whether the peer wants `document`, from the body this node holds
    /// (`nil`: none).
    ///
    /// The log is what this node owes the mesh: every logged delta goes to every peer
    /// that wants its document, whether or not this node still holds the document
    /// (EVICT removes a document's registers and body, never its log). A document this
    /// node cannot judge, because it holds no body for it (evicted, or left with no live
    /// field) or one it cannot read (stored past the limits by an older version), is
    /// sent: a subscriber can only get more than it asked for, never less, and no
    /// verdict could explain withholding it (DATA_MODEL.md §11).
    ///
    /// A collection a rule lets the peer read only in part is the exception
    /// (`withheldUnlessShown`): there a document this node cannot judge is withheld, since
    /// sending it could give the peer what the rule's condition keeps from it.
    mutating func judge(_ document: DocumentRef, body: String?) {
        let unknown = !subscriptions.withheldUnlessShown.contains(document.collection)
        matched[document] = body.map { text in
            guard let parsed = try? JSON.parse(text) else { return unknown }
            return subscriptions.matches(collection: document.collection, document: parsed)
        } ?? unknown
    }

    /// Whether the peer wants a document's deltas; its body must have been judged
    /// when its collection has a WHERE.
    func wants(_ document: DocumentRef) -> Bool {
        guard subscriptions.names(collection: document.collection) else { return false }
        // No WHERE to evaluate: the document is wanted whatever its body (a deleted one
        // keeps its tombstone to send, an evicted one its log).
        if subscriptions.takesWholeCollection(document.collection) { return true }
        guard let known = matched[document] else {
            preconditionFailure("\(document.collection) \(document.id) planned before its body was judged")
        }
        return known
    }

    /// Whether a piece of `id` from `rows` would carry a delta for the peer (a lazy
    /// origin's transaction is then offered). Stops at the first document it wants:
    /// the bodies it must judge are read (`bodies`) `chunk` at a time, in row order, so
    /// that a transaction whose first document is wanted costs one short read, and one
    /// of a thousand documents none of which is wanted, a few reads rather than a
    /// thousand.
    mutating func carries<E: Error>(
        _ id: TransactionID, rows: ArraySlice<LogRow>, chunk: Int = 64,
        bodies: ([DocumentRef]) async throws(E) -> [DocumentRef: String]
    ) async throws(E) -> Bool {
        if isExcluded(id) { return false }
        let needed = bodiesNeeded(rows)
        var nextNeeded = 0
        var judged: DocumentRef?
        for row in rows {
            if let judged, judged.is(collection: row.delta.collection, id: row.delta.documentID) { continue }
            let document = DocumentRef(collection: row.delta.collection, id: row.delta.documentID)
            judged = document
            guard subscriptions.names(collection: document.collection) else { continue }
            if !subscriptions.takesWholeCollection(document.collection), matched[document] == nil, nextNeeded < needed.count {
                // This document and the next ones still to judge, in one read.
                let batch = Array(needed[nextNeeded..<min(needed.count, nextNeeded + max(1, chunk))])
                nextNeeded += batch.count
                let read = try await bodies(batch)
                for document in batch { judge(document, body: read[document]) }
            }
            if wants(document) { return true }
        }
        return false
    }

    /// The piece of `id` that `rows` make for the peer, or `nil` when it has nothing
    /// for it: a piece with no delta goes out only as the last piece of a transaction
    /// that earlier pieces began (`continuing`). `record` gives what this node recorded
    /// of the transaction (its manifest and `rest`; `nil` when nothing), asked only for
    /// a piece that goes out; `superseding` gives `rest` with each transaction
    /// compaction took out of the log replaced by those that superseded it
    /// (`latestSuperseding`).
    func plan<E: Error>(
        _ id: TransactionID, rows: ArraySlice<LogRow>, isLast: Bool, continuing: Bool,
        record: () throws(E) -> StoredTransaction?, superseding: ([Verdict]) async throws(E) -> [Verdict]
    ) async throws(E) -> PlannedPiece? {
        if isExcluded(id) { return nil }
        var deltas: [Delta] = []
        deltas.reserveCapacity(rows.count)
        var counts: [DocumentRef: UInt32] = [:]
        var withContext: [DocumentRef] = []
        // A transaction's rows come grouped by document: a run of one document's rows
        // is judged once (its collection wanted, its body matched, a WHERE that may
        // read its fields), and only the last of those looks at each delta.
        var run: (document: DocumentRef, matched: Bool, filtered: Bool)?
        for row in rows {
            let document: DocumentRef
            let matched: Bool
            let filtered: Bool
            if let run, run.document.is(collection: row.delta.collection, id: row.delta.documentID) {
                (document, matched, filtered) = run
            } else {
                document = DocumentRef(collection: row.delta.collection, id: row.delta.documentID)
                matched = wants(document)
                filtered = matched && context && subscriptions.filters(collection: document.collection)
                run = (document, matched, filtered)
                // Every row of a document in a transaction carries the same count.
                if matched { counts[document] = row.documentDeltas }
            }
            guard matched else { continue }
            deltas.append(row.delta)
            if filtered, subscriptions.matchMayDependOn(collection: document.collection, field: row.delta.field),
                !withContext.contains(document)
            {
                withContext.append(document)
            }
        }
        guard !deltas.isEmpty || (isLast && continuing) else { return nil }
        // The log keeps a document's deltas together; a piece carries them in transaction order.
        if !deltas.isEmpty, !zip(deltas, deltas.dropFirst()).allSatisfy({ $0.index < $1.index }) {
            deltas.sort { $0.index < $1.index }
        }
        let record = try record()
        guard let first = rows.first?.delta else {
            // An answer about collections this node holds no row of (`transactionPieces`):
            // a last piece with no deltas, its manifest from the transaction's record and
            // its verdicts saying why, as a page would have said them.
            guard isLast, let record else { return nil }
            var piece = TransactionPiece(
                id: id, deltaCount: record.deltaCount, documentCount: record.documentCount, collections: record.collections,
                deltas: [], documentDeltaCounts: [:], isLast: true)
            piece.verdicts = try await superseding(Self.heldNoRowVerdicts(record, subscriptions: subscriptions))
            return PlannedPiece(piece: piece, contextDocuments: [], sent: [])
        }
        var piece = TransactionPiece(
            id: id, deltaCount: record?.deltaCount ?? first.count,
            documentCount: record?.documentCount
                ?? UInt32(Set(rows.map { DocumentRef(collection: $0.delta.collection, id: $0.delta.documentID) }).count),
            collections: record?.collections
                ?? CollectionCount.manifest(of: rows.map { (collection: $0.delta.collection, document: $0.delta.documentID) }),
            deltas: deltas, documentDeltaCounts: counts, isLast: isLast)
        if isLast {
            piece.verdicts = Self.lastPieceVerdicts(
                piece.collections, filter: subscriptions.filter, rest: try await superseding(record?.rest ?? []))
        }
        let sent = withContext.isEmpty ? [] : Set(deltas.map { Self.sentKey($0.documentID, $0.field, $0.timestamp) })
        return PlannedPiece(piece: piece, contextDocuments: withContext, sent: sent)
    }

    /// Adds to a planned piece the current fields of `document` (as this node holds
    /// them, `fields`) that the peer needs to judge its WHERE: when a sent delta writes
    /// a field a subscription reads, the document may have just started to match.
    /// Leaves out fields the piece carries, fields of the transaction itself, and
    /// fields the peer wrote.
    func addContext(to planned: inout PlannedPiece, document: DocumentRef, fields: [FieldRecord]) {
        for f in fields where f.state.transaction.origin != excluded {
            let field = ContextField(
                document: document, field: f.name, valueJSON: f.state.json, timestamp: f.state.version.timestamp,
                transaction: f.state.transaction)
            if field.transaction != planned.piece.id,
                !planned.sent.contains(Self.sentKey(document.id, field.field, field.timestamp))
            {
                planned.piece.context.append(field)
            }
        }
    }

    private static func sentKey(_ document: String, _ field: String, _ timestamp: HybridTimestamp) -> String {
        "\(document)\u{0}\(field)\u{0}\(timestamp.rawValue)"
    }

    /// `verdicts` with each transaction a `SUPERSEDED` names that compaction took out of
    /// this node's log since replaced by what it recorded superseded that one, and so
    /// on: the transactions named are then ones the log still holds (or this node never
    /// held), which a peer streaming the log gets. Named as recorded, a transaction
    /// compacted in turn was never sent to a peer that resynced from the compacted log,
    /// and the transaction it vouched for stayed partial there for ever (shoal-check:
    /// a restored node held 19 so, every document it covered there). More than `limit`
    /// transactions make the verdict `unknown`.
    ///
    /// The chase goes a round at a time, each round asking about all the transactions
    /// it reached at once: `inLog` says which of them the log holds a row of;
    /// `recorded` what this node recorded of each (its `rest`; left out when nothing).
    static func latestSuperseding<E: Error>(
        _ verdicts: [Verdict], limit: Int, inLog: ([TransactionID]) async throws(E) -> Set<TransactionID>,
        recorded: ([TransactionID]) async throws(E) -> [TransactionID: [Verdict]]
    ) async throws(E) -> [Verdict] {
        guard verdicts.contains(where: { if case .superseded = $0.coverage { true } else { false } }) else { return verdicts }
        var result: [Verdict] = []
        result.reserveCapacity(verdicts.count)
        for verdict in verdicts {
            guard case .superseded(let named) = verdict.coverage else {
                result.append(verdict)
                continue
            }
            var latest: Set<TransactionID> = []
            var seen: Set<TransactionID> = []
            var round = named.filter { seen.insert($0).inserted }
            while !round.isEmpty, latest.count <= limit {
                let held = try await inLog(round)
                let gone = round.filter { !held.contains($0) }
                latest.formUnion(held)
                // Out of the log: what compaction recorded superseded each in this collection.
                let records = gone.isEmpty ? [:] : try await recorded(gone)
                var next: [TransactionID] = []
                for id in gone {
                    let later = (records[id] ?? []).flatMap { recorded -> [TransactionID] in
                        guard recorded.collection == verdict.collection, case .superseded(let ids) = recorded.coverage else { return [] }
                        return ids
                    }
                    if later.isEmpty { latest.insert(id) } else { next += later.filter { seen.insert($0).inserted } }
                }
                round = next
            }
            result.append(
                Verdict(
                    collection: verdict.collection,
                    coverage: latest.count > limit ? .unknown : .superseded(latest.sorted())))
        }
        return result
    }

    /// What a node says of a transaction of which it holds no row in the collections
    /// asked about. Per collection: what it recorded (`rest`: documents it never held,
    /// and, once compaction took the transaction's rows, the transactions that
    /// superseded them), behind `notCovered` by the asker's set (vacuous: it withholds
    /// nothing); with nothing recorded, its rows went before compaction recorded what
    /// superseded them, and it can only say `unknown`. Never `notCovered` alone, which
    /// would vouch for deltas it does not hold.
    static func heldNoRowVerdicts(_ stored: StoredTransaction, subscriptions: SubscriptionSet) -> [Verdict] {
        var verdicts: [Verdict] = []
        for count in stored.collections {
            let recorded = stored.rest.filter { $0.collection == count.collection }
            if recorded.isEmpty {
                verdicts.append(Verdict(collection: count.collection, coverage: .unknown))
            } else {
                verdicts.append(Verdict(collection: count.collection, coverage: .notCovered(subscriptions.filter)))
                verdicts += recorded
            }
        }
        return verdicts
    }

    /// For each collection of the manifest: what this node logged and withholds does
    /// not match the peer's subscriptions (`notCovered` by them: it sends everything it
    /// logged that they may want); what it never logged is what its own sources said
    /// (`rest`).
    static func lastPieceVerdicts(_ collections: [CollectionCount], filter: SubscriptionFilter, rest: [Verdict]) -> [Verdict] {
        var verdicts: [Verdict] = []
        for count in collections {
            verdicts.append(Verdict(collection: count.collection, coverage: .notCovered(filter)))
            for verdict in rest where verdict.collection == count.collection && !verdicts.contains(verdict) {
                verdicts.append(verdict)
            }
        }
        return verdicts
    }
}

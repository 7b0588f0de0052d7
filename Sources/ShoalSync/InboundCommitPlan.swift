import ShoalCRDT
import ShoalStorage

/// What one inbound commit does, decided on values: which received pieces are applied
/// at once (late pieces of transactions applied before, pieces of partial ones), what
/// the coverage assembler decides, which transactions are refused, what waits in the
/// buffer, and which cursors and offers are recorded. `InboundPipeline.commit` reads
/// what the plan asks (the states and records of the transactions it names), carries
/// out its steps in one write transaction, and tells it how each apply went.
///
/// ```
///  reads: states, records ─► receive each piece ─► (apply now) ─► decide ─► steps ─► finish
///                                                                  ▲           │
///                                                       applied(…) └───────────┘ refusal: refuse it whole
/// ```
///
/// Every transaction it touches ends the commit with a record (applied, partial,
/// waiting or refused), and no commit removes one: so what the store decided before the
/// commit, with what the commit decided, is what it has decided after (`decided`).
struct InboundCommitPlan: Sendable {
    private(set) var assembler: CoverageAssembler
    private(set) var result: InboundPipeline.CommitResult
    let subscriptions: SubscriptionSet
    /// What this node takes, for itself and the nodes it relays for (`SyncEngine.carriedSubscriptions`):
    /// what an applied transaction may leave out (`VerdictFilters.leavesOut`), and what
    /// the rest it records is chosen for (`rest(of:)`). Read the first time it is needed.
    private let carriedSource: @Sendable () -> SubscriptionSet
    private var carriedRead: SubscriptionSet?
    private let now: UInt64
    /// The states the store held before the commit, of the transactions `toRead` named.
    private let states: [TransactionID: TransactionRecord.State]
    /// The records of those waiting or partial, as the store held them.
    private let records: [TransactionID: TransactionRecord]
    /// What those applied left out (`restsUsed`): their `rest`, when not empty.
    private var rests: [TransactionID: [Verdict]]
    /// The transactions the assembler held when the commit began.
    private let started: Set<TransactionID>
    /// What this commit received of each waiting transaction, not yet in the buffer.
    private var fresh: [TransactionID: Received] = [:]
    /// What this commit received of a transaction.
    typealias Received = (deltas: [Delta], counts: [DocumentRef: UInt32], context: [ContextField])
    /// Transactions first heard of in this commit: nothing of them is in the buffer yet.
    private var created: Set<TransactionID> = []
    /// Transactions a piece of this commit was added to the assembler for.
    private var touched: Set<TransactionID> = []

    /// A step of the commit, for the store.
    enum Step: Sendable {
        case apply(Apply)
        case markApplied(TransactionID, rest: [Verdict])
        /// A late last piece came of a transaction applied with something this node takes
        /// now left out (`rest`): what it leaves out now is read from the log, and recorded.
        case settleRest(TransactionID, rest: [Verdict], manifest: [CollectionCount], verdicts: [Verdict])
        case refuse(TransactionRecord, reason: String)
        case buffer(TransactionID, deltas: [Delta], counts: [DocumentRef: UInt32], context: [ContextField])
        case save(TransactionRecord)
        case recordCursor(peer: SiteID, key: String, through: UInt64, epoch: UInt64)
        /// Something to log as a warning: a piece dropped.
        case warn(String, id: TransactionID, peer: SiteID)
    }

    /// An apply (`InboundWriting.apply`), and why: what follows when it is refused.
    struct Apply: Sendable {
        enum Kind: Sendable, Equatable {
            /// A late piece of a transaction applied whole before (a wider subscription,
            /// another path), from `peer`.
            case latePiece(TransactionPiece, peer: SiteID)
            /// A piece of a transaction applied in part before, from `peer`.
            case partialPiece(TransactionPiece, peer: SiteID)
            /// A waiting transaction, now whole.
            case whole
            /// A waiting transaction applied in part, for `reason`.
            case partial(CoverageAssembler.PartialReason)
        }

        var kind: Kind
        var record: TransactionRecord
        var deltas: [Delta]
        var counts: [DocumentRef: UInt32]
        var context: [ContextField]
        /// Whether the buffer holds some of it.
        var buffered: Bool
        /// First heard of in this commit, with no record in the store: the log holds
        /// none of it (`InboundWriting.apply`'s `isNew`).
        var isNew = false
        var state: TransactionRecord.State?
        var rest: [Verdict]?
    }

    /// The transactions whose state (and record, when waiting or partial) a commit of
    /// `items` must read first: those of its pieces and offers, and those the routes
    /// noted, that `assembler` does not hold; with `shared` (other processes write the
    /// store: hubs on one database), also every one it holds, which another process may
    /// have applied or moved on since (`CoverageAssembler.refresh`).
    static func toRead(
        _ items: [InboundPipeline.Item], assembler: CoverageAssembler, routes: Routing.Snapshot, shared: Bool = false
    ) -> [TransactionID] {
        var ids: Set<TransactionID> = shared ? Set(assembler.records.keys) : []
        for item in items {
            for piece in item.pieces where assembler.records[piece.id] == nil { ids.insert(piece.id) }
            for offer in item.offered where assembler.records[offer.id] == nil { ids.insert(offer.id) }
        }
        for id in routes.noted where assembler.records[id] == nil { ids.insert(id) }
        return ids.sorted()
    }

    /// Of `rests`, what the applied transactions `toRead` named left out (read with
    /// their states), those the commit uses: of transactions an item offers, the routes
    /// noted, or a last piece of which came. What each left out decides whether this
    /// node is done with it (`decided`) or a late last piece settles it (`settle`).
    static func restsUsed(
        _ rests: [TransactionID: [Verdict]], items: [InboundPipeline.Item], routes: Routing.Snapshot
    ) -> [TransactionID: [Verdict]] {
        guard !rests.isEmpty else { return [:] }
        var ids = Set(routes.noted)
        for item in items {
            for offer in item.offered { ids.insert(offer.id) }
            for piece in item.pieces where piece.isLast { ids.insert(piece.id) }
        }
        return rests.filter { ids.contains($0.key) }
    }

    /// `states`: those of `toRead`'s transactions the store has a record of;
    /// `records`: the records of those waiting or partial. A state of a transaction
    /// `assembler` holds (read with `shared`) is the store's truth: the assembler follows it.
    init(
        assembler: CoverageAssembler, subscriptions: SubscriptionSet, now: UInt64,
        states: [TransactionID: TransactionRecord.State], records: [TransactionID: TransactionRecord],
        rests: [TransactionID: [Verdict]] = [:], carried: (@Sendable () -> SubscriptionSet)? = nil
    ) {
        var assembler = assembler
        var refusedElsewhere: [InboundPipeline.Status.Refused] = []
        for (id, state) in states.sorted(by: { $0.key < $1.key }) {
            guard let held = assembler.records[id] else { continue }
            // The peers that sent this node pieces of it hear why nothing of it was applied.
            if state == .refused {
                refusedElsewhere.append(
                    InboundPipeline.Status.Refused(
                        id: id, reason: "another process of this node refused it (that process's log says why)",
                        from: held.reports.keys.sorted(), at: now))
            }
            assembler.refresh(id, state: state, record: records[id])
        }
        self.assembler = assembler
        self.result = InboundPipeline.CommitResult(assembler: assembler)
        result.refused = refusedElsewhere
        self.subscriptions = subscriptions
        self.now = now
        self.states = states
        self.records = records
        self.rests = rests
        self.carriedSource = carried ?? { [subscriptions] in subscriptions }
        self.started = Set(assembler.records.keys)
    }

    /// What this node carries (`carriedSource`), read once.
    mutating func carried() -> SubscriptionSet {
        if let carriedRead { return carriedRead }
        let set = carriedSource()
        carriedRead = set
        return set
    }

    /// Whether `rest`, what an applied transaction left out, leaves out what this node carries.
    private mutating func leavesOut(_ rest: [Verdict]) -> Bool {
        let set = carried()
        return assembler.filters.leavesOut(rest, for: set)
    }

    /// The rest of `id` to record as it applies: judged by what this node carries where
    /// its reporters differ.
    private mutating func rest(of id: TransactionID) -> [Verdict] {
        let set = assembler.hasChoiceOfRest(id) ? carried() : subscriptions
        return assembler.rest(of: id, subscriptions: set)
    }

    /// Takes one received piece: adds it to its transaction, and returns the apply it
    /// needs now, if any (a late piece of a transaction applied whole or in part).
    ///
    /// A piece whose manifest or context names a collection `source` may not write
    /// (`mayWrite`) is refused: it adds nothing, and the transaction is left as it was,
    /// to be applied whole if a peer that may write it sends it. Refusing the
    /// transaction itself would let a peer with no rights veto any transaction, even
    /// one it made up the ID of.
    mutating func receive(_ piece: TransactionPiece, from source: SiteID, mayWrite: PeerRights.Write = .everything) -> Apply? {
        if mayWrite != .everything {
            let written = piece.collections.map(\.collection) + piece.context.map(\.document.collection)
            let forbidden = PeerRights(read: .everything, write: mayWrite, admin: .none).forbiddenWrites(written)
            if !forbidden.isEmpty {
                result.forbidden.append(
                    InboundPipeline.Status.Refused(
                        id: piece.id,
                        reason: "peer \(source) may not write \(forbidden.joined(separator: ", ")) on this node (its permissions), and the transaction writes there",
                        from: [source], at: now))
                // Nothing more of it will be taken from there: an offer of it from there is resolved.
                if piece.isLast { result.routes.lastPieces.append((piece.id, source)) }
                return nil
            }
        }
        if assembler.records[piece.id] == nil {
            switch states[piece.id] {
            case .applied?:
                var record = TransactionRecord(
                    id: piece.id, deltaCount: piece.deltaCount, documentCount: piece.documentCount,
                    collections: piece.collections, state: .applied, firstSeen: now)
                record.documents = [:]
                return Apply(
                    kind: .latePiece(piece, peer: source), record: record, deltas: piece.deltas, counts: piece.documentDeltaCounts,
                    context: piece.context, buffered: false, state: nil, rest: nil)
            case .refused?:
                // Refused whole before: nothing of it is ever applied here.
                return nil
            case .partial?, .waiting?:
                if let record = records[piece.id] { assembler.adopt(record) }
            case nil:
                created.insert(piece.id)
                result.firstHeld.insert(piece.id)
            }
        }
        let new = assembler.add(piece, from: source, now: now)
        touched.insert(piece.id)
        let record = assembler.records[piece.id]!
        if record.state == .partial {
            // Applied in part: the log says which of the deltas were held.
            return Apply(
                kind: .partialPiece(piece, peer: source), record: record, deltas: new, counts: piece.documentDeltaCounts,
                context: piece.context, buffered: false, state: .partial, rest: rest(of: piece.id))
        }
        result.received(piece, new: new.count, from: source)
        fresh[piece.id, default: ([], [:], [])].deltas += new
        fresh[piece.id]!.counts.merge(piece.documentDeltaCounts) { max($0, $1) }
        fresh[piece.id]!.context += piece.context
        return nil
    }

    /// The transactions the verdicts of waiting ones name as superseding: whether they
    /// are applied here is read before deciding.
    var supersedingNamed: Set<TransactionID> { assembler.supersedingNamed() }

    /// What the assembler decides, `isApplied` saying which superseding transactions
    /// this node applied.
    mutating func decide(isApplied: (TransactionID) -> Bool) -> [CoverageAssembler.Decision] {
        assembler.decide(subscriptions: subscriptions, now: now, isApplied: isApplied)
    }

    /// The steps of one decision, in order (`applied` is told how each apply went).
    mutating func steps(for decision: CoverageAssembler.Decision) -> [Step] {
        switch decision {
        case .apply(let ids):
            return ids.map { id in
                let received = fresh.removeValue(forKey: id)
                return .apply(
                    Apply(
                        kind: .whole, record: assembler.records[id]!, deltas: received?.deltas ?? [], counts: received?.counts ?? [:],
                        context: received?.context ?? [], buffered: !created.contains(id), isNew: created.contains(id),
                        state: .applied, rest: rest(of: id)))
            }
        case .applyPartially(let id, let reason):
            let received = fresh.removeValue(forKey: id)
            return [
                .apply(
                    Apply(
                        kind: .partial(reason), record: assembler.records[id]!, deltas: received?.deltas ?? [],
                        counts: received?.counts ?? [:], context: received?.context ?? [], buffered: !created.contains(id),
                        isNew: created.contains(id), state: .partial, rest: rest(of: id)))
            ]
        case .completed(let id):
            let rest = rest(of: id)
            assembler.remove(id)
            result.applied.append(id)
            result.counters.completed += 1
            return [.markApplied(id, rest: rest)]
        case .refuse(let record, let collections):
            fresh[record.id] = nil
            return [
                refuse(
                    record,
                    "a peer holds documents of \(collections.joined(separator: ", ")) in it that are over what this node said it takes (its frame limit, --max-frame-size, or its document size limit, document_size_hard_limit_bytes), or over what a relay between them takes"
                )
            ]
        case .ask(let id, let collections):
            // Those that sent their last piece already said what they hold.
            let reporters = Set(assembler.records[id]?.reports.filter(\.value.isLast).keys.map { $0 } ?? [])
            result.questions.append(InboundPipeline.Question(id: id, collections: collections, only: nil, except: reporters))
            return []
        }
    }

    /// How an apply went: `refusal`, a body this node cannot hold (nothing was
    /// written); `newlyLogged`, the deltas it logged that the log did not hold. Returns
    /// what follows: a warning, or the transaction refused whole.
    mutating func applied(_ apply: Apply, refusal: DocumentRefusal?, newlyLogged: Int) -> [Step] {
        let id = apply.record.id
        switch apply.kind {
        case .latePiece(let piece, let peer), .partialPiece(let piece, let peer):
            guard let refusal else {
                result.received(piece, new: newlyLogged, from: peer)
                if case .latePiece = apply.kind, piece.isLast, let rest = rests[id], leavesOut(rest) {
                    return [.settleRest(id, rest: rest, manifest: piece.collections, verdicts: piece.verdicts)]
                }
                return []
            }
            // Applied (in part) already, so it cannot be refused whole: this piece stays out.
            // Its sender sent all it will of it: an offer of it from there is resolved.
            if piece.isLast { result.routes.lastPieces.append((piece.id, peer)) }
            let before = apply.state == nil ? "applied before" : "applied in part"
            return [.warn("dropped a late piece of a remote transaction \(before): this node cannot hold \(refusal)", id: id, peer: peer)]
        case .whole:
            if let refusal { return [refuse(apply.record, refusal.description)] }
            assembler.remove(id)
            result.applied.append(id)
            result.counters.applied += 1
            return []
        case .partial(let reason):
            if let refusal { return [refuse(apply.record, refusal.description)] }
            assembler.releaseBuffer(id)
            result.partial.append((reason, [id]))
            if reason == .overflow { result.counters.overflows += 1 }
            return []
        }
    }

    /// Refuses a transaction whole: this node cannot hold a document it writes. Its
    /// buffered pieces go, its record says so, and the assembler forgets it, so the
    /// transactions of its origin behind it no longer wait for it.
    private mutating func refuse(_ record: TransactionRecord, _ reason: String) -> Step {
        assembler.remove(record.id)
        result.refused.append(
            InboundPipeline.Status.Refused(id: record.id, reason: reason, from: record.reports.keys.sorted(), at: now))
        return .refuse(record, reason: reason)
    }

    /// Why pieces cannot be buffered (a document they write, or give context of, over
    /// the key bound or in a collection whose name the store cannot hold), nil when they can.
    static func keyRefusal(_ received: Received, limits: DocumentLimits) -> DocumentRefusal? {
        guard limits.boundsKeys else { return nil }
        for delta in received.deltas {
            if let refusal = limits.keyRefusal(collection: delta.collection, id: delta.documentID, fields: [delta.field]) {
                return DocumentRefusal(document: DocumentRef(collection: delta.collection, id: delta.documentID), reason: refusal)
            }
        }
        for field in received.context {
            if let refusal = limits.keyRefusal(collection: field.document.collection, id: field.document.id, fields: [field.field]) {
                return DocumentRefusal(document: field.document, reason: refusal)
            }
        }
        return nil
    }

    /// Whether this node is done with `id` as far as offers go: applied (whole or in
    /// part) or refused. One still waiting for its other pieces is not: the link that
    /// streams them may close before the last, and then the offer is what brings the
    /// rest (docs/ROUTES.md, "Graft").
    ///
    /// Nor is one applied that left out documents this node's subscriptions take now
    /// (`leavesOut`: it took a collection up since): the links eager for its origin may
    /// never bring them, and an offer is then what does.
    private mutating func decided(_ id: TransactionID) -> Bool {
        if let record = assembler.records[id] { return record.state != .waiting }
        if started.contains(id) || touched.contains(id) { return true }
        guard let state = states[id] else { return false }
        if state == .applied, let rest = rests[id], leavesOut(rest) { return false }
        return state != .waiting
    }

    /// What an applied transaction leaves out once a late last piece came, `logged` being
    /// the deltas of it the log holds now, by document: a collection `rest` left out for
    /// what this node carries is dropped when the log holds all its deltas (the
    /// manifest's count), or takes the piece's verdicts on it when they vouch for what it
    /// carries: none leaves out what it takes (`VerdictFilters.leavesOut`), and a
    /// transaction one says superseded its copy by is applied here (`isApplied`), as the
    /// coverage assembler asks for a waiting one. Any other verdict stays as it was.
    mutating func settle(
        _ rest: [Verdict], manifest: [CollectionCount], logged: [DocumentRef: Set<UInt32>], verdicts: [Verdict],
        isApplied: (TransactionID) -> Bool
    ) -> [Verdict] {
        let set = carried()
        return Self.settled(
            rest, subscriptions: set, manifest: manifest, logged: logged, verdicts: verdicts, filters: &assembler.filters,
            isApplied: isApplied)
    }

    /// `settle`, for `subscriptions`, with `filters` to judge verdicts by.
    static func settled(
        _ rest: [Verdict], subscriptions: SubscriptionSet, manifest: [CollectionCount], logged: [DocumentRef: Set<UInt32>],
        verdicts: [Verdict], filters: inout VerdictFilters, isApplied: (TransactionID) -> Bool
    ) -> [Verdict] {
        var out: [Verdict] = []
        var done: Set<String> = []
        for verdict in rest {
            let c = verdict.collection
            if done.contains(c) { continue }
            let ofC = rest.filter { $0.collection == c }
            guard ofC.contains(where: { filters.leavesOut($0, for: subscriptions) }) else {
                out.append(verdict)
                continue
            }
            done.insert(c)
            let held = logged.reduce(0) { $1.key.collection == c ? $0 + $1.value.count : $0 }
            if let count = manifest.first(where: { $0.collection == c }), held >= Int(count.deltas) { continue }
            let theirs = verdicts.filter { $0.collection == c }
            var vouch = !theirs.isEmpty
            for verdict in theirs where vouch {
                switch verdict.coverage {
                case .notCovered: vouch = !filters.leavesOut(verdict, for: subscriptions)
                case .superseded(let ids): vouch = ids.allSatisfy(isApplied)
                case .unknown, .overLimit: vouch = false
                }
            }
            out += vouch ? theirs : ofC
        }
        return out
    }

    /// A `settleRest` step recorded `rest` for `id`: offers later in the commit read it.
    mutating func settled(_ id: TransactionID, rest: [Verdict]) {
        rests[id] = rest.isEmpty ? nil : rest
    }

    /// The commit's last steps: the pieces of transactions still waiting go to the
    /// buffer, every record touched is saved, and each item's cursor is recorded, below
    /// the offers of its peer not resolved (so that after a restart, which forgets
    /// them, the peer makes them again: docs/ROUTES.md). The result is then whole.
    ///
    /// A waiting transaction a piece of which writes a document `limits` refuse the key
    /// of (`DocumentLimits.keyRefusal`: a hub's store keeps buffered pieces' context under
    /// keys its indexes and its text must hold) is refused whole then, rather than buffered.
    mutating func finish(_ items: [InboundPipeline.Item], routes: Routing.Snapshot, limits: DocumentLimits = DocumentLimits()) -> [Step] {
        var steps: [Step] = []
        for (id, received) in fresh.sorted(by: { $0.key < $1.key }) {
            guard let record = assembler.records[id], record.state == .waiting else { continue }
            if let refusal = Self.keyRefusal(received, limits: limits) {
                steps.append(refuse(record, refusal.description))
                continue
            }
            steps.append(.buffer(id, deltas: received.deltas, counts: received.counts, context: received.context))
        }
        for id in touched.sorted() {
            guard let record = assembler.records[id], record.state != .applied else { continue }
            steps.append(.save(record))
        }
        var limits = routes.resumeLimits
        for item in items {
            for offer in item.offered where !decided(offer.id) {
                result.routes.offers[item.source, default: []].append(offer)
                if states[offer.id] == .applied { result.routes.leftOut.insert(offer.id) }
                let before = offer.logSequence &- 1
                limits[item.source] = min(limits[item.source] ?? before, before)
            }
            if let cursor = item.cursor, item.lane?.recordsCursors ?? true {
                steps.append(
                    .recordCursor(
                        peer: item.source, key: cursor.key, through: min(cursor.through, limits[item.source] ?? .max),
                        epoch: cursor.epoch))
            }
        }
        for id in routes.noted where decided(id) { result.routes.held.insert(id) }
        result.assembler = assembler
        return steps
    }
}

public import ShoalCRDT
public import ShoalStorage
import Logging
import Metrics
import Foundation

/// One node's inbound pipeline: every session hands it the pieces it receives, it
/// puts transactions together (`CoverageAssembler`), and it commits as many whole
/// transactions as are ready, with the pieces of waiting ones, in one SQLite
/// transaction. Each session learns when its batch is durable and only then
/// acknowledges it.
///
/// ```
///  session ─┐                         ┌─► apply whole transactions (many per commit)
///  session ─┼─► queue ─► assembler ───┼─► buffer waiting pieces (durable)
///  session ─┘   (FIFO)   (decides)    ├─► record each batch's cursor
///                                     └─► after commit: Ack per batch, ask peers
/// ```
///
/// The pipeline's work runs in `run()`, which `SyncEngine.run()` calls: one loop per
/// node. A commit takes every item queued (up to `maximumCommitDeltas` deltas), so
/// batches that arrive while one commit runs go together into the next.
public final class InboundPipeline: Sendable {
    public struct Configuration: Sendable, Hashable {
        public var coverage: CoverageAssembler.Configuration
        /// Deltas one commit takes at most (an item is never split).
        public var maximumCommitDeltas: Int
        /// How often timeouts are checked.
        public var tickInterval: Duration

        public init(
            coverage: CoverageAssembler.Configuration = .init(), maximumCommitDeltas: Int = 20_000,
            tickInterval: Duration = .seconds(1)
        ) {
            self.coverage = coverage
            self.maximumCommitDeltas = maximumCommitDeltas
            self.tickInterval = tickInterval
        }
    }

    /// Something a session received: pieces from `source`, and where to record how far
    /// its log has been applied.
    public struct Item: Sendable {
        public var source: SiteID
        public var pieces: [TransactionPiece]
        /// Where to record how far `source`'s log is applied, and the cursor epoch its
        /// stream was read at (`ResumePoint`).
        public var cursor: (key: String, through: UInt64, epoch: UInt64)?
        /// The items this one must follow (one session's): none of them commits once
        /// one has failed.
        public var lane: Lane?
        /// Called once the item is durable (or failed to be).
        public var done: (@Sendable (Result<Void, ShoalError>) -> Void)?
        /// Transactions `source` offered instead of sending (version 4): those not held
        /// here are noted (`RouteTable`), and the cursor stays below them.
        public var offered: [RouteTable.Offer]
        /// What `source` may write here (`AccessRules`): a transaction whose manifest
        /// names another collection is refused whole.
        public var mayWrite: PeerRights.Write

        public init(
            source: SiteID, pieces: [TransactionPiece], cursor: (key: String, through: UInt64, epoch: UInt64)? = nil,
            lane: Lane? = nil, offered: [RouteTable.Offer] = [], mayWrite: PeerRights.Write = .everything,
            done: (@Sendable (Result<Void, ShoalError>) -> Void)? = nil
        ) {
            self.mayWrite = mayWrite
            self.source = source
            self.pieces = pieces
            self.cursor = cursor
            self.lane = lane
            self.offered = offered
            self.done = done
        }
    }

    /// The items one session hands the pipeline, which commit in the order given.
    /// When a commit fails (a commit of several lanes' items is first tried again lane
    /// by lane, and only the lanes whose own commit fails count), every item of its
    /// lane still queued or queued later fails with it, uncommitted: a later batch's
    /// cursor must never be recorded over an earlier batch that was not, or the node
    /// would resume past transactions it never applied. The session closes on the
    /// failure and its next one resumes from the cursor that is durable.
    public final class Lane: Sendable {
        private struct Failure {
            var error: ShoalError?
            var handler: (@Sendable (ShoalError) -> Void)?
        }
        private let failure = Locked(Failure())
        private let cursorsStopped = Locked(false)

        public init() {}

        /// The error of the commit that failed an item of this lane, if one did.
        public var failed: ShoalError? { failure.withLock { $0.error } }

        func fail(_ error: ShoalError) {
            let handler = failure.withLock { state -> (@Sendable (ShoalError) -> Void)? in
                guard state.error == nil else { return nil }
                state.error = error
                return state.handler
            }
            handler?(error)
        }

        /// Calls `handler` once, when an item of this lane fails (at once, if one has):
        /// its session closes then, also when no item of it waited for an answer.
        public func whenFailed(_ handler: @escaping @Sendable (ShoalError) -> Void) {
            let failed = failure.withLock { state -> ShoalError? in
                if state.error == nil { state.handler = handler }
                return state.error
            }
            if let failed { handler(failed) }
        }

        /// Whether this lane's items record their cursors when they commit.
        public var recordsCursors: Bool { !cursorsStopped.withLock { $0 } }

        /// From now on, this lane's items are applied but record no cursor. A session
        /// whose link closes calls it before the routes forget that link's offers: the
        /// offers were what held its cursor below transactions not delivered yet, so a
        /// batch still queued then must not carry the cursor past them (docs/ROUTES.md,
        /// "Bounds"). Its next session resumes from the cursor stored before.
        public func stopRecordingCursors() { cursorsStopped.withLock { $0 = true } }
    }

    /// Counters and the transactions held back, for status.
    public struct Status: Sendable, Hashable {
        public struct Pending: Sendable, Hashable {
            public var id: TransactionID
            public var haveDocuments: Int
            public var needDocuments: Int
            public var firstSeen: UInt64
            public var askedPeers: [SiteID]
            /// "coverage" or "order".
            public var reason: String
            public var missingCollections: [String]
        }

        /// A remote transaction this node refused whole: it cannot hold what it writes.
        public struct Refused: Sendable, Hashable {
            public var id: TransactionID
            /// Which document, and which limit.
            public var reason: String
            /// The peers that sent it.
            public var from: [SiteID]
            /// When, in milliseconds since 1970.
            public var at: UInt64
        }

        public var appliedRemote: UInt64 = 0
        public var completedLater: UInt64 = 0
        public var overflows: UInt64 = 0
        /// Remote transactions refused since the node started, and the latest few.
        public var refused: UInt64 = 0
        public var recentRefusals: [Refused] = []
        public var waiting: [Pending] = []
        public var partial: [Pending] = []
        public var bufferedBytes: Int = 0
    }

    /// A request to send: ask peers for `id`'s pieces in `collections`.
    struct Question: Sendable {
        var id: TransactionID
        var collections: [String]
        /// Only these peers; or, when nil, every connected peer but `except`.
        var only: Set<SiteID>?
        var except: Set<SiteID> = []

        func asks(_ site: SiteID) -> Bool { only.map { $0.contains(site) } ?? !except.contains(site) }
    }

    private struct State {
        var queue: [Item] = []
        var newPeers: [SiteID] = []
        var waiter: CheckedContinuation<Void, Never>?
        /// Set by the ticker: the next `take` returns even with nothing queued.
        var tickDue = false
        var assembler: CoverageAssembler?
        var running = false
        var status = Status()
        /// One warning per origin per interval about far-ahead timestamps.
        var skewWarnings = SkewWarnings()
        /// Since when the transactions waiting for coverage cannot be read, and when
        /// that was last logged (once per `unreadableWarningInterval`).
        var unreadableSince: ContinuousClock.Instant?
        var unreadableWarned: ContinuousClock.Instant?
    }

    /// How often a store that cannot be read is logged while it stays so.
    static let unreadableWarningInterval = Duration.seconds(30)

    public let configuration: Configuration
    let store: any SyncStore
    let logger: Logger
    /// Times each commit of received transactions (one per SQLite transaction), if given.
    let applyDuration: Metrics.Timer?
    private let state = Locked(State())

    init(store: any SyncStore, configuration: Configuration, logger: Logger, applyDuration: Metrics.Timer? = nil) {
        self.store = store
        self.configuration = configuration
        self.logger = logger
        self.applyDuration = applyDuration
    }

    public var status: Status { state.withLock { $0.status } }

    /// Items queued and not yet taken into a commit.
    public var queuedItems: Int { state.withLock { $0.queue.count } }

    /// Queues an item; `item.done` is called once it is durable.
    public func enqueue(_ item: Item) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.queue.append(item)
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }

    /// Marks a tick due and wakes the loop.
    private func tick() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.tickDue = true
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }

    /// A peer connected: it will be asked about transactions stuck or partial here.
    func peerConnected(_ site: SiteID) {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.newPeers.append(site)
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }

    /// Runs the pipeline until the task is cancelled. Only one `run` works at a time;
    /// another waits to take over when the working one ends.
    func run(engine: SyncEngine) async {
        while !Task.isCancelled {
            let claimed = state.withLock { s -> Bool in
                if s.running { return false }
                s.running = true
                return true
            }
            guard claimed else {
                try? await Task.sleep(for: .milliseconds(50))
                continue
            }
            // The ticker wakes the loop every tick, so that waiting for work is one
            // continuation, not a task group racing a sleep each time.
            await withTaskGroup(of: Void.self) { group in
                group.addTask { [configuration] in
                    while (try? await Task.sleep(for: configuration.tickInterval)) != nil { self.tick() }
                }
                await work(engine: engine)
                group.cancelAll()
            }
            state.withLock { $0.running = false }
        }
    }

    private func work(engine: SyncEngine) async {
        var assembler: CoverageAssembler
        if let loaded = state.withLock({ $0.assembler }) {
            assembler = loaded
        } else {
            do {
                assembler = CoverageAssembler(configuration: configuration.coverage, records: try await store.transactionRecords())
                let since = state.withLock { s in
                    defer {
                        s.unreadableSince = nil
                        s.unreadableWarned = nil
                    }
                    return s.unreadableSince
                }
                if let since {
                    logger.notice("the transactions waiting for coverage are read again, after \((ContinuousClock.now - since).components.seconds) s")
                }
            } catch {
                // Cancelled: another run takes over (`run`), with the queue as it is.
                if Task.isCancelled { return }
                // Nothing queued can commit before the store answers again, which may take
                // long (a database away): each item fails, so that its session closes and
                // its peer resends when it dials again, here or elsewhere, rather than
                // wait on a session that acknowledges nothing.
                let (failed, warn) = state.withLock { s -> ([Item], Bool) in
                    let now = ContinuousClock.now
                    defer { s.queue = [] }
                    if s.unreadableSince == nil { s.unreadableSince = now }
                    if let last = s.unreadableWarned, now - last < Self.unreadableWarningInterval { return (s.queue, false) }
                    s.unreadableWarned = now
                    return (s.queue, true)
                }
                if warn {
                    logger.error(
                        "cannot read the transactions waiting for coverage; retrying every second",
                        metadata: ["shoal.error": "\(error)", "shoal.sync.failed_items": "\(failed.count)"])
                }
                for item in failed {
                    item.lane?.fail(error)
                    item.done?(.failure(error))
                }
                try? await Task.sleep(for: .seconds(1))
                return
            }
        }
        while !Task.isCancelled {
            let (taken, peers) = await take()
            if Task.isCancelled {
                requeue(taken)
                break
            }
            var items: [Item] = []
            items.reserveCapacity(taken.count)
            for item in taken {
                if let error = item.lane?.failed {
                    item.done?(.failure(error))
                } else {
                    items.append(item)
                }
            }
            let subscriptions = engine.subscriptions
            let routes = engine.routing.snapshot()
            // One commit for everything taken. Should it fail with the batches of more
            // than one session in it, each session's batches are committed again on
            // their own: one session's batch that the store refuses must not close the
            // sessions whose batches only shared its commit.
            var groups = [items]
            var newPeers = peers
            var failed = false
            while !groups.isEmpty {
                let group = groups.removeFirst()
                do {
                    let started = ContinuousClock.now
                    let (result, outcome) = try await commit(
                        group, assembler: assembler, subscriptions: subscriptions, routes: routes, deliveries: engine.deliveries,
                        carried: { [engine] in engine.carriedSubscriptions })
                    if !group.isEmpty { applyDuration?.record(duration: ContinuousClock.now - started) }
                    assembler = result.assembler
                    publish(assembler, result.counters, refused: result.refused + result.forbidden, subscriptions: subscriptions)
                    engine.registry.countDuplicates(result.duplicates)
                    // Before the sessions acknowledge: an Ack's held_through stays below the offers noted.
                    await engine.routing.committed(result.routes, engine: engine)
                    // Before the Acks go out: each carries what its peer is to be told of.
                    for refused in result.forbidden {
                        for site in refused.from {
                            engine.registry.noteRefusal(.init(id: refused.id, code: .permissionDenied, reason: refused.reason), to: site)
                        }
                    }
                    for refused in result.refused {
                        // Its origin is told too, when connected: its EVICT must not count
                        // on this node for what the transaction wrote (PROTOCOL.md §8.8).
                        for site in Set(refused.from + [refused.id.origin]).sorted() {
                            engine.registry.noteRefusal(
                                .init(id: refused.id, code: .limitExceeded, reason: "this node cannot hold it: \(refused.reason)"), to: site)
                        }
                    }
                    for item in group { item.done?(.success(())) }
                    await committed(result, outcome, newPeers: newPeers, assembler: &assembler, engine: engine, subscriptions: subscriptions)
                    newPeers = []
                } catch {
                    if Task.isCancelled {
                        // Rolled back: the assembler as it was before is what is durable.
                        requeue(group + groups.flatMap { $0 })
                        state.withLock { $0.assembler = assembler }
                        return
                    }
                    let lanes = Self.lanes(of: group)
                    if lanes.count > 1 {
                        logger.warning(
                            "could not commit received transactions together; committing each session's alone",
                            metadata: ["shoal.error": "\(error)", "shoal.sync.sessions": "\(lanes.count)"])
                        groups = lanes + groups
                        continue
                    }
                    logger.error("could not commit received transactions", metadata: ["shoal.error": "\(error)"])
                    for item in group {
                        item.lane?.fail(error)
                        item.done?(.failure(error))
                    }
                    failed = true
                }
            }
            if failed {
                // What is durable is the truth: start again from it.
                state.withLock { $0.assembler = nil }
                return
            }
        }
        state.withLock { $0.assembler = assembler }
    }

    /// After a commit: what it applied and applied in part, logged; the peers asked
    /// about the transactions still missing pieces.
    private func committed(
        _ result: CommitResult, _ outcome: ApplyOutcome, newPeers: [SiteID], assembler: inout CoverageAssembler,
        engine: SyncEngine, subscriptions: SubscriptionSet
    ) async {
        if outcome.logged > 0 || !result.applied.isEmpty {
            logger.debug(
                "applied remote transactions",
                metadata: ["shoal.sync.transactions": "\(result.applied.count)", "shoal.sync.deltas": "\(outcome.logged)"])
        }
        for refused in result.forbidden {
            logger.warning(
                "refused a piece of remote transaction \(refused.id): \(refused.reason). It is applied here only if a peer that may write it sends it",
                metadata: ["shoal.txn": "\(refused.id)", "shoal.peer.site": "\(refused.from.map(\.description).joined(separator: ","))"])
            for peer in refused.from { engine.registry.noteError(site: peer, "refused transaction \(refused.id): \(refused.reason)") }
        }
        for refused in result.refused {
            logger.warning(
                "refused a remote transaction whole: this node cannot hold \(refused.reason). The transaction is not applied here or relayed from here; where the limit is a setting (a document's size), raise it on this node if the sender's is right",
                metadata: [
                    "shoal.txn": "\(refused.id)", "shoal.peer.site": "\(refused.from.map(\.description).joined(separator: ","))",
                ])
            for peer in refused.from {
                engine.registry.noteError(site: peer, "refused transaction \(refused.id): this node cannot hold \(refused.reason)")
            }
        }
        for (reason, ids) in result.partial {
            for id in ids {
                logger.warning(
                    "applied a remote transaction in part: some pieces its subscriptions cover are missing",
                    metadata: ["shoal.txn": "\(id)", "shoal.txn.reason": "\(reason)"])
            }
        }
        var questions = result.questions
        for peer in newPeers {
            for (id, collections) in assembler.questions(for: peer) {
                questions.append(Question(id: id, collections: collections, only: [peer]))
            }
        }
        for question in questions {
            let asked = await engine.ask(question)
            assembler.noteAsked(question.id, peers: asked)
        }
        if !questions.isEmpty { publish(assembler, nil, subscriptions: subscriptions) }
    }

    /// `items` by the lane they came in, each lane's in their order, lanes in the order
    /// of their first item; items of no lane together.
    static func lanes(of items: [Item]) -> [[Item]] {
        var groups: [[Item]] = []
        var slots: [ObjectIdentifier?: Int] = [:]
        for item in items {
            let key = item.lane.map(ObjectIdentifier.init)
            if let slot = slots[key] {
                groups[slot].append(item)
            } else {
                slots[key] = groups.count
                groups.append([item])
            }
        }
        return groups
    }

    /// Waits for queued items (or new peers, or the next tick) and takes a commit's worth.
    private func take() async -> ([Item], [SiteID]) {
        while true {
            let taken = state.withLock { s -> ([Item], [SiteID])? in
                guard !s.queue.isEmpty || !s.newPeers.isEmpty || s.tickDue else { return nil }
                s.tickDue = false
                var count = 0
                var end = 0
                while end < s.queue.count, end == 0 || count + s.queue[end].pieces.reduce(0, { $0 + $1.deltas.count }) <= configuration.maximumCommitDeltas {
                    count += s.queue[end].pieces.reduce(0) { $0 + $1.deltas.count }
                    end += 1
                }
                let items = Array(s.queue[..<end])
                s.queue.removeFirst(end)
                defer { s.newPeers = [] }
                return (items, s.newPeers)
            }
            if let taken { return taken }
            if Task.isCancelled { return ([], []) }
            await waitForWork()
        }
    }

    /// Returns when an item or a new peer is queued, a tick is due, or the task is cancelled.
    private func waitForWork() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { s -> Bool in
                    if !s.queue.isEmpty || !s.newPeers.isEmpty || s.tickDue || Task.isCancelled { return true }
                    s.waiter = c
                    return false
                }
                if ready { c.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume()
        }
    }

    private func requeue(_ items: [Item]) {
        state.withLock { $0.queue.insert(contentsOf: items, at: 0) }
    }

    struct Counters: Sendable {
        var applied = 0
        var completed = 0
        var overflows = 0
    }

    struct CommitResult: Sendable {
        var assembler: CoverageAssembler
        var applied: [TransactionID] = []
        var refused: [Status.Refused] = []
        /// Pieces refused because their sender may not write where they write (`AccessRules`).
        var forbidden: [Status.Refused] = []
        var partial: [(CoverageAssembler.PartialReason, [TransactionID])] = []
        var questions: [Question] = []
        var counters = Counters()
        /// Per peer, the deltas it sent that this node held already (logged, or
        /// received from another peer for a transaction still waiting).
        var duplicates: [SiteID: UInt64] = [:]
        /// What the route table learns from the commit.
        var routes = Routing.Commit()
        /// The transactions this node held nothing of before the commit (`DeliveryLedger`).
        var firstHeld: Set<TransactionID> = []

        /// `piece` from `peer` brought `new` deltas this node did not hold.
        mutating func received(_ piece: TransactionPiece, new: Int, from peer: SiteID) {
            let count = piece.deltas.count - new
            if count > 0 { duplicates[peer, default: 0] += UInt64(count) }
            if !piece.deltas.isEmpty { routes.receipts.append(.init(id: piece.id, from: peer, duplicate: new == 0)) }
            if piece.isLast { routes.lastPieces.append((piece.id, peer)) }
        }
    }

    /// The most deltas a commit may hold to count as short (`SyncStore.writeInbound`):
    /// about `DocumentStore.shortWrite` of applying on two cores, so that one received
    /// transaction of a hundred documents, or a few smaller ones, apply on this thread.
    static let shortCommitDeltas = 1024

    /// One write transaction: every item's pieces, the decisions they allow, and the
    /// cursors, as `InboundCommitPlan` decides them.
    private func commit(
        _ items: [Item], assembler start: CoverageAssembler, subscriptions: SubscriptionSet, routes: Routing.Snapshot,
        deliveries: Locked<DeliveryLedger>? = nil, carried: (@Sendable () -> SubscriptionSet)? = nil
    ) async throws(ShoalError) -> (CommitResult, ApplyOutcome) {
        let now = HybridLogicalClock.systemMilliseconds()
        for item in items {
            for piece in item.pieces {
                var ahead: HybridTimestamp?
                for delta in piece.deltas where !store.clock.observe(delta.timestamp) && ahead == nil { ahead = delta.timestamp }
                guard let ahead,
                    case .warn(let suppressed) = state.withLock({ $0.skewWarnings.farAhead(from: piece.id.origin, now: now) })
                else { continue }
                var metadata: Logger.Metadata = [
                    "shoal.peer.site": "\(item.source)", "shoal.txn": "\(piece.id)", "shoal.hlc": "\(ahead)",
                ]
                if suppressed > 0 { metadata["shoal.suppressed"] = "\(suppressed)" }
                logger.warning(
                    "a remote write is timestamped far ahead of this clock; not adopting its time\(suppressed > 0 ? " (\(suppressed) more from its origin since the last warning)" : "")",
                    metadata: metadata)
            }
        }
        // Small, and nothing buffered that it could complete: the store may run it on
        // this task's thread instead of hopping to the writer's queue and back.
        let deltas = items.reduce(0) { $0 + $1.pieces.reduce(0) { $0 + $1.deltas.count } }
        let short = !items.isEmpty && deltas <= Self.shortCommitDeltas && start.waitingCount == 0
        let logger = self.logger
        let store = self.store
        // A commit that may let a held transaction go partial writes what no piece of it
        // names: it runs as the one writer at once, rather than fail beside the others first.
        let claim = store.hasOtherProcesses && !start.mayRelease(now: now) ? Self.claim(items, assembler: start) : nil
        // What the body warns of is logged once the write is kept, once however many
        // times the store ran it.
        let deferred = DeferredLog()
        let written = try await store.writeInbound(short: short, claim: claim) { writer async throws(ShoalError) in
            let logger = deferred.attempt(of: logger)
            // Read once the write holds the gate: `ALTER SYSTEM SET` may have changed them
            // while it waited.
            let limits = store.documentLimits
            // What the plan decides on: the states of the transactions it does not hold
            // (on a shared store, of those it holds too), and the records of those
            // waiting or partial that it does not hold as they are.
            let ids = InboundCommitPlan.toRead(items, assembler: start, routes: routes, shared: store.hasOtherProcesses)
            // With their states, what those applied left out (their `rest`): an offer of
            // one, or a late last piece, may be of one that left out what this node takes now.
            let read = ids.isEmpty ? TransactionStates() : try await writer.states(of: ids, rests: true)
            let states = read.states
            let unfinished = states.filter { $0.value == .waiting || $0.value == .partial }
            // One another hub wrote since this one read it holds more than the assembler does.
            let elsewhere = try await writer.writtenElsewhere(unfinished.keys.filter { start.records[$0] != nil }.sorted())
            var records: [TransactionID: TransactionRecord] = [:]
            for (id, state) in unfinished where start.records[id]?.state != state || elsewhere.contains(id) {
                if let record = try await writer.loadRecord(id) { records[id] = record }
            }
            let rests = InboundCommitPlan.restsUsed(read.rests, items: items, routes: routes)
            var plan = InboundCommitPlan(
                assembler: start, subscriptions: subscriptions, now: now, states: states, records: records, rests: rests,
                carried: carried)
            // The registers of every document the pieces of transactions whose last piece
            // came write, in one read rather than one per transaction applied, where reads
            // are round trips. The pieces of others go to the buffer, as a rule, and read
            // nothing (what a piece applied at once needs is read when it applies).
            if writer.readsRegistersAhead {
                let ending = Set(items.flatMap { $0.pieces.filter(\.isLast).map(\.id) })
                var documents: Set<DocumentRef> = []
                for item in items {
                    for piece in item.pieces where ending.contains(piece.id) {
                        for delta in piece.deltas { documents.insert(DocumentRef(collection: delta.collection, id: delta.documentID)) }
                    }
                }
                try await writer.readAhead(registersOf: Array(documents))
            }
            for item in items {
                for piece in item.pieces {
                    if let apply = plan.receive(piece, from: item.source, mayWrite: item.mayWrite) {
                        try await Self.carryOut([.apply(apply)], of: &plan, writer: writer, limits: limits, logger: logger)
                    }
                }
            }
            // The transactions the verdicts name as superseding, read before deciding; a
            // state that cannot be read counts as not applied, as it always did (when the
            // batch fails, each is read alone, so that one bad row costs only its own).
            let superseding = await Self.supersedingStates(plan.supersedingNamed.sorted(), writer: writer)
            for decision in plan.decide(isApplied: { superseding[$0].map { $0 != .waiting } ?? false }) {
                try await Self.carryOut(plan.steps(for: decision), of: &plan, writer: writer, limits: limits, logger: logger)
            }
            try await Self.carryOut(plan.finish(items, routes: routes, limits: limits), of: &plan, writer: writer, limits: limits, logger: logger)
            // Before the commit's rows are published: a session told of them asks the
            // ledger whether they are echoes (`SyncEngine.isEcho`). Told early of a
            // commit that then fails, it errs only towards sending: a transaction first
            // held here is still first held at the next commit.
            let firstHeld = plan.result.firstHeld
            deliveries?.withLock { $0.committed(items.lazy.flatMap(\.pieces).map(\.id), firstHeld: firstHeld) }
            return plan.result
        }
        deferred.flush(to: logger)
        return written
    }

    /// The states of the transactions verdicts name as superseding: a state that cannot
    /// be read counts as not applied (when the batch fails, each is read alone, so that
    /// one bad row costs only its own).
    private static func supersedingStates(
        _ named: [TransactionID], writer: any InboundWriting
    ) async -> [TransactionID: TransactionRecord.State] {
        guard !named.isEmpty else { return [:] }
        if let states = try? await writer.states(of: named) { return states }
        var states: [TransactionID: TransactionRecord.State] = [:]
        for id in named { states[id] = (try? await writer.state(of: id)) ?? nil }
        return states
    }

    /// What a commit of `items` names before it reads (`InboundClaim`): the documents and
    /// context its pieces write, with those `assembler` holds of their transactions (a
    /// piece may complete one), the transactions, and the cursors it records.
    static func claim(_ items: [Item], assembler: CoverageAssembler) -> InboundClaim {
        var claim = InboundClaim()
        for item in items {
            if let cursor = item.cursor { claim.cursors.insert(InboundClaim.Cursor(peer: item.source, key: cursor.key)) }
            for piece in item.pieces {
                claim.transactions.insert(piece.id)
                for delta in piece.deltas { claim.documents.insert(DocumentRef(collection: delta.collection, id: delta.documentID)) }
                for field in piece.context { claim.documents.insert(field.document) }
                if let held = assembler.records[piece.id] { claim.documents.formUnion(held.documents.keys) }
            }
        }
        return claim
    }

    /// Carries out `steps` in order, each apply followed at once by what the plan says
    /// follows it (`InboundCommitPlan.applied`).
    private static func carryOut(
        _ steps: [InboundCommitPlan.Step], of plan: inout InboundCommitPlan, writer: any InboundWriting, limits: DocumentLimits,
        logger: Logger
    ) async throws(ShoalError) {
        var steps = steps
        var next = 0
        while next < steps.count {
            let step = steps[next]
            next += 1
            switch step {
            case .apply(let apply):
                let logged = writer.outcome.logged
                let refusal = try await writer.apply(
                    apply.record, deltas: apply.deltas, documentDeltaCounts: apply.counts, context: apply.context,
                    buffered: apply.buffered, isNew: apply.isNew, state: apply.state, rest: apply.rest, limits: limits, logger: logger)
                steps.insert(contentsOf: plan.applied(apply, refusal: refusal, newlyLogged: writer.outcome.logged - logged), at: next)
            case .markApplied(let id, let rest):
                try await writer.markApplied(id, rest: rest)
            case .settleRest(let id, let rest, let manifest, let verdicts):
                let logged = try await writer.loggedIndexes(of: id)
                var named: Set<TransactionID> = []
                for verdict in verdicts {
                    if case .superseded(let ids) = verdict.coverage { named.formUnion(ids.filter { $0 != id }) }
                }
                let superseding = await supersedingStates(named.sorted(), writer: writer)
                let now = plan.settle(rest, manifest: manifest, logged: logged, verdicts: verdicts) { later in
                    later == id || superseding[later].map { $0 != .waiting } ?? false
                }
                if now != rest {
                    try await writer.recordRest(id, rest: now)
                    plan.settled(id, rest: now)
                }
            case .refuse(let record, let reason):
                try await writer.refuse(record, reason: reason)
            case .buffer(let id, let deltas, let counts, let context):
                try await writer.buffer(deltas, documentDeltaCounts: counts, context: context, of: id)
            case .save(let record):
                try await writer.save(record)
            case .recordCursor(let peer, let key, let through, let epoch):
                try await writer.recordCursor(peer: peer, subscriptionKey: key, through: through, epoch: epoch)
            case .warn(let message, let id, let peer):
                logger.warning("\(message)", metadata: ["shoal.txn": "\(id)", "shoal.peer.site": "\(peer)"])
            }
        }
    }

    /// The refusals status keeps, newest last.
    static let recentRefusals = 16

    private func publish(
        _ assembler: CoverageAssembler, _ counters: Counters?, refused: [Status.Refused] = [], subscriptions: SubscriptionSet
    ) {
        let covered = subscriptions.collections
        func pending(_ record: TransactionRecord) -> Status.Pending {
            let need = record.collections.filter { covered.contains($0.collection) }.reduce(0) { $0 + Int($1.documents) }
            let have = record.documents.count { covered.contains($0.key.collection) && $0.value.isComplete }
            var reason = "coverage"
            var missing: [String] = []
            switch assembler.waits[record.id] {
            case .order?: reason = "order"
            case .coverage(let m)?: missing = m
            case nil: missing = record.collections.map(\.collection).filter { covered.contains($0) }
            }
            return Status.Pending(
                id: record.id, haveDocuments: have, needDocuments: need, firstSeen: record.firstSeen,
                askedPeers: (assembler.asked[record.id] ?? []).sorted(), reason: reason, missingCollections: missing)
        }
        let records = assembler.records.values.sorted { ($0.firstSeen, $0.id) < ($1.firstSeen, $1.id) }
        state.withLock { s in
            if let counters {
                s.status.appliedRemote += UInt64(counters.applied)
                s.status.completedLater += UInt64(counters.completed)
                s.status.overflows += UInt64(counters.overflows)
            }
            if !refused.isEmpty {
                s.status.refused += UInt64(refused.count)
                s.status.recentRefusals = Array((s.status.recentRefusals + refused).suffix(Self.recentRefusals))
            }
            s.status.waiting = records.filter { $0.state == .waiting }.map(pending)
            s.status.partial = records.filter { $0.state == .partial }.map(pending)
            s.status.bufferedBytes = assembler.bufferedBytes
        }
    }
}

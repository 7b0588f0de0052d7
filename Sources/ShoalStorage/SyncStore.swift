package import ShoalCRDT

/// What sync does with a store, and nothing more: ShoalSync reaches the store only
/// through this protocol, so that another engine (PostgreSQL, a test double) can sit
/// under the same sessions and inbound pipeline. `DocumentStore` (SQLite) is the one
/// in use. Its operations are reads and writes of rows; the rules of what a peer gets
/// and of what a received transaction does are ShoalSync's.
///
/// Outbound, a session reads the change log after a peer's cursor (`logPage`), and
/// ShoalSync's piece planner turns its rows into pieces with the bodies, records and
/// current fields it asks for (`SyncStore.changes`, `transactionPieces`); it wakes
/// when the log grows or cursors restart. Inbound, the pipeline starts from the
/// transactions left waiting or partial (`transactionRecords`) and does each commit
/// in one write transaction (`writeInbound`) through an `InboundWriting`, whose reads
/// (the buffer, what the log holds, registers) ShoalSync's `InboundApplier` turns into
/// the rows to write (`AppliedRows`).
package protocol SyncStore: AnyObject, Sendable {
    /// This node's site.
    var siteID: SiteID { get }
    /// The clock remote timestamps are observed on.
    var clock: HybridLogicalClock { get }
    /// Whether this store may lack some of its own transactions (it has evicted
    /// documents, or went back), so a peer streaming from the start should send them too.
    var mayLackOwnTransactions: Bool { get }
    /// The system parameters in force (the document size limits a session checks).
    var systemParameters: SystemParameters { get }
    /// The limits a received or local write is held to: the parameters' (`systemParameters`),
    /// and the engine's own bound on keys, if it has one (`DocumentLimits.keyBytes`).
    var documentLimits: DocumentLimits { get }

    // MARK: Outbound

    /// Where `peer`'s stream for `subscriptions` resumes in this node's log (the set's
    /// cursor, or a wider set's), read in one snapshot with the cursor epoch a batch of
    /// that stream records its cursor under.
    func resumePoint(peer: SiteID, subscriptions: SubscriptionSet) async throws(ShoalError) -> ResumePoint
    /// `peer`'s stream with this node's own transactions in it caught up: its cursor
    /// becomes the one of `subscriptionKey` (`SubscriptionSet.refillKey`).
    func ownTransactionsBack(peer: SiteID, subscriptionKey: String) async throws(ShoalError)
    // MARK: Reading the log (ShoalSync's `PiecePlanner` decides what of it a peer gets)
    //
    // Each call reads one committed state, at least as new as the one the call before
    // it read (read committed, never going back); two calls may see different states.
    // The planner relies on no more: what must agree with a page's rows (their records,
    // which the verdicts come from) comes with the page. A body read later is what a
    // later page would have been judged by, and a current field read later is still
    // what PROTOCOL.md §8.3 asks context to be: what the node holds now (which may
    // include a field of a transaction after the page, as it may when the page does not
    // reach the log's end).

    /// The rows of the change log after `sequence`, in order, each row whole: rows until
    /// `limit` deltas, then more to finish the transaction the limit falls in while the
    /// page stays within `stretch` deltas, and within `byteLimit` bytes of values (one
    /// row at least, whatever its size); with the records of their transactions that
    /// `records` names, and the transactions on either side, all read in one snapshot
    /// (`LogPage`).
    func logPage(
        after sequence: UInt64, limit: Int, stretch: Int, byteLimit: Int, records: @escaping @Sendable (TransactionID) -> Bool
    ) async throws(ShoalError) -> LogPage
    /// Every row the log holds of transaction `id`, in log order, with its record, in
    /// one snapshot (`next` and `previous` are nil).
    func logPage(of id: TransactionID) async throws(ShoalError) -> LogPage
    /// Which of the transactions `ids` the log holds a row of.
    func logHolds(_ ids: [TransactionID]) async throws(ShoalError) -> Set<TransactionID>
    /// The bodies (canonical JSON) this node holds of `documents`; one it holds no body
    /// of is left out.
    func bodies(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRef: String]
    /// What this node recorded of the transactions `ids`; one with no record is left out.
    func storedTransactions(_ ids: [TransactionID]) async throws(ShoalError) -> [TransactionID: StoredTransaction]
    /// The current registers of `documents`, each document's in name order.
    func currentFields(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRef: [FieldRecord]]
    /// Calls `handler` with the change log's end, now and each time it grows, with what
    /// the commit appended (from the committing task: it must only hand it on), and
    /// `closed` when the store closes.
    func listenToChangeLog(
        _ handler: @escaping @Sendable (LogEnd) -> Void, closed: @escaping @Sendable () -> Void
    ) -> ChangeFeedListening
    /// A signal each time EVICT restarts every peer cursor.
    func cursorResets() -> AsyncStream<UInt64>
    /// How far this store holds `origin`'s transactions (sent in a Subscribe to it).
    func history(of origin: SiteID) async throws(ShoalError) -> OriginHistory
    /// Checks what `peer` holds of this node's own transactions against this store,
    /// and repairs a history that went back (`DocumentStore+History.swift`).
    func reconcileOwnHistory(with held: OriginHistory, peer: SiteID) async throws(ShoalError) -> HistoryVerdict
    /// A peer resumes after `sequence` of this node's log: if the log ends below it
    /// (it went back), moves every row above it (`DocumentStore+History.swift`).
    func raiseLog(above sequence: UInt64, peer: SiteID) async throws(ShoalError) -> UInt64?
    /// The interest this node relays for, by the node that stated it, as saved before
    /// (read once, at start).
    func savedInterest() throws(ShoalError) -> [SiteID: SavedInterest]
    /// Saves the interest of these origins, replacing what was saved of them, and
    /// forgets that of `forgetting`, so a restart keeps relaying what it relayed.
    func saveInterest(_ interest: [SiteID: SavedInterest], forgetting: [SiteID]) async throws(ShoalError)
    /// `peer` acknowledged this node's log through `through` under `subscriptions`:
    /// what EVICT asks before it drops this node's own writes.
    func notePeerHolding(_ peer: SiteID, through: UInt64, subscriptions: SubscriptionSet)
    /// `peer` refused these transactions whole (its Ack said so, PROTOCOL.md §8.8): it
    /// acknowledged the log past them all the same, so EVICT must not count on it for a
    /// document whose current values one of this node's own among them wrote. Kept
    /// across restarts, since the peer's acknowledgement comes back with its cursor.
    /// Returns those of this node's own it did not know `peer` refused (all of them, for
    /// an engine that keeps none): a peer tells a refusal again at each session
    /// (`refusedTransactions`).
    func notePeerRefused(_ peer: SiteID, transactions: [TransactionID]) async throws(ShoalError) -> Set<TransactionID>
    /// The transactions of `origin` this node refused whole (state refused, DATA_MODEL.md
    /// §4.4), newest first, `limit` at most, each with its reason: told again to
    /// `origin` at the start of each session with it (PROTOCOL.md §8.8), since the Ack
    /// that told one first may have been lost with its session, and a refusal of a
    /// transaction that came through another peer was told to that peer only.
    func refusedTransactions(of origin: SiteID, limit: Int) async throws(ShoalError) -> [(id: TransactionID, reason: String)]
    /// The change log's last sequence as of the latest commit or the store's opening.
    var lastCommittedSequence: UInt64 { get }
    /// Whether the store holds anything another node wrote: a peer that holds only its
    /// own writes cannot bring back a document another node forgot (ShoalSync's `Freshness`).
    func holdsOthersWrites() async throws(ShoalError) -> Bool

    // MARK: Inbound

    /// Every waiting and partial transaction: what the inbound pipeline starts from.
    func transactionRecords() async throws(ShoalError) -> [TransactionRecord]
    /// Runs `body` in one write transaction; returns what it returned and what was
    /// applied. The transaction is serializable (one writer at a time) and all or
    /// nothing: when `body` throws, or the commit fails, nothing of it stays, and no
    /// reader sees any of it before it commits. `short`: the caller knows the write is
    /// small (up to about a thousand deltas), and the store may run it on the calling
    /// thread. `claim`: what the body will write, named before it reads anything, for a
    /// store whose writers can commit side by side (`InboundClaim`); the body may then run
    /// twice, so it must depend on nothing but its values and the writer.
    func writeInbound<T: Sendable>(
        short: Bool, claim: InboundClaim?, _ body: @escaping @Sendable (any InboundWriting) async throws(ShoalError) -> T
    ) async throws(ShoalError) -> (T, ApplyOutcome)

    // MARK: Attachments

    func attachmentLength(hash: String) async throws(ShoalError) -> Int?
    /// A writer for the bytes `hash` names, continuing what an interrupted fetch of
    /// them stored; its `finish` checks the hash.
    func attachmentWriter(fetching hash: String) async throws(ShoalError) -> AttachmentWriter
    func attachmentChunk(hash: String, offset: Int, maximum: Int) async throws(ShoalError) -> (total: Int, bytes: [UInt8])?
    /// `count` bytes from `start` of the staging entry `blob` (an `AttachmentWriter`'s),
    /// fewer when it holds fewer: what a fetch under way has stored so far.
    func stagedAttachmentBytes(blob: Int64, from start: Int, count: Int) async throws(ShoalError) -> [UInt8]
    /// Whether other processes are this node with this one (hubs on one database): they
    /// reach peers this process does not (`fetchThroughOtherProcesses`).
    var hasOtherProcesses: Bool { get }
    /// After this process's peers could not send attachment `hash`: asks the other
    /// processes that are this node with it (hubs on one database), which reach other
    /// peers, to fetch it into the staging entry `blob`, and waits while one does: a
    /// first sign within a few seconds, then each step of progress within `step`. Returns the
    /// attachment's length once it is held; nil when no other process took the request,
    /// or the one that did stopped. A store of one process returns nil at once.
    func fetchThroughOtherProcesses(hash: String, blob: Int64, step: Duration) async throws(ShoalError) -> Int?
    /// Runs until the task is cancelled, calling `asked` with each attachment another
    /// process of this node asks for (`fetchThroughOtherProcesses`); a store of one
    /// process returns at once.
    func followAttachmentRequests(_ asked: @escaping @Sendable (String) -> Void) async

    // MARK: Compaction (`PeerPositions.compact`)

    /// The highest change-log sequence committed so far.
    func lastSequence() async throws(ShoalError) -> UInt64
    /// Saves what peers acknowledged (the highest of each) and forgets `forget`.
    func savePeerAcknowledgements(_ acknowledgements: [PeerAcknowledgement], forget: [SiteID]) async throws(ShoalError)
    func peerAcknowledgements() async throws(ShoalError) -> [PeerAcknowledgement]
    /// Removes the transactions through `through` that hold no current value.
    func compactChangeLog(
        after start: UInt64, through: UInt64, progress: @Sendable (UInt64, CompactionReport) async -> Void
    ) async throws(ShoalError) -> CompactionReport
}

/// The store operations of one inbound commit, all inside the same write transaction:
/// the durable buffer of waiting transactions, the apply of whole or partial ones,
/// and peer cursors. A body makes its calls one at a time, each awaited (never two at
/// once, as `async let` would), and none after `writeInbound` returns: those throw.
package protocol InboundWriting: AnyObject, Sendable {
    /// What the calls so far applied.
    var outcome: ApplyOutcome { get }
    /// The states of the transactions `ids` this node has a record of (one it has no
    /// record of is left out) and, with `rests`, what each of those applied left out,
    /// its `rest` (PROTOCOL.md §8.8), where it is not empty. One applied under narrower
    /// subscriptions vouches collections as not covered that this node may take now
    /// (PROTOCOL.md §8.11, "Offers"): read in the same query, as a column of the row.
    func states(of ids: [TransactionID], rests: Bool) async throws(ShoalError) -> TransactionStates
    /// Of the waiting or partial transactions `ids`, those whose record another process
    /// wrote since this one last read or wrote it: more of it buffered, its reports or
    /// its state changed there (hubs on one database). A store no other process writes
    /// names none.
    func writtenElsewhere(_ ids: [TransactionID]) async throws(ShoalError) -> Set<TransactionID>
    /// Records a waiting transaction: its header and reports. A record already further
    /// on (partial, applied, refused) keeps its state, and a waiting record leaves a
    /// partial one's reports as they are.
    func save(_ record: TransactionRecord) async throws(ShoalError)
    /// Keeps pieces of a waiting transaction in the durable buffer.
    func buffer(_ deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32], context: [ContextField], of id: TransactionID) async throws(ShoalError)
    /// What the durable buffer holds of transaction `id` (which wrote `deltaCount`
    /// deltas in all, as each of its deltas says).
    func buffered(of id: TransactionID, deltaCount: UInt32) async throws(ShoalError) -> BufferedPieces
    /// Which deltas of transaction `id` the change log holds, by document (their
    /// indexes in the transaction); empty for a transaction it holds nothing of.
    func loggedIndexes(of id: TransactionID) async throws(ShoalError) -> [DocumentRef: Set<UInt32>]
    /// The registers of `documents`, in their order (empty for a document with none).
    func registers(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRegisters]
    /// Whether `readAhead(registersOf:)` saves anything: true for a store whose reads are
    /// round trips (PostgreSQL), false for one whose reads are cheap (SQLite), which is
    /// then not asked to.
    var readsRegistersAhead: Bool { get }
    /// Reads the registers of `documents` at once, for the `registers(of:)` calls that
    /// follow in this write, which are answered from what it read until the write
    /// writes a document, which is then read again.
    func readAhead(registersOf documents: [DocumentRef]) async throws(ShoalError)
    /// Writes the rows of one apply, as they are (`AppliedRows`).
    func write(_ rows: AppliedRows) async throws(ShoalError)
    /// Records a transaction as refused for good (`reason`: which document, which
    /// limit), dropping what the buffer holds of it.
    func refuse(_ record: TransactionRecord, reason: String) async throws(ShoalError)
    /// Marks a partial transaction whole.
    func markApplied(_ id: TransactionID, rest: [Verdict]) async throws(ShoalError)
    /// Records what an applied transaction leaves out now (a late last piece brought
    /// more of it): its `rest` alone. Nothing new is applied, so the commit tells
    /// observers nothing of it.
    func recordRest(_ id: TransactionID, rest: [Verdict]) async throws(ShoalError)
    /// Records `through` as the resume point for `peer`'s log under `subscriptionKey`,
    /// unless every cursor was forgotten since `epoch` was read (`ResumePoint`): then the
    /// batch belongs to a stream that no longer counts, and nothing is recorded. With
    /// `epoch` nil, records it under the epoch in force.
    func recordCursor(peer: SiteID, subscriptionKey: String, through: UInt64, epoch: UInt64?) async throws(ShoalError)
    /// Reads back a waiting or partial transaction's record.
    func loadRecord(_ id: TransactionID) async throws(ShoalError) -> TransactionRecord?
}

/// Where a peer's stream resumes: the cursor of a subscription set, the cursor of the
/// stream of the same set with this node's own transactions in it
/// (`SubscriptionSet.refillKey`; 0: none), and the cursor epoch.
///
/// EVICT and a store that went back forget every cursor, so that peers send again what
/// this node may lack. A batch of a stream that began before that, committed after it,
/// must not record its cursor again: the node would resume past its own transactions
/// without asking for them (found by shoal-check: a node restored twice from the same
/// copy, killed two seconds after the second, never got 47 of its own transactions
/// back and held counters apart for good). So each forgetting raises the epoch, and a
/// batch records its cursor only under the epoch its stream was read at.
public struct ResumePoint: Sendable, Hashable {
    public var through: UInt64
    public var refill: UInt64
    public var epoch: UInt64

    public init(through: UInt64, refill: UInt64 = 0, epoch: UInt64 = 0) {
        self.through = through
        self.refill = refill
        self.epoch = epoch
    }
}

/// What `InboundWriting.states(of:rests:)` read: the states of the transactions the
/// store has a record of and, when asked, the `rest` of those applied that left
/// something out.
package struct TransactionStates: Sendable, Equatable {
    package var states: [TransactionID: TransactionRecord.State] = [:]
    package var rests: [TransactionID: [Verdict]] = [:]

    package init(states: [TransactionID: TransactionRecord.State] = [:], rests: [TransactionID: [Verdict]] = [:]) {
        self.states = states
        self.rests = rests
    }
}

extension InboundWriting {
    package var readsRegistersAhead: Bool { false }

    /// The states of the transactions `ids` this node has a record of.
    package func states(of ids: [TransactionID]) async throws(ShoalError) -> [TransactionID: TransactionRecord.State] {
        try await states(of: ids, rests: false).states
    }

    package func writtenElsewhere(_ ids: [TransactionID]) async throws(ShoalError) -> Set<TransactionID> { [] }

    package func readAhead(registersOf documents: [DocumentRef]) async throws(ShoalError) {}

    /// The state of a transaction this node has a record of, if any.
    package func state(of id: TransactionID) async throws(ShoalError) -> TransactionRecord.State? {
        try await states(of: [id])[id]
    }
}

extension SyncStore {
    /// Runs `body` in one write transaction as the one writer (no claim).
    package func writeInbound<T: Sendable>(
        short: Bool = false, _ body: @escaping @Sendable (any InboundWriting) async throws(ShoalError) -> T
    ) async throws(ShoalError) -> (T, ApplyOutcome) {
        try await writeInbound(short: short, claim: nil, body)
    }

    /// One process: no other to ask.
    package var hasOtherProcesses: Bool { false }

    package func fetchThroughOtherProcesses(hash: String, blob: Int64, step: Duration) async throws(ShoalError) -> Int? { nil }

    package func followAttachmentRequests(_ asked: @escaping @Sendable (String) -> Void) async {}
}

extension SyncStore {
    /// The parameters' limits, with no bound on keys.
    package var documentLimits: DocumentLimits { systemParameters.documentLimits }
}

import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Logging
import Testing

/// Sync reaches the store only through `SyncStore`: a store of another kind (here
/// one that forwards to a `DocumentStore` and counts what it is asked) sits under
/// the same sessions and pipeline.
@Suite struct SyncStoreTests {
    final class CountingStore: SyncStore {
        let base: DocumentStore
        let commits = Locked(0)
        let pages = Locked(0)
        /// Each commit's `short` hint and how many deltas it logged.
        let hints = Locked<[(short: Bool, logged: Int)]>([])
        init(_ base: DocumentStore) { self.base = base }

        func lastSequence() async throws(ShoalError) -> UInt64 { try await base.lastSequence() }
        func savePeerAcknowledgements(_ acknowledgements: [PeerAcknowledgement], forget: [SiteID]) async throws(ShoalError) {
            try await base.savePeerAcknowledgements(acknowledgements, forget: forget)
        }
        func peerAcknowledgements() async throws(ShoalError) -> [PeerAcknowledgement] { try await base.peerAcknowledgements() }
        func compactChangeLog(
            after start: UInt64, through: UInt64, progress: @Sendable (UInt64, CompactionReport) async -> Void
        ) async throws(ShoalError) -> CompactionReport {
            try await base.compactChangeLog(after: start, through: through, progress: progress)
        }

        var siteID: SiteID { base.siteID }
        var clock: HybridLogicalClock { base.clock }
        var systemParameters: SystemParameters { base.systemParameters }
        var mayLackOwnTransactions: Bool { base.mayLackOwnTransactions }
        func resumePoint(peer: SiteID, subscriptions: SubscriptionSet) async throws(ShoalError) -> ResumePoint {
            try await base.resumePoint(peer: peer, subscriptions: subscriptions)
        }
        func ownTransactionsBack(peer: SiteID, subscriptionKey: String) async throws(ShoalError) {
            try await base.ownTransactionsBack(peer: peer, subscriptionKey: subscriptionKey)
        }
        func logPage(
            after sequence: UInt64, limit: Int, stretch: Int, byteLimit: Int, records: @escaping @Sendable (TransactionID) -> Bool
        ) async throws(ShoalError) -> LogPage {
            pages.withLock { $0 += 1 }
            return try await base.logPage(after: sequence, limit: limit, stretch: stretch, byteLimit: byteLimit, records: records)
        }
        func logPage(of id: TransactionID) async throws(ShoalError) -> LogPage { try await base.logPage(of: id) }
        func logHolds(_ ids: [TransactionID]) async throws(ShoalError) -> Set<TransactionID> {
            holdsAsked.withLock { $0 += 1 }
            return try await base.logHolds(ids)
        }
        /// How many times `logHolds` and `storedTransactions` were called.
        let holdsAsked = Locked(0)
        let recordsAsked = Locked(0)
        func bodies(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRef: String] {
            try await base.bodies(of: documents)
        }
        func storedTransactions(_ ids: [TransactionID]) async throws(ShoalError) -> [TransactionID: StoredTransaction] {
            recordsAsked.withLock { $0 += 1 }
            return try await base.storedTransactions(ids)
        }
        func currentFields(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRef: [FieldRecord]] {
            try await base.currentFields(of: documents)
        }
        func listenToChangeLog(
            _ handler: @escaping @Sendable (LogEnd) -> Void, closed: @escaping @Sendable () -> Void
        ) -> ChangeFeedListening {
            base.listenToChangeLog(handler, closed: closed)
        }
        func cursorResets() -> AsyncStream<UInt64> { base.cursorResets() }
        func history(of origin: SiteID) async throws(ShoalError) -> OriginHistory { try await base.history(of: origin) }
        func reconcileOwnHistory(with held: OriginHistory, peer: SiteID) async throws(ShoalError) -> HistoryVerdict {
            try await base.reconcileOwnHistory(with: held, peer: peer)
        }
        func raiseLog(above sequence: UInt64, peer: SiteID) async throws(ShoalError) -> UInt64? {
            try await base.raiseLog(above: sequence, peer: peer)
        }
        func savedInterest() throws(ShoalError) -> [SiteID: SavedInterest] {
            try base.savedInterest()
        }
        func saveInterest(_ interest: [SiteID: SavedInterest], forgetting: [SiteID]) async throws(ShoalError) {
            try await base.saveInterest(interest, forgetting: forgetting)
        }
        func notePeerRefused(_ peer: SiteID, transactions: [TransactionID]) async throws(ShoalError) -> Set<TransactionID> {
            try await base.notePeerRefused(peer, transactions: transactions)
        }
        func refusedTransactions(of origin: SiteID, limit: Int) async throws(ShoalError) -> [(id: TransactionID, reason: String)] {
            try await base.refusedTransactions(of: origin, limit: limit)
        }
        func notePeerHolding(_ peer: SiteID, through: UInt64, subscriptions: SubscriptionSet) {
            base.notePeerHolding(peer, through: through, subscriptions: subscriptions)
        }
        var lastCommittedSequence: UInt64 { base.lastCommittedSequence }
        func holdsOthersWrites() async throws(ShoalError) -> Bool { try await base.holdsOthersWrites() }
        func transactionRecords() async throws(ShoalError) -> [TransactionRecord] {
            if failRecords.withLock({ $0 }) { throw ShoalError(.database, "the database cannot be reached (injected)") }
            return try await base.transactionRecords()
        }
        /// While set, the transactions waiting for coverage cannot be read, as from a
        /// database that went away.
        let failRecords = Locked(false)
        /// When set, the next commit that logs deltas is rolled back and, once the latch
        /// opens, fails as a full disk would.
        let failNextApply = Locked<Latch?>(nil)

        /// When set, the next commit waits for the latch before it starts (`holding`
        /// meanwhile), so that what arrives after queues behind it.
        let holdNext = Locked<Latch?>(nil)
        let holding = Locked(false)
        /// When set, a commit that would apply a transaction of this origin fails, as a
        /// store refusing one session's batch would.
        let refuse = Locked<SiteID?>(nil)

        /// Forwards to the store's writer, and throws on a transaction of `refused` origin.
        final class RefusingWriter: InboundWriting, Sendable {
            let base: any InboundWriting
            let refused: SiteID
            init(_ base: any InboundWriting, refusing refused: SiteID) {
                self.base = base
                self.refused = refused
            }
            var outcome: ApplyOutcome { base.outcome }
            func states(of ids: [TransactionID], rests: Bool) async throws(ShoalError) -> TransactionStates {
                try await base.states(of: ids, rests: rests)
            }
            func save(_ record: TransactionRecord) async throws(ShoalError) {
                try fail(record.id)
                try await base.save(record)
            }
            func buffer(_ deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32], context: [ContextField], of id: TransactionID) async throws(ShoalError) {
                try fail(id)
                try await base.buffer(deltas, documentDeltaCounts: documentDeltaCounts, context: context, of: id)
            }
            func buffered(of id: TransactionID, deltaCount: UInt32) async throws(ShoalError) -> BufferedPieces {
                try await base.buffered(of: id, deltaCount: deltaCount)
            }
            func loggedIndexes(of id: TransactionID) async throws(ShoalError) -> [DocumentRef: Set<UInt32>] {
                try fail(id)
                return try await base.loggedIndexes(of: id)
            }
            func registers(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRegisters] {
                try await base.registers(of: documents)
            }
            var readsRegistersAhead: Bool { base.readsRegistersAhead }
            func readAhead(registersOf documents: [DocumentRef]) async throws(ShoalError) {
                try await base.readAhead(registersOf: documents)
            }
            func write(_ rows: AppliedRows) async throws(ShoalError) {
                try fail(rows.record.id)
                try await base.write(rows)
            }
            func refuse(_ record: TransactionRecord, reason: String) async throws(ShoalError) { try await base.refuse(record, reason: reason) }
            func markApplied(_ id: TransactionID, rest: [Verdict]) async throws(ShoalError) { try await base.markApplied(id, rest: rest) }
            func recordRest(_ id: TransactionID, rest: [Verdict]) async throws(ShoalError) { try await base.recordRest(id, rest: rest) }
            func recordCursor(peer: SiteID, subscriptionKey: String, through: UInt64, epoch: UInt64?) async throws(ShoalError) {
                try await base.recordCursor(peer: peer, subscriptionKey: subscriptionKey, through: through, epoch: epoch)
            }
            func loadRecord(_ id: TransactionID) async throws(ShoalError) -> TransactionRecord? { try await base.loadRecord(id) }
            func fail(_ id: TransactionID) throws(ShoalError) {
                if id.origin == refused { throw ShoalError(.database, "a transaction of \(refused) refused (injected)") }
            }
        }

        func writeInbound<T: Sendable>(
            short: Bool, claim: InboundClaim?, _ body: @escaping @Sendable (any InboundWriting) async throws(ShoalError) -> T
        ) async throws(ShoalError) -> (T, ApplyOutcome) {
            commits.withLock { $0 += 1 }
            if let release = holdNext.withLock({ latch in defer { latch = nil }; return latch }) {
                holding.withLock { $0 = true }
                try? await release.wait()
                holding.withLock { $0 = false }
            }
            if let refused = refuse.withLock({ $0 }) {
                return try await base.writeInbound(short: short, claim: claim) { writer async throws(ShoalError) in
                    try await body(RefusingWriter(writer, refusing: refused))
                }
            }
            if let release = failNextApply.withLock({ $0 }) {
                let rolledBack = Locked(false)
                do throws(ShoalError) {
                    let (result, outcome) = try await base.writeInbound(short: short, claim: claim) { writer async throws(ShoalError) in
                        let result = try await body(writer)
                        if writer.outcome.logged > 0 {
                            rolledBack.withLock { $0 = true }
                            throw ShoalError(.cancelled, "rolled back (injected)")
                        }
                        return result
                    }
                    return (result, outcome)
                } catch {
                    guard rolledBack.withLock({ $0 }) else { throw error }
                    failNextApply.withLock { $0 = nil }
                    try? await release.wait()
                    throw ShoalError(.database, "the disk that holds the data directory is full (injected)")
                }
            }
            let (result, outcome) = try await base.writeInbound(short: short, claim: claim, body)
            hints.withLock { $0.append((short, outcome.logged)) }
            return (result, outcome)
        }
        func attachmentLength(hash: String) async throws(ShoalError) -> Int? { try await base.attachmentLength(hash: hash) }
        func attachmentWriter(fetching hash: String) async throws(ShoalError) -> AttachmentWriter {
            try await base.attachmentWriter(fetching: hash)
        }
        func attachmentChunk(hash: String, offset: Int, maximum: Int) async throws(ShoalError) -> (total: Int, bytes: [UInt8])? {
            try await base.attachmentChunk(hash: hash, offset: offset, maximum: maximum)
        }
        func stagedAttachmentBytes(blob: Int64, from start: Int, count: Int) async throws(ShoalError) -> [UInt8] {
            try await base.stagedAttachmentBytes(blob: blob, from: start, count: count)
        }
    }

    /// 600 one-document transactions reach a node whose engine runs on another store,
    /// and its pipeline commits many of them per write transaction (group commit); its
    /// own write goes back out through the same store.
    /// A, a `TestNode`, and B, an engine on a `CountingStore` over a store of its own,
    /// both subscribed to notes.
    static func withNodes(_ body: (TestNode, DocumentStore, CountingStore, SyncEngine) async throws -> Void) async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        let directory = TemporaryDirectory(prefix: "shoal-b")
        let bStore = try DocumentStore(directory: directory.path)
        let counting = CountingStore(bStore)
        let b = SyncEngine(store: counting, configuration: SyncConfiguration(nodeName: "b"))
        defer {
            a.remove()
            bStore.close()
            directory.remove()
        }
        try b.subscribe("SELECT * FROM notes")
        try await body(a, bStore, counting, b)
    }

    /// A page asks the store about the transactions its verdicts name as superseding all
    /// at once, and about each once. A relay holds 50 transactions of another node, each
    /// writing a document of `own` here and one of `hot` that its sender's compacted log
    /// no longer held, so their records say `hot` was superseded by one transaction this
    /// node never saw (as a hub fed from devices that compact holds hundreds). Asked run
    /// by run, one page asked `logHolds` and `storedTransactions` once a transaction each:
    /// on a hub, round trips enough to keep a session silent past its peer's idle timeout
    /// (the hub checker's page reads of 2 to 18 s).
    @Test func aPageAsksAboutWhatSupersededItsTransactionsOnce() async throws {
        let directory = TemporaryDirectory(prefix: "shoal-supersession")
        let base = try DocumentStore(directory: directory.path)
        defer {
            base.close()
            directory.remove()
        }
        let count = 50, origin = SiteID(0x0E1)
        let later = TransactionID(origin: origin, sequence: 1_000)
        let limits = base.systemParameters.documentLimits
        _ = try await base.writeInbound(short: false) { writer async throws(ShoalError) in
            for i in 0..<count {
                let id = TransactionID(origin: origin, sequence: UInt64(i + 1))
                let document = DocumentRef(collection: "own", id: Value.string("own\(i)").canonicalJSON)
                let delta = Delta(
                    collection: "own", documentID: document.id, field: "n", valueJSON: "\(i)",
                    timestamp: HybridTimestamp(rawValue: UInt64(1_000 + i) << 16), transaction: id, index: 0, count: 2)
                let record = TransactionRecord(
                    id: id, deltaCount: 2, documentCount: 2,
                    collections: [
                        CollectionCount(collection: "hot", documents: 1, deltas: 1), CollectionCount(collection: "own", documents: 1, deltas: 1),
                    ], state: .applied, firstSeen: 0)
                _ = try await writer.apply(
                    record, deltas: [delta], documentDeltaCounts: [document: 1], context: [], buffered: false, isNew: true,
                    state: .applied, rest: [Verdict(collection: "hot", coverage: .superseded([later]))], limits: limits,
                    logger: Logger(label: "shoal.test"))
            }
        }
        let store = CountingStore(base)
        let page = try await store.changes(
            after: 0, limit: 100_000, subscriptions: SessionStateMachineTests.set("SELECT * FROM hot", "SELECT * FROM own"))
        let named = page.pieces.filter { piece in
            piece.verdicts.contains { $0.collection == "hot" && $0.coverage == .superseded([later]) }
        }
        #expect(named.count == count, "\(named.count) of \(page.pieces.count) pieces name what superseded them")
        let holds = store.holdsAsked.withLock { $0 }, records = store.recordsAsked.withLock { $0 }
        #expect(holds == 1 && records == 1, "logHolds asked \(holds) times, storedTransactions \(records) times")
    }

    @Test func anotherStoreRunsUnderTheEngineAndCommitsAreGrouped() async throws {
        try await Self.withNodes { a, bStore, counting, b in
            _ = try await bStore.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-b', 'n': -1})")
            for i in 0..<600 {
                _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': :id, 'n': :n})", arguments: ["id": .string("n\(i)"), "n": .int(Int64(i))])
            }
            try await InProcessMesh.withLink(a.sync, b) { () async throws in
                let arrived = try await InProcessMesh.eventually(timeout: .seconds(60)) {
                    try await bStore.collectionCounts().first?.documents == 601
                }
                #expect(arrived)
                let back = try await InProcessMesh.eventually {
                    try await a.store.execute("SELECT * FROM notes WHERE _id = 'from-b'").items.count == 1
                }
                #expect(back, "A reads B's log through the protocol")
            }
            let applied = try await bStore.execute("SELECT * FROM notes WHERE n = 599").items
            #expect(applied == [["_id": "n599", "n": 599]])
            let commits = counting.commits.withLock { $0 }
            #expect(commits >= 1 && commits <= 60, "600 transactions in \(commits) commits: the pipeline groups them")
            #expect(counting.pages.withLock { $0 } >= 1)
        }
    }

    /// The pipeline tells the store which commits are short (it may run those on the
    /// calling thread): one that applies a small transaction is, one that applies a
    /// transaction of more than `shortCommitDeltas` deltas is not.
    @Test func thePipelineHintsWhichCommitsAreShort() async throws {
        try await Self.withNodes { a, bStore, counting, b in
            _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'small', 'n': 1})")
            try await InProcessMesh.withLink(a.sync, b) { () async throws in
                #expect(try await InProcessMesh.eventually { try await bStore.collectionCounts().first?.documents == 1 })
                let small = counting.hints.withLock { $0 }.filter { $0.logged > 0 }
                #expect(!small.isEmpty && small.allSatisfy(\.short), "\(small)")
                let documents = (0..<600).map { Value.object(["_id": .string("big\($0)"), "n": .int(Int64($0))]) }
                _ = try await a.store.execute("INSERT INTO notes DOCUMENTS (:docs)", arguments: ["docs": .array(documents)])
                #expect(try await InProcessMesh.eventually { try await bStore.collectionCounts().first?.documents == 601 })
            }
            // Above `InboundPipeline.shortCommitDeltas` (1,024): 600 documents of 2 fields.
            let big = counting.hints.withLock { $0 }.filter { $0.logged > 1024 }
            #expect(!big.isEmpty && big.allSatisfy { !$0.short }, "\(big)")
        }
    }

    /// Commits a peer does not want are passed over without reading the log: B's own
    /// writes to a collection A does not subscribe to, and what B applies from A (echoes
    /// to A). A's cursor still reaches B's log end (the owed empty batch, at a tick), and
    /// a note B writes after them still reaches A.
    @Test func commitsAPeerDoesNotWantAreNotRead() async throws {
        try await Self.withNodes { a, bStore, counting, b in
            try await InProcessMesh.withLink(a.sync, b) { () async throws in
                _ = try await bStore.execute("INSERT INTO notes DOCUMENTS ({'_id': 'first', 'n': 0})")
                #expect(try await InProcessMesh.eventually {
                    try await a.store.execute("SELECT * FROM notes").items.count == 1
                })
                let before = counting.pages.withLock { $0 }
                // Spaced out, so that each would be a page read of its own.
                for i in 0..<20 {
                    _ = try await bStore.execute("INSERT INTO scratch DOCUMENTS ({'_id': :id})", arguments: ["id": .string("s\(i)")])
                    try await Task.sleep(for: .milliseconds(5))
                }
                for i in 0..<10 {
                    _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': :id, 'n': 1})", arguments: ["id": .string("a\(i)")])
                    #expect(try await InProcessMesh.eventually { try await bStore.execute("SELECT * FROM notes").items.count == i + 2 })
                }
                let read = counting.pages.withLock { $0 } - before
                // Only a tick that happens to see a commit before its session does reads a
                // page: a few on a loaded machine, where every commit read would be 30 (7
                // once, in CI with benchmarks and a convergence check beside it). Under a
                // sanitizer every step is ten times slower and ticks see more (7 once under
                // ThreadSanitizer on a loaded machine).
                let bound = InProcessMesh.sanitized ? 15 : 10
                #expect(read <= bound, "\(read) pages read for 30 commits A wants none of")
                let end = bStore.lastCommittedSequence
                #expect(try await InProcessMesh.eventually(timeout: .seconds(10)) {
                    try await a.store.cursor(peer: bStore.siteID, subscriptionKey: a.sync.subscriptions.key) == end
                }, "the owed empty batch moves A's cursor to B's log end")
                _ = try await bStore.execute("INSERT INTO notes DOCUMENTS ({'_id': 'last', 'n': 2})")
                #expect(try await InProcessMesh.eventually {
                    try await a.store.execute("SELECT * FROM notes WHERE _id = 'last'").items.count == 1
                })
            }
        }
    }
    /// One commit holds the batches of two sessions, and the store refuses a transaction
    /// of one of them: the other session's batches commit on their own and its session
    /// goes on; only the refused session's batch fails.
    @Test func aBatchTheStoreRefusesFailsOnlyItsOwnSession() async throws {
        try await Self.withNodes { a1, bStore, counting, b in
            let a2 = try TestNode(name: "a2", subscriptions: ["SELECT * FROM notes"])
            defer { a2.remove() }
            // Whether B holds every one of these documents.
            let holds: @Sendable ([String]) async throws -> Bool = { ids in
                for id in ids where try await bStore.execute("SELECT _id FROM notes WHERE _id = :id", arguments: ["id": .string(id)]).items.isEmpty {
                    return false
                }
                return true
            }
            try await InProcessMesh.withLink(a1.sync, b) { () async throws in
                try await InProcessMesh.withLink(a2.sync, b) { () async throws in
                    _ = try await a1.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'one', 'n': 1})")
                    _ = try await a2.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'two', 'n': 2})")
                    #expect(try await InProcessMesh.eventually { try await holds(["one", "two"]) })
                    // B's next commit waits, so that a batch of each session queues behind it.
                    let release = Latch()
                    counting.holdNext.withLock { $0 = release }
                    _ = try await a2.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'held', 'n': 2})")
                    #expect(await InProcessMesh.eventually { counting.holding.withLock { $0 } })
                    counting.refuse.withLock { $0 = a1.store.siteID }
                    _ = try await a1.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'refused', 'n': 1})")
                    _ = try await a2.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'good', 'n': 2})")
                    #expect(await InProcessMesh.eventually { b.pipeline.queuedItems >= 2 }, "a batch of each session queued")
                    release.open()
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(20)) { try await holds(["held", "good"]) })
                    #expect(try await holds(["refused"]) == false)
                    // A2's session is still up: its next write arrives over it.
                    _ = try await a2.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'after', 'n': 2})")
                    #expect(try await InProcessMesh.eventually(timeout: .seconds(20)) { try await holds(["after"]) })
                }
            }
        }
    }

    /// A commit fails, and then the store cannot even be read (its database gone): a
    /// batch of another session, queued meanwhile, fails too, and its session closes,
    /// rather than wait with it queued for as long as the store stays away. Once the
    /// store is back, new sessions bring every transaction.
    @Test func batchesQueuedWhileTheStoreCannotBeReadFailAndTheirSessionsClose() async throws {
        try await Self.withNodes { a1, bStore, counting, b in
            let a2 = try TestNode(name: "a2", subscriptions: ["SELECT * FROM notes"])
            defer { a2.remove() }
            let release = Latch()
            counting.failNextApply.withLock { $0 = release }
            try await InProcessMesh.withLink(a1.sync, b) { () async throws in
                try await InProcessMesh.withLink(a2.sync, b) { () async throws in
                    #expect(await InProcessMesh.eventually { b.peers().count == 2 })
                    _ = try await a1.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'first', 'n': 1})")
                    // A1's batch is being committed (it fails once released); a2's queues behind it.
                    #expect(try await InProcessMesh.eventually { counting.failNextApply.withLock { $0 == nil } })
                    _ = try await a2.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'second', 'n': 2})")
                    #expect(await InProcessMesh.eventually { b.pipeline.queuedItems >= 1 }, "a2's batch queued")
                    // And pieces that wait for no answer (as answers to a question do): their
                    // lane is told, as a session's is, so that it closes.
                    let lane = InboundPipeline.Lane()
                    let told = Locked<[String]>([])
                    lane.whenFailed { error in told.withLock { $0.append(error.message) } }
                    b.pipeline.enqueue(InboundPipeline.Item(source: SiteID(0x42), pieces: [], lane: lane))
                    counting.failRecords.withLock { $0 = true }
                    release.open()
                    #expect(await InProcessMesh.eventually(timeout: .seconds(10)) { b.pipeline.queuedItems == 0 })
                    // The lane hears of the failure after its item left the queue.
                    #expect(await InProcessMesh.eventually(timeout: .seconds(10)) { !told.withLock { $0.isEmpty } })
                    #expect(told.withLock { $0 } == ["the database cannot be reached (injected)"])
                    #expect(await InProcessMesh.eventually(timeout: .seconds(10)) { b.peers().isEmpty && a2.sync.peers().isEmpty },
                            "both sessions end: \(b.peers().map(\.state))")
                }
            }
            counting.failRecords.withLock { $0 = false }
            try await InProcessMesh.withLink(a1.sync, b) { () async throws in
                try await InProcessMesh.withLink(a2.sync, b) { () async throws in
                    #expect(try await InProcessMesh.eventually {
                        try await bStore.execute("SELECT _id FROM notes").items.count == 2
                    })
                }
            }
        }
    }

    /// A commit of a batch fails (a full disk): the batches of the same session queued
    /// behind it fail with it, uncommitted, so that no later batch's cursor is recorded
    /// over the failed one. The session closes, the next resumes from the durable
    /// cursor, and every transaction arrives once the disk takes writes again.
    @Test func batchesQueuedBehindAFailedCommitFailWithIt() async throws {
        try await Self.withNodes { a, bStore, counting, b in
            let release = Latch()
            counting.failNextApply.withLock { $0 = release }
            let key = b.subscriptions.key
            try await InProcessMesh.withLink(a.sync, b) { () async throws in
                _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'first', 'n': 1})")
                // The first batch's commit is under way (it fails once released); the
                // next two batches queue behind it.
                #expect(try await InProcessMesh.eventually { counting.failNextApply.withLock { $0 == nil } })
                for (index, id) in ["second", "third"].enumerated() {
                    _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': :id, 'n': 1})", arguments: ["id": .string(id)])
                    #expect(await InProcessMesh.eventually { b.pipeline.queuedItems >= index + 1 }, "batch \(id) queued")
                }
                release.open()
                // Nothing after the failed batch was committed: B's cursor did not move past it.
                #expect(try await InProcessMesh.eventually(timeout: .seconds(5)) { b.pipeline.queuedItems == 0 })
                #expect(try await bStore.cursor(peer: a.store.siteID, subscriptionKey: key) == 0)
                #expect(try await bStore.execute("SELECT * FROM notes").items.isEmpty)
            }
            // A new session resumes from the durable cursor and brings all three.
            try await InProcessMesh.withLink(a.sync, b) { () async throws in
                #expect(try await InProcessMesh.eventually {
                    try await bStore.execute("SELECT _id FROM notes").items.count == 3
                })
            }
            #expect(try await bStore.cursor(peer: a.store.siteID, subscriptionKey: key) == a.store.lastCommittedSequence)
        }
    }
}

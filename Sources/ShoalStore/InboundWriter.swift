package import ShoalCRDT
package import ShoalStorage
import GRDB
import Foundation
import Logging


/// The store operations of the inbound pipeline, run inside one write transaction
/// (`DocumentStore.writeInbound`): the durable buffer of waiting transactions, the
/// apply of whole (or partial) ones, and peer cursors. Every call is part of the
/// same SQLite transaction, so a crash keeps all of a commit or none of it.
///
/// Each call is one access to the writer connection (`access`), on which
/// `writeInbound` began the transaction. A call that does little (a state, a record,
/// a cursor, an apply of at most `smallApply` deltas) runs on the calling thread: the
/// gate keeps every other writer out, so the writer's queue is idle. A larger apply,
/// and the commit, go to the writer's queue unless the whole write is short, so that
/// a long access never holds a thread of the concurrency pool.
///
/// Unchecked: its state is guarded by the store's write gate, which the task of
/// `writeInbound` holds for the writer's whole life, and by the contract's rule that a
/// body makes its calls one at a time, each awaited (`InboundWriting`); after
/// `writeInbound` returns, every call throws (`ended`).
final class InboundWriter: InboundWriting, @unchecked Sendable {
    let store: DocumentStore
    /// Whether every access runs on the calling thread (a short write).
    let inline: Bool
    var commit = Commit(transactions: [], collections: [], sequence: 0)
    var lastSequence: UInt64?
    /// What this commit appended to the change log (`after` set at the first row).
    var appended = LogEnd.Appended(after: 0, collections: [], transactions: [])
    private(set) var outcome = ApplyOutcome()
    /// Set once the transaction committed or rolled back.
    private let ended = Locked(false)

    /// The most deltas an apply may bring to run on the calling thread in a write that
    /// is not short: as many as a whole short write (`InboundPipeline.shortCommitDeltas`),
    /// about a millisecond of work.
    static let smallApply = 1024

    init(store: DocumentStore, inline: Bool) {
        self.store = store
        self.inline = inline
    }

    /// Runs `body` on the writer connection, inside the transaction `writeInbound`
    /// began; on this thread unless `long` (and the write is not short). Throws when the
    /// transaction is no longer open: the write ended, or SQLite rolled it back (an
    /// interrupted statement), so that nothing is ever written outside it.
    func access<T: Sendable>(
        long: Bool = false, opening: Bool = false, _ body: @escaping @Sendable (Database) throws -> T
    ) async throws(ShoalError) -> T {
        guard !ended.withLock({ $0 }) else {
            throw ShoalError(.closed, "the inbound write has ended: nothing more can be written in it")
        }
        let checked: @Sendable (Database) throws -> T = { db in
            guard opening || db.isInsideTransaction else {
                throw ShoalError(.database, "the inbound write's transaction was rolled back by the database; nothing of it was kept")
            }
            return try body(db)
        }
        do {
            if inline || !long { return try DocumentStore.writeHere(store.pool, transaction: false, checked) }
            return try await store.pool.writeWithoutTransaction(checked)
        } catch {
            throw ShoalError.wrapping(error, "database write")
        }
    }

    /// The transaction committed or rolled back: later calls throw.
    func end() { ended.withLock { $0 = true } }

    func state(of id: TransactionID) async throws(ShoalError) -> TransactionRecord.State? {
        try await access { db in try self.state(db, of: id) }
    }

    func save(_ record: TransactionRecord) async throws(ShoalError) {
        try await access { db in try self.save(db, record) }
    }

    func buffer(
        _ deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32], context: [ContextField], of id: TransactionID
    ) async throws(ShoalError) {
        try await access(long: deltas.count > Self.smallApply) { db in
            try self.buffer(db, deltas, documentDeltaCounts: documentDeltaCounts, context: context, of: id)
        }
    }

    @discardableResult
    func apply(
        _ record: TransactionRecord, deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32], context: [ContextField],
        buffered: Bool, state: TransactionRecord.State?, rest: [Verdict]?
    ) async throws(ShoalError) -> DocumentRefusal? {
        try await access(long: buffered || deltas.count > Self.smallApply) { db in
            try self.apply(
                db, record, deltas: deltas, documentDeltaCounts: documentDeltaCounts, context: context, buffered: buffered,
                state: state, rest: rest)
        }
    }

    func refuse(_ record: TransactionRecord, reason: String) async throws(ShoalError) {
        try await access { db in try self.refuse(db, record, reason: reason) }
    }

    func markApplied(_ id: TransactionID, rest: [Verdict]) async throws(ShoalError) {
        try await access { db in try self.markApplied(db, id, rest: rest) }
    }

    func recordCursor(peer: SiteID, subscriptionKey: String, through: UInt64, epoch: UInt64) async throws(ShoalError) {
        try await access { db in try self.recordCursor(db, peer: peer, subscriptionKey: subscriptionKey, through: through, epoch: epoch) }
    }

    func loadRecord(_ id: TransactionID) async throws(ShoalError) -> TransactionRecord? {
        try await access { db in try self.loadRecord(db, id) }
    }

    // MARK: On the writer connection

    /// The state of a transaction this node has a record of, if any.
    private func state(_ db: Database, of id: TransactionID) throws -> TransactionRecord.State? {
        guard
            let state = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT state FROM txn WHERE origin = ? AND seq = ?"),
                arguments: [Int64(bitPattern: id.origin.rawValue), Int64(id.sequence)])
        else { return nil }
        return try StoredTransaction.state(state, of: id)
    }

    /// Keeps a waiting or partial transaction's header, state and reports durable
    /// (its `rest`, recorded when it was applied in part, stays as it is).
    private func save(_ db: Database, _ record: TransactionRecord) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen)
                VALUES (?, ?, ?, ?, ?, ?, '', ?, ?)
                ON CONFLICT (origin, seq) DO UPDATE SET state = excluded.state, reports = excluded.reports
                """
        ).execute(arguments: [
            Int64(bitPattern: record.id.origin.rawValue), Int64(record.id.sequence), Int64(record.deltaCount),
            Int64(record.documentCount), CollectionCount.encode(record.collections), record.state.rawValue,
            TransactionRecord.Report.encode(record.reports), Int64(bitPattern: record.firstSeen),
        ])
    }

    /// Puts the deltas of a waiting transaction in the durable buffer.
    private func buffer(
        _ db: Database, _ deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32], context: [ContextField], of id: TransactionID
    ) throws {
        let origin = Int64(bitPattern: id.origin.rawValue), seq = Int64(id.sequence)
        let insert = try db.cachedStatement(
            sql: """
                INSERT OR IGNORE INTO txn_piece (origin, seq, idx, collection, doc_id, doc_deltas, name, value, ts)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for d in deltas {
            let count = documentDeltaCounts[DocumentRef(collection: d.collection, id: d.documentID)] ?? 1
            try insert.execute(arguments: [
                origin, seq, Int64(d.index), d.collection, d.documentID, Int64(count), d.field, d.valueJSON,
                Int64(bitPattern: d.timestamp.rawValue),
            ])
        }
        let insertContext = try db.cachedStatement(
            sql: """
                INSERT OR REPLACE INTO txn_context (origin, seq, collection, doc_id, name, value, ts, src_origin, src_seq)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for f in context {
            try insertContext.execute(arguments: [
                origin, seq, f.document.collection, f.document.id, f.field, f.valueJSON,
                Int64(bitPattern: f.timestamp.rawValue), Int64(bitPattern: f.transaction.origin.rawValue),
                Int64(f.transaction.sequence),
            ])
        }
    }

    /// Applies a transaction's deltas: those given and, with `buffered`, those in
    /// the durable buffer (which it then clears), plus context fields; records its
    /// state and the verdicts on what this node does not hold (`rest`), which it
    /// passes on when it relays the transaction. With `state` and `rest` nil (a late
    /// piece of a transaction applied before), its record is left as it is.
    ///
    /// Each delta is logged once (a piece already logged is not logged again) and
    /// merged last-writer-wins; the bodies of the documents it changed are rebuilt once.
    ///
    /// Every body it would write is checked against `DocumentLimits` first: if one
    /// breaks them, nothing of the transaction is written (its buffer stays) and the
    /// refusal is returned, for the caller to `refuse` it whole.
    private func apply(
        _ db: Database, _ record: TransactionRecord, deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32],
        context: [ContextField], buffered: Bool, state: TransactionRecord.State?, rest: [Verdict]?
    ) throws -> DocumentRefusal? {
        let id = record.id
        let origin = Int64(bitPattern: id.origin.rawValue), seq = Int64(id.sequence)
        var all = deltas
        var counts = documentDeltaCounts
        var contextFields = context
        if buffered {
            try BufferedDelta.forEach(db, of: id) { buffered in
                counts[buffered.document] = buffered.documentDeltas
                all.append(buffered.delta(of: id, count: record.deltaCount))
            }
            try BufferedContextField.forEach(db, of: id) { contextFields.append($0) }
        }
        // Deltas nearly always come in index order: sorting only when they do not spares
        // copying the caller's array (which `all` still shares) a delta at a time.
        if all.indices.dropFirst().contains(where: { all[$0 - 1].index > all[$0].index }) {
            all.sort { $0.index < $1.index }
        }
        // Each document's registers are loaded once, merged in memory (in place, in
        // `touched`), and what won is saved. A transaction's deltas come grouped by
        // document, so a run of one document's deltas looks it up once.
        var statements = try RegisterRows.Statements(db)
        var touched: [Touched] = []
        var slots: [DocumentRef: Int] = [:]
        slots.reserveCapacity(Int(record.documentCount))
        // What the log holds of this transaction already (a late piece, a resend): each
        // delta is logged once. Nothing, for a transaction seen for the first time.
        var logged: [DocumentRef: Set<UInt32>] = [:]
        try ChangeLogRecord.forEach(db, of: id) { _, entries in
            try LogEntries.forEach(entries) { collection, id, _, deltas in
                logged[DocumentRef(collection: collection, id: id), default: []].formUnion(try PackedDeltas.indexes(deltas))
            }
        }
        // The deltas to log, per touched document (by slot), packed as they come.
        var packs: [PackedDeltas] = []
        var previous: UInt32?
        var run: (collection: String, id: String, slot: Int)?
        for delta in all {
            let slot: Int
            if let run, DocumentRef(collection: run.collection, id: run.id).is(collection: delta.collection, id: delta.documentID) {
                slot = run.slot
            } else {
                let document = DocumentRef(collection: delta.collection, id: delta.documentID)
                slot = try self.slot(for: document, expecting: Int(counts[document] ?? 1), &touched, &slots, &statements)
                run = (delta.collection, delta.documentID, slot)
            }
            // `all` is in index order: a delta given twice (buffered and again) is adjacent.
            if delta.index != previous, logged.isEmpty || logged[touched[slot].document]?.contains(delta.index) != true {
                while packs.count <= slot { packs.append(PackedDeltas()) }
                packs[slot].append(index: delta.index, timestamp: delta.timestamp.rawValue, name: delta.field, value: delta.valueJSON)
            }
            previous = delta.index
            // Merged even when logged before: EVICT keeps the log but not the fields, and a
            // refill must bring them back. A duplicate simply loses LWW (equal version).
            let state = RegisterState(delta: delta, parsed: delta.parsed)
            if touched[slot].registers.merge(delta.field, state) {
                touched[slot].won[delta.field] = (state, delta.index)
            }
        }
        for field in contextFields {
            let i = try slot(for: field.document, expecting: 1, &touched, &slots, &statements)
            let state = RegisterState(delta: field.delta, parsed: field.delta.parsed)
            if touched[i].registers.merge(field.field, state) {
                touched[i].won[field.field] = (state, 0)
            }
        }
        // What this node can hold, checked before anything is written.
        let limits = store.systemParameters.documentLimits
        var bodies: [DocumentRegisters.Body.Text?] = Array(repeating: nil, count: touched.count)
        for (slot, entry) in touched.enumerated() where !entry.won.isEmpty {
            let body = try RegisterRows.materialize(entry.registers, collection: entry.document.collection, key: entry.document.id)
            if case .live(let json) = body {
                switch limits.check(body: json) {
                case .fits: break
                case .overSoft(let bytes):
                    store.logger.warning(
                        "transaction \(id) makes document \(entry.document.id) in \(entry.document.collection) \(bytes) bytes, over the soft document size limit of \(limits.softBytes) bytes (document_size_soft_limit_bytes)",
                        metadata: ["shoal.txn": "\(id)", "shoal.collection": "\(entry.document.collection)"])
                case .refused(let reason):
                    return DocumentRefusal(document: entry.document, reason: reason)
                }
            }
            bodies[slot] = body
        }
        if buffered {
            try db.cachedStatement(sql: "DELETE FROM txn_piece WHERE origin = ? AND seq = ?").execute(arguments: [origin, seq])
            try db.cachedStatement(sql: "DELETE FROM txn_context WHERE origin = ? AND seq = ?").execute(arguments: [origin, seq])
        }
        // The log leaves out what it holds already (`logged`).
        var log = LogAppender(db, site: id.origin.rawValue, sequence: id.sequence, deltaCount: Int(record.deltaCount))
        for (slot, pack) in packs.enumerated() where !pack.isEmpty {
            let document = touched[slot].document
            try log.append(document, deltaCount: Int(counts[document] ?? 1), pack.bytes)
            appended.collections.insert(document.collection)
            appended.documents += 1
            outcome.logged += pack.count
        }
        try log.finish()
        if let first = log.first, let last = log.last {
            if lastSequence == nil { appended.after = first - 1 }
            lastSequence = last
            if appended.transactions.last != id { appended.transactions.append(id) }
        }
        var dirty = 0
        for (slot, entry) in touched.enumerated() where !entry.won.isEmpty {
            let document = entry.document
            try statements.upsert.save(collection: document.collection, key: document.id, entry.won)
            outcome.won += entry.won.count
            try statements.bodies.save(collection: document.collection, key: document.id, body: bodies[slot]!)
            commit.collections.insert(document.collection)
            dirty += 1
        }
        try statements.bodies.finish()
        outcome.changedDocuments += dirty
        if let state, let rest {
            try db.cachedStatement(sql: FieldSQL.insertTransaction).execute(arguments: [
                origin, seq, Int64(record.deltaCount), Int64(record.documentCount), CollectionCount.encode(record.collections),
                state.rawValue, Verdict.encode(rest), state == .applied ? "" : TransactionRecord.Report.encode(record.reports),
                Int64(bitPattern: record.firstSeen),
            ])
        }
        if (state != nil || dirty > 0), !commit.transactions.contains(id) { commit.transactions.append(id) }
        return nil
    }

    /// Records a transaction as refused, never to be applied (`DocumentLimits`), and
    /// drops whatever of it the durable buffer holds.
    private func refuse(_ db: Database, _ record: TransactionRecord, reason: String) throws {
        let origin = Int64(bitPattern: record.id.origin.rawValue), seq = Int64(record.id.sequence)
        try db.cachedStatement(sql: "DELETE FROM txn_piece WHERE origin = ? AND seq = ?").execute(arguments: [origin, seq])
        try db.cachedStatement(sql: "DELETE FROM txn_context WHERE origin = ? AND seq = ?").execute(arguments: [origin, seq])
        try db.cachedStatement(
            sql: """
                INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen, refusal)
                VALUES (?, ?, ?, ?, ?, ?, '', '', ?, ?)
                ON CONFLICT (origin, seq) DO UPDATE SET state = excluded.state, reports = '', refusal = excluded.refusal
                """
        ).execute(arguments: [
            origin, seq, Int64(record.deltaCount), Int64(record.documentCount), CollectionCount.encode(record.collections),
            TransactionRecord.State.refused.rawValue, Int64(bitPattern: record.firstSeen), reason,
        ])
    }

    /// A document's registers as an apply merges them, and the writes that won.
    typealias Touched = (document: DocumentRef, registers: DocumentRegisters, won: [String: (state: RegisterState, index: UInt32)])

    /// Where `document` is in `touched`, loading its registers the first time, with
    /// room for the `expecting` deltas this apply brings it.
    private func slot(
        for document: DocumentRef, expecting: Int, _ touched: inout [Touched], _ slots: inout [DocumentRef: Int],
        _ statements: inout RegisterRows.Statements
    ) throws -> Int {
        if let known = slots[document] { return known }
        var loaded = try RegisterRows.load(&statements.load, collection: document.collection, key: document.id)
        loaded.reserveCapacity(loaded.registers.count + expecting)
        touched.append((document, loaded, Dictionary(minimumCapacity: expecting)))
        slots[document] = touched.count - 1
        return touched.count - 1
    }

    /// Marks a partial transaction whole, with nothing left to apply, and what this
    /// node now says of the documents it does not hold.
    private func markApplied(_ db: Database, _ id: TransactionID, rest: [Verdict]) throws {
        try db.cachedStatement(sql: "UPDATE txn SET state = ?, rest = ?, reports = '' WHERE origin = ? AND seq = ?").execute(
            arguments: [
                TransactionRecord.State.applied.rawValue, Verdict.encode(rest), Int64(bitPattern: id.origin.rawValue),
                Int64(id.sequence),
            ])
        if !commit.transactions.contains(id) { commit.transactions.append(id) }
    }

    /// Records `through` as the resume point for `peer`'s log under `subscriptionKey`.
    private func recordCursor(_ db: Database, peer: SiteID, subscriptionKey: String, through: UInt64, epoch: UInt64) throws {
        guard epoch == (try DocumentStore.cursorEpoch(db)) else { return }
        try db.cachedStatement(
            sql: """
                INSERT INTO peer_cursor (peer, subscription_key, through) VALUES (?, ?, ?)
                ON CONFLICT (peer, subscription_key) DO UPDATE SET through = MAX(through, excluded.through)
                """
        ).execute(arguments: [Int64(bitPattern: peer.rawValue), subscriptionKey, Int64(through)])
    }

    /// Reads back a partial transaction's record: its header and reports from `txn`,
    /// what is held of it from the change log.
    private func loadRecord(_ db: Database, _ id: TransactionID) throws -> TransactionRecord? {
        guard let stored = try StoredTransaction.fetch(db, id), stored.state == .waiting || stored.state == .partial
        else { return nil }
        return try DocumentStore.record(db, id, stored)
    }
}

extension DocumentStore {
    /// Runs `body` in one write transaction, then tells observers and sessions what
    /// it applied. Returns what `body` returned and what was applied. `short`: a small
    /// write, run on the calling thread (`write(inline:)`).
    package func writeInbound<T: Sendable>(
        short: Bool = false, _ body: @escaping @Sendable (any InboundWriting) async throws(ShoalError) -> T
    ) async throws(ShoalError) -> (T, ApplyOutcome) {
        let marks = OpenTransactions.marks
        try refuseWriteBesideOpenTransaction(marks)
        try await acquireGate(nested: marks.contains { $0.store == ObjectIdentifier(self) })
        defer { gate.release() }
        let writer = InboundWriter(store: self, inline: short)
        defer { writer.end() }
        // A write the body starts in this task would wait for the gate this one holds.
        let inside = marks + [
            OpenTransactions.Mark(
                store: ObjectIdentifier(self), info: TransactionInfo(id: "inbound", hint: "received transactions", isReadOnly: false))
        ]
        let result: T
        do {
            try await writer.access(opening: true) { db in try Self.beginImmediate(db) }
            result = try await OpenTransactions.$marks.withValue(inside) { try await body(writer) }
            let logged = writer.appended.documents
            try await writer.access(long: true) { db in
                self.refreshStatisticsIfGrown(db, logged: logged)
                try db.cachedStatement(sql: "COMMIT").execute()
            }
        } catch {
            // What the body wrote goes, even when the task was cancelled (an async access
            // would refuse to run then, and leave the transaction open behind the gate).
            rollBackOpenTransaction()
            throw (error as? ShoalError) ?? ShoalError.wrapping(error, "database write")
        }
        let (outcome, commit, last, appended) = (writer.outcome, writer.commit, writer.lastSequence, writer.appended)
        if let last { feed.publish(LogEnd(sequence: last, appended: appended)) }
        if !commit.transactions.isEmpty {
            var commit = commit
            commit.sequence = last ?? 0
            commits.publish(commit)
        }
        return (result, outcome)
    }

    /// Every waiting and partial transaction, as records: what the pipeline starts from.
    package func transactionRecords() async throws(ShoalError) -> [TransactionRecord] {
        try await read { db in
            try StoredTransaction.unfinished(db).map { try Self.record(db, $0.id, $0) }
        }
    }

    static func record(_ db: Database, _ id: TransactionID, _ stored: StoredTransaction) throws -> TransactionRecord {
        var record = TransactionRecord(
            id: id, deltaCount: stored.deltaCount, documentCount: stored.documentCount, collections: stored.collections,
            state: stored.state, firstSeen: stored.firstSeen, reports: stored.reports)
        func hold(_ document: DocumentRef, expected: UInt32, _ indexes: [UInt32]) {
            var progress = record.documents[document] ?? .init(expected: expected)
            progress.received.formUnion(indexes)
            record.documents[document] = progress
        }
        if stored.state == .waiting {
            try BufferedDelta.forEach(db, of: id) { buffered in
                hold(buffered.document, expected: buffered.documentDeltas, [buffered.index])
                record.bufferedBytes += buffered.valueJSON.utf8.count
            }
        } else {
            try ChangeLogRecord.forEach(db, of: id) { _, entries in
                try LogEntries.forEach(entries) { collection, id, documentDeltas, deltas in
                    hold(DocumentRef(collection: collection, id: id), expected: documentDeltas, try PackedDeltas.indexes(deltas))
                }
            }
        }
        return record
    }
}

extension DocumentStore {
    /// Applies pieces received from `peer` at once, each as a whole transaction, in
    /// one commit, and records `through` as that peer's cursor under
    /// `subscriptionKey` (nil: record nothing). This is what the inbound pipeline
    /// does with a transaction once it is whole; tools and tests that hold whole
    /// transactions use it directly.
    @discardableResult
    package func applyRemote(
        _ pieces: [TransactionPiece], from peer: SiteID, subscriptionKey: String? = nil, through: UInt64 = 0
    ) async throws(ShoalError) -> ApplyOutcome {
        for piece in pieces {
            for delta in piece.deltas { clock.observe(delta.timestamp) }
        }
        let now = HybridLogicalClock.systemMilliseconds()
        let epoch = try await read { db in try Self.cursorEpoch(db) }
        let ((), outcome) = try await writeInbound { writer async throws(ShoalError) in
            for piece in pieces {
                let record = TransactionRecord(
                    id: piece.id, deltaCount: piece.deltaCount, documentCount: piece.documentCount,
                    collections: piece.collections, state: .applied, firstSeen: now)
                try await writer.apply(
                    record, deltas: piece.deltas, documentDeltaCounts: piece.documentDeltaCounts, context: piece.context,
                    buffered: false, state: .applied, rest: [])
            }
            if let subscriptionKey {
                try await writer.recordCursor(peer: peer, subscriptionKey: subscriptionKey, through: through, epoch: epoch)
            }
        }
        return outcome
    }
}

package import ShoalCRDT
package import ShoalStorage
import GRDB
import Foundation
import Logging


/// The store operations of the inbound pipeline, run inside one write transaction
/// (`DocumentStore.writeInbound`): transaction states and records, the durable buffer
/// of waiting transactions, what the log holds of a transaction, registers, the rows
/// of an apply (as ShoalSync's `InboundApplier` decided them), and peer cursors. Every
/// call is part of the same SQLite transaction, so a crash keeps all of a commit or
/// none of it.
///
/// Each call is one access to the writer connection (`access`), on which
/// `writeInbound` began the transaction. A call that does little (states, a record,
/// a cursor, the registers of at most `smallApply / 4` documents, the rows of an apply
/// of at most `smallApply` deltas) runs on the calling thread: the gate keeps every
/// other writer out, so the writer's queue is idle. A larger one, a read of the buffer,
/// the rows of an apply that empties it, and the commit go to the writer's queue unless
/// the whole write is short, so that a long access never holds a thread of the
/// concurrency pool (the apply's own merge of more than 1,024 deltas runs off it too,
/// `InboundWriting.planHere`).
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

    func states(of ids: [TransactionID], rests: Bool) async throws(ShoalError) -> TransactionStates {
        try await access(long: ids.count > Self.smallApply / 4) { db in
            var read = TransactionStates()
            let statement = try db.cachedStatement(sql: "SELECT state, rest FROM txn WHERE origin = ? AND seq = ?")
            for id in ids {
                guard let row = try Row.fetchOne(statement, arguments: [Int64(bitPattern: id.origin.rawValue), Int64(id.sequence)])
                else { continue }
                let stored = StoredRow(row, of: "txn")
                let state = try StoredTransaction.state(stored.value(Column("state")), of: id)
                read.states[id] = state
                if rests, state == .applied, let rest = try stored.value(Column("rest"), as: String?.self), !rest.isEmpty {
                    read.rests[id] = Verdict.decode(rest)
                }
            }
            return read
        }
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

    func buffered(of id: TransactionID, deltaCount: UInt32) async throws(ShoalError) -> BufferedPieces {
        try await access(long: true) { db in try self.buffered(db, of: id, deltaCount: deltaCount) }
    }

    func loggedIndexes(of id: TransactionID) async throws(ShoalError) -> [DocumentRef: Set<UInt32>] {
        try await access { db in try self.loggedIndexes(db, of: id) }
    }

    func registers(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRegisters] {
        try await access(long: documents.count > Self.smallApply / 4) { db in try self.registers(db, of: documents) }
    }

    func write(_ rows: AppliedRows) async throws(ShoalError) {
        try await access(long: rows.dropBuffer || rows.deltas.count > Self.smallApply) { db in try self.write(db, rows) }
    }

    func refuse(_ record: TransactionRecord, reason: String) async throws(ShoalError) {
        try await access { db in try self.refuse(db, record, reason: reason) }
    }

    func markApplied(_ id: TransactionID, rest: [Verdict]) async throws(ShoalError) {
        try await access { db in try self.markApplied(db, id, rest: rest) }
    }

    func recordRest(_ id: TransactionID, rest: [Verdict]) async throws(ShoalError) {
        try await access { db in
            try db.cachedStatement(sql: "UPDATE txn SET rest = ? WHERE origin = ? AND seq = ? AND state = ?").execute(
                arguments: [
                    Verdict.encode(rest), Int64(bitPattern: id.origin.rawValue), Int64(id.sequence),
                    TransactionRecord.State.applied.rawValue,
                ])
        }
    }

    func recordCursor(peer: SiteID, subscriptionKey: String, through: UInt64, epoch: UInt64?) async throws(ShoalError) {
        try await access { db in try self.recordCursor(db, peer: peer, subscriptionKey: subscriptionKey, through: through, epoch: epoch) }
    }

    func loadRecord(_ id: TransactionID) async throws(ShoalError) -> TransactionRecord? {
        try await access { db in try self.loadRecord(db, id) }
    }

    // MARK: On the writer connection

    /// Keeps a waiting or partial transaction's header, state and reports durable
    /// (its `rest`, recorded when it was applied in part, stays as it is). A state never
    /// moves back: a waiting record leaves a partial one as it is (DATA_MODEL.md, "States
    /// only move forward").
    private func save(_ db: Database, _ record: TransactionRecord) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen)
                VALUES (?, ?, ?, ?, ?, ?, '', ?, ?)
                ON CONFLICT (origin, seq) DO UPDATE SET state = excluded.state, reports = excluded.reports
                WHERE txn.state = 0 OR (txn.state = 2 AND excluded.state = 2)
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
        // Through `HotStatement`, which binds text with its length: GRDB binds a String as
        // a C string, which a field name holding U+0000 would be cut short at.
        var insert = try HotStatement(
            db,
            sql: """
                INSERT OR IGNORE INTO txn_piece (origin, seq, idx, collection, doc_id, doc_deltas, name, value, ts)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for d in deltas {
            let count = documentDeltaCounts[DocumentRef(collection: d.collection, id: d.documentID)] ?? 1
            try insert.bind(id.origin.rawValue)
            try insert.bind(id.sequence)
            try insert.bind(Int64(d.index))
            try insert.bind(d.collection)
            try insert.bind(d.documentID)
            try insert.bind(Int64(count))
            try insert.bind(d.field)
            try insert.bind(d.valueJSON)
            try insert.bind(d.timestamp.rawValue)
            try insert.run()
        }
        var insertContext = try HotStatement(
            db,
            sql: """
                INSERT OR REPLACE INTO txn_context (origin, seq, collection, doc_id, name, value, ts, src_origin, src_seq)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        for f in context {
            try insertContext.bind(id.origin.rawValue)
            try insertContext.bind(id.sequence)
            try insertContext.bind(f.document.collection)
            try insertContext.bind(f.document.id)
            try insertContext.bind(f.field)
            try insertContext.bind(f.valueJSON)
            try insertContext.bind(f.timestamp.rawValue)
            try insertContext.bind(f.transaction.origin.rawValue)
            try insertContext.bind(f.transaction.sequence)
            try insertContext.run()
        }
    }

    /// What the buffer holds of transaction `id`, which wrote `deltaCount` deltas.
    private func buffered(_ db: Database, of id: TransactionID, deltaCount: UInt32) throws -> BufferedPieces {
        var pieces = BufferedPieces()
        try BufferedDelta.forEach(db, of: id) { buffered in
            pieces.documentDeltaCounts[buffered.document] = buffered.documentDeltas
            pieces.deltas.append(buffered.delta(of: id, count: deltaCount))
        }
        try BufferedContextField.forEach(db, of: id) { pieces.context.append($0) }
        return pieces
    }

    /// Which deltas of transaction `id` the log holds, by document.
    private func loggedIndexes(_ db: Database, of id: TransactionID) throws -> [DocumentRef: Set<UInt32>] {
        var logged: [DocumentRef: Set<UInt32>] = [:]
        try ChangeLogRecord.forEach(db, of: id) { _, entries in
            try LogEntries.forEach(entries) { collection, id, _, deltas in
                logged[DocumentRef(collection: collection, id: id), default: []].formUnion(try PackedDeltas.indexes(deltas))
            }
        }
        return logged
    }

    /// The registers of `documents`, in order, through one prepared statement.
    private func registers(_ db: Database, of documents: [DocumentRef]) throws -> [DocumentRegisters] {
        var load = try HotStatement(db, sql: RegisterRows.load)
        return try documents.map { document in
            try RegisterRows.load(&load, collection: document.collection, key: document.id)
        }
    }

    /// Writes the rows of one apply (`AppliedRows`), in the order it gives.
    private func write(_ db: Database, _ rows: AppliedRows) throws {
        let id = rows.record.id
        let origin = Int64(bitPattern: id.origin.rawValue), seq = Int64(id.sequence)
        if rows.dropBuffer {
            try db.cachedStatement(sql: "DELETE FROM txn_piece WHERE origin = ? AND seq = ?").execute(arguments: [origin, seq])
            try db.cachedStatement(sql: "DELETE FROM txn_context WHERE origin = ? AND seq = ?").execute(arguments: [origin, seq])
        }
        var log = LogAppender(db, site: id.origin.rawValue, sequence: id.sequence, deltaCount: Int(rows.record.deltaCount))
        var pack = PackedDeltas()
        for document in rows.documents where !document.logged.isEmpty {
            pack.removeAll()
            for position in document.logged {
                let delta = rows.deltas[position]
                pack.append(index: delta.index, timestamp: delta.timestamp.rawValue, name: delta.field, value: delta.valueJSON)
            }
            try log.append(document.document, deltaCount: Int(document.deltaCount), pack.bytes)
            appended.collections.insert(document.document.collection)
            appended.documents += 1
            outcome.logged += pack.count
        }
        try log.finish()
        if let first = log.first, let last = log.last {
            if lastSequence == nil { appended.after = first - 1 }
            lastSequence = last
            if appended.transactions.last != id { appended.transactions.append(id) }
        }
        var upserts = RegisterRows.Upserts(db)
        var bodies = RegisterRows.Bodies(db)
        var dirty = 0
        for document in rows.documents where !document.won.isEmpty {
            let ref = document.document
            guard let body = document.body else {
                throw ShoalError(.database, "an apply of \(id) changed registers of \(ref.id) in \(ref.collection) without a body to save")
            }
            try upserts.save(collection: ref.collection, key: ref.id, document.won)
            outcome.won += document.won.count
            try bodies.save(collection: ref.collection, key: ref.id, body: body)
            commit.collections.insert(ref.collection)
            dirty += 1
        }
        try bodies.finish()
        outcome.changedDocuments += dirty
        let record = rows.record
        if let state = rows.state, let rest = rows.rest {
            try db.cachedStatement(sql: FieldSQL.insertTransaction).execute(arguments: [
                origin, seq, Int64(record.deltaCount), Int64(record.documentCount), CollectionCount.encode(record.collections),
                state.rawValue, Verdict.encode(rest), state == .applied ? "" : TransactionRecord.Report.encode(record.reports),
                Int64(bitPattern: record.firstSeen),
            ])
        }
        if (rows.state != nil || dirty > 0), !commit.transactions.contains(id) { commit.transactions.append(id) }
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
    private func recordCursor(_ db: Database, peer: SiteID, subscriptionKey: String, through: UInt64, epoch: UInt64?) throws {
        if let epoch, epoch != (try DocumentStore.cursorEpoch(db)) { return }
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
    /// One writer: the claim is not needed.
    package func writeInbound<T: Sendable>(
        short: Bool, claim: InboundClaim?, _ body: @escaping @Sendable (any InboundWriting) async throws(ShoalError) -> T
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
        var record = TransactionRecord(stored)
        if stored.state == .waiting {
            try BufferedDelta.forEach(db, of: id) { buffered in
                record.hold(buffered.document, expected: buffered.documentDeltas, [buffered.index])
                record.bufferedBytes += buffered.valueJSON.utf8.count
            }
        } else {
            try ChangeLogRecord.forEach(db, of: id) { _, entries in try record.holdLogged(entries) }
        }
        return record
    }
}

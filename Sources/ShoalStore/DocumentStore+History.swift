package import ShoalCRDT
package import ShoalStorage
import Foundation
import GRDB
import Logging


/// A node's history never goes backwards unseen (DATA_MODEL.md §4.5).
///
/// A store restored from a backup, or one that lost its last commits, numbers its
/// next transactions with numbers its peers already hold for other transactions, which
/// they would drop as known: acknowledged writes lost, and the node's own later writes
/// that only peers hold never coming back. Two defences:
///
/// - At open, a data directory whose database file is not the one it was (another
///   device or inode: a copy, a restore) takes a new site identity before it writes
///   anything (`DocumentStore.init`), so it can reuse no number at all.
/// - With every Subscribe, a peer says how far it holds this node's transactions
///   (`OriginHistory`). If that is beyond this node's counter, or its transaction of
///   that number is not this node's, this node commits its transactions since the
///   last point a peer confirmed again under numbers above everything the peer holds
///   (`reconcileOwnHistory`), and asks every peer for its own transactions again from
///   the start, which brings back the ones it lost.
extension DocumentStore {
    /// How far this store holds `origin`'s transactions.
    package func history(of origin: SiteID) async throws(ShoalError) -> OriginHistory {
        try await read { db in try Self.history(db, of: origin) }
    }

    static func history(_ db: Database, of origin: SiteID) throws -> OriginHistory {
        guard
            let through = try Int64.fetchOne(
                db, sql: "SELECT MAX(seq) FROM txn WHERE origin = ? AND state IN (1, 2)",
                arguments: [Int64(bitPattern: origin.rawValue)])
        else { return .none }
        let sequence: UInt64 = try StoredInteger.unsigned(through, table: "txn", column: "seq")
        let newest = try newestDelta(db, origin: origin, sequence: sequence)
        return OriginHistory(through: sequence, index: newest?.index ?? 0, timestamp: newest?.timestamp ?? 0)
    }

    /// The delta with the newest timestamp (the lowest index among equals) logged here
    /// of one transaction, or `only` that index's; nil when none is.
    static func newestDelta(
        _ db: Database, origin: SiteID, sequence: UInt64, only: UInt32? = nil
    ) throws -> (index: UInt32, timestamp: UInt64)? {
        var newest: (index: UInt32, timestamp: UInt64)?
        try ChangeLogRecord.forEach(db, of: TransactionID(origin: origin, sequence: sequence)) { _, entries in
            try OriginHistory.newestDelta(in: entries, only: only, above: &newest)
        }
        return newest
    }

    /// Checks what `peer` holds of this node's own transactions against this store,
    /// and when the store went back, commits this node's unconfirmed transactions again
    /// under new numbers and restarts every cursor so that peers send its own
    /// transactions back (see the extension's summary).
    package func reconcileOwnHistory(with held: OriginHistory, peer: SiteID) async throws(ShoalError) -> HistoryVerdict {
        guard held.through > 0 else { return .unknown }
        let site = siteID
        // Read first: a session must not wait for the writer to learn that all is well.
        let (looked, confirmed) = try await read { db in
            (try Self.compare(db, held, site: site), try Self.unsignedMeta(db, "history_confirmed"))
        }
        switch looked {
        case .unknown: return .unknown
        case .consistent:
            if held.through > confirmed {
                try await write { db in
                    if try held.through > Self.unsignedMeta(db, "history_confirmed") {
                        try Self.setMeta(db, "history_confirmed", Int64(held.through))
                    }
                }
            }
            return .consistent
        case .reissued: break
        }
        let (verdict, appended) = try await write { db -> (HistoryVerdict, LogEnd.Appended?) in
            // Again inside the write: another session may have repaired it meanwhile.
            guard case .reissued = try Self.compare(db, held, site: site) else { return (.unknown, nil) }
            let counter = try Self.unsignedMeta(db, "transaction_counter")
            let base = OriginHistory.reissueBase(peerThrough: held.through, counter: counter, nowMillis: HybridLogicalClock.systemMilliseconds())
            return try Self.reissue(db, site: site, above: base, counter: counter)
        }
        if case .reissued(let count, let from, let to) = verdict {
            logger.error(
                "this node's store is older than what peer \(peer) holds of its own writes (a restored backup, a copied data directory, or commits lost to a power failure): the peer holds its transactions through \(held.through). Its \(count) transaction(s) since the last point a peer confirmed are committed again as \(site):\(from) to \(site):\(to), and every peer is asked for this node's own transactions again",
                metadata: ["shoal.peer.site": "\(peer)", "shoal.history.peer_through": "\(held.through)"])
            if let appended, let last = try? await lastSequence() { feed.publish(LogEnd(sequence: last, appended: appended)) }
            evictions.withLock { $0 = true }
            resets.publish(1)
        }
        return verdict
    }

    /// What `held` says of this store's own history: `.reissued` (of nothing yet) when
    /// it went back.
    static func compare(_ db: Database, _ held: OriginHistory, site: SiteID) throws -> HistoryVerdict {
        let counter = try unsignedMeta(db, "transaction_counter")
        if held.through > counter { return .reissued(count: 0, from: 0, to: 0) }
        // A number this node holds no transaction of is one it gave up (reissued) and is
        // being sent back: nothing to compare yet.
        guard
            let deltaCount = try Int64.fetchOne(
                db, sql: "SELECT delta_count FROM txn WHERE origin = ? AND seq = ?",
                arguments: [Int64(bitPattern: site.rawValue), Int64(held.through)])
        else { return .unknown }
        guard held.timestamp != 0 else { return .unknown }
        guard let own = try newestDelta(db, origin: site, sequence: held.through, only: held.index) else {
            // Its transaction of that number never had the delta the peer names: the peer
            // holds another transaction under it (found by shoal-check: a store restored in
            // place wrote past the peer's number before they met, with fewer deltas). A
            // delta it had and no longer logs (compacted, evicted) says nothing.
            return Int64(held.index) >= deltaCount ? .reissued(count: 0, from: 0, to: 0) : .unknown
        }
        return own.timestamp == held.timestamp ? .consistent : .reissued(count: 0, from: 0, to: 0)
    }

    /// Moves this node's transactions after the last confirmed point to numbers above
    /// `base`, each to the end of the log (so every peer is sent them again), keeping
    /// their deltas and timestamps; forgets every peer cursor, so that peers send this
    /// node's own transactions back, and says it may lack some of them.
    static func reissue(
        _ db: Database, site: SiteID, above base: UInt64, counter: UInt64
    ) throws -> (HistoryVerdict, LogEnd.Appended?) {
        let confirmed = try unsignedMeta(db, "history_confirmed")
        let own = Int64(bitPattern: site.rawValue)
        let sequences = try Int64.fetchAll(
            db, sql: "SELECT seq FROM txn WHERE origin = ? AND seq > ? ORDER BY seq", arguments: [own, Int64(confirmed)]
        ).map { sequence throws -> UInt64 in try StoredInteger.unsigned(sequence, table: "txn", column: "seq") }
        var next = base
        var appended = LogEnd.Appended(after: 0, collections: [], transactions: [])
        var first: UInt64?
        for old in sequences {
            next += 1
            // Read whole before the copies are written: the log is what they are written to.
            var rows: [(record: ChangeLogRecord, entries: [UInt8])] = []
            try ChangeLogRecord.forEach(db, of: TransactionID(origin: site, sequence: old)) { record, entries in
                rows.append((record, [UInt8](entries)))
            }
            for row in rows {
                try db.execute(
                    sql: LogAppender.insertSQL,
                    arguments: [own, Int64(next), Int64(row.record.deltaCount), Int64(row.record.documents), Data(row.entries)])
                let seq = UInt64(db.lastInsertedRowID)
                if first == nil { first = seq }
                try row.entries.withUnsafeBytes { bytes in
                    try LogEntries.forEach(bytes) { collection, _, _, _ in
                        appended.collections.insert(collection)
                        appended.documents += 1
                    }
                }
            }
            // The copies first, then the old rows go: a sequence is never given twice,
            // which it would be if the log's last rows went first (a rowid is the largest + 1).
            try db.execute(sql: "DELETE FROM change_log WHERE txn_site = ? AND txn_seq = ?", arguments: [own, Int64(old)])
            let id = TransactionID(origin: site, sequence: next)
            appended.transactions.append(id)
            let arguments: StatementArguments = [Int64(next), own, Int64(old)]
            try db.execute(sql: "UPDATE txn SET seq = ? WHERE origin = ? AND seq = ?", arguments: arguments)
            try db.execute(sql: "UPDATE field SET txn_seq = ? WHERE COALESCE(txn_site, site) = ? AND txn_seq = ?", arguments: arguments)
            try db.execute(
                sql: "UPDATE evicted_counter SET txn_seq = ? WHERE COALESCE(txn_site, site) = ? AND txn_seq = ?", arguments: arguments)
        }
        try setMeta(db, "transaction_counter", Int64(next))
        try forgetPeerCursors(db)
        try setMeta(db, "evicted", 1)
        if let first { appended.after = first - 1 }
        return (.reissued(count: sequences.count, from: base + 1, to: next), sequences.isEmpty ? nil : appended)
    }
}

extension DocumentStore {
    /// Moves every row of the change log above `sequence`, keeping their order, when a
    /// peer resumes after `sequence` and the log ends below it: the log went back (a
    /// restored backup, a copied directory). Otherwise the rows this node appends next
    /// would take sequences that peer's cursor already passed, and it would never be
    /// sent them. Moved, every row is above every cursor a peer can hold: each peer is
    /// sent the log again from its cursor (what it holds already is not logged twice).
    /// Returns the new end, or nil when the log did not end below `sequence`.
    package func raiseLog(above sequence: UInt64, peer: SiteID) async throws(ShoalError) -> UInt64? {
        guard sequence > lastCommittedSequence else { return nil }
        let moved = try await write { db -> (from: UInt64, to: UInt64)? in
            let last = try ChangeLogRecord.lastSequence(db)
            // Read again inside the write: another session may have moved it meanwhile.
            guard sequence > last, last > 0 else { return nil }
            // Numbered on from `sequence`, one apart, as a hub numbers them: adding
            // `sequence` to each row moved the end to `last + sequence`, past 2^62 after
            // two moves (a review found it: a cursor of 2^61, then one of 2^62 - 2^40).
            try db.execute(
                sql: """
                    INSERT INTO change_log (seq, txn_site, txn_seq, txn_count, documents, entries)
                    SELECT ? + row_number() OVER (ORDER BY seq), txn_site, txn_seq, txn_count, documents, entries
                    FROM change_log WHERE seq <= ? ORDER BY seq
                    """,
                arguments: [Int64(sequence), Int64(last)])
            let rows = db.changesCount
            try db.execute(sql: "DELETE FROM change_log WHERE seq <= ?", arguments: [Int64(last)])
            return (last, sequence + UInt64(max(rows, 1)))
        }
        guard let moved else { return nil }
        logger.error(
            "peer \(peer) resumes after sequence \(sequence) of this node's change log, which ends at \(moved.from): the log went back (a restored backup or a copied data directory). Every row moved above \(sequence) (the log now ends at \(moved.to)), so that no peer passes over what this node logs next; peers are sent the log again from their cursors",
            metadata: ["shoal.peer.site": "\(peer)", "shoal.log.peer_resume": "\(sequence)"])
        feed.publish(LogEnd(sequence: moved.to, appended: nil))
        return moved.to
    }
}

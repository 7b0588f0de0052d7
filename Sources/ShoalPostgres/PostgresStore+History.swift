import Crypto
import Logging
import NIOCore
package import ShoalCRDT
package import ShoalStorage
import PostgresNIO

/// The hubs' history never goes backwards unseen (DATA_MODEL.md §4.5), as a SQLite
/// node's: a database restored from a backup, or one a failover left without its last
/// commits, numbers the hubs' next transactions with numbers devices already hold for
/// other transactions, and its log's next rows with sequences devices' cursors passed.
///
/// - With every Subscribe, a device says how far it holds the hubs' own transactions.
///   If that is beyond the database's counter, or its transaction of that number is
///   not the hubs', the hub commits the hubs' transactions since the last point a peer
///   confirmed (`history_confirmed`) again under numbers far above everything the
///   device holds, forgets every peer cursor, and asks every peer for the hubs' own
///   transactions again from the start (`may_lack_own_transactions`), which brings back
///   the ones the database lost. The other hubs hear of it on the log's channel
///   (`cursors <epoch>`) and restart their streams too.
/// - A device resuming after the log's end moves every row of the log above its
///   cursor first (`raiseLog`), so nothing the hubs log next is passed over.
/// - A hub that runs while its database goes back (a failover that lost commits, a
///   backup restored in place) finds it itself: the log ends below what the hub knew
///   committed (`known`). Its sessions and devices hold positions past that end, and
///   stay connected through it, so no Subscribe would tell. Before it writes, and when
///   it starts listening and at each slow tick of `followOtherHubs`, the hub moves
///   every row of the log far above what it knew (`OriginHistory.reissueGap` above, as
///   another hub may have known more), commits the hubs' transactions since the last
///   confirmed point again, and forgets every cursor, as above (`repairIfWentBack`).
///
/// Each runs as the hubs' one writer (`log_end`'s lock), which checks again inside that
/// the database still went back: two hubs told at once repair it once.
///
/// A log that went back may not end below what a hub knew for long: a hub that knew
/// less (one started on the database since, or one whose announcements lagged) logs on
/// from where it ends, past where this hub's sessions stand, and those sessions would
/// pass over the rows below their cursors. So each hub also keeps the newest row it read
/// or wrote (`KnownLog.witness`), and a log whose row of that sequence holds another
/// transaction, or other entries, went back too. No store rewrites a row in place: a
/// row is inserted once, and moved (`raiseLog`, `reissue`) or compacted only by deleting
/// it, so a row gone says nothing and a row changed says the database went back.
extension PostgresStore {
    /// Repairs the database if it went back under the running hub (`KnownLog.wentBack`).
    /// A write finds it as it begins (`withWriter`), a page read as it reads; this finds
    /// it when nothing is written or read. A failure is logged and left to the next call.
    package func repairIfWentBack() async {
        do {
            let knew = known.withLock { $0 }
            let found = try await database.withConnection { connection in
                try await Self.readLogEnd(connection, witness: knew.witness, lock: false, logger: self.logger)
            }
            guard knew.wentBack(end: found.end, there: found.there), !gate.isClosed else { return }
            try await acquireGate()
            defer { gate.release() }
            // The one writer checks again under the lock, and repairs.
            _ = try await withWriter("repairing a database that went back") { _ in }
        } catch {
            guard !Task.isCancelled else { return }
            logger.warning("checking whether this hub's database went back failed; checked again at the next tick: \(error)")
        }
    }

    /// `log_end`'s value (under its row lock until the write ends when `lock`), the row
    /// of `witness`'s sequence as the log holds it now (nil when it holds none), and the
    /// cursor epoch, in one statement.
    ///
    /// The one writer reads the epoch here, after the writers' lock, so that it knows of
    /// every repair committed before it began, heard or not (`forgotCursors`): an
    /// increment it writes next is named anew. (Read in the statement that waits for
    /// `log_end`'s lock it could be older than that row, but the one writer waits for
    /// no one there: whoever moves `log_end` holds the writers' lock.)
    static func readLogEnd(
        _ connection: HubConnection, witness: LogWitness?, lock: Bool, logger: Logger
    ) async throws -> (end: UInt64, there: LogWitness?, epoch: UInt64) {
        let sequence = witness.map { Int64(bitPattern: $0.sequence) } ?? -1
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT m.value, c.txn_site, c.txn_seq, sha256(c.entries),
                        COALESCE((SELECT value FROM shoal_meta WHERE key = 'cursor_epoch'), 0)
                    FROM shoal_meta m LEFT JOIN change_log c ON c.seq = \(sequence)
                    WHERE m.key = 'log_end'\(lock ? " FOR UPDATE OF m" : "")
                    """), logger: logger)
        for (end, site, seq, digest, epoch) in try rows.decode((Int64, Int64?, Int64?, ByteBuffer?, Int64).self) {
            let there = try site.flatMap { site in
                try seq.flatMap { seq in
                    try digest.map { digest in
                        LogWitness(
                            sequence: UInt64(bitPattern: sequence),
                            transaction: TransactionID(origin: SiteID(UInt64(bitPattern: site)), sequence: try Stored.unsigned(seq, "change_log", "txn_seq")),
                            digest: Array(digest.readableBytesView))
                    }
                }
            }
            return (
                try Stored.unsigned(end, "shoal_meta", "value of log_end"), there,
                try Stored.unsigned(epoch, "shoal_meta", "value of cursor_epoch")
            )
        }
        throw ShoalError(.database, "the database has no log_end row: is the schema migrated?")
    }

    /// The transaction of the log's row at `sequence` (nil at 0, or when it holds none),
    /// and the row of `witness`'s sequence as the log holds it, in one query.
    static func rows(
        _ connection: HubConnection, at sequence: UInt64, witness: LogWitness?, logger: Logger
    ) async throws -> (previous: TransactionID?, there: LogWitness?) {
        let at = sequence > 0 ? Int64(bitPattern: sequence) : -1
        let seen = witness.map { Int64(bitPattern: $0.sequence) } ?? -1
        guard at >= 0 || seen >= 0 else { return (nil, nil) }
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT seq, txn_site, txn_seq, CASE WHEN seq = \(seen) THEN sha256(entries) END
                    FROM change_log WHERE seq IN (\(at), \(seen))
                    """), logger: logger)
        var previous: TransactionID?
        var there: LogWitness?
        for (seq, site, txnSeq, digest) in try rows.decode((Int64, Int64, Int64, ByteBuffer?).self) {
            let transaction = TransactionID(origin: SiteID(UInt64(bitPattern: site)), sequence: try Stored.unsigned(txnSeq, "change_log", "txn_seq"))
            if seq == at { previous = transaction }
            if seq == seen, let digest {
                there = LogWitness(sequence: UInt64(bitPattern: seq), transaction: transaction, digest: Array(digest.readableBytesView))
            }
        }
        return (previous, there)
    }

    /// A page read found the row this hub saw newest changed: the database went back
    /// under it. Repairs it at once rather than at the next tick, once at a time.
    /// A repair that fails is tried again a second later at the soonest.
    func wentBackSeen() {
        guard !gate.isClosed, repairAsked.withLock({ asked in defer { asked = true }; return !asked }) else { return }
        Task {
            await self.repairIfWentBack()
            try? await Task.sleep(for: .seconds(1))
            self.repairAsked.withLock { $0 = false }
        }
    }

    /// Tells what a write's repair did (`PostgresInboundWriter.repairWentBack`), once it committed.
    func repaired(_ wentBack: WentBack, by writer: PostgresInboundWriter) {
        let above = max(wentBack.known.end, wentBack.end) + OriginHistory.reissueGap
        let found =
            wentBack.end < wentBack.known.end
            ? "this hub's change log ends at \(wentBack.end), below sequence \(wentBack.known.end), which this hub knew committed"
            : "this hub's change log holds another row at sequence \(wentBack.known.witness?.sequence ?? 0) than the one this hub read or wrote there (it ends at \(wentBack.end): a hub that knew less has logged on since)"
        logger.error(
            "\(found): the database went back under it (a failover that lost commits, or a backup restored in place). Every row moved above \(above), so that no device passes over what the hubs log next. \(renumbered(wentBack.verdict) ?? ""), and every peer cursor is forgotten: peers are sent the log again and asked for what they sent",
            metadata: ["shoal.log.end": "\(wentBack.end)", "shoal.log.known": "\(wentBack.known.end)"])
        repairCommitted(by: writer)
    }

    /// What a repair committed again, for its log line; nil when it committed nothing again.
    func renumbered(_ verdict: HistoryVerdict) -> String? {
        guard case .reissued(let count, let from, let to) = verdict else { return nil }
        return count == 0
            ? "It holds none of its transactions since the last point a peer confirmed; its next are numbered from \(siteID):\(from)"
            : "Its \(count) transaction(s) since the last point a peer confirmed are committed again as \(siteID):\(from) to \(siteID):\(to)"
    }

    /// Once a repair committed: the sessions told where the log ends, and that every cursor was forgotten.
    func repairCommitted(by writer: PostgresInboundWriter) {
        repairCount.withLock { $0 += 1 }
        if let last = writer.lastSequence { publish(LogEnd(sequence: last, appended: nil)) }
        forgotCursors(epoch: writer.cursorEpoch)
    }

    package func reconcileOwnHistory(with held: OriginHistory, peer: SiteID) async throws(ShoalError) -> HistoryVerdict {
        guard held.through > 0 else { return .unknown }
        let site = siteID
        // Read first: a session must not wait for the writer to learn that all is well.
        let looked = try await snapshot("comparing this hub's history with a peer's") { connection in
            try await Self.compare(connection, held, site: site, logger: self.logger)
        }
        switch looked {
        case .unknown: return .unknown
        case .consistent:
            // Only ever raised, in one statement: no writer needed.
            try await run(
                "recording how far a peer confirmed this hub's history",
                """
                UPDATE shoal_meta SET value = GREATEST(value, \(Int64(held.through))) WHERE key = 'history_confirmed'
                """)
            return .consistent
        case .reissued: break
        }
        let (verdict, writer) = try await withWriter("committing this hub's transactions again under new numbers") { writer in
            // Again inside the write: another hub or session may have repaired it meanwhile.
            guard case .reissued = try await Self.compare(writer.connection, held, site: site, logger: self.logger) else {
                return HistoryVerdict.unknown
            }
            let counter = try await Self.meta(writer.connection, "transaction_counter", logger: self.logger)
            return try await writer.reissue(
                site: site,
                above: OriginHistory.reissueBase(peerThrough: held.through, counter: counter, nowMillis: HybridLogicalClock.systemMilliseconds()))
        }
        if let renumbered = renumbered(verdict) {
            logger.error(
                "this hub's database is older than what peer \(peer) holds of its own writes (a restored backup, or commits a failover lost): the peer holds its transactions through \(held.through). \(renumbered), and every peer is asked for this node's own transactions again",
                metadata: ["shoal.peer.site": "\(peer)", "shoal.history.peer_through": "\(held.through)"])
            repairCommitted(by: writer)
        }
        return verdict
    }


    /// What `held` says of the hubs' own history: `.reissued` (of nothing yet) when the
    /// database went back; the same delta confirms it.
    static func compare(_ connection: HubConnection, _ held: OriginHistory, site: SiteID, logger: Logger) async throws -> HistoryVerdict {
        let wentBack = HistoryVerdict.reissued(count: 0, from: 0, to: 0)
        if held.through > (try await meta(connection, "transaction_counter", logger: logger)) { return wentBack }
        let rows = try await connection.query(
            "SELECT delta_count FROM txn WHERE origin = \(Int64(bitPattern: site.rawValue)) AND seq = \(Int64(held.through))",
            logger: logger)
        var deltaCount: Int64?
        for value in try rows.decode(Int64.self) { deltaCount = value }
        // A number the hubs hold no transaction of (one given up, being sent back) says nothing yet.
        guard let deltaCount, held.timestamp != 0 else { return .unknown }
        guard
            let own = try await newestDelta(connection, TransactionID(origin: site, sequence: held.through), only: held.index, logger: logger)
        else {
            // Its transaction of that number never had the delta the peer names: another
            // transaction under the number. One it had and no longer logs says nothing.
            return Int64(held.index) >= deltaCount ? wentBack : .unknown
        }
        return own.timestamp == held.timestamp ? .consistent : wentBack
    }

    package func raiseLog(above sequence: UInt64, peer: SiteID) async throws(ShoalError) -> UInt64? {
        guard sequence > (try await lastSequence()) else { return nil }
        let (moved, writer) = try await withWriter("moving the change log above a peer's cursor") { writer -> (from: UInt64, to: UInt64)? in
            // Above the gap, as a repair moves it: the other devices' cursors past the
            // log's end are passed too, so their Subscribes move nothing again, and every
            // cursor is forgotten once, not once a device.
            guard let moved = try await writer.raiseLog(above: sequence, margin: OriginHistory.reissueGap) else { return nil }
            // The database went back: every hub names its counter contributions anew,
            // hearing of it by the epoch (a repair in this write did it already).
            if writer.wentBack == nil { try await writer.forgetPeerCursors() }
            return moved
        }
        guard let moved else { return nil }
        logger.error(
            "peer \(peer) resumes after sequence \(sequence) of this hub's change log, which ends at \(moved.from): the database went back (a restored backup, or commits a failover lost). Every row moved above \(sequence) and a margin (the log now ends at \(moved.to)), so that no peer passes over what the hubs log next; peers are sent the log again from their cursors, and every peer cursor is forgotten: peers are asked for what they sent",
            metadata: ["shoal.peer.site": "\(peer)", "shoal.log.peer_resume": "\(sequence)"])
        if writer.wentBack == nil { repairCommitted(by: writer) }
        publish(LogEnd(sequence: moved.to, appended: nil))
        return moved.to
    }

    /// Every peer cursor was forgotten (`epoch`, here or on another hub): the sessions
    /// start their streams again, asking for the hubs' own transactions. The database
    /// went back, so this hub's counter contributions are named anew.
    ///
    /// An epoch announced may arrive after a newer one was read, so only a greater one
    /// counts; one read from the database as it stands now (`current`) counts whenever
    /// it differs, since a lower one says the database went back too (epochs follow
    /// the server's clock, which may stand behind on a server failed over to).
    func forgotCursors(epoch: UInt64, current: Bool = false) {
        lacksOwn.withLock { $0 = true }
        let newer = cursorEpoch.withLock { known in
            guard current ? epoch != known : epoch > known else { return false }
            known = epoch
            return true
        }
        if newer {
            nameCounterContributionsAnew()
            resets.publish(epoch)
        }
    }

    /// Names this hub's counter contributions anew (DATA_MODEL.md §7): the database went
    /// back, and holds this hub's contributions as they were at its backup, while
    /// devices hold them with the increments made since. An increment written on from
    /// the old total, under a newer version, would win over those and lose the
    /// increments; under a new name it is summed with them. Called before a repair's
    /// write goes on to its statements, and when another hub's repair is heard of.
    func nameCounterContributionsAnew() {
        counterSites.withLock { $0 = SiteID.random() }
    }

    /// Whether the database may lack some of the hubs' own transactions, and its cursor epoch.
    static func readHistory(_ database: PostgresHubDatabase, logger: Logger) async throws(ShoalError) -> (lacksOwn: Bool, cursorEpoch: UInt64) {
        do {
            var lacksOwn = false, epoch: UInt64 = 0
            for (key, value) in try await database.query(
                "SELECT key, value FROM shoal_meta WHERE key IN ('may_lack_own_transactions', 'cursor_epoch')", logger: logger
            ).decode((String, Int64).self) {
                if key == "cursor_epoch" { epoch = try Stored.unsigned(value, "shoal_meta", "value of cursor_epoch") } else { lacksOwn = value != 0 }
            }
            return (lacksOwn, epoch)
        } catch {
            throw ShoalError(.database, "reading the history's marks on \(database.location): \(PostgresHubDatabase.describe(error))")
        }
    }
}

/// What a hub knew of the log all hubs share (`PostgresStore.known`), to tell when the
/// database went back under it.
struct KnownLog: Sendable, Equatable {
    /// The highest sequence this hub knew committed: every end told, every row read.
    var end: UInt64 = 0
    /// The newest row this hub read or wrote; nil before the first.
    var witness: LogWitness?

    /// Takes in a row this hub read or wrote, found with the log as `checked` said it:
    /// the newest row only replaces the one checked, so that none is replaced unchecked.
    mutating func saw(_ row: LogWitness, checked: LogWitness?) {
        end = max(end, row.sequence)
        if witness == checked, row.sequence >= witness?.sequence ?? 0 { witness = row }
    }

    /// Whether a log that ends at `end`, and holds `there` at the witness's sequence (nil:
    /// no row, as compaction or a repair's move leaves it), went back under this hub.
    func wentBack(end logEnd: UInt64, there: LogWitness?) -> Bool {
        if logEnd < end { return true }
        guard let witness, let there else { return false }
        return there != witness
    }
}

/// A row of the change log as a hub read or wrote it: its sequence, its transaction,
/// and the SHA-256 of its entries, which hold the deltas' timestamps (no two writes'
/// are the same), so that another write logged under the same numbers differs. (The
/// same transaction logged again at the same sequence, after rows below it changed,
/// does not: docs/ARCHITECTURE.md lists it among what this does not cover.)
struct LogWitness: Sendable, Equatable {
    var sequence: UInt64
    var transaction: TransactionID
    var digest: [UInt8]

    init(sequence: UInt64, transaction: TransactionID, digest: [UInt8]) {
        self.sequence = sequence
        self.transaction = transaction
        self.digest = digest
    }

    init(sequence: UInt64, transaction: TransactionID, entries: UnsafeRawBufferPointer) {
        var hasher = SHA256()
        hasher.update(bufferPointer: entries)
        self.init(sequence: sequence, transaction: transaction, digest: Array(hasher.finalize()))
    }

    init(_ record: PostgresStore.LogRecord) {
        self = record.entries.withUnsafeReadableBytes { LogWitness(sequence: record.sequence, transaction: record.transaction, entries: $0) }
    }
}

/// What a write found, and did, when the database went back under its hub: where the
/// log ended, what the hub knew, and what was committed again.
struct WentBack {
    var end: UInt64
    var known: KnownLog
    var verdict: HistoryVerdict
}

extension PostgresInboundWriter {
    /// Repairs the database, as the one writer beginning, when it went back under the
    /// running hub (`KnownLog.wentBack`). Every row moves above `known.end` and a margin
    /// (another hub may have known more: rows a lagging hub logged since are moved too),
    /// the hubs' transactions since the last confirmed point are committed again under
    /// new numbers, and every peer cursor is forgotten (`reissue`): peers are sent the
    /// log again, send back what the database lost, and nothing the hubs log next takes a
    /// sequence a device passed.
    func repairWentBack(known: KnownLog) async throws {
        // Before this write's statements run: they may increment a counter.
        store.nameCounterContributionsAnew()
        let end = logEnd
        _ = try await raiseLog(above: max(known.end, end) + OriginHistory.reissueGap)
        let counter = try await PostgresStore.meta(connection, "transaction_counter", logger: logger)
        let verdict = try await reissue(
            site: store.siteID,
            above: OriginHistory.reissueBase(peerThrough: 0, counter: counter, nowMillis: HybridLogicalClock.systemMilliseconds()))
        // What this write appends next follows the moved rows.
        if let last = lastSequence { appended.after = last }
        wentBack = WentBack(end: end, known: known, verdict: verdict)
    }

    /// Moves the hubs' transactions after the last confirmed point to numbers above
    /// `base`, each to the end of the log (so every peer is sent them again), keeping
    /// their deltas and timestamps; forgets every peer cursor, so that peers send the
    /// hubs' own transactions back, and says the database may lack some of them.
    func reissue(site: SiteID, above base: UInt64) async throws -> HistoryVerdict {
        let own = Int64(bitPattern: site.rawValue)
        let confirmed = try await PostgresStore.meta(connection, "history_confirmed", logger: logger)
        // The new number of each: a few statements whatever their count, all under the lock.
        try await query(
            """
            CREATE TEMPORARY TABLE reissued ON COMMIT DROP AS
            SELECT seq AS old, \(Int64(base)) + row_number() OVER (ORDER BY seq) AS new
            FROM txn WHERE origin = \(own) AND seq > \(Int64(confirmed))
            """)
        var count: UInt64 = 0
        for value in try await query("SELECT count(*) FROM reissued").decode(Int64.self) { count = try Stored.unsigned(value, "reissued", "count") }
        if count > 0 {
            // The copies at the log's end, in the transactions' order, then the old rows
            // go: no sequence is given twice.
            let end = Int64(lastSequence ?? logEnd)
            var copied: UInt64 = 0
            for value in try await query(
                """
                WITH copies AS (
                    INSERT INTO change_log (seq, txn_site, txn_seq, txn_count, documents, entries)
                    SELECT \(end) + row_number() OVER (ORDER BY r.new, c.seq), c.txn_site, r.new, c.txn_count, c.documents, c.entries
                    FROM change_log c JOIN reissued r ON c.txn_site = \(own) AND c.txn_seq = r.old
                    RETURNING 1)
                SELECT count(*) FROM copies
                """
            ).decode(Int64.self) {
                copied = try Stored.unsigned(value, "change_log", "count")
            }
            try await query("DELETE FROM change_log c USING reissued r WHERE c.txn_site = \(own) AND c.txn_seq = r.old")
            try await query("UPDATE txn t SET seq = r.new FROM reissued r WHERE t.origin = \(own) AND t.seq = r.old")
            try await query("UPDATE field f SET txn_seq = r.new FROM reissued r WHERE f.txn_site = \(own) AND f.txn_seq = r.old")
            if copied > 0 { lastSequence = UInt64(end) + copied }
        }
        try await query("UPDATE shoal_meta SET value = \(Int64(base + count)) WHERE key = 'transaction_counter'")
        try await forgetPeerCursors()
        return .reissued(count: Int(count), from: base + 1, to: base + count)
    }

    /// Forgets every peer cursor under a new epoch, marks the database as maybe lacking
    /// the hubs' own transactions, and tells the other hubs (on commit).
    func forgetPeerCursors() async throws {
        try await query("DELETE FROM peer_cursor")
        // Not an epoch given before, even by a database restored from before it: the
        // server's clock in milliseconds, or one more than the last (unless the clock
        // went back further than the time since). Counted on by one, a restore and a
        // repair gave an epoch again, which a hub that had heard it before took for
        // nothing new (its increments kept their name) and a stream read before the
        // restore took for its own (its cursor was recorded).
        let rows = try await query(
            """
            UPDATE shoal_meta SET value = GREATEST(value + 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
            WHERE key = 'cursor_epoch' RETURNING value
            """)
        for value in try rows.decode(Int64.self) { cursorEpoch = try Stored.unsigned(value, "shoal_meta", "value of cursor_epoch") }
        // Delivered when, and only if, the write commits.
        try await query("SELECT pg_notify(\(PostgresHubDatabase.logChannel), \("cursors \(cursorEpoch)"))")
        try await query("UPDATE shoal_meta SET value = 1 WHERE key = 'may_lack_own_transactions'")
    }

    /// Moves every row of the log above `needed` and `margin` when the log ends below
    /// `needed`, keeping their order; returns where it ended and ends now, or nil when
    /// it did not end below. The rows are numbered on from there, not shifted by it, so
    /// that the log's end grows by what it holds, not twice over, each time it moves.
    func raiseLog(above needed: UInt64, margin: UInt64 = 0) async throws -> (from: UInt64, to: UInt64)? {
        // Read again under the lock: another hub or session may have moved it meanwhile,
        // and this write may have already (`repairWentBack`).
        let end = lastSequence ?? logEnd
        guard needed > end else { return nil }
        let sequence = needed + margin
        // The database went back: what it holds of this hub's counter contributions too.
        store.nameCounterContributionsAnew()
        var moved: UInt64 = 0
        for value in try await query(
            """
            WITH copies AS (
                INSERT INTO change_log (seq, txn_site, txn_seq, txn_count, documents, entries)
                SELECT \(Int64(sequence)) + row_number() OVER (ORDER BY seq), txn_site, txn_seq, txn_count, documents, entries
                FROM change_log WHERE seq <= \(Int64(end))
                RETURNING 1)
            SELECT count(*) FROM copies
            """
        ).decode(Int64.self) {
            moved = try Stored.unsigned(value, "change_log", "count")
        }
        try await query("DELETE FROM change_log WHERE seq <= \(Int64(end))")
        lastSequence = sequence + moved
        return (end, sequence + moved)
    }
}

package import Foundation
import Logging
import NIOCore
import PostgresNIO
package import ShoalCRDT
package import ShoalStorage

/// Change-log compaction and forgetting on a hub: the SQLite store's rules
/// (`DocumentStore+Compaction.swift`, DATA_MODEL.md §18), decided in Swift
/// (`LogCompaction`), since the log's entries are packed in `BYTEA` and PostgreSQL has no
/// function to unpack them. Each step that changes the log or the registers runs as
/// the hubs' writer (`log_end`'s row lock), so no hub applies a write between what it
/// reads and what it removes; several hubs compacting take turns and find nothing left
/// to do. Compaction holds the lock a chunk of the log at a time.
///
/// `vacuum` does nothing: the server's autovacuum gives the space back.
extension PostgresStore {
    /// Log rows scanned per write: compaction holds every hub's writer a chunk at a time.
    static let compactionChunk: UInt64 = 2_000

    package func compactChangeLog(
        after start: UInt64, through: UInt64, progress: @Sendable (UInt64, CompactionReport) async -> Void
    ) async throws(ShoalError) -> CompactionReport {
        let (rows, last) = try await snapshot("reading the change log's size") { connection in
            var counted: (rows: UInt64, last: UInt64) = (0, 0)
            for (rows, last) in try await connection.query(
                "SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM change_log", logger: logger
            ).decode((Int64, Int64).self) {
                counted = (try Stored.unsigned(rows, "change_log", "COUNT(*)"), try Stored.unsigned(last, "change_log", "seq"))
            }
            return counted
        }
        let point = min(through, last)
        var report = CompactionReport(through: point, rowsBefore: rows)
        var low = min(start, point)
        while low < point {
            let high = min(low + Self.compactionChunk, point)
            let (removed, _) = try await withWriter("compacting the change log") { writer in
                try await self.compactChunk(writer.connection, after: low, through: high, point: point)
            }
            report.rowsRemoved += removed.rows
            report.transactionsRemoved += removed.transactions
            low = high
            await progress(high, report)
        }
        if point == 0 { await progress(0, report) }
        return report
    }

    /// Removes the transactions with a row in `(low, high]` that lie wholly at or below
    /// `point`, are not the log's last, and hold no current value; records what
    /// superseded each in its `rest`. Returns the rows and transactions removed.
    private func compactChunk(
        _ connection: HubConnection, after low: UInt64, through high: UInt64, point: UInt64
    ) async throws -> (rows: UInt64, transactions: UInt64) {
        var ids: [TransactionID] = []
        let found = try await connection.query(
            "SELECT DISTINCT txn_site, txn_seq FROM change_log WHERE seq > \(Int64(low)) AND seq <= \(Int64(high))",
            logger: logger)
        for (site, sequence) in try found.decode((Int64, Int64).self) {
            ids.append(TransactionID(origin: SiteID(UInt64(bitPattern: site)), sequence: try Stored.unsigned(sequence, "change_log", "txn_seq")))
        }
        guard !ids.isEmpty else { try await markCompacted(connection, through: point); return (0, 0) }
        // The log's last transaction stays, as on SQLite, whatever it holds.
        let last = try await Self.lastLogSequence(connection, logger: logger)
        let keep = min(point, last &- 1)
        let logged = try await Self.loggedTransactions(connection, ids, logger: logger).filter { $0.highestSequence <= keep }
        let registers = try await Self.registerWriters(connection, of: logged.flatMap { $0.entries.map(\.document) }, logger: logger)
        let superseded = logged.filter { transaction in
            transaction.entries.allSatisfy { LogCompaction.isSuperseded($0, of: transaction.id, registers: registers) }
        }
        guard !superseded.isEmpty else { try await markCompacted(connection, through: point); return (0, 0) }
        try await recordSupersession(connection, superseded, registers: registers)
        let (sites, sequences) = Self.columns(superseded.map(\.id))
        var removedRows: UInt64 = 0
        let deleted = try await connection.query(
            """
            WITH gone AS (
                DELETE FROM change_log WHERE (txn_site, txn_seq) IN (SELECT * FROM UNNEST(\(sites)::bigint[], \(sequences)::bigint[]))
                RETURNING 1)
            SELECT COUNT(*) FROM gone
            """, logger: logger)
        for count in try deleted.decode(Int64.self) { removedRows = UInt64(max(0, count)) }
        try await markCompacted(connection, through: point)
        return (removedRows, UInt64(superseded.count))
    }

    /// Records in each transaction's `supersession` what superseded it, before it leaves the log.
    private func recordSupersession(
        _ connection: HubConnection, _ transactions: [LogCompaction.Logged], registers: [RegisterKey: LogCompaction.RegisterWriter]
    ) async throws {
        let (sites, sequences) = Self.columns(transactions.map(\.id))
        var recorded: [TransactionID: String] = [:]
        let rows = try await connection.query(
            "SELECT origin, seq, supersession FROM txn WHERE (origin, seq) IN (SELECT * FROM UNNEST(\(sites)::bigint[], \(sequences)::bigint[]))",
            logger: logger)
        for (site, sequence, text) in try rows.decode((Int64, Int64, String).self) {
            recorded[TransactionID(origin: SiteID(UInt64(bitPattern: site)), sequence: try Stored.unsigned(sequence, "txn", "seq"))] = text
        }
        var changed: [(TransactionID, String)] = []
        for transaction in transactions {
            let by = LogCompaction.supersession(of: transaction, registers: registers)
            guard !by.isEmpty, let text = recorded[transaction.id] else { continue }
            changed.append((transaction.id, LogCompaction.recorded(text, adding: by)))
        }
        guard !changed.isEmpty else { return }
        let (origins, seqs) = Self.columns(changed.map(\.0))
        let texts = changed.map(\.1)
        try await connection.query(
            """
            UPDATE txn SET supersession = u.supersession
            FROM UNNEST(\(origins)::bigint[], \(seqs)::bigint[], \(texts)::text[]) AS u(origin, seq, supersession)
            WHERE txn.origin = u.origin AND txn.seq = u.seq
            """, logger: logger)
    }

    /// Raises `compacted_through` to `point` and sets `compacted_at` to now.
    private func markCompacted(_ connection: HubConnection, through point: UInt64) async throws {
        let now = Self.milliseconds(Date())
        try await connection.query(
            """
            INSERT INTO shoal_meta (key, value) VALUES ('compacted_through', \(Int64(point))), ('compacted_at', \(now))
            ON CONFLICT (key) DO UPDATE SET value = CASE WHEN shoal_meta.key = 'compacted_at' THEN excluded.value
                ELSE GREATEST(shoal_meta.value, excluded.value) END
            """, logger: logger)
    }

    // MARK: Registers no value needs

    package func purgeHiddenRegisters() async throws(ShoalError) -> Int {
        let tombstone = Stored.bytes(RegisterName.tombstone)
        let (purged, _) = try await withWriter("purging registers hidden by tombstones") { writer in
            var purged = 0
            let rows = try await writer.connection.query(
                """
                WITH gone AS (
                    DELETE FROM field f USING field t
                    WHERE t.collection = f.collection AND t.doc_id = f.doc_id AND t.name = \(tombstone)
                    AND f.name <> \(tombstone) AND f.ts <= t.ts
                    RETURNING 1)
                SELECT COUNT(*) FROM gone
                """, logger: self.logger)
            for count in try rows.decode(Int64.self) { purged = Int(count) }
            return purged
        }
        return purged
    }

    package func forgetRemovals(removedBefore: UInt64) async throws(ShoalError) -> Int {
        let expiry = Self.lastTimestamp(beforeMillis: removedBefore)
        let ((removed, through), _) = try await withWriter("forgetting removals") { writer -> (Int, UInt64) in
            let connection = writer.connection
            var removed = 0
            var newest: Int64?
            let rows = try await connection.query(
                """
                WITH gone AS (
                    DELETE FROM field WHERE (value = '' OR left(value, 1) = '~') AND ts <= \(expiry)
                    RETURNING ts)
                SELECT COUNT(*), MAX(ts) FROM gone
                """, logger: self.logger)
            for (count, max) in try rows.decode((Int64, Int64?).self) { (removed, newest) = (Int(count), max) }
            guard let newest else { return (0, 0) }
            return (removed, try await self.raiseForgottenThrough(connection, to: UInt64(bitPattern: newest) >> 16))
        }
        if removed > 0 { freshness.withLock { $0.forgottenThrough = max($0.forgottenThrough, through) } }
        return removed
    }

    // MARK: Forgetting deleted documents

    /// As the SQLite store's (`DocumentStore.forgetDeletedDocuments`). The log's rows are
    /// read first on a snapshot, without the writer (a whole-log scan, done only when
    /// some deleted document is past the horizon); then, as the writer, the candidates
    /// are read again, the rows logged since the snapshot scanned too, and the decision
    /// made on the registers as they are.
    package func forgetDeletedDocuments(deletedBefore: UInt64, through point: UInt64) async throws(ShoalError) -> ForgetReport {
        let expiry = Self.lastTimestamp(beforeMillis: deletedBefore)
        let scanned = try await snapshot("reading the deleted documents past the horizon") {
            connection -> (candidates: Set<DocumentBytes>, writers: Set<TransactionID>, through: UInt64)? in
            let candidates = Set(try await Self.expiredDocuments(connection, expiry: expiry, logger: self.logger).keys)
            guard !candidates.isEmpty else { return nil }
            let last = try await Self.lastLogSequence(connection, logger: self.logger)
            let writers = try await Self.transactionsWriting(candidates, connection, after: 0, through: last, logger: self.logger)
            return (candidates, writers, last)
        }
        guard let scanned else {
            return ForgetReport(documents: 0, forgottenThroughMillis: freshness.withLock { $0.forgottenThrough })
        }
        let ((forgotten, through), _) = try await withWriter("forgetting deleted documents") { writer -> (UInt64, UInt64) in
            let connection = writer.connection
            // Candidates still, and only those whose rows the snapshot scanned.
            let expired = try await Self.expiredDocuments(connection, expiry: expiry, logger: self.logger)
                .filter { scanned.candidates.contains($0.key) }
            guard !expired.isEmpty else { return (0, 0) }
            let candidates = Set(expired.keys)
            let last = try await Self.lastLogSequence(connection, logger: self.logger)
            var writers = scanned.writers
            writers.formUnion(
                try await Self.transactionsWriting(candidates, connection, after: scanned.through, through: last, logger: self.logger))
            let logged = try await Self.loggedTransactions(connection, Array(writers), logger: self.logger)
                .filter { !$0.documents.isDisjoint(with: candidates) }
            let registers = try await Self.registerWriters(
                connection, of: logged.flatMap { $0.entries.map(\.document) }, logger: self.logger)
            let forget = LogCompaction.forgettable(
                expired.values.map(\.document), writers: logged, point: min(point, last &- 1), registers: registers)
            guard !forget.isEmpty else { return (0, 0) }
            let forgetting = Set(forget.map(DocumentBytes.init))
            let (sites, sequences) = Self.columns(logged.filter { !$0.documents.isDisjoint(with: forgetting) }.map(\.id))
            try await connection.query(
                "DELETE FROM change_log WHERE (txn_site, txn_seq) IN (SELECT * FROM UNNEST(\(sites)::bigint[], \(sequences)::bigint[]))",
                logger: self.logger)
            let collections = forget.map(\.collection), keys = forget.map(\.id)
            try await connection.query(
                "DELETE FROM field WHERE (collection, doc_id) IN (SELECT * FROM UNNEST(\(collections)::text[], \(keys)::text[]))",
                logger: self.logger)
            try await connection.query(
                "DELETE FROM document WHERE (collection, doc_id) IN (SELECT * FROM UNNEST(\(collections)::text[], \(keys)::text[]))",
                logger: self.logger)
            let newest = forgetting.compactMap { expired[$0]?.millis }.max() ?? 0
            try await connection.query(
                """
                INSERT INTO shoal_meta (key, value) VALUES ('documents_forgotten', \(Int64(forget.count)))
                ON CONFLICT (key) DO UPDATE SET value = shoal_meta.value + excluded.value
                """, logger: self.logger)
            return (UInt64(forget.count), try await self.raiseForgottenThrough(connection, to: newest))
        }
        if forgotten > 0 { freshness.withLock { $0.forgottenThrough = max($0.forgottenThrough, through) } }
        return ForgetReport(documents: forgotten, forgottenThroughMillis: freshness.withLock { $0.forgottenThrough })
    }

    /// Raises `forgotten_through` (Unix ms) to `millis` at least; returns its value now.
    private func raiseForgottenThrough(_ connection: HubConnection, to millis: UInt64) async throws -> UInt64 {
        let rows = try await connection.query(
            """
            INSERT INTO shoal_meta (key, value) VALUES ('forgotten_through', \(Int64(clamping: millis)))
            ON CONFLICT (key) DO UPDATE SET value = GREATEST(shoal_meta.value, excluded.value) RETURNING value
            """, logger: logger)
        for value in try rows.decode(Int64.self) { return try Stored.unsigned(value, "shoal_meta", "value of forgotten_through") }
        return millis
    }

    /// Documents deleted at or before `expiry` (a timestamp) and not written since, with
    /// when the deletion happened as far as peers' freshness goes (Unix ms): the later
    /// of the tombstone's time and when this node logged its DELETE.
    static func expiredDocuments(
        _ connection: HubConnection, expiry: Int64, logger: Logger
    ) async throws -> [DocumentBytes: (document: DocumentRef, millis: UInt64)] {
        let rows = try await connection.query(
            """
            SELECT t.collection, t.doc_id, GREATEST(t.ts >> 16, COALESCE(
                (SELECT x.first_seen FROM txn x WHERE x.origin = t.txn_site AND x.seq = t.txn_seq), 0))
            FROM field t
            WHERE t.name = \(Stored.bytes(RegisterName.tombstone)) AND t.ts <= \(expiry)
            AND NOT EXISTS (SELECT 1 FROM field n WHERE n.collection = t.collection AND n.doc_id = t.doc_id AND n.ts > t.ts)
            """, logger: logger)
        var expired: [DocumentBytes: (document: DocumentRef, millis: UInt64)] = [:]
        for (collection, key, millis) in try rows.decode((String, String, Int64).self) {
            let document = DocumentRef(collection: collection, id: key)
            expired[DocumentBytes(document)] = (document, UInt64(max(0, millis)))
        }
        return expired
    }

    /// The transactions with a row in `(after, through]` that writes one of `documents`,
    /// read a page of rows at a time.
    static func transactionsWriting(
        _ documents: Set<DocumentBytes>, _ connection: HubConnection, after: UInt64, through: UInt64, logger: Logger
    ) async throws -> Set<TransactionID> {
        var writers: Set<TransactionID> = []
        var cursor = Int64(after)
        while true {
            let batch = try await logRows(
                connection, "seq > \(cursor) AND seq <= \(Int64(through)) ORDER BY seq LIMIT \(pageRowsPerQuery * 8)", logger: logger)
            for record in batch where !writers.contains(record.transaction) {
                var rows: [LogRow] = []
                try record.decode(into: &rows)
                if rows.contains(where: { documents.contains(DocumentBytes(DocumentRef(collection: $0.delta.collection, id: $0.delta.documentID))) }) {
                    writers.insert(record.transaction)
                }
            }
            guard batch.count == pageRowsPerQuery * 8, let last = batch.last else { return writers }
            cursor = Int64(last.sequence)
        }
    }

    // MARK: Reading what compaction decides on

    /// The log's highest sequence (0: empty).
    static func lastLogSequence(_ connection: HubConnection, logger: Logger) async throws -> UInt64 {
        for last in try await connection.query("SELECT COALESCE(MAX(seq), 0) FROM change_log", logger: logger)
            .decode(Int64.self)
        {
            return try Stored.unsigned(last, "change_log", "seq")
        }
        return 0
    }

    /// Every row of the transactions `ids`, grouped by transaction and document.
    static func loggedTransactions(
        _ connection: HubConnection, _ ids: [TransactionID], logger: Logger
    ) async throws -> [LogCompaction.Logged] {
        guard !ids.isEmpty else { return [] }
        let sites = ids.map { String(Int64(bitPattern: $0.origin.rawValue)) }.joined(separator: ",")
        let sequences = ids.map { String(Int64(bitPattern: $0.sequence)) }.joined(separator: ",")
        var rows: [LogRow] = []
        for record in try await logRows(
            connection,
            "(txn_site, txn_seq) IN (SELECT * FROM UNNEST(ARRAY[\(sites)]::bigint[], ARRAY[\(sequences)]::bigint[])) ORDER BY seq",
            logger: logger)
        {
            try record.decode(into: &rows)
        }
        return LogCompaction.transactions(of: rows)
    }

    /// Who wrote each register of `documents`, and when.
    static func registerWriters(
        _ connection: HubConnection, of documents: [DocumentRef], logger: Logger
    ) async throws -> [RegisterKey: LogCompaction.RegisterWriter] {
        var unique: [DocumentBytes: DocumentRef] = [:]
        for document in documents { unique[DocumentBytes(document)] = document }
        guard !unique.isEmpty else { return [:] }
        let collections = unique.values.map(\.collection), keys = unique.values.map(\.id)
        let rows = try await connection.query(
            """
            SELECT f.collection, f.doc_id, f.name, f.ts, f.txn_site, f.txn_seq
            FROM UNNEST(\(collections)::text[], \(keys)::text[]) AS t(c, k)
            JOIN field f ON f.collection = t.c AND f.doc_id = t.k
            """, logger: logger)
        var writers: [RegisterKey: LogCompaction.RegisterWriter] = [:]
        for (collection, key, name, ts, site, sequence) in try rows.decode((String, String, ByteBuffer, Int64, Int64, Int64).self) {
            writers[RegisterKey(collection, key, Stored.name(name))] = LogCompaction.RegisterWriter(
                transaction: TransactionID(origin: SiteID(UInt64(bitPattern: site)), sequence: try Stored.unsigned(sequence, "field", "txn_seq")),
                timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: ts)))
        }
        return writers
    }

    /// The largest timestamp whose wall clock is before `millis` (as a column holds it).
    static func lastTimestamp(beforeMillis millis: UInt64) -> Int64 {
        millis == 0 ? 0 : Int64(bitPattern: (millis - 1) << 16 | 0xFFFF)
    }

    package func vacuum() async throws(ShoalError) {}

    /// What the hub keeps of a document, live, deleted or forgotten: its registers (the
    /// tombstone among them), whether it has a body row, and the change-log rows that
    /// write it. The log is read whole: for checks, not for a hot path.
    package func retained(_ document: DocumentRef) async throws(ShoalError) -> (registers: Int, body: Bool, logRows: Int) {
        try await snapshot("reading what the hub keeps of a document") { connection in
            var registers = 0, body = false
            for (count, exists) in try await connection.query(
                """
                SELECT (SELECT COUNT(*) FROM field WHERE collection = \(document.collection) AND doc_id = \(document.id)),
                EXISTS (SELECT 1 FROM document WHERE collection = \(document.collection) AND doc_id = \(document.id))
                """, logger: self.logger
            ).decode((Int64, Bool).self) {
                (registers, body) = (Int(count), exists)
            }
            let wanted = DocumentBytes(document)
            var logRows = 0
            var cursor: Int64 = 0
            while true {
                let batch = try await Self.logRows(connection, "seq > \(cursor) ORDER BY seq LIMIT 512", logger: self.logger)
                for record in batch {
                    var rows: [LogRow] = []
                    try record.decode(into: &rows)
                    if rows.contains(where: { DocumentBytes(DocumentRef(collection: $0.delta.collection, id: $0.delta.documentID)) == wanted }) {
                        logRows += 1
                    }
                }
                guard batch.count == 512, let last = batch.last else { break }
                cursor = Int64(last.sequence)
            }
            return (registers, body, logRows)
        }
    }
}

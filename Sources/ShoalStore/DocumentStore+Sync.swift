package import ShoalCRDT
package import ShoalStorage
import ShoalQuery
import GRDB
import Logging


extension LogRow {
    /// Appends the deltas of one row of the log (`ChangeLogRecord`) to `rows`, in
    /// stored order; returns how many.
    @discardableResult
    static func decode(_ record: ChangeLogRecord, entries: UnsafeRawBufferPointer, into rows: inout [LogRow]) throws -> Int {
        try decode(
            sequence: record.sequence, transaction: record.transaction, deltaCount: record.deltaCount, entries: entries, into: &rows)
    }
}

extension DocumentStore {
    /// The highest sequence of `peer`'s change log applied here under `subscriptionKey`.
    package func cursor(peer: SiteID, subscriptionKey: String) async throws(ShoalError) -> UInt64 {
        try await read { db in try Self.cursor(db, peer: peer, subscriptionKey: subscriptionKey) }
    }

    /// Where a stream of `peer`'s log for `subscriptions` resumes: the set's own cursor,
    /// or the cursor of a set that holds every entry of it, whichever is higher.
    ///
    /// What a set's cursor says (every transaction of the peer's log through it that the
    /// set matches is here) holds for any set with fewer entries: a document a narrower
    /// set matches, the wider one matched too. So when a neighbour's interest is
    /// forgotten and the set this node asks for shrinks, the narrower set goes on from
    /// where the wider one was, and nothing is sent again (ARCHITECTURE.md, "Relaying
    /// for neighbours"). The set's entries are recorded (`subscription_set`) for the
    /// sets asked for later.
    package func resumePoint(peer: SiteID, subscriptions: SubscriptionSet) async throws(ShoalError) -> ResumePoint {
        let key = subscriptions.key
        let entries = Set(subscriptions.entries.map(\.id))
        return try await write { db in
            try db.execute(
                sql: "INSERT OR IGNORE INTO subscription_set (key, entries) VALUES (?, ?)",
                arguments: [key, Value.array(entries.sorted().map(Value.string)).canonicalJSON])
            var point = try Self.resumePoint(db, peer: peer, subscriptionKey: key)
            let wider = try Row.fetchAll(
                db,
                sql: """
                    SELECT c.through AS through, s.entries AS entries FROM peer_cursor c
                    JOIN subscription_set s ON s.key = c.subscription_key
                    WHERE c.peer = ? AND c.subscription_key <> ? AND c.through > ?
                    """,
                arguments: [Int64(bitPattern: peer.rawValue), key, Int64(clamping: point.through)])
            for row in wider {
                guard case .array(let items)? = try? JSON.parse(row["entries"] as String) else { continue }
                let theirs = Set(items.compactMap(\.stringValue))
                guard entries.isSubset(of: theirs) else { continue }
                point.through = max(
                    point.through, try StoredInteger.unsigned(row["through"] as Int64, table: "peer_cursor", column: "through"))
            }
            return point
        }
    }

    /// The resume point of the set named `subscriptionKey` alone: its own cursor.
    package func resumePoint(peer: SiteID, subscriptionKey: String) async throws(ShoalError) -> ResumePoint {
        try await read { db in try Self.resumePoint(db, peer: peer, subscriptionKey: subscriptionKey) }
    }

    static func resumePoint(_ db: Database, peer: SiteID, subscriptionKey: String) throws -> ResumePoint {
        ResumePoint(
            through: try cursor(db, peer: peer, subscriptionKey: subscriptionKey),
            refill: try cursor(db, peer: peer, subscriptionKey: SubscriptionSet.refillKey(subscriptionKey)),
            epoch: try cursorEpoch(db))
    }

    /// A row of `peer_cursor`: its `through`, 0 when there is none.
    static func cursor(_ db: Database, peer: SiteID, subscriptionKey: String) throws -> UInt64 {
        let through = try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT through FROM peer_cursor WHERE peer = ? AND subscription_key = ?"),
            arguments: [Int64(bitPattern: peer.rawValue), subscriptionKey]) ?? 0
        return try StoredInteger.unsigned(through, table: "peer_cursor", column: "through")
    }

    /// `peer` streamed its whole log with this node's own transactions in it, and this
    /// node applied it: the cursor of that stream (`SubscriptionSet.refillKey`) becomes
    /// the cursor of `subscriptionKey` (it passed over nothing the set wants).
    package func ownTransactionsBack(peer: SiteID, subscriptionKey: String) async throws(ShoalError) {
        try await write { db in
            let site = Int64(bitPattern: peer.rawValue)
            let refill = SubscriptionSet.refillKey(subscriptionKey)
            try db.execute(
                sql: """
                    INSERT INTO peer_cursor (peer, subscription_key, through)
                    SELECT peer, ?, through FROM peer_cursor WHERE peer = ? AND subscription_key = ?
                    ON CONFLICT (peer, subscription_key) DO UPDATE SET through = MAX(through, excluded.through)
                    """,
                arguments: [subscriptionKey, site, refill])
            try db.execute(
                sql: "DELETE FROM peer_cursor WHERE peer = ? AND subscription_key = ?", arguments: [site, refill])
        }
    }

    /// The most rows of the log a page may have left to read to count as a short read
    /// (`read(inline:)`): a session keeping up with transactions of a hundred documents
    /// (a row each: `LogAppender.documentsPerRow`) or of a few reads them on its own
    /// thread, in about a millisecond at most.
    static let shortPageRows: UInt64 = 4

    /// The most keys a batched read (`bodies`, `storedTransactions`, `currentFields`)
    /// may name to run on the calling thread (`read(inline:)`): each is one lookup by
    /// primary key, a few microseconds.
    static let shortReadKeys = 64

    package func logPage(
        after sequence: UInt64, limit: Int, stretch: Int, byteLimit: Int, records wanted: @escaping @Sendable (TransactionID) -> Bool
    ) async throws(ShoalError) -> LogPage {
        // A page near the log's end (a session keeping up) is short: read it on this thread.
        try await read(inline: lastCommittedSequence &- sequence <= Self.shortPageRows) { db in
            var page = LogPageFitting(limit: limit, stretch: stretch, byteLimit: byteLimit)
            var statement = try HotStatement(db, sql: "\(ChangeLogRecord.select) WHERE seq > ? ORDER BY seq LIMIT ?")
            try statement.bind(sequence)
            try statement.bind(stretch + 1)
            try ChangeLogRecord.query(&statement) { record, entries in
                try page.offer { rows in try LogRow.decode(record, entries: entries, into: &rows) }
            }
            let (rows, next) = (page.rows, page.next)
            guard !rows.isEmpty else { return LogPage(rows: [], next: nil) }
            // The records of the page's transactions, from the page's own snapshot.
            var records: [TransactionID: StoredTransaction] = [:]
            var last: TransactionID?
            for row in rows where row.delta.transaction != last {
                let id = row.delta.transaction
                last = id
                if records[id] == nil, wanted(id), let record = try StoredTransaction.fetch(db, id) { records[id] = record }
            }
            let previous = sequence > 0 ? try Self.loggedTransaction(db, at: sequence) : nil
            return LogPage(rows: rows, next: next, previous: previous, records: records)
        }
    }

    package func logPage(of id: TransactionID) async throws(ShoalError) -> LogPage {
        try await read { db in
            var rows: [LogRow] = []
            try ChangeLogRecord.forEach(db, of: id) { record, entries in
                try LogRow.decode(record, entries: entries, into: &rows)
            }
            let record = try StoredTransaction.fetch(db, id)
            return LogPage(rows: rows, next: nil, records: record.map { [id: $0] } ?? [:])
        }
    }

    /// The transaction of the log's row `sequence`, its header alone; nil when no row has it.
    static func loggedTransaction(_ db: Database, at sequence: UInt64) throws -> TransactionID? {
        var statement = try HotStatement(db, sql: "SELECT \(TransactionColumn.selection) FROM change_log WHERE seq = ?")
        try statement.bind(sequence)
        var found: TransactionID?
        try statement.query { row in
            found = TransactionID(
                origin: SiteID(row.bitPattern(TransactionColumn.site)),
                sequence: try row.unsigned(TransactionColumn.sequence, of: ChangeLogRecord.table))
            return false
        }
        return found
    }

    package func logHolds(_ ids: [TransactionID]) async throws(ShoalError) -> Set<TransactionID> {
        guard !ids.isEmpty else { return [] }
        return try await read(inline: ids.count <= Self.shortReadKeys) { db in
            var statement = try HotStatement(db, sql: "SELECT 1 FROM change_log WHERE txn_site = ? AND txn_seq = ? LIMIT 1")
            var held: Set<TransactionID> = []
            for id in ids {
                try statement.bind(id.origin.rawValue)
                try statement.bind(id.sequence)
                try statement.query { _ in
                    held.insert(id)
                    return false
                }
            }
            return held
        }
    }

    package func bodies(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRef: String] {
        guard !documents.isEmpty else { return [:] }
        return try await read(inline: documents.count <= Self.shortReadKeys) { db in
            var statement = try HotStatement(db, sql: "SELECT \(BodyColumn.selection) FROM document WHERE collection = ? AND doc_id = ?")
            var bodies: [DocumentRef: String] = [:]
            for document in documents {
                try statement.bind(document.collection)
                try statement.bind(document.id)
                try statement.query { row in
                    bodies[document] = row.text(BodyColumn.body)
                    return false
                }
            }
            return bodies
        }
    }

    package func storedTransactions(_ ids: [TransactionID]) async throws(ShoalError) -> [TransactionID: StoredTransaction] {
        guard !ids.isEmpty else { return [:] }
        return try await read(inline: ids.count <= Self.shortReadKeys) { db in
            var records: [TransactionID: StoredTransaction] = [:]
            for id in ids {
                if let record = try StoredTransaction.fetch(db, id) { records[id] = record }
            }
            return records
        }
    }

    package func currentFields(of documents: [DocumentRef]) async throws(ShoalError) -> [DocumentRef: [FieldRecord]] {
        guard !documents.isEmpty else { return [:] }
        return try await read(inline: documents.count <= Self.shortReadKeys) { db in
            var statement = try HotStatement(db, sql: FieldRecord.contextSQL)
            var fields: [DocumentRef: [FieldRecord]] = [:]
            for document in documents {
                try statement.bind(document.collection)
                try statement.bind(document.id)
                var found: [FieldRecord] = []
                try statement.query { row in
                    found.append(try FieldRecord(row))
                    return true
                }
                fields[document] = found
            }
            return fields
        }
    }
}

extension DocumentStore: SyncStore {
    package func notePeerHolding(_ peer: SiteID, through: UInt64, subscriptions: SubscriptionSet) {
        peerHoldings.note(peer, through: through, subscriptions: subscriptions)
    }

    package func notePeerRefused(_ peer: SiteID, transactions: [TransactionID]) async throws(ShoalError) -> Set<TransactionID> {
        // Only this node's own: EVICT asks about no other origin's.
        let own = transactions.filter { $0.origin == siteID }
        guard !own.isEmpty else { return [] }
        return try await write { db in
            let insert = try db.cachedStatement(sql: "INSERT OR IGNORE INTO peer_refusal (peer, txn_seq) VALUES (?, ?)")
            var new: Set<TransactionID> = []
            for id in own {
                try insert.execute(arguments: [Int64(bitPattern: peer.rawValue), Int64(bitPattern: id.sequence)])
                if db.changesCount > 0 { new.insert(id) }
            }
            return new
        }
    }

    package func refusedTransactions(of origin: SiteID, limit: Int) async throws(ShoalError) -> [(id: TransactionID, reason: String)] {
        try await read(inline: true) { db in
            // Through the index of transactions not applied (`state != 1`, which SQLite
            // does not infer from `state = 3`): refusals are few.
            let rows = try Row.fetchAll(
                db, sql: "SELECT seq, refusal FROM txn WHERE state != 1 AND state = 3 AND origin = ? ORDER BY seq DESC LIMIT ?",
                arguments: [Int64(bitPattern: origin.rawValue), limit])
            return rows.map { row in
                (TransactionID(origin: origin, sequence: UInt64(bitPattern: row[0] as Int64)), (row[1] as String?) ?? "")
            }
        }
    }
}

/// The one column `bodies(of:)` reads.
private enum BodyColumn: Int32, HotColumn {
    case body
    var name: String { "body" }
}

/// The columns `loggedTransaction` reads of a log row: its transaction, without the entries.
private enum TransactionColumn: Int32, HotColumn {
    case site, sequence
    var name: String {
        switch self {
        case .site: "txn_site"
        case .sequence: "txn_seq"
        }
    }
}

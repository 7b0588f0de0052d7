public import ShoalCRDT
import ShoalQuery
import GRDB
import Logging

/// A page of the change log read for one peer: pieces of the transactions in it
/// that the peer's subscriptions want, in log order.
public struct ChangeLogPage: Sendable, Equatable {
    public var pieces: [TransactionPiece]
    /// The last sequence examined, matched or not: the peer may resume after it.
    public var through: UInt64
    /// Transactions of origins lazy for the peer that the page would have sent pieces
    /// of, with the sequence of their first row in it (PROTOCOL.md §8.11).
    public var offered: [Offer] = []
    /// The lazy transactions offered (in this page or earlier ones of the stream) whose
    /// run of rows goes on past the page: later pages neither send nor offer them.
    public var offersOpen: Set<TransactionID> = []

    public init(pieces: [TransactionPiece], through: UInt64, offered: [Offer] = [], offersOpen: Set<TransactionID> = []) {
        self.pieces = pieces
        self.through = through
        self.offered = offered
        self.offersOpen = offersOpen
    }

    /// A transaction a page offers instead of sending it, and where its rows begin.
    public struct Offer: Sendable, Hashable {
        public var id: TransactionID
        public var logSequence: UInt64

        public init(_ id: TransactionID, at logSequence: UInt64) {
            self.id = id
            self.logSequence = logSequence
        }
    }

    /// Every delta of the page, in order.
    public var deltas: [Delta] { pieces.flatMap(\.deltas) }
}

/// One delta of the change log with the row it is stored in, decoded once.
struct LogRow {
    /// The sequence of its row: every delta of a run of one transaction's documents shares it.
    var sequence: UInt64
    var delta: Delta
    /// How many deltas its transaction wrote to its document.
    var documentDeltas: UInt32

    /// Appends the deltas of one row of the log (`ChangeLogRecord`) to `rows`, in
    /// stored order; returns how many.
    @discardableResult
    static func decode(_ record: ChangeLogRecord, entries: UnsafeRawBufferPointer, into rows: inout [LogRow]) throws -> Int {
        let sequence = record.sequence, transaction = record.transaction, count = record.deltaCount
        let before = rows.count
        try LogEntries.forEach(entries) { collection, documentID, documentDeltas, deltas in
            try PackedDeltas.forEach(deltas) { index, timestamp, name, value in
                rows.append(
                    LogRow(
                        sequence: sequence,
                        delta: Delta(
                            collection: collection, documentID: documentID, field: name, valueJSON: value,
                            timestamp: HybridTimestamp(rawValue: timestamp), transaction: transaction, index: index, count: count),
                        documentDeltas: documentDeltas))
            }
        }
        return rows.count - before
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

    /// Reads the change log after `sequence` for a peer with `subscriptions`.
    ///
    /// Reads about `limit` rows (more, up to 4 times as many, to finish the transaction
    /// the limit falls in) and at most about `byteLimit` bytes of values (at least one
    /// row), and turns them into pieces of their transactions:
    /// - a piece carries the deltas of documents whose **current** body the
    ///   subscriptions match; rows of transactions that `peer` originated are left out
    ///   (it holds its own writes), and so are those `skipping` names (the peer sent
    ///   them here), before any piece of them is built;
    /// - a piece is the transaction's last when the transaction's run of rows ends in
    ///   this page (`resuming`: the page follows a resume point, so a run it starts in
    ///   the middle of counts as continuing); the last piece carries a verdict for each collection of the
    ///   manifest (`lastPieceVerdicts`). A transaction in `continuing` (one that
    ///   earlier pages sent part of) gets its last piece even when it carries no delta;
    ///   any other transaction with nothing to send is left out;
    /// - when a sent delta writes a field that a subscription's WHERE reads, the
    ///   document may have just started to match: the piece also carries the
    ///   document's other current fields as context;
    /// - a transaction whose origin `isLazy` is not sent but offered, if a piece of it
    ///   would carry a delta (PROTOCOL.md §8.11): once per stream (`offersOpen` holds
    ///   those offered whose rows go on), never one in `continuing` (begun eagerly, it
    ///   stays eager to its last piece).
    package func changes(
        after sequence: UInt64, limit: Int, byteLimit: Int = 4 << 20, subscriptions: SubscriptionSet,
        excludingOrigin peer: SiteID? = nil, skipping: (@Sendable (TransactionID) -> Bool)? = nil,
        continuing: Set<TransactionID> = [], resuming: Bool = false,
        isLazy: (@Sendable (SiteID) -> Bool)? = nil, offersOpen: Set<TransactionID> = []
    ) async throws(ShoalError) -> ChangeLogPage {
        // A page near the log's end (a session keeping up) is short: read it on this thread.
        return try await read(inline: lastCommittedSequence &- sequence <= Self.shortPageRows) { db in
            var rows: [LogRow] = []
            var bytes = 0
            var next: LogRow?
            // A page may run past `limit` rows (up to 4 times as many) to finish the
            // transaction it is in, so that ordinary transactions travel whole; past
            // that, or past the byte budget, it ends inside the transaction.
            let stretch = limit * 4
            var statement = try HotStatement(db, sql: "\(ChangeLogRecord.select) WHERE seq > ? ORDER BY seq LIMIT ?")
            try statement.bind(sequence)
            try statement.bind(stretch + 1)
            // A row of the log (one document's deltas in one transaction) goes whole into
            // a page or waits for the next: decoded onto the page's end, and taken off
            // again when it does not fit.
            rows.reserveCapacity(min(limit, 4096))
            try ChangeLogRecord.query(&statement) { record, entries in
                let start = rows.count
                let previous = rows.last?.delta.transaction
                guard try LogRow.decode(record, entries: entries, into: &rows) > 0 else { return true }
                let first = rows[start]
                var size = 0
                for i in start..<rows.count { size += rows[i].delta.valueJSON.utf8.count }
                let full = start >= limit && first.delta.transaction != previous
                if start > 0 && (full || rows.count > stretch || bytes + size > byteLimit) {
                    next = first
                    rows.removeSubrange(start...)
                    return false
                }
                bytes += size
                return true
            }
            guard let lastRow = rows.last else {
                return ChangeLogPage(pieces: [], through: sequence, offersOpen: offersOpen)
            }
            var continuing = continuing
            if resuming, sequence > 0,
                let before = try ChangeLogRecord.fetch(db, at: sequence), rows[0].delta.transaction == before.transaction
            {
                // Resuming inside a transaction's run: its earlier pieces went out before.
                continuing.insert(rows[0].delta.transaction)
            }
            var reader = PieceReader(db: db, subscriptions: subscriptions, excluded: peer)
            var page = ChangeLogPage(pieces: [], through: lastRow.sequence, offersOpen: offersOpen)
            var start = 0
            while start < rows.count {
                let id = rows[start].delta.transaction
                var end = start
                while end < rows.count, rows[end].delta.transaction == id { end += 1 }
                let isLast = end < rows.count || next?.delta.transaction != id
                defer { start = end }
                if skipping?(id) == true { continue }
                if !continuing.contains(id), let isLazy, page.offersOpen.contains(id) || isLazy(id.origin) {
                    // Lazy: offered at its first run with something for the peer, then passed over.
                    if !page.offersOpen.contains(id), try reader.carries(id, rows: rows[start..<end]) {
                        page.offered.append(ChangeLogPage.Offer(id, at: rows[start].sequence))
                        page.offersOpen.insert(id)
                    }
                    if isLast { page.offersOpen.remove(id) }
                    continue
                }
                if let piece = try reader.piece(id, rows: rows[start..<end], isLast: isLast, continuing: continuing.contains(id)) {
                    page.pieces.append(piece)
                }
            }
            return page
        }
    }

    /// Every piece this node holds of one transaction, for a peer with
    /// `subscriptions` that asked for it: what `changes` would have sent of it,
    /// restricted to `collections` (all when empty), cut into pieces of about
    /// `byteLimit` bytes. Empty when the transaction is not applied here.
    package func transactionPieces(
        _ id: TransactionID, subscriptions: SubscriptionSet, collections: Set<String> = [], byteLimit: Int = 4 << 20
    ) async throws(ShoalError) -> [TransactionPiece] {
        return try await read { db in
            guard let stored = try StoredTransaction.fetch(db, id), stored.state == .applied || stored.state == .partial else { return [] }
            var rows: [LogRow] = []
            try ChangeLogRecord.forEach(db, of: id) { record, entries in
                try LogRow.decode(record, entries: entries, into: &rows)
            }
            rows.sort { $0.delta.index < $1.delta.index }
            if !collections.isEmpty { rows = rows.filter { collections.contains($0.delta.collection) } }
            var reader = PieceReader(db: db, subscriptions: subscriptions, excluded: nil, context: false)
            var pieces: [TransactionPiece] = []
            var start = 0
            repeat {
                var end = start
                var bytes = 0
                while end < rows.count, end == start || bytes + rows[end].delta.valueJSON.utf8.count <= byteLimit {
                    bytes += rows[end].delta.valueJSON.utf8.count
                    end += 1
                }
                if let piece = try reader.piece(id, rows: rows[start..<end], isLast: end == rows.count, continuing: true) {
                    pieces.append(piece)
                }
                start = end
            } while start < rows.count
            return pieces
        }
    }
}

/// What the planner asks of the database while it builds one page's pieces for one
/// peer: the bodies that decide a WHERE, transaction records, current fields for
/// context, and whether the log still holds a transaction. The decisions are
/// `PiecePlanner`'s.
struct PieceReader {
    let db: Database
    var planner: PiecePlanner

    init(db: Database, subscriptions: SubscriptionSet, excluded: SiteID?, context: Bool = true) {
        self.db = db
        self.planner = PiecePlanner(subscriptions: subscriptions, excluded: excluded, context: context)
    }

    /// Reads the bodies the planner needs to judge `rows`.
    mutating func judge(_ rows: ArraySlice<LogRow>) throws {
        for document in planner.bodiesNeeded(rows) {
            planner.judge(document, body: try Self.body(db, of: document))
        }
    }

    /// The body this node holds of `document`, `nil` when none.
    static func body(_ db: Database, of document: DocumentRef) throws -> String? {
        try String.fetchOne(
            db.cachedStatement(sql: "SELECT body FROM document WHERE collection = ? AND doc_id = ?"),
            arguments: [document.collection, document.id])
    }

    /// Whether a piece of `id` from `rows` would carry a delta for the peer.
    mutating func carries(_ id: TransactionID, rows: ArraySlice<LogRow>) throws -> Bool {
        let db = db
        return try planner.carries(id, rows: rows) { try Self.body(db, of: $0) }
    }

    mutating func piece(
        _ id: TransactionID, rows: ArraySlice<LogRow>, isLast: Bool, continuing: Bool
    ) throws -> TransactionPiece? {
        try judge(rows)
        guard
            var planned = try planner.plan(
                id, rows: rows, isLast: isLast, continuing: continuing, record: { try StoredTransaction.fetch(db, id) },
                superseding: latestSuperseding)
        else { return nil }
        for document in planned.contextDocuments {
            var fields: [(name: String, state: RegisterState)] = []
            var statement = try HotStatement(db, sql: FieldRecord.contextSQL)
            try statement.bind(document.collection)
            try statement.bind(document.id)
            try statement.query { row in
                let field = try FieldRecord(row)
                fields.append((field.name, field.state))
                return true
            }
            planner.addContext(to: &planned, document: document, fields: fields)
        }
        return planned.piece
    }

    /// `PiecePlanner.latestSuperseding` over this database.
    func latestSuperseding(_ verdicts: [Verdict]) throws -> [Verdict] {
        try PiecePlanner.latestSuperseding(
            verdicts, limit: DocumentStore.supersessionLimit,
            inLog: { id in
                let inLog = try db.cachedStatement(sql: "SELECT 1 FROM change_log WHERE txn_site = ? AND txn_seq = ? LIMIT 1")
                return try Int64.fetchOne(inLog, arguments: [Int64(bitPattern: id.origin.rawValue), Int64(id.sequence)]) != nil
            },
            recorded: { id in try StoredTransaction.fetch(db, id)?.rest ?? [] })
    }
}

public import ShoalCRDT
import ShoalQuery
import GRDB
import Logging

/// A transaction received from a peer: its ID, its manifest size and the deltas
/// the peer sent of it.
public struct RemoteTransaction: Sendable, Equatable {
    public var id: TransactionID
    public var count: UInt32
    public var deltas: [Delta]

    public init(id: TransactionID, count: UInt32, deltas: [Delta]) {
        self.id = id
        self.count = count
        self.deltas = deltas
    }
}

/// One row of the change log: a delta and the local sequence it was committed under.
public struct ChangeLogEntry: Sendable, Equatable {
    public var sequence: UInt64
    public var delta: Delta
}

/// A page of the change log read for one peer.
public struct ChangeLogPage: Sendable, Equatable {
    /// The entries the peer's subscriptions match, in log order.
    public var entries: [ChangeLogEntry]
    /// The last sequence examined, matched or not: the peer may resume after it.
    public var through: UInt64

    /// The entries grouped into transactions, one group per run of a transaction,
    /// as a receiver's `applyRemote` takes them.
    public var transactions: [RemoteTransaction] {
        var out: [RemoteTransaction] = []
        for entry in entries {
            let d = entry.delta
            if out.last?.id != d.transaction { out.append(RemoteTransaction(id: d.transaction, count: d.count, deltas: [])) }
            out[out.count - 1].deltas.append(d)
        }
        return out
    }
}

/// What applying a received batch did.
public struct ApplyOutcome: Sendable, Equatable {
    /// Deltas that won and were written (and logged for relay).
    public var applied: Int
    /// Deltas already superseded here (duplicates and older writes).
    public var superseded: Int
    /// The documents whose body changed.
    public var changedDocuments: Int
}

extension DocumentStore {
    /// The highest sequence of `peer`'s change log applied here under `subscriptionKey`.
    public func cursor(peer: SiteID, subscriptionKey: String) async throws(StoreError) -> UInt64 {
        try await read { db in
            UInt64(
                try Int64.fetchOne(
                    db, sql: "SELECT through FROM peer_cursor WHERE peer = ? AND subscription_key = ?",
                    arguments: [Int64(bitPattern: peer.rawValue), subscriptionKey]) ?? 0)
        }
    }

    /// Reads the change log after `sequence` for a peer with `subscriptions`.
    ///
    /// Reads about `limit` rows, extended so the page never splits a transaction's
    /// contiguous run of rows, and keeps those whose document the subscriptions
    /// match in its current state. Rows that `peer` itself originated are left out:
    /// it holds its own writes.
    ///
    /// A write to a field that a subscription's WHERE reads may have just made the
    /// document match, in which case the peer may never have received its other
    /// fields. For such documents the page also carries every current field (each
    /// with the version and transaction that wrote it); the receiver drops what it
    /// already holds.
    public func changes(
        after sequence: UInt64, limit: Int, subscriptions: SubscriptionSet, excludingOrigin peer: SiteID? = nil
    ) async throws(StoreError) -> ChangeLogPage {
        try await read { db in
            var rows = try Row.fetchAll(
                db, sql: "\(Self.logColumns) WHERE seq > ? ORDER BY seq LIMIT ?",
                arguments: [Int64(sequence), limit])
            if rows.count == limit, let last = rows.last {
                let tail = try Row.fetchAll(
                    db, sql: "\(Self.logColumns) WHERE seq > ? ORDER BY seq LIMIT 10000",
                    arguments: [last[0] as Int64])
                let site: Int64 = last[6], seq: Int64 = last[7]
                rows += tail.prefix { ($0[6] as Int64) == site && ($0[7] as Int64) == seq }
            }
            guard let lastRow = rows.last else { return ChangeLogPage(entries: [], through: sequence) }
            let excluded = peer.map { Int64(bitPattern: $0.rawValue) }
            var verdicts: [String: Bool] = [:]
            var entries: [ChangeLogEntry] = []
            var backfill: [(collection: String, key: String)] = []
            var backfilled: Set<String> = []
            let wanted = subscriptions.collections
            for row in rows {
                let collection: String = row[1], key: String = row[2]
                guard wanted.contains(collection), row[6] as Int64 != excluded else { continue }
                let docKey = collection + "\u{0}" + key
                let matched: Bool
                if let known = verdicts[docKey] {
                    matched = known
                } else {
                    let body = try String.fetchOne(
                        db, sql: "SELECT body FROM document WHERE collection = ? AND doc_id = ?",
                        arguments: [collection, key])
                    matched = try body.map { subscriptions.matches(collection: collection, document: try Self.parseBody($0)) } ?? false
                    verdicts[docKey] = matched
                }
                guard matched else { continue }
                entries.append(Self.entry(row))
                if subscriptions.matchMayDependOn(collection: collection, field: row[3]),
                    backfilled.insert(docKey).inserted
                {
                    backfill.append((collection, key))
                }
            }
            let through = UInt64(lastRow[0] as Int64)
            let sent = Set(entries.map { "\($0.delta.collection)\u{0}\($0.delta.documentID)\u{0}\($0.delta.field)\u{0}\($0.delta.timestamp.rawValue)" })
            for doc in backfill {
                let fields = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT name, value, ts, COALESCE(txn_site, site), txn_seq, txn_index, txn_count FROM field
                        WHERE collection = ? AND doc_id = ? ORDER BY site, txn_seq, txn_index
                        """,
                    arguments: [doc.collection, doc.key])
                for f in fields where f[3] as Int64 != excluded {
                    let delta = Delta(
                        collection: doc.collection, documentID: doc.key, field: f[0], valueJSON: f[1],
                        timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: f[2])),
                        transaction: TransactionID(origin: SiteID(UInt64(bitPattern: f[3])), sequence: UInt64(f[4] as Int64)),
                        index: UInt32(f[5] as Int64), count: UInt32(f[6] as Int64))
                    let id = "\(delta.collection)\u{0}\(delta.documentID)\u{0}\(delta.field)\u{0}\(delta.timestamp.rawValue)"
                    if !sent.contains(id) { entries.append(ChangeLogEntry(sequence: through, delta: delta)) }
                }
            }
            return ChangeLogPage(entries: entries, through: through)
        }
    }

    static let logColumns =
        "SELECT seq, collection, doc_id, name, value, ts, txn_site, txn_seq, txn_index, txn_count FROM change_log"

    static func entry(_ row: Row) -> ChangeLogEntry {
        let delta = Delta(
            collection: row[1], documentID: row[2], field: row[3], valueJSON: row[4],
            timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: row[5])),
            transaction: TransactionID(origin: SiteID(UInt64(bitPattern: row[6])), sequence: UInt64(row[7] as Int64)),
            index: UInt32(row[8] as Int64), count: UInt32(row[9] as Int64))
        return ChangeLogEntry(sequence: UInt64(row[0] as Int64), delta: delta)
    }

    /// Applies transactions received from `peer` in one SQLite transaction and
    /// records `through` as that peer's cursor under `subscriptionKey` (nil: the
    /// batch was read under a superseded subscription set; record nothing).
    ///
    /// Each delta merges last-writer-wins; a delta that wins is written, its
    /// document re-materialized, and appended to this store's change log (keeping
    /// its transaction ID) so it relays onward. A delta that loses is dropped: the
    /// value that beat it is already in the log. Nothing is acknowledged unless all
    /// of it commits.
    public func applyRemote(
        _ transactions: [RemoteTransaction], from peer: SiteID, subscriptionKey: String?, through: UInt64
    ) async throws(StoreError) -> ApplyOutcome {
        for transaction in transactions {
            for delta in transaction.deltas {
                do {
                    // An empty value is a register removed by UNSET; "~SITE" an observed map removal.
                    if delta.valueJSON.hasPrefix(DocumentBody.observedRemovalPrefix) {
                        guard SiteID(hex: delta.valueJSON.dropFirst()) != nil else {
                            throw JSON.ParseError(offset: 1, message: "an observed removal must name a site in hex")
                        }
                    } else if delta.valueJSON != DocumentBody.removedValue {
                        _ = try JSON.parse(delta.valueJSON)
                    }
                } catch {
                    throw StoreError(
                        .invalidDocument,
                        "transaction \(transaction.id) from \(peer): field \(delta.field) of \(delta.collection) \(delta.documentID) is not valid JSON (\(error))")
                }
            }
        }
        for transaction in transactions {
            var warned = false
            for delta in transaction.deltas where !clock.observe(delta.timestamp) && !warned {
                warned = true
                logger.warning(
                    "a remote write is timestamped far ahead of this clock; not adopting its time",
                    metadata: ["shoal.peer.site": "\(peer)", "shoal.txn": "\(transaction.id)", "shoal.hlc": "\(delta.timestamp)"])
            }
        }
        let (outcome, lastSequence, commit) = try await write { db -> (ApplyOutcome, UInt64?, Commit) in
            var outcome = ApplyOutcome(applied: 0, superseded: 0, changedDocuments: 0)
            var dirty: [String: (collection: String, key: String)] = [:]
            let current = try db.cachedStatement(
                sql: "SELECT ts, site, value FROM field WHERE collection = ? AND doc_id = ? AND name = ?")
            let upsert = try db.cachedStatement(sql: FieldSQL.upsert)
            let append = try db.cachedStatement(sql: FieldSQL.appendLog)
            var lastSequence: UInt64?
            var commit = Commit(transactions: [], collections: [], sequence: 0)
            for transaction in transactions {
                var appliedAny = false
                defer { if appliedAny { commit.transactions.append(transaction.id) } }
                for delta in transaction.deltas {
                    let row = try Row.fetchOne(current, arguments: [delta.collection, delta.documentID, delta.field])
                    let existing = row.map {
                        RegisterVersion(
                            timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: $0[0])),
                            site: SiteID(UInt64(bitPattern: $0[1])))
                    }
                    let version = DocumentBody.version(of: delta)
                    let currentValue: String? = row?[2]
                    var wins = Register.incomingWins(
                        version, removes: DocumentBody.isRemoval(delta.valueJSON), over: existing,
                        removed: currentValue.map(DocumentBody.isRemoval) ?? false)
                    // Equal versions with different values come only from INITIAL DOCUMENTS
                    // (time zero, same site, rewritten after EVICT): the larger bytes win everywhere.
                    if !wins, version == existing, let currentValue, currentValue != delta.valueJSON,
                        !DocumentBody.isRemoval(currentValue), !DocumentBody.isRemoval(delta.valueJSON)
                    {
                        wins = Array(delta.valueJSON.utf8).lexicographicallyPrecedes(Array(currentValue.utf8)) == false
                    }
                    guard wins else {
                        outcome.superseded += 1
                        continue
                    }
                    let ts = Int64(bitPattern: delta.timestamp.rawValue)
                    let site = Int64(bitPattern: delta.site.rawValue)
                    try upsert.execute(arguments: [
                        delta.collection, delta.documentID, delta.field, delta.valueJSON, ts,
                        Int64(bitPattern: version.site.rawValue), Int64(transaction.id.sequence), Int64(delta.index),
                        Int64(transaction.count), site,
                    ])
                    try append.execute(arguments: [
                        delta.collection, delta.documentID, delta.field, delta.valueJSON, ts, site,
                        Int64(transaction.id.sequence), Int64(delta.index), Int64(transaction.count),
                    ])
                    lastSequence = UInt64(db.lastInsertedRowID)
                    outcome.applied += 1
                    appliedAny = true
                    commit.collections.insert(delta.collection)
                    dirty[delta.collection + "\u{0}" + delta.documentID] = (delta.collection, delta.documentID)
                }
            }
            for (_, doc) in dirty {
                try DocumentBody.materialize(db: db, collection: doc.collection, key: doc.key)
            }
            outcome.changedDocuments = dirty.count
            if let subscriptionKey {
                try db.execute(
                sql: """
                    INSERT INTO peer_cursor (peer, subscription_key, through) VALUES (?, ?, ?)
                    ON CONFLICT (peer, subscription_key) DO UPDATE SET through = MAX(through, excluded.through)
                    """,
                arguments: [Int64(bitPattern: peer.rawValue), subscriptionKey, Int64(through)])
            }
            return (outcome, lastSequence, commit)
        }
        if let lastSequence {
            feed.publish(lastSequence)
            var commit = commit
            commit.sequence = lastSequence
            commits.publish(commit)
        }
        return outcome
    }
}

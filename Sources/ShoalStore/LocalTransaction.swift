import ShoalCRDT
import ShoalQuery
import GRDB

/// The writes of one local read-write transaction, inside its open SQLite transaction.
///
/// Each field write takes a fresh HLC timestamp (INITIAL DOCUMENTS take time
/// zero), updates the `field` row, and is remembered as a delta; the document's
/// body is re-materialized after each statement touches it, so later statements
/// in the transaction see it. `finish()` numbers the deltas, appends them to the
/// change log under this transaction's ID and bumps the transaction counter, all
/// before the SQLite transaction commits.
///
/// A `Transaction` spans several database accesses (one per `execute`), and a
/// `Database` may not outlive its access, so what the transaction has written so
/// far lives in `progress`, a value carried from one access to the next: a
/// `LocalTransaction` is made again around it for each access.
struct LocalTransaction {
    /// What a transaction has written so far, between its database accesses.
    struct Progress: Sendable {
        /// This transaction's number, if it commits any write.
        let sequence: Int64
        var pending: [PendingDelta] = []
        /// Set when EVICT removed local data: peers must resend what subscriptions still match.
        var evicted = false
    }

    /// A delta written but not yet in the change log.
    struct PendingDelta: Sendable {
        var collection: String
        var key: String
        var field: String
        var json: String
        var ts: HybridTimestamp
    }

    let db: Database
    let site: SiteID
    let clock: HybridLogicalClock
    private(set) var progress: Progress

    var sequence: Int64 { progress.sequence }
    var evicted: Bool { progress.evicted }

    init(db: Database, site: SiteID, clock: HybridLogicalClock, progress: Progress) {
        self.db = db
        self.site = site
        self.clock = clock
        self.progress = progress
    }

    /// The progress of a transaction that starts now: numbered after the last one committed.
    static func begin(db: Database) throws -> Progress {
        let previous = try Int64.fetchOne(db, sql: "SELECT value FROM shoal_meta WHERE key = 'transaction_counter'") ?? 0
        return Progress(sequence: previous + 1)
    }

    static func evaluate(_ expression: Expression, document: Value, arguments: [String: Value]) throws -> Value? {
        do {
            return try Evaluator.evaluate(expression, document: document, arguments: arguments)
        } catch {
            throw StoreError(error)
        }
    }

    /// An ATTACHMENT field holds a token (or takes a bare attachment ID, turned into one).
    static func attachmentValue(_ value: Value, field: String, collection: String) throws -> Value {
        guard let token = AttachmentToken(value) else {
            throw StoreError(
                .invalidDocument,
                "\(collection): field \(field) is an ATTACHMENT; give it the token `shoal attachment put` printed")
        }
        return token.value
    }

    mutating func insert(_ insert: InsertStatement, arguments: [String: Value]) throws -> [Value] {
        var ids: [Value] = []
        for expression in insert.documents {
            let value = try Self.evaluate(expression, document: .object([:]), arguments: arguments)
            let documents: [Value]
            switch value {
            case .object?: documents = [value!]
            case .array(let items)?: documents = items
            default:
                throw StoreError(
                    .invalidDocument,
                    "INSERT INTO \(insert.collection): a document must be a JSON object, got \(value?.typeName ?? "nothing")")
            }
            for document in documents {
                guard case .object(var fields) = document else {
                    throw StoreError(
                        .invalidDocument,
                        "INSERT INTO \(insert.collection): a document must be a JSON object, got \(document.typeName)")
                }
                for name in fields.keys { try DocumentBody.checkWritable(name, collection: insert.collection) }
                for (name, type) in insert.declaredTypes where type == .attachment {
                    if let value = fields[name] {
                        fields[name] = try Self.attachmentValue(value, field: name, collection: insert.collection)
                    }
                }
                if fields["_id"] == nil || fields["_id"] == .null {
                    guard !insert.initial else {
                        throw StoreError(
                            .invalidDocument,
                            "INSERT INTO \(insert.collection) INITIAL DOCUMENTS: every initial document needs an _id, so that all peers insert the same one")
                    }
                    fields["_id"] = .string(Self.randomID())
                }
                if let written = try insertOne(
                    collection: insert.collection, fields: fields, conflict: insert.conflict, initial: insert.initial,
                    declared: insert.declaredTypes)
                {
                    ids.append(written)
                }
            }
        }
        return ids
    }

    private mutating func insertOne(
        collection: String, fields: [String: Value], conflict: ConflictPolicy, initial: Bool,
        declared: [String: FieldType]
    ) throws -> Value? {
        let id = fields["_id"]!
        let key = DocumentKey.make(id)
        let existing = try loadBody(collection: collection, key: key)
        let toWrite: [String]
        if initial {
            // Defaults at time zero: they never override a write, real or initial, already here.
            let written = Set(try String.fetchAll(
                db, sql: "SELECT name FROM field WHERE collection = ? AND doc_id = ?", arguments: [collection, key]))
            toWrite = fields.keys.filter { !written.contains($0) }.sorted()
            if toWrite.isEmpty { return nil }
        } else if let existing {
            switch conflict {
            case .fail:
                throw StoreError(
                    .documentExists,
                    "INSERT INTO \(collection): a document with _id \(id.canonicalJSON) already exists (use ON ID CONFLICT DO UPDATE to overwrite it, or DO NOTHING to keep it)")
            case .doNothing:
                return nil
            case .doUpdate:
                toWrite = fields.keys.filter { $0 != "_id" }.sorted()
            case .doUpdateLocalDiff:
                toWrite = fields.keys.filter { $0 != "_id" && existing[$0] != fields[$0] }.sorted()
                if toWrite.isEmpty { return nil }
            }
        } else {
            toWrite = fields.keys.sorted()
        }
        for name in toWrite {
            if !initial, try isMap(collection: collection, key: key, field: name, declared: declared) {
                try writeMap(collection: collection, key: key, path: [name], value: fields[name]!)
            } else {
                try writeField(collection: collection, key: key, field: name, json: fields[name]!.canonicalJSON, initial: initial)
            }
        }
        try DocumentBody.materialize(db: db, collection: collection, key: key)
        return id
    }

    mutating func update(_ update: UpdateStatement, arguments: [String: Value]) throws -> [Value] {
        for operation in update.counterOperations where operation.path.count != 1 {
            throw StoreError(
                QueryError(
                    "APPLY works on top-level COUNTER fields; \(operation.path.joined(separator: ".")) is nested",
                    position: operation.position))
        }
        for operation in update.counterOperations {
            try DocumentBody.checkWritable(operation.path[0], collection: update.collection)
        }
        for target in update.assignments.map(\.path) + update.unsets.map(\.path) {
            try DocumentBody.checkWritable(target[0], collection: update.collection)
        }
        let matches = try DocumentStore.matchingDocuments(
            collection: update.collection, predicate: update.whereClause, orderBy: update.orderBy,
            limit: update.limit, offset: update.offset, arguments: arguments, db: db)
        var ids: [Value] = []
        for (key, original) in matches {
            guard case .object(var body) = original else { continue }
            for operation in update.counterOperations {
                try apply(operation, collection: update.collection, key: key, document: original, arguments: arguments)
            }
            var changedTop: [String] = []
            for assignment in update.assignments {
                var value = try Self.evaluate(assignment.value, document: original, arguments: arguments) ?? .null
                let top = assignment.path[0]
                if update.declaredTypes[top] == .attachment, assignment.path.count == 1 {
                    value = try Self.attachmentValue(value, field: top, collection: update.collection)
                }
                // A dot path into a map, or into nothing yet, writes map entries; a whole
                // value on a map replaces its entries. A register holding an object stays one.
                let map = try isMap(collection: update.collection, key: key, field: top, declared: update.declaredTypes)
                if map || (assignment.path.count > 1 && body[top] == nil) {
                    if assignment.path.count == 1 && value.objectValue == nil {
                        // A plain value replaces the map: its entries go, the register takes over.
                        try writeMap(collection: update.collection, key: key, path: assignment.path, value: nil)
                    } else {
                        try writeMap(collection: update.collection, key: key, path: assignment.path, value: value)
                        continue
                    }
                }
                body[top] = Self.setting(body[top], path: assignment.path.dropFirst(), to: value)
                if !changedTop.contains(top) { changedTop.append(top) }
            }
            for unset in update.unsets {
                let top = unset.path[0]
                if try isMap(collection: update.collection, key: key, field: top, declared: [:]) {
                    try writeMap(collection: update.collection, key: key, path: unset.path, value: nil)
                    if unset.path.count > 1 { continue }
                }
                if unset.path.count == 1 {
                    body[top] = nil
                } else if let current = body[top] {
                    body[top] = Self.removing(current, path: unset.path.dropFirst())
                }
                if !changedTop.contains(top) { changedTop.append(top) }
            }
            for top in changedTop {
                try writeField(
                    collection: update.collection, key: key, field: top,
                    json: body[top]?.canonicalJSON ?? DocumentBody.removedValue, initial: false)
            }
            try DocumentBody.materialize(db: db, collection: update.collection, key: key)
            ids.append(body["_id"] ?? .null)
        }
        return ids
    }

    /// APPLY on a PN counter: INCREMENT adds to this site's contribution under the
    /// counter's current base; RESTART [WITH v] writes a new base, which starts a
    /// new epoch (see `Counter`).
    private mutating func apply(
        _ operation: CounterOperation, collection: String, key: String, document: Value, arguments: [String: Value]
    ) throws {
        let field = operation.path[0]
        switch operation.kind {
        case .restart(let expression):
            let value = try expression.map { try Self.evaluate($0, document: document, arguments: arguments) } ?? .int(0)
            guard let value, value.numberValue != nil else {
                throw StoreError(QueryError("RESTART WITH needs a number", position: operation.position))
            }
            try writeField(collection: collection, key: key, field: field, json: value.canonicalJSON, initial: false)
        case .increment(let expression):
            let amount = try Self.evaluate(expression, document: document, arguments: arguments)
            guard let amount, amount.numberValue != nil else {
                throw StoreError(
                    QueryError(
                        "INCREMENT BY needs a number, got \(amount?.typeName ?? "nothing")", position: operation.position))
            }
            // What a DELETE buried does not count: without a visible base, the epoch is the tombstone's time.
            let tombstone = try timestamp(collection: collection, key: key, field: DocumentBody.tombstoneField) ?? 0
            let baseTimestamp = try timestamp(collection: collection, key: key, field: field).flatMap { $0 > tombstone ? $0 : nil }
            let epoch = baseTimestamp ?? tombstone
            let name = Counter.contributionField(field, site: site)
            let mine = try Row.fetchOne(
                db, sql: "SELECT value, ts FROM field WHERE collection = ? AND doc_id = ? AND name = ?",
                arguments: [collection, key, name]
            ).flatMap { row -> Counter.Contribution? in
                guard UInt64(bitPattern: row[1] as Int64) > tombstone else { return nil }
                return (try? JSON.parse(row[0] as String)).flatMap(Counter.Contribution.init)
            }
            var contribution = mine?.epoch == epoch ? mine! : Counter.Contribution(epoch: epoch, up: .int(0), down: .int(0))
            contribution.add(amount)
            try writeField(collection: collection, key: key, field: name, json: contribution.value.canonicalJSON, initial: false)
        }
    }

    /// Whether `field` is a MAP in this document: declared so, or already holding map entries.
    /// Whether `field` is a MAP in this document: declared so, or holding live map
    /// entries newer than any live register value (the side that won a type conflict).
    private func isMap(collection: String, key: String, field: String, declared: [String: FieldType]) throws -> Bool {
        if declared[field] == .map { return true }
        let entries = try liveEntries(collection: collection, key: key, prefix: field)
        guard let newest = entries.map(\.version).max() else { return false }
        guard let register = try liveRow(collection: collection, key: key, name: field) else { return true }
        return newest > register
    }

    /// The version of a row that holds a value (not a removal), if any.
    private func liveRow(collection: String, key: String, name: String) throws -> RegisterVersion? {
        guard
            let row = try Row.fetchOne(
                db, sql: "SELECT ts, site, value FROM field WHERE collection = ? AND doc_id = ? AND name = ?",
                arguments: [collection, key, name]),
            !DocumentBody.isRemoval(row[2])
        else { return nil }
        return RegisterVersion(timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: row[0])), site: SiteID(UInt64(bitPattern: row[1])))
    }

    /// The live map entries at `prefix` and below, with their versions.
    private func liveEntries(collection: String, key: String, prefix: String) throws -> [(name: String, version: RegisterVersion)] {
        let below = prefix + String(DocumentBody.pathSeparator)
        let end = prefix + String(Counter.separator)  // U+001F sorts right after U+001E
        // The entry at `prefix` itself counts only below the top level: there it is the register.
        let exact = prefix.contains(DocumentBody.pathSeparator) ? prefix : below
        return try Row.fetchAll(
            db,
            sql: """
                SELECT name, ts, site, value FROM field WHERE collection = ? AND doc_id = ?
                AND (name = ? OR (name >= ? AND name < ?))
                """,
            arguments: [collection, key, exact, below, end]
        ).filter { !DocumentBody.isRemoval($0[3]) }.map { row in
            (row[0], RegisterVersion(timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: row[1])), site: SiteID(UInt64(bitPattern: row[2]))))
        }
    }

    /// Replaces the map subtree at `path` with `value` (nil: removes it). Entries the
    /// new value does not rewrite get observed removals, so entries added
    /// concurrently elsewhere survive (add-wins).
    private mutating func writeMap(collection: String, key: String, path: [String], value: Value?) throws {
        let prefix = path.joined(separator: String(DocumentBody.pathSeparator))
        var leaves: [String: Value] = [:]
        func flatten(_ v: Value, _ name: String) {
            if case .object(let members) = v, !members.isEmpty {
                for (k, child) in members { flatten(child, name + String(DocumentBody.pathSeparator) + k) }
            } else {
                leaves[name] = v
            }
        }
        if let value { flatten(value, prefix) }
        for name in leaves.keys {
            for component in name.split(separator: DocumentBody.pathSeparator, omittingEmptySubsequences: false)
            where component.contains(Counter.separator) || component.contains(DocumentBody.pathSeparator) {
                throw StoreError(.invalidDocument, "\(collection): map keys may not contain U+001E or U+001F")
            }
        }
        var existing = try liveEntries(collection: collection, key: key, prefix: prefix)
        // Values at the ancestors of `path` (a scalar entry `m.a` under a new `m.a.b`, or a
        // register `m`) are replaced too, so they cannot reappear when the new entry goes.
        for depth in 1..<max(1, path.count) {
            let ancestor = path[0..<depth].joined(separator: String(DocumentBody.pathSeparator))
            if let version = try liveRow(collection: collection, key: key, name: ancestor) {
                existing.append((ancestor, version))
            }
        }
        for entry in existing where leaves[entry.name] == nil {
            try store(
                collection: collection, key: key, field: entry.name,
                json: DocumentBody.observedRemovalPrefix + entry.version.site.description, version: entry.version)
        }
        for (name, leaf) in leaves.sorted(by: { $0.key < $1.key }) {
            try writeField(collection: collection, key: key, field: name, json: leaf.canonicalJSON, initial: false)
        }
    }

    private func timestamp(collection: String, key: String, field: String) throws -> UInt64? {
        try Int64.fetchOne(
            db, sql: "SELECT ts FROM field WHERE collection = ? AND doc_id = ? AND name = ?",
            arguments: [collection, key, field]
        ).map { UInt64(bitPattern: $0) }
    }

    /// DELETE: a replicated tombstone per matching document.
    mutating func delete(_ delete: DeleteStatement, arguments: [String: Value]) throws -> [Value] {
        let matches = try DocumentStore.matchingDocuments(
            collection: delete.collection, predicate: delete.whereClause, arguments: arguments, db: db)
        for (key, _) in matches {
            try writeField(
                collection: delete.collection, key: key, field: DocumentBody.tombstoneField, json: "true", initial: false)
            try DocumentBody.materialize(db: db, collection: delete.collection, key: key)
        }
        return matches.map { $0.body["_id"] ?? .null }
    }

    /// EVICT: forgets local copies without telling anyone. The change log keeps
    /// what it relayed; peer cursors restart so subscriptions refill what they match.
    mutating func evict(_ evict: DeleteStatement, arguments: [String: Value]) throws -> [Value] {
        let matches = try DocumentStore.matchingDocuments(
            collection: evict.collection, predicate: evict.whereClause, arguments: arguments, db: db)
        for (key, _) in matches {
            try db.execute(sql: "DELETE FROM field WHERE collection = ? AND doc_id = ?", arguments: [evict.collection, key])
            try db.execute(sql: "DELETE FROM document WHERE collection = ? AND doc_id = ?", arguments: [evict.collection, key])
        }
        if !matches.isEmpty {
            try db.execute(sql: "DELETE FROM peer_cursor")
            // From now on a logged document may have no body: relaying must say so (`unknown`).
            try db.execute(sql: "INSERT OR REPLACE INTO shoal_meta (key, value) VALUES ('evicted', 1)")
            progress.evicted = true
        }
        return matches.map { $0.body["_id"] ?? .null }
    }

    /// `base` with the value at `path` replaced, creating objects along the way.
    static func setting(_ base: Value?, path: ArraySlice<String>, to value: Value) -> Value {
        guard let first = path.first else { return value }
        var object = base?.objectValue ?? [:]
        object[first] = setting(object[first], path: path.dropFirst(), to: value)
        return .object(object)
    }

    /// `base` without the member at `path` (unchanged when the path is absent).
    static func removing(_ base: Value, path: ArraySlice<String>) -> Value {
        guard let first = path.first, var object = base.objectValue, let child = object[first] else { return base }
        if path.count == 1 {
            object.removeValue(forKey: first)
        } else {
            object[first] = removing(child, path: path.dropFirst())
        }
        return .object(object)
    }

    private mutating func writeField(collection: String, key: String, field: String, json: String, initial: Bool) throws {
        var ts = HybridTimestamp.zero
        if !initial {
            ts = clock.tick()
            // A write must supersede what it overwrites, even a value from a clock
            // running far ahead that this clock declined to adopt.
            if let current = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT ts FROM field WHERE collection = ? AND doc_id = ? AND name = ?"),
                arguments: [collection, key, field]),
                UInt64(bitPattern: current) >= ts.rawValue
            {
                guard UInt64(bitPattern: current) < UInt64.max else {
                    throw StoreError(
                        .invalidDocument,
                        "\(collection): field \(field) of \(key) carries the largest possible timestamp (a peer's clock is broken); it cannot be overwritten")
                }
                ts = HybridTimestamp(rawValue: UInt64(bitPattern: current) + 1)
            }
        }
        try store(collection: collection, key: key, field: field, json: json, version: RegisterVersion(timestamp: ts, site: site))
    }

    /// Writes a field row with an explicit version (an observed removal reuses the
    /// version it removes) and remembers the delta.
    private mutating func store(collection: String, key: String, field: String, json: String, version: RegisterVersion) throws {
        // The transaction's size is unknown until it finishes; `finish()` fills in txn_count.
        try db.cachedStatement(sql: FieldSQL.upsert).execute(arguments: [
            collection, key, field, json, Int64(bitPattern: version.timestamp.rawValue),
            Int64(bitPattern: version.site.rawValue), sequence, progress.pending.count, 0,
            Int64(bitPattern: site.rawValue),
        ])
        progress.pending.append(
            PendingDelta(collection: collection, key: key, field: field, json: json, ts: version.timestamp))
    }

    private func loadBody(collection: String, key: String) throws -> [String: Value]? {
        guard
            let text = try String.fetchOne(
                db, sql: "SELECT body FROM document WHERE collection = ? AND doc_id = ? AND deleted = 0",
                arguments: [collection, key])
        else { return nil }
        return try DocumentStore.parseBody(text).objectValue
    }

    /// Appends the transaction's deltas to the change log and records its manifest;
    /// `nil` when it wrote nothing.
    func finish() throws -> (transaction: TransactionID, lastSequence: UInt64)? {
        let pending = progress.pending
        guard !pending.isEmpty else { return nil }
        let transaction = TransactionID(origin: site, sequence: UInt64(sequence))
        try db.execute(
            sql: "INSERT INTO shoal_meta (key, value) VALUES ('transaction_counter', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            arguments: [sequence])
        var perDocument: [DocumentRef: Int] = [:]
        for d in pending { perDocument[DocumentRef(collection: d.collection, id: d.key), default: 0] += 1 }
        let insert = try db.cachedStatement(sql: FieldSQL.appendLog)
        let count = try db.cachedStatement(
            sql: "UPDATE field SET txn_count = ? WHERE collection = ? AND doc_id = ? AND name = ? AND txn_site = ? AND txn_seq = ?")
        for (index, d) in pending.enumerated() {
            try insert.execute(arguments: [
                d.collection, d.key, d.field, d.json, Int64(bitPattern: d.ts.rawValue),
                Int64(bitPattern: site.rawValue), sequence, index, pending.count,
                perDocument[DocumentRef(collection: d.collection, id: d.key)]!,
            ])
            try count.execute(arguments: [pending.count, d.collection, d.key, d.field, Int64(bitPattern: site.rawValue), sequence])
        }
        let last = UInt64(db.lastInsertedRowID)
        let manifest = CollectionCount.manifest(of: pending.map { (collection: $0.collection, document: $0.key) })
        try db.cachedStatement(sql: FieldSQL.insertTransaction).execute(arguments: [
            Int64(bitPattern: site.rawValue), sequence, pending.count, perDocument.count,
            CollectionCount.encode(manifest), TransactionRecord.State.applied.rawValue, "", "", 0,
        ])
        return (transaction, last)
    }

    static func randomID() -> String {
        var g = SystemRandomNumberGenerator()
        let a = UInt64.random(in: 0...UInt64.max, using: &g)
        let b = UInt64.random(in: 0...UInt64.max, using: &g)
        return SiteID(a).description + SiteID(b).description
    }
}

/// SQL shared by local and remote writes, prepared once per connection.
enum FieldSQL {
    static let upsert = """
        INSERT INTO field (collection, doc_id, name, value, ts, site, txn_seq, txn_index, txn_count, txn_site)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (collection, doc_id, name) DO UPDATE SET value = excluded.value, ts = excluded.ts,
            site = excluded.site, txn_seq = excluded.txn_seq, txn_index = excluded.txn_index,
            txn_count = excluded.txn_count, txn_site = excluded.txn_site
        """
    static let saveBody = """
        INSERT INTO document (collection, doc_id, body, deleted) VALUES (?, ?, ?, 0)
        ON CONFLICT (collection, doc_id) DO UPDATE SET body = excluded.body, deleted = 0
        """
    /// Logs a delta once: a piece of a transaction already logged is skipped.
    static let appendLog = """
        INSERT OR IGNORE INTO change_log (collection, doc_id, name, value, ts, txn_site, txn_seq, txn_index, txn_count, doc_deltas)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """
    static let insertTransaction = """
        INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (origin, seq) DO UPDATE SET state = excluded.state, rest = excluded.rest,
            reports = excluded.reports, delta_count = excluded.delta_count,
            document_count = excluded.document_count, collections = excluded.collections
        """
}

import ShoalCRDT
import ShoalQuery
import GRDB

/// The writes of one local read-write transaction, inside one GRDB `write {}`.
///
/// Each field write takes a fresh HLC timestamp, updates the `field` row and the
/// document body at once (so later statements in the transaction see it), and is
/// remembered as a delta. `finish()` numbers the deltas, appends them to the change
/// log under this transaction's ID and bumps the transaction counter, all before
/// the SQLite transaction commits.
struct LocalTransaction {
    let db: Database
    let site: SiteID
    let clock: HybridLogicalClock
    /// This transaction's number, if it commits any write.
    let sequence: Int64
    private var pending: [(collection: String, key: String, field: String, json: String, ts: HybridTimestamp)] = []

    init(db: Database, site: SiteID, clock: HybridLogicalClock) throws {
        self.db = db
        self.site = site
        self.clock = clock
        let previous = try Int64.fetchOne(db, sql: "SELECT value FROM shoal_meta WHERE key = 'transaction_counter'") ?? 0
        self.sequence = previous + 1
    }

    mutating func insert(_ insert: InsertStatement, arguments: [String: Value]) throws -> [Value] {
        var ids: [Value] = []
        for expression in insert.documents {
            let value: Value?
            do {
                value = try Evaluator.evaluate(expression, document: .object([:]), arguments: arguments)
            } catch {
                throw StoreError(error)
            }
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
                if fields["_id"] == nil || fields["_id"] == .null { fields["_id"] = .string(Self.randomID()) }
                if let written = try insertOne(collection: insert.collection, fields: fields, conflict: insert.conflict) {
                    ids.append(written)
                }
            }
        }
        return ids
    }

    private mutating func insertOne(collection: String, fields: [String: Value], conflict: ConflictPolicy) throws -> Value? {
        let id = fields["_id"]!
        let key = DocumentKey.make(id)
        let existing = try loadBody(collection: collection, key: key)
        var body = existing?.objectValue ?? [:]
        var toWrite: [String]
        if existing == nil {
            toWrite = fields.keys.sorted()
        } else {
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
                toWrite = fields.keys.filter { $0 != "_id" && body[$0] != fields[$0] }.sorted()
                if toWrite.isEmpty { return nil }
            }
        }
        for name in toWrite {
            body[name] = fields[name]!
            try writeField(collection: collection, key: key, field: name, value: fields[name]!)
        }
        try saveBody(collection: collection, key: key, body: .object(body))
        return id
    }

    mutating func update(_ update: UpdateStatement, arguments: [String: Value]) throws -> [Value] {
        for assignment in update.assignments where assignment.path.first == "_id" {
            throw StoreError(
                QueryError(
                    "UPDATE cannot change _id: a document's identity is fixed once inserted",
                    position: assignment.position, query: nil))
        }
        let matches = try DocumentStore.matchingDocuments(
            collection: update.collection, predicate: update.whereClause, arguments: arguments, db: db)
        var ids: [Value] = []
        for (key, original) in matches {
            guard case .object(var body) = original else { continue }
            var changedTop: [String] = []
            for assignment in update.assignments {
                let value: Value
                do {
                    value = try Evaluator.evaluate(assignment.value, document: original, arguments: arguments) ?? .null
                } catch {
                    throw StoreError(error)
                }
                let top = assignment.path[0]
                body[top] = Self.setting(body[top], path: assignment.path.dropFirst(), to: value)
                if !changedTop.contains(top) { changedTop.append(top) }
            }
            for top in changedTop {
                try writeField(collection: update.collection, key: key, field: top, value: body[top]!)
            }
            try saveBody(collection: update.collection, key: key, body: .object(body))
            ids.append(body["_id"] ?? .null)
        }
        return ids
    }

    /// `base` with the value at `path` replaced, creating objects along the way.
    static func setting(_ base: Value?, path: ArraySlice<String>, to value: Value) -> Value {
        guard let first = path.first else { return value }
        var object = base?.objectValue ?? [:]
        object[first] = setting(object[first], path: path.dropFirst(), to: value)
        return .object(object)
    }

    private mutating func writeField(collection: String, key: String, field: String, value: Value) throws {
        let ts = clock.tick()
        let json = value.canonicalJSON
        // The transaction's size is unknown until it finishes; `finish()` fills in txn_count.
        try db.cachedStatement(sql: FieldSQL.upsert).execute(arguments: [
            collection, key, field, json, Int64(bitPattern: ts.rawValue), Int64(bitPattern: site.rawValue),
            sequence, pending.count, 0,
        ])
        pending.append((collection, key, field, json, ts))
    }

    private func loadBody(collection: String, key: String) throws -> Value? {
        guard
            let text = try String.fetchOne(
                db, sql: "SELECT body FROM document WHERE collection = ? AND doc_id = ?", arguments: [collection, key])
        else { return nil }
        return try DocumentStore.parseBody(text)
    }

    private func saveBody(collection: String, key: String, body: Value) throws {
        try db.cachedStatement(sql: FieldSQL.saveBody).execute(arguments: [collection, key, body.canonicalJSON])
    }

    /// Appends the transaction's deltas to the change log; `nil` when it wrote nothing.
    mutating func finish() throws -> (transaction: TransactionID, lastSequence: UInt64)? {
        guard !pending.isEmpty else { return nil }
        let transaction = TransactionID(origin: site, sequence: UInt64(sequence))
        try db.execute(
            sql: "INSERT INTO shoal_meta (key, value) VALUES ('transaction_counter', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            arguments: [sequence])
        let insert = try db.cachedStatement(sql: FieldSQL.appendLog)
        let count = try db.cachedStatement(
            sql: "UPDATE field SET txn_count = ? WHERE collection = ? AND doc_id = ? AND name = ? AND site = ? AND txn_seq = ?")
        for (index, d) in pending.enumerated() {
            try insert.execute(arguments: [
                d.collection, d.key, d.field, d.json, Int64(bitPattern: d.ts.rawValue),
                Int64(bitPattern: site.rawValue), sequence, index, pending.count,
            ])
            try count.execute(arguments: [pending.count, d.collection, d.key, d.field, Int64(bitPattern: site.rawValue), sequence])
        }
        let last = UInt64(db.lastInsertedRowID)
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
        INSERT INTO field (collection, doc_id, name, value, ts, site, txn_seq, txn_index, txn_count)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (collection, doc_id, name) DO UPDATE SET value = excluded.value, ts = excluded.ts,
            site = excluded.site, txn_seq = excluded.txn_seq, txn_index = excluded.txn_index,
            txn_count = excluded.txn_count
        """
    static let saveBody = """
        INSERT INTO document (collection, doc_id, body) VALUES (?, ?, ?)
        ON CONFLICT (collection, doc_id) DO UPDATE SET body = excluded.body
        """
    static let appendLog = """
        INSERT INTO change_log (collection, doc_id, name, value, ts, txn_site, txn_seq, txn_index, txn_count)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        """
}

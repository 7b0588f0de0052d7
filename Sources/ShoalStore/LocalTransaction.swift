import ShoalCRDT
import ShoalStorage
import ShoalQuery
import GRDB

/// The writes of one local read-write transaction, inside its open SQLite transaction.
///
/// It evaluates statements and applies them document by document: it loads the
/// document's registers, lets `DocumentEditor` (ShoalCRDT) turn the statement into
/// register writes under the write rules, saves those registers and the body they
/// materialize to (so later statements in the transaction see it), and remembers
/// each write as a delta. `finish()` numbers the deltas, appends them to the change
/// log under this transaction's ID with its manifest, and bumps the transaction
/// counter, all before the SQLite transaction commits.
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
    /// What this store's counter contributions are named by (`DocumentStore.counterSite`).
    let counterSite: SiteID
    let clock: HybridLogicalClock
    private(set) var progress: Progress
    /// The live bodies written since `takeWrittenBodies()`: collection, key and size
    /// in bytes, for the document size limits.
    private var writtenBodies: [(collection: String, key: String, bytes: Int)] = []
    /// The register upserts, prepared once for all the documents of this access.
    private var upserts: RegisterRows.Upserts

    var sequence: Int64 { progress.sequence }
    var evicted: Bool { progress.evicted }

    init(db: Database, site: SiteID, counterSite: SiteID, clock: HybridLogicalClock, progress: Progress) {
        self.db = db
        self.site = site
        self.counterSite = counterSite
        self.clock = clock
        self.progress = progress
        upserts = RegisterRows.Upserts(db)
    }

    /// The progress of a transaction that starts now: numbered after the last one committed.
    static func begin(db: Database) throws -> Progress {
        let previous = try DocumentStore.unsignedMeta(db, "transaction_counter")
        return Progress(sequence: Int64(previous) + 1)
    }

    static func evaluate(_ expression: Expression, document: Value, arguments: [String: Value]) throws -> Value? {
        do {
            return try Evaluator.evaluate(expression, document: document, arguments: arguments)
        } catch {
            throw ShoalError(error)
        }
    }

    /// An ATTACHMENT field holds a token (or takes a bare attachment ID, turned into one).
    static func attachmentValue(_ value: Value, field: String, collection: String) throws -> Value {
        guard let token = AttachmentToken(value) else {
            throw ShoalError(
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
                throw ShoalError(
                    .invalidDocument,
                    "INSERT INTO \(insert.collection): a document must be a JSON object, got \(value?.typeName ?? "nothing")")
            }
            for document in documents {
                guard case .object(var fields) = document else {
                    throw ShoalError(
                        .invalidDocument,
                        "INSERT INTO \(insert.collection): a document must be a JSON object, got \(document.typeName)")
                }
                for name in fields.keys { try RegisterRows.checkWritable(name, collection: insert.collection) }
                for (name, type) in insert.declaredTypes where type == .attachment {
                    if let value = fields[name] {
                        fields[name] = try Self.attachmentValue(value, field: name, collection: insert.collection)
                    }
                }
                if fields["_id"] == nil || fields["_id"] == .null {
                    guard !insert.initial else {
                        throw ShoalError(
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
        var registers = try RegisterRows.load(db, collection: collection, key: key)
        // Room for the fields it writes, so that the editor's writes rehash nothing.
        registers.reserveCapacity(registers.registers.count + fields.count)
        let names: [String]
        if initial {
            names = fields.keys.sorted()
        } else if !registers.isEmpty, let existing = try loadBody(collection: collection, key: key) {
            switch conflict {
            case .fail:
                throw ShoalError(
                    .documentExists,
                    "INSERT INTO \(collection): a document with _id \(id.canonicalJSON) already exists (use ON ID CONFLICT DO UPDATE to overwrite it, or DO NOTHING to keep it)")
            case .doNothing:
                return nil
            case .doUpdate:
                names = fields.keys.filter { $0 != "_id" }.sorted()
            case .doUpdateLocalDiff:
                names = fields.keys.filter { $0 != "_id" && existing[$0] != fields[$0] }.sorted()
                if names.isEmpty { return nil }
            }
        } else {
            names = fields.keys.sorted()
        }
        let kinds = Self.kinds(declared)
        let wrote = try edit(collection: collection, key: key, registers: registers) { editor throws(EditError) in
            try editor.insert(fields, names: names, initial: initial, kinds: kinds)
        }
        return wrote || !initial ? id : nil
    }

    mutating func update(_ update: UpdateStatement, arguments: [String: Value]) throws -> [Value] {
        for operation in update.counterOperations where operation.path.count != 1 {
            throw ShoalError(
                QueryError(
                    "APPLY works on top-level COUNTER fields; \(operation.path.joined(separator: ".")) is nested",
                    position: operation.position))
        }
        for operation in update.counterOperations {
            try RegisterRows.checkWritable(operation.path[0], collection: update.collection)
        }
        for target in update.assignments.map(\.path) + update.unsets.map(\.path) {
            try RegisterRows.checkWritable(target[0], collection: update.collection)
        }
        let matches = try DocumentStore.matchingDocuments(
            collection: update.collection, predicate: update.whereClause, orderBy: update.orderBy,
            limit: update.limit, offset: update.offset, arguments: arguments, db: db)
        let kinds = Self.kinds(update.declaredTypes)
        var ids: [Value] = []
        for (key, original) in matches {
            guard case .object(let body) = original else { continue }
            // Every value is evaluated against the document as it was before this statement.
            var counters: [(field: String, change: CounterChange)] = []
            for operation in update.counterOperations {
                switch operation.kind {
                case .restart(let expression):
                    let value = try expression.map { try Self.evaluate($0, document: original, arguments: arguments) } ?? .int(0)
                    guard let value, value.numberValue != nil else {
                        throw ShoalError(QueryError("RESTART WITH needs a number", position: operation.position))
                    }
                    counters.append((operation.path[0], .restart(value)))
                case .increment(let expression):
                    let amount = try Self.evaluate(expression, document: original, arguments: arguments)
                    guard let amount, amount.numberValue != nil else {
                        throw ShoalError(
                            QueryError(
                                "INCREMENT BY needs a number, got \(amount?.typeName ?? "nothing")", position: operation.position))
                    }
                    counters.append((operation.path[0], .increment(amount)))
                }
            }
            var assignments: [(path: [String], value: Value)] = []
            for assignment in update.assignments {
                var value = try Self.evaluate(assignment.value, document: original, arguments: arguments) ?? .null
                let top = assignment.path[0]
                if update.declaredTypes[top] == .attachment, assignment.path.count == 1 {
                    value = try Self.attachmentValue(value, field: top, collection: update.collection)
                }
                assignments.append((assignment.path, value))
            }
            let unsets = update.unsets.map(\.path)
            let increments = counters.contains { if case .increment = $0.change { true } else { false } }
            try edit(collection: update.collection, key: key, rememberingEvicted: increments) { editor throws(EditError) in
                try editor.update(counters: counters, assignments: assignments, unsets: unsets, kinds: kinds, original: body)
            }
            ids.append(body["_id"] ?? .null)
        }
        return ids
    }

    static func kinds(_ declared: [String: FieldType]) -> [String: FieldKind] {
        declared.mapValues { type in
            switch type {
            case .register: .register
            case .map: .map
            case .counter: .counter
            case .attachment: .attachment
            }
        }
    }

    /// Runs the write rules on one document: loads its registers, edits them, saves
    /// what was written and the body, and remembers each write as a delta. Returns
    /// whether anything was written.
    ///
    /// With `rememberingEvicted` (an increment), the registers an EVICT kept of the
    /// document go to the editor too; those the document now holds at their version
    /// or a later one are dropped.
    @discardableResult
    private mutating func edit(
        collection: String, key: String, registers: DocumentRegisters? = nil, rememberingEvicted: Bool = false,
        _ body: (inout DocumentEditor) throws(EditError) -> Void
    ) throws -> Bool {
        let kept = rememberingEvicted
            ? try RegisterRows.load(db, collection: collection, key: key, from: RegisterRows.loadEvicted) : DocumentRegisters()
        var editor = DocumentEditor(
            registers: try registers ?? RegisterRows.load(db, collection: collection, key: key), remembered: kept, site: site,
            counterSite: counterSite, clock: clock, transaction: TransactionID(origin: site, sequence: UInt64(sequence)))
        do {
            try body(&editor)
        } catch {
            throw ShoalError(.invalidDocument, "\(collection) \(key): \(error.description)")
        }
        if !kept.isEmpty { try RegisterRows.dropEvicted(db, collection: collection, key: key, kept: kept, now: editor.registers) }
        guard !editor.written.isEmpty else { return false }
        // A register written twice keeps its last state; every write is a delta.
        var last: [String: (state: RegisterState, index: UInt32)] = Dictionary(minimumCapacity: editor.written.count)
        for (name, state) in editor.written {
            last[name] = (state, UInt32(truncatingIfNeeded: progress.pending.count))
            progress.pending.append(
                PendingDelta(collection: collection, key: key, field: name, json: state.json, ts: state.version.timestamp))
        }
        try upserts.save(collection: collection, key: key, last)
        if let bytes = try RegisterRows.saveBody(db, collection: collection, key: key, editor.registers) {
            writtenBodies.append((collection, key, bytes))
        }
        return true
    }

    /// The live bodies written since the last call, and forgets them.
    mutating func takeWrittenBodies() -> [(collection: String, key: String, bytes: Int)] {
        defer { writtenBodies.removeAll(keepingCapacity: true) }
        return writtenBodies
    }

    /// DELETE: a replicated tombstone per matching document.
    mutating func delete(_ delete: DeleteStatement, arguments: [String: Value]) throws -> [Value] {
        let matches = try DocumentStore.matchingDocuments(
            collection: delete.collection, predicate: delete.whereClause, arguments: arguments, db: db)
        for (key, _) in matches {
            try edit(collection: delete.collection, key: key) { editor throws(EditError) in try editor.delete() }
        }
        return matches.map { $0.body["_id"] ?? .null }
    }

    /// EVICT: forgets local copies without telling anyone, and never what only this
    /// node holds (DATA_MODEL.md §11).
    ///
    /// The change log is untouched: it still sends every peer what it logged, evicted
    /// documents included. A document that holds a write of this node's own that no
    /// peer has acknowledged (`holdings`) is kept whole: dropped here, nobody would give
    /// it back to this node, since peers never stream a node's own writes back unless
    /// it asks from the start. Peer cursors restart, so subscriptions refill what they
    /// match, this node's own writes included. What this site's next increments need
    /// (its own counter contributions, their bases, the tombstone) is kept aside in
    /// `evicted_counter`. Returns the `_id`s evicted and those kept.
    mutating func evict(
        _ evict: DeleteStatement, arguments: [String: Value], holdings: PeerHoldings
    ) throws -> (evicted: [Value], kept: [Value]) {
        let matches = try DocumentStore.matchingDocuments(
            collection: evict.collection, predicate: evict.whereClause, arguments: arguments, db: db)
        var evicted: [Value] = [], kept: [Value] = []
        for (key, body) in matches {
            let registers = try RegisterRows.load(db, collection: evict.collection, key: key)
            if let sequence = try lastOwnWrite(registers),
                !holdings.someoneHolds(collection: evict.collection, body: body, through: sequence)
            {
                kept.append(body["_id"] ?? .null)
                continue
            }
            evicted.append(body["_id"] ?? .null)
            // What the clock adopts of the forgotten timestamps outlives them in the high-water mark.
            if let latest = registers.latestTimestamp { clock.observe(latest) }
            // This site's increments must outlive them too, until peers send them back.
            let kept = registers.counters(of: counterSite)
            if !kept.isEmpty { try RegisterRows.keepEvicted(db, collection: evict.collection, key: key, kept) }
            try db.execute(sql: "DELETE FROM field WHERE collection = ? AND doc_id = ?", arguments: [evict.collection, key])
            try db.execute(sql: "DELETE FROM document WHERE collection = ? AND doc_id = ?", arguments: [evict.collection, key])
        }
        if !evicted.isEmpty {
            try saveClockHighWater()
            try DocumentStore.forgetPeerCursors(db)
            // From now on this node may lack its own transactions: it asks peers for them.
            try db.execute(sql: "INSERT OR REPLACE INTO shoal_meta (key, value) VALUES ('evicted', 1)")
            progress.evicted = true
        }
        return (evicted, kept)
    }

    /// The highest change-log sequence of the transactions of this site that wrote a
    /// register `registers` hold now; nil when none did.
    private func lastOwnWrite(_ registers: DocumentRegisters) throws -> UInt64? {
        let own = Set(registers.registers.values.lazy.map(\.transaction).filter { $0.origin == site }.map(\.sequence))
        guard !own.isEmpty else { return nil }
        let statement = try db.cachedStatement(sql: "SELECT MAX(seq) FROM change_log WHERE txn_site = ? AND txn_seq = ?")
        var last: UInt64 = 0
        for sequence in own {
            let row = try Int64.fetchOne(statement, arguments: [Int64(bitPattern: site.rawValue), Int64(sequence)]) ?? 0
            last = max(last, try StoredInteger.unsigned(row, table: "change_log", column: "seq"))
        }
        return last
    }

    private func loadBody(collection: String, key: String) throws -> [String: Value]? {
        guard
            let text = try String.fetchOne(
                db.cachedStatement(sql: "SELECT body FROM document WHERE collection = ? AND doc_id = ? AND deleted = 0"),
                arguments: [collection, key])
        else { return nil }
        // A body an older version stored past the limits reads as its `_id` alone (as
        // `matchingDocuments` sees it), so an upsert can still repair the document.
        return (try? JSON.parse(text).objectValue) ?? ["_id": identifier(ofKey: key)]
    }

    private func identifier(ofKey key: String) -> Value { (try? JSON.parse(key)) ?? .null }

    /// Appends the transaction's deltas to the change log and records its manifest;
    /// `nil` when it wrote nothing.
    func finish() throws -> (transaction: TransactionID, lastSequence: UInt64, appended: LogEnd.Appended)? {
        let pending = progress.pending
        guard !pending.isEmpty else { return nil }
        let transaction = TransactionID(origin: site, sequence: UInt64(sequence))
        try db.cachedStatement(
            sql: "INSERT INTO shoal_meta (key, value) VALUES ('transaction_counter', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        ).execute(arguments: [sequence])
        try saveClockHighWater()
        // One log entry per document, its deltas in transaction order (a transaction may
        // come back to a document after writing others). A document's deltas come in
        // runs: each run is looked up once, not each delta; `more` holds the runs of a
        // document the transaction came back to.
        var documents: [(document: DocumentRef, run: Range<Int>, more: [Range<Int>])] = []
        var slots: [DocumentRef: Int] = [:]
        var start = 0
        while start < pending.count {
            let run = pending[start]
            var end = start + 1
            let document = DocumentRef(collection: run.collection, id: run.key)
            // By bytes (as `DocumentRef` compares): two canonically equivalent keys are two documents.
            while end < pending.count, document.is(collection: pending[end].collection, id: pending[end].key) { end += 1 }
            if let slot = slots[document] {
                documents[slot].more.append(start..<end)
            } else {
                slots[document] = documents.count
                documents.append((document, start..<end, []))
            }
            start = end
        }
        var log = LogAppender(db, site: site.rawValue, sequence: UInt64(sequence), deltaCount: pending.count)
        var packed = PackedDeltas()
        var counts: [(collection: String, deltas: Int)] = []
        counts.reserveCapacity(documents.count)
        func pack(_ range: Range<Int>) {
            for index in range {
                let d = pending[index]
                packed.append(index: UInt32(index), timestamp: d.ts.rawValue, name: d.field, value: d.json)
            }
        }
        for (document, run, more) in documents {
            packed.removeAll()
            pack(run)
            for range in more { pack(range) }
            counts.append((document.collection, packed.count))
            try log.append(document, deltaCount: packed.count, packed.bytes)
        }
        try log.finish()
        let last = log.last ?? UInt64(db.lastInsertedRowID)
        let manifest = CollectionCount.manifest(documents: counts)
        // The log's rows are numbered on from its last one: this transaction's follow it.
        let appended = LogEnd.Appended(
            after: (log.first ?? last) - 1, collections: Set(manifest.map(\.collection)), transactions: [transaction],
            documents: documents.count)
        try db.cachedStatement(sql: FieldSQL.insertTransaction).execute(arguments: [
            Int64(bitPattern: site.rawValue), sequence, pending.count, documents.count,
            CollectionCount.encode(manifest), TransactionRecord.State.applied.rawValue, "", "", 0,
        ])
        return (transaction, last, appended)
    }

    /// Keeps the clock's reading durable (`clock_high_water`), so that after a restart
    /// it starts above every timestamp it issued or adopted, even those EVICT removed
    /// from `field`. Timestamps a write took above a far-ahead stored value, which the
    /// clock never adopts, stay out of it.
    func saveClockHighWater() throws {
        try db.cachedStatement(
            sql: "INSERT INTO shoal_meta (key, value) VALUES ('clock_high_water', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        ).execute(arguments: [Int64(bitPattern: clock.current.rawValue)])
    }

    static func randomID() -> String {
        var g = SystemRandomNumberGenerator()
        let a = UInt64.random(in: 0...UInt64.max, using: &g)
        let b = UInt64.random(in: 0...UInt64.max, using: &g)
        return SiteID(a).description + SiteID(b).description
    }
}

/// Change-log and transaction SQL shared by local and remote writes, prepared once per connection.
enum FieldSQL {
    static let insertTransaction = """
        INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (origin, seq) DO UPDATE SET state = excluded.state, rest = excluded.rest,
            reports = excluded.reports, delta_count = excluded.delta_count,
            document_count = excluded.document_count, collections = excluded.collections
        """
}

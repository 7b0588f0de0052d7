package import ShoalCRDT
package import ShoalQuery

/// The rows a local write reads and writes, one document at a time, inside the
/// engine's open write transaction: SQLite reads and writes its connection at once;
/// PostgreSQL reads ahead what a statement needs and writes at commit.
package protocol LocalRows {
    /// Every register of a document (none for a document the store lacks).
    mutating func registers(collection: String, key: String) throws -> DocumentRegisters
    /// What an EVICT kept of a document for this node's next increments (its own
    /// counter contributions): none where the engine evicts nothing.
    mutating func remembered(collection: String, key: String) throws -> DocumentRegisters
    /// Forgets the kept registers that `now` holds at the same version or a later one.
    mutating func forgetRemembered(collection: String, key: String, kept: DocumentRegisters, now: DocumentRegisters) throws
    /// The body of a live document; nil when it has none. A body the store cannot read
    /// is its `_id` alone.
    mutating func liveBody(collection: String, key: String) throws -> [String: Value]?
    /// The live documents of `collection` that satisfy `predicate`, ordered and cut as
    /// the statement says (`DocumentMatch`).
    mutating func matching(
        collection: String, predicate: Expression?, orderBy: [OrderTerm], limit: Expression?, offset: Expression?,
        arguments: [String: Value]
    ) throws -> [(key: String, body: Value)]
    /// Saves a document's written registers, each with its delta's index in the
    /// transaction, and the body `registers` now materialize to (`LocalWrites.body(of:)`);
    /// returns the live body's size in bytes, nil when it has none.
    mutating func save(
        collection: String, key: String, written: [String: (state: RegisterState, index: UInt32)], registers: DocumentRegisters
    ) throws -> Int?
}

/// A delta written but not yet in the change log.
package struct LocalDelta: Sendable {
    package var collection: String
    package var key: String
    package var field: String
    package var json: String
    package var ts: HybridTimestamp

    package init(collection: String, key: String, field: String, json: String, ts: HybridTimestamp) {
        self.collection = collection
        self.key = key
        self.field = field
        self.json = json
        self.ts = ts
    }
}

/// The writes of one local read-write transaction, the same on every engine: it
/// evaluates INSERT, UPDATE and DELETE and applies them document by document. For each
/// document it loads the registers, lets `DocumentEditor` (ShoalCRDT) turn the
/// statement into register writes under the write rules, saves those registers and the
/// body they materialize to (so later statements see it), and remembers each write as
/// a delta (`pending`), which the engine logs at commit (`logRuns`).
///
/// EVICT is the engine's own: what it must keep depends on what peers acknowledged.
package struct LocalWrites<Rows: LocalRows> {
    package var rows: Rows
    package let site: SiteID
    /// What this store's counter contributions are named by.
    package let counterSite: SiteID
    package let clock: HybridLogicalClock
    /// This transaction's number, if it commits any write.
    package let sequence: UInt64
    /// The deltas written so far, in transaction order.
    package var pending: [LocalDelta]
    /// The live bodies written since `takeWrittenBodies()`: collection, key and size
    /// in bytes, for the document size limits.
    private var writtenBodies: [(collection: String, key: String, bytes: Int)] = []

    package init(
        rows: Rows, site: SiteID, counterSite: SiteID, clock: HybridLogicalClock, sequence: UInt64, pending: [LocalDelta]
    ) {
        self.rows = rows
        self.site = site
        self.counterSite = counterSite
        self.clock = clock
        self.sequence = sequence
        self.pending = pending
    }

    package var transaction: TransactionID { TransactionID(origin: site, sequence: sequence) }

    /// INSERT of `documents` (`documents(of:arguments:)`); returns the `_id`s written.
    package mutating func insert(_ insert: InsertStatement, documents: [[String: Value]]) throws -> [Value] {
        var ids: [Value] = []
        for fields in documents {
            if let written = try insertOne(
                collection: insert.collection, fields: fields, conflict: insert.conflict, initial: insert.initial,
                declared: insert.declaredTypes)
            {
                ids.append(written)
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
        var registers = try rows.registers(collection: collection, key: key)
        // Room for the fields it writes, so that the editor's writes rehash nothing.
        registers.reserveCapacity(registers.registers.count + fields.count)
        let names: [String]
        if initial {
            names = fields.keys.sorted()
        } else if !registers.isEmpty, let existing = try rows.liveBody(collection: collection, key: key) {
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
        let kinds = LocalWriteRules.kinds(declared)
        let wrote = try edit(collection: collection, key: key, registers: registers) { editor throws(EditError) in
            try editor.insert(fields, names: names, initial: initial, kinds: kinds)
        }
        return wrote || !initial ? id : nil
    }

    /// UPDATE: each matching document edited; returns their `_id`s.
    package mutating func update(_ update: UpdateStatement, arguments: [String: Value]) throws -> [Value] {
        try LocalWriteRules.check(update)
        let matches = try rows.matching(
            collection: update.collection, predicate: update.whereClause, orderBy: update.orderBy, limit: update.limit,
            offset: update.offset, arguments: arguments)
        let kinds = LocalWriteRules.kinds(update.declaredTypes)
        var ids: [Value] = []
        for (key, original) in matches {
            guard case .object(let body) = original else { continue }
            // Every value is evaluated against the document as it was before this statement.
            var counters: [(field: String, change: CounterChange)] = []
            for operation in update.counterOperations {
                switch operation.kind {
                case .restart(let expression):
                    let value = try expression.map { e throws(ShoalError) in try LocalWriteRules.evaluate(e, document: original, arguments: arguments) } ?? .int(0)
                    guard let value, value.numberValue != nil else {
                        throw ShoalError(QueryError("RESTART WITH needs a number", position: operation.position))
                    }
                    counters.append((operation.path[0], .restart(value)))
                case .increment(let expression):
                    let amount = try LocalWriteRules.evaluate(expression, document: original, arguments: arguments)
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
                var value = try LocalWriteRules.evaluate(assignment.value, document: original, arguments: arguments) ?? .null
                let top = assignment.path[0]
                if update.declaredTypes[top] == .attachment, assignment.path.count == 1 {
                    value = try LocalWriteRules.attachmentValue(value, field: top, collection: update.collection)
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

    /// DELETE: a replicated tombstone per matching document; returns their `_id`s.
    package mutating func delete(_ delete: DeleteStatement, arguments: [String: Value]) throws -> [Value] {
        let matches = try rows.matching(
            collection: delete.collection, predicate: delete.whereClause, orderBy: [], limit: nil, offset: nil,
            arguments: arguments)
        for (key, _) in matches {
            try edit(collection: delete.collection, key: key) { editor throws(EditError) in try editor.delete() }
        }
        return matches.map { $0.body["_id"] ?? .null }
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
        let kept = rememberingEvicted ? try rows.remembered(collection: collection, key: key) : DocumentRegisters()
        var editor = DocumentEditor(
            registers: try registers ?? rows.registers(collection: collection, key: key), remembered: kept, site: site,
            counterSite: counterSite, clock: clock, transaction: transaction)
        do {
            try body(&editor)
        } catch {
            throw ShoalError(.invalidDocument, "\(collection) \(key): \(error.description)")
        }
        if !kept.isEmpty { try rows.forgetRemembered(collection: collection, key: key, kept: kept, now: editor.registers) }
        guard !editor.written.isEmpty else { return false }
        // A register written twice keeps its last state; every write is a delta.
        var last: [String: (state: RegisterState, index: UInt32)] = Dictionary(minimumCapacity: editor.written.count)
        for (name, state) in editor.written {
            last[name] = (state, UInt32(truncatingIfNeeded: pending.count))
            pending.append(LocalDelta(collection: collection, key: key, field: name, json: state.json, ts: state.version.timestamp))
        }
        if let bytes = try rows.save(collection: collection, key: key, written: last, registers: editor.registers) {
            writtenBodies.append((collection, key, bytes))
        }
        return true
    }

    /// The live bodies written since the last call, and forgets them.
    package mutating func takeWrittenBodies() -> [(collection: String, key: String, bytes: Int)] {
        defer { writtenBodies.removeAll(keepingCapacity: true) }
        return writtenBodies
    }

}

/// The rules of local writes that need no rows: evaluating what a statement writes,
/// checking names and bodies, and grouping a transaction's deltas for its log.
package enum LocalWriteRules {
    package static func evaluate(_ expression: Expression, document: Value, arguments: [String: Value]) throws(ShoalError) -> Value? {
        do {
            return try Evaluator.evaluate(expression, document: document, arguments: arguments)
        } catch {
            throw ShoalError(error)
        }
    }

    /// An ATTACHMENT field holds a token (or takes a bare attachment ID, turned into one).
    package static func attachmentValue(_ value: Value, field: String, collection: String) throws(ShoalError) -> Value {
        guard let token = AttachmentToken(value) else {
            throw ShoalError(
                .invalidDocument,
                "\(collection): field \(field) is an ATTACHMENT; give it the token `shoal attachment put` printed")
        }
        return token.value
    }

    /// The documents an INSERT writes, each with its `_id` (a random one where it has
    /// none), its attachment fields as tokens and its field names checked. Apart from
    /// `insert(_:documents:)` so that an engine may read ahead the documents they name.
    package static func documents(of insert: InsertStatement, arguments: [String: Value]) throws(ShoalError) -> [[String: Value]] {
        var out: [[String: Value]] = []
        for expression in insert.documents {
            let value = try evaluate(expression, document: .object([:]), arguments: arguments)
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
                for name in fields.keys { try checkWritable(name, collection: insert.collection) }
                for (name, type) in insert.declaredTypes where type == .attachment {
                    if let value = fields[name] {
                        fields[name] = try attachmentValue(value, field: name, collection: insert.collection)
                    }
                }
                if fields["_id"] == nil || fields["_id"] == .null {
                    guard !insert.initial else {
                        throw ShoalError(
                            .invalidDocument,
                            "INSERT INTO \(insert.collection) INITIAL DOCUMENTS: every initial document needs an _id, so that all peers insert the same one")
                    }
                    fields["_id"] = .string(randomID())
                }
                out.append(fields)
            }
        }
        return out
    }

    /// Refuses an UPDATE's nested counter paths and reserved field names before anything is read.
    package static func check(_ update: UpdateStatement) throws(ShoalError) {
        for operation in update.counterOperations where operation.path.count != 1 {
            throw ShoalError(
                QueryError(
                    "APPLY works on top-level COUNTER fields; \(operation.path.joined(separator: ".")) is nested",
                    position: operation.position))
        }
        for operation in update.counterOperations {
            try checkWritable(operation.path[0], collection: update.collection)
        }
        for target in update.assignments.map(\.path) + update.unsets.map(\.path) {
            try checkWritable(target[0], collection: update.collection)
        }
    }

    package static func kinds(_ declared: [String: FieldType]) -> [String: FieldKind] {
        declared.mapValues { type in
            switch type {
            case .register: .register
            case .map: .map
            case .counter: .counter
            case .attachment: .attachment
            }
        }
    }

    /// The transaction's deltas by document, for its log entries: one per document, its
    /// deltas in transaction order (a transaction may come back to a document after
    /// writing others), documents in the order first written. Each document's deltas
    /// are runs of `pending`: its first, and `more` for the runs of a document the
    /// transaction came back to. Documents compare by bytes (as `DocumentRef` does):
    /// two canonically equivalent keys are two documents.
    package static func logRuns(_ pending: [LocalDelta]) -> [(document: DocumentRef, run: Range<Int>, more: [Range<Int>])] {
        var documents: [(document: DocumentRef, run: Range<Int>, more: [Range<Int>])] = []
        var slots: [DocumentRef: Int] = [:]
        var start = 0
        while start < pending.count {
            let run = pending[start]
            var end = start + 1
            let document = DocumentRef(collection: run.collection, id: run.key)
            while end < pending.count, document.is(collection: pending[end].collection, id: pending[end].key) { end += 1 }
            if let slot = slots[document] {
                documents[slot].more.append(start..<end)
            } else {
                slots[document] = documents.count
                documents.append((document, start..<end, []))
            }
            start = end
        }
        return documents
    }

    /// What `registers` materialize to, refused when no reader could take it back
    /// (`DocumentLimits.depthRefusal`): the rule every local write goes through.
    package static func body(of registers: DocumentRegisters, collection: String, key: String) throws(ShoalError) -> DocumentRegisters.Body.Text {
        let body = try materialize(registers, collection: collection, key: key)
        if case .live(let json) = body, let refusal = DocumentLimits.depthRefusal(body: json) {
            throw ShoalError(.invalidDocument, "document \(key) in \(collection) cannot be written: \(refusal); nothing of the statement was written")
        }
        return body
    }

    /// What `registers` materialize to, unchecked.
    package static func materialize(_ registers: DocumentRegisters, collection: String, key: String) throws(ShoalError)
        -> DocumentRegisters.Body.Text
    {
        do {
            return try registers.materializedJSON(key: key)
        } catch {
            throw ShoalError(.database, "a stored register of \(collection) \(key) is not valid JSON: \(error)")
        }
    }

    /// Whether a user may write this top-level field name.
    package static func checkWritable(_ name: String, collection: String) throws(ShoalError) {
        // By byte: both are ASCII controls, which no other character's UTF-8 contains
        // (and `String.contains` of a `Character` walks grapheme clusters).
        if name.utf8.contains(where: { $0 == Counter.separatorByte || $0 == RegisterName.pathSeparatorByte }) {
            throw ShoalError(.invalidDocument, "\(collection): field names may not contain the characters U+001E or U+001F")
        }
        if name.hasPrefix("_") && name != "_id" {
            throw ShoalError(
                .invalidDocument,
                "\(collection): field names beginning with '_' are reserved (got '\(name)'); only _id may be written")
        }
    }

    /// A random `_id`, and a transaction's description ID: 128 random bits in hex.
    package static func randomID() -> String {
        var g = SystemRandomNumberGenerator()
        let a = UInt64.random(in: 0...UInt64.max, using: &g)
        let b = UInt64.random(in: 0...UInt64.max, using: &g)
        return SiteID(a).description + SiteID(b).description
    }
}

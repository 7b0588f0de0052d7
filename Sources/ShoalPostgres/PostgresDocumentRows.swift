import Logging
import NIOCore
import PostgresNIO
import ShoalCRDT
import ShoalQuery
import ShoalStorage

/// The documents a hub's local read-write transaction reads and writes (`LocalRows`).
///
/// `LocalWrites` reads a document's rows synchronously, and PostgreSQL answers over
/// the network; so before each statement runs, `readAhead` reads from the writer's
/// connection what the statement can touch: the registers of the documents an INSERT
/// names, and for a statement with a WHERE the live bodies it may match (of the one
/// document an `_id = constant` names, of those its pre-filter keeps, or of its whole
/// collection), then the registers of those that match. The statement then runs on
/// what is held here, and what it writes stays here until the commit writes it all as
/// one apply (`appliedRows`, through
/// `PostgresInboundWriter.write`): one round trip for the whole transaction.
///
/// Nothing else writes meanwhile: the writer holds `log_end`'s row lock from before the
/// first read to the commit, so what was read stays true. A value: a statement that
/// fails is undone by keeping the rows as they were before it.
struct PostgresDocumentRows: LocalRows {
    /// A document read or written by the transaction.
    struct Document {
        var registers: DocumentRegisters
        /// What its registers materialize to, once the transaction wrote it.
        var body: DocumentRegisters.Body.Text?
        /// The registers the transaction wrote, each with its last delta's index.
        var written: [String: (state: RegisterState, index: UInt32)] = [:]
    }

    /// The documents whose registers were read, and those written.
    private(set) var documents: [DocumentRef: Document] = [:]
    /// Live bodies as stored, of the documents read ahead for a WHERE (nil: read, none live).
    private var stored: [DocumentRef: String?] = [:]
    /// The collections (by bytes) whose live bodies were all read.
    private var wholeCollections: Set<[UInt8]> = []
    /// The filters whose candidates were read, each with its collection (by bytes).
    private var filtered: Set<Filtered> = []

    struct Filtered: Hashable {
        var collection: [UInt8]
        var filter: PreFilter
    }

    // MARK: Reading ahead

    /// Reads what `statement` can touch (see the type's summary); returns an INSERT's
    /// documents, which must be the ones it then inserts (their random `_id`s are drawn here).
    mutating func readAhead(
        _ statement: ShoalQuery.Statement, arguments: [String: Value], writer: PostgresInboundWriter
    ) async throws(ShoalError) -> [[String: Value]] {
        switch statement {
        case .insert(let insert):
            let documents = try LocalWriteRules.documents(of: insert, arguments: arguments)
            try await readRegisters(
                of: documents.map { DocumentRef(collection: insert.collection, id: DocumentKey.make($0["_id"] ?? .null)) },
                writer: writer)
            return documents
        case .update(let update):
            try LocalWriteRules.check(update)
            try await readMatches(
                collection: update.collection, predicate: update.whereClause, orderBy: update.orderBy, limit: update.limit,
                offset: update.offset, arguments: arguments, writer: writer)
        case .delete(let delete):
            try await readMatches(
                collection: delete.collection, predicate: delete.whereClause, orderBy: [], limit: nil, offset: nil,
                arguments: arguments, writer: writer)
        case .select(let select):
            try await readBodies(collection: select.collection, predicate: select.whereClause, arguments: arguments, writer: writer)
        case .evict, .system, .index:
            break
        }
        return []
    }

    /// Reads the live bodies a WHERE may match, then the registers of those it matches.
    private mutating func readMatches(
        collection: String, predicate: Expression?, orderBy: [OrderTerm], limit: Expression?, offset: Expression?,
        arguments: [String: Value], writer: PostgresInboundWriter
    ) async throws(ShoalError) {
        try await readBodies(collection: collection, predicate: predicate, arguments: arguments, writer: writer)
        let matches = try PostgresDocumentTransaction.rethrowing {
            try matching(
                collection: collection, predicate: predicate, orderBy: orderBy, limit: limit, offset: offset, arguments: arguments)
        }
        try await readRegisters(of: matches.map { DocumentRef(collection: collection, id: $0.key) }, writer: writer)
    }

    /// Reads the live bodies a WHERE may match: the one document of an `_id = constant`,
    /// those its pre-filter keeps, or the whole collection; each once per transaction.
    private mutating func readBodies(
        collection: String, predicate: Expression?, arguments: [String: Value], writer: PostgresInboundWriter
    ) async throws(ShoalError) {
        let name = Array(collection.utf8)
        guard !wholeCollections.contains(name) else { return }
        if let id = Evaluator.constantIDEquality(predicate, arguments: arguments) {
            let document = DocumentRef(collection: collection, id: DocumentKey.make(id))
            guard stored[document] == nil else { return }
            let bodies = try await writer.liveBodies(collection: collection, key: document.id)
            stored[document] = .some(bodies.first?.body)
            return
        }
        // Only the documents the WHERE may match, when part of it translates
        // (`PostgresFilter`): what the transaction reads of them is then enough to
        // decide this predicate, and `matching` decides it exactly.
        let filter = PreFilter.make(predicate, arguments: arguments, rules: PostgresFilter.rules)
        if let filter {
            guard !filtered.contains(Filtered(collection: name, filter: filter)) else { return }
        }
        for (key, body) in try await writer.liveBodies(collection: collection, key: nil, filter: filter) {
            stored[DocumentRef(collection: collection, id: key)] = .some(body)
        }
        if let filter {
            filtered.insert(Filtered(collection: name, filter: filter))
        } else {
            wholeCollections.insert(name)
        }
    }

    /// Reads the registers of the documents not held yet.
    private mutating func readRegisters(of wanted: [DocumentRef], writer: PostgresInboundWriter) async throws(ShoalError) {
        var seen: Set<DocumentRef> = []
        let missing = wanted.filter { documents[$0] == nil && seen.insert($0).inserted }
        guard !missing.isEmpty else { return }
        for (document, registers) in zip(missing, try await writer.registers(of: missing)) {
            documents[document] = Document(registers: registers)
        }
    }

    // MARK: LocalRows

    func registers(collection: String, key: String) throws -> DocumentRegisters {
        try held(DocumentRef(collection: collection, id: key)).registers
    }

    /// A hub evicts nothing, so keeps nothing aside.
    func remembered(collection: String, key: String) throws -> DocumentRegisters { DocumentRegisters() }

    func forgetRemembered(collection: String, key: String, kept: DocumentRegisters, now: DocumentRegisters) throws {}

    func liveBody(collection: String, key: String) throws -> [String: Value]? {
        let document = try held(DocumentRef(collection: collection, id: key))
        let body = try document.body ?? LocalWriteRules.materialize(document.registers, collection: collection, key: key)
        guard case .live(let json) = body else { return nil }
        return (try? JSON.parse(json).objectValue) ?? ["_id": (try? JSON.parse(key)) ?? .null]
    }

    func matching(
        collection: String, predicate: Expression?, orderBy: [OrderTerm], limit: Expression?, offset: Expression?,
        arguments: [String: Value]
    ) throws -> [(key: String, body: Value)] {
        try matching(
            collection: collection, predicate: predicate, orderBy: orderBy, limit: limit, offset: offset, arguments: arguments,
            unreadable: nil)
    }

    /// As `LocalRows.matching`, over the bodies read ahead and those the transaction
    /// wrote, in key order (byte by byte, as the primary key orders keys).
    func matching(
        collection: String, predicate: Expression?, orderBy: [OrderTerm], limit: Expression?, offset: Expression?,
        arguments: [String: Value], unreadable: ((String) -> Void)?
    ) throws -> [(key: String, body: Value)] {
        let name = Array(collection.utf8)
        var candidates: [DocumentRef]
        // A key lookup whenever the predicate names one `_id`, as SQLite's: compared by
        // bytes, not by DQL's `=`, which takes canonically equivalent strings for one.
        if let id = Evaluator.constantIDEquality(predicate, arguments: arguments) {
            candidates = [DocumentRef(collection: collection, id: DocumentKey.make(id))]
        } else {
            let read =
                wholeCollections.contains(name)
                || PreFilter.make(predicate, arguments: arguments, rules: PostgresFilter.rules).map {
                    filtered.contains(Filtered(collection: name, filter: $0))
                } == true
            guard read else {
                throw ShoalError(.database, "a hub's write read \(collection) before reading it ahead: this is a defect of Shoal")
            }
            var inCollection = Set(stored.keys.filter { Array($0.collection.utf8) == name })
            for (document, held) in documents where held.body != nil && Array(document.collection.utf8) == name {
                inCollection.insert(document)
            }
            candidates = inCollection.sorted { $0.id.utf8.lexicographicallyPrecedes($1.id.utf8) }
        }
        var match = try DocumentMatch(predicate: predicate, orderBy: orderBy, limit: limit, offset: offset, arguments: arguments)
        for document in candidates where match.wantsMore {
            let text: String?
            if let body = documents[document]?.body {
                guard case .live(let json) = body else { continue }
                text = json
            } else {
                text = stored[document] ?? nil
            }
            guard let text else { continue }
            try match.offer(key: document.id, body: { text }, unreadable: unreadable)
        }
        return try match.finish()
    }

    mutating func save(
        collection: String, key: String, written: [String: (state: RegisterState, index: UInt32)], registers: DocumentRegisters
    ) throws -> Int? {
        let ref = DocumentRef(collection: collection, id: key)
        var document = try held(ref)
        document.registers = registers
        for (name, write) in written { document.written[name] = write }
        let body = try LocalWriteRules.body(of: registers, collection: collection, key: key)
        document.body = body
        documents[ref] = document
        if case .live(let json) = body { return json.utf8.count }
        return nil
    }

    private func held(_ document: DocumentRef) throws -> Document {
        guard let held = documents[document] else {
            throw ShoalError(
                .database,
                "a hub's write used \(document.id) in \(document.collection) before reading it ahead: this is a defect of Shoal")
        }
        return held
    }

    // MARK: Commit

    /// What the transaction wrote as one apply: the log entries of `pending`, the
    /// registers written and the bodies, and the record of a committed local transaction.
    func appliedRows(_ id: TransactionID, pending: [LocalDelta]) throws -> AppliedRows {
        let count = UInt32(pending.count)
        let deltas = pending.enumerated().map { index, delta in
            Delta(
                collection: delta.collection, documentID: delta.key, field: delta.field, valueJSON: delta.json, timestamp: delta.ts,
                transaction: id, index: UInt32(index), count: count)
        }
        var written: [AppliedRows.Document] = []
        for (document, run, more) in LocalWriteRules.logRuns(pending) {
            let logged = Array(run) + more.flatMap { Array($0) }
            let held = try held(document)
            written.append(
                AppliedRows.Document(
                    document: document, deltaCount: UInt32(logged.count), logged: logged, won: held.written, body: held.body))
        }
        let manifest = CollectionCount.manifest(documents: written.map { ($0.document.collection, Int($0.deltaCount)) })
        let record = TransactionRecord(
            id: id, deltaCount: count, documentCount: UInt32(written.count), collections: manifest, state: .applied, firstSeen: 0)
        return AppliedRows(record: record, deltas: deltas, documents: written, dropBuffer: false, state: .applied, rest: [])
    }
}

extension PostgresInboundWriter {
    /// The live bodies of `collection` as stored (of the one document `key`, when
    /// given; of those `filter` keeps, when given), in key order, in one query.
    func liveBodies(collection: String, key: String?, filter: PreFilter? = nil) async throws(ShoalError) -> [(key: String, body: String)] {
        if key == nil { store.askForIndexes(collection: collection, filter: filter) }
        return try await access("reading documents of \(collection)") {
            var out: [(key: String, body: String)] = []
            try await PostgresStore.liveBodies(
                connection, of: collection, only: key, filter: filter, perQuery: nil, logger: store.logger
            ) { key, body in
                out.append((key, body))
                return true
            }
            return out
        }
    }

    /// A value of `shoal_meta`, as its BIGINT.
    func meta(_ key: String) async throws(ShoalError) -> Int64 {
        try await access("reading \(key)") {
            for value in try await query("SELECT value FROM shoal_meta WHERE key = \(key)").decode(Int64.self) {
                return value
            }
            throw ShoalError(.database, "the database has no \(key) row: is the schema migrated?")
        }
    }

    /// Sets a value of `shoal_meta`; with `raising`, only to a higher one.
    func setMeta(_ key: String, _ value: Int64, raising: Bool = false) async throws(ShoalError) {
        try await access("writing \(key)") {
            _ = try await query(
                raising
                    ? "UPDATE shoal_meta SET value = GREATEST(value, \(value)) WHERE key = \(key)"
                    : "UPDATE shoal_meta SET value = \(value) WHERE key = \(key)")
        }
    }
}

package import ShoalCRDT
package import ShoalStorage

/// What applying a received transaction writes, decided with no store: the deltas
/// given and those the buffer held, merged last-writer-wins into the registers read,
/// each delta logged once, each changed document's body rebuilt once and checked
/// against `DocumentLimits` before anything is written.
///
/// Two steps, because which registers to read depends on the deltas: `init` gathers
/// the deltas and the documents they touch (`documents`, whose registers the caller
/// reads), then `plan` merges and says what to write (`AppliedRows`) or why nothing
/// may be (`DocumentRefusal`). `InboundWriting.apply` runs both around a store's reads
/// and write; tests run them on values.
package struct InboundApplier: Sendable {
    package let record: TransactionRecord
    /// Every delta to apply, in index order: a delta given twice (buffered and again)
    /// is adjacent.
    package private(set) var deltas: [Delta]
    /// The documents the deltas and context fields touch, in the order met: the
    /// registers to read, and the order of the log's entries.
    package private(set) var documents: [DocumentRef] = []
    private var documentDeltaCounts: [DocumentRef: UInt32]
    private let context: [ContextField]
    /// Each delta's document, as its position in `documents`.
    private var deltaSlots: [Int] = []
    private var contextSlots: [Int] = []

    /// For `record`'s `deltas` (with `documentDeltaCounts`, each document's delta count
    /// in the transaction) and `context`, and what the buffer held of it (`buffered`),
    /// whose counts prevail.
    package init(
        _ record: TransactionRecord, deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32], context: [ContextField],
        buffered: BufferedPieces? = nil
    ) {
        self.record = record
        var deltas = deltas
        var counts = documentDeltaCounts
        var context = context
        if let buffered {
            counts.merge(buffered.documentDeltaCounts) { $1 }
            deltas += buffered.deltas
            context += buffered.context
        }
        // Deltas nearly always come in index order: sorting only when they do not spares
        // copying the caller's array (which `deltas` still shares) a delta at a time.
        if deltas.indices.dropFirst().contains(where: { deltas[$0 - 1].index > deltas[$0].index }) {
            deltas.sort { $0.index < $1.index }
        }
        self.deltas = deltas
        self.documentDeltaCounts = counts
        self.context = context
        var slots: [DocumentRef: Int] = [:]
        // Sized by what arrived, never by what the record claims: a peer may claim 2^32 - 1.
        slots.reserveCapacity(min(Int(record.documentCount), deltas.count))
        func slot(_ document: DocumentRef) -> Int {
            if let known = slots[document] { return known }
            documents.append(document)
            slots[document] = documents.count - 1
            return documents.count - 1
        }
        // A transaction's deltas come grouped by document: a run of one document's
        // deltas looks it up once.
        deltaSlots.reserveCapacity(deltas.count)
        // (Byte for byte, as `DocumentRef`'s `==` is: two canonically equivalent IDs are
        // two documents, which `String`'s `==` would take for one.)
        var run: (document: DocumentRef, slot: Int)?
        for delta in deltas {
            if let run, run.document.is(collection: delta.collection, id: delta.documentID) {
                deltaSlots.append(run.slot)
            } else {
                let document = DocumentRef(collection: delta.collection, id: delta.documentID)
                let s = slot(document)
                run = (document, s)
                deltaSlots.append(s)
            }
        }
        contextSlots = context.map { slot($0.document) }
    }

    /// What the apply decided.
    package enum Plan: Sendable {
        /// The rows to write, and the documents they make larger than the soft limit
        /// (with their bodies' bytes), to warn of.
        case write(AppliedRows, overSoftLimit: [(document: DocumentRef, bytes: Int)])
        /// A body this node cannot hold: nothing of the transaction may be written.
        case refuse(DocumentRefusal)
    }

    /// Merges the deltas and context fields into `registers` (those of `documents`, in
    /// order) and says what to write: each delta the log does not hold yet (`logged`,
    /// by document) is logged; every delta is merged, logged before or not (EVICT keeps
    /// the log but not the fields, and a refill must bring them back; a duplicate
    /// simply loses, at an equal version). `state` and `rest`: the record's new state
    /// and verdicts (nil: leave it as it is); `dropBuffer`: the buffer held some of it.
    package func plan(
        logged: [DocumentRef: Set<UInt32>], registers: consuming [DocumentRegisters], limits: DocumentLimits,
        state: TransactionRecord.State?, rest: [Verdict]?, dropBuffer: Bool
    ) throws(ShoalError) -> Plan {
        // Consumed, and merged in place: a copy would copy each document's registers at
        // its first merge.
        guard registers.count == documents.count else {
            throw ShoalError(
                .database, "the store read the registers of \(registers.count) documents for an apply that touches \(documents.count)")
        }
        var written = documents.map { document in
            let count = documentDeltaCounts[document] ?? 1
            return AppliedRows.Document(document: document, deltaCount: count, won: Dictionary(minimumCapacity: min(Int(count), deltas.count)))
        }
        for slot in written.indices {
            registers[slot].reserveCapacity(registers[slot].registers.count + min(Int(written[slot].deltaCount), deltas.count))
        }
        var previous: UInt32?
        for (position, delta) in deltas.enumerated() {
            let slot = deltaSlots[position]
            if delta.index != previous, logged.isEmpty || logged[documents[slot]]?.contains(delta.index) != true {
                written[slot].logged.append(position)
            }
            previous = delta.index
            let state = RegisterState(delta: delta, parsed: delta.parsed)
            if registers[slot].merge(delta.field, state) { written[slot].won[delta.field] = (state, delta.index) }
        }
        for (field, slot) in zip(context, contextSlots) {
            let state = RegisterState(delta: field.delta, parsed: field.delta.parsed)
            if registers[slot].merge(field.field, state) { written[slot].won[field.field] = (state, 0) }
        }
        var overSoftLimit: [(document: DocumentRef, bytes: Int)] = []
        for slot in written.indices where !written[slot].won.isEmpty {
            let document = documents[slot]
            if let refusal = limits.keyRefusal(collection: document.collection, id: document.id, fields: written[slot].won.keys) {
                return .refuse(DocumentRefusal(document: document, reason: refusal))
            }
            let body: DocumentRegisters.Body.Text
            do {
                body = try registers[slot].materializedJSON(key: document.id)
            } catch {
                throw ShoalError(.database, "a stored register of \(document.collection) \(document.id) is not valid JSON: \(error)")
            }
            if case .live(let json) = body {
                switch limits.check(body: json) {
                case .fits: break
                case .overSoft(let bytes): overSoftLimit.append((document, bytes))
                case .refused(let reason): return .refuse(DocumentRefusal(document: document, reason: reason))
                }
            }
            written[slot].body = body
        }
        return .write(
            AppliedRows(record: record, deltas: deltas, documents: written, dropBuffer: dropBuffer, state: state, rest: rest),
            overSoftLimit: overSoftLimit)
    }
}

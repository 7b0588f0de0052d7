package import ShoalCRDT

extension TransactionRecord {
    /// A waiting or partial transaction as the inbound pipeline takes it back from a
    /// store: its header and reports from what the store recorded, nothing held yet
    /// (`hold`, `holdLogged` add what the buffer or the log holds of it).
    package init(_ stored: StoredTransaction) {
        self.init(
            id: stored.id, deltaCount: stored.deltaCount, documentCount: stored.documentCount, collections: stored.collections,
            state: stored.state, firstSeen: stored.firstSeen, reports: stored.reports)
    }

    /// Notes that the node holds the deltas `indexes` of `document`, to which the
    /// transaction wrote `expected` deltas.
    package mutating func hold(_ document: DocumentRef, expected: UInt32, _ indexes: [UInt32]) {
        var progress = documents[document] ?? .init(expected: expected)
        progress.received.formUnion(indexes)
        documents[document] = progress
    }

    /// Notes every delta a row of the change log (`LogEntries`) holds of it.
    package mutating func holdLogged(_ entries: UnsafeRawBufferPointer) throws {
        try LogEntries.forEach(entries) { collection, id, documentDeltas, deltas in
            hold(DocumentRef(collection: collection, id: id), expected: documentDeltas, try PackedDeltas.indexes(deltas))
        }
    }
}

extension OriginHistory {
    /// The delta with the newest timestamp (the lowest index among equals) of the rows
    /// of the change log `entries` hold, or of index `only`, above `newest` so far.
    package static func newestDelta(
        in entries: UnsafeRawBufferPointer, only: UInt32? = nil, above newest: inout (index: UInt32, timestamp: UInt64)?
    ) throws {
        try LogEntries.forEach(entries) { _, _, _, deltas in
            try PackedDeltas.forEach(deltas) { index, timestamp, _, _ in
                if let only, index != only { return }
                if let held = newest, held.timestamp > timestamp || (held.timestamp == timestamp && held.index <= index) { return }
                newest = (index, timestamp)
            }
        }
    }
}

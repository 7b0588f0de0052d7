package import ShoalCRDT

/// One delta of the change log with the row it is stored in: what a store hands the
/// piece planner (ShoalSync's `PiecePlanner`) to turn into the pieces a peer gets.
package struct LogRow: Sendable, Hashable {
    /// The sequence of its row: every delta of a run of one transaction's documents shares it.
    package var sequence: UInt64
    package var delta: Delta
    /// How many deltas its transaction wrote to its document.
    package var documentDeltas: UInt32

    package init(sequence: UInt64, delta: Delta, documentDeltas: UInt32) {
        self.sequence = sequence
        self.delta = delta
        self.documentDeltas = documentDeltas
    }
}

/// A page of the change log as a store reads it (`SyncStore.logPage`), all in one
/// snapshot: whole rows, in log order; the transactions of the rows on either side of
/// it; and the records of the transactions it has rows of.
///
/// The records come from the same snapshot as the rows because the verdicts of a last
/// piece are made from them: a record read after a commit that completed a partial
/// transaction would vouch for deltas the page does not hold, and a peer would apply
/// that transaction without them.
package struct LogPage: Sendable, Hashable {
    package var rows: [LogRow]
    /// The transaction of the row after the page's last; nil at the log's end.
    package var next: TransactionID?
    /// The transaction of the row the page follows (sequence `after`); nil when there
    /// is none (the log's start, or compacted away).
    package var previous: TransactionID?
    /// What this node recorded of each transaction the page has rows of, when it did.
    package var records: [TransactionID: StoredTransaction]

    package init(
        rows: [LogRow], next: TransactionID?, previous: TransactionID? = nil, records: [TransactionID: StoredTransaction] = [:]
    ) {
        self.rows = rows
        self.next = next
        self.previous = previous
        self.records = records
    }
}

extension LogRow {
    /// Appends the deltas of one row of the log to `rows`, in stored order: the row's
    /// `sequence`, the `transaction` it is of (which wrote `deltaCount` deltas in all)
    /// and its `entries` (`LogEntries`). Returns how many.
    @discardableResult
    package static func decode(
        sequence: UInt64, transaction: TransactionID, deltaCount: UInt32, entries: UnsafeRawBufferPointer, into rows: inout [LogRow]
    ) throws -> Int {
        let before = rows.count
        try LogEntries.forEach(entries) { collection, documentID, documentDeltas, deltas in
            try PackedDeltas.forEach(deltas) { index, timestamp, name, value in
                rows.append(
                    LogRow(
                        sequence: sequence,
                        delta: Delta(
                            collection: collection, documentID: documentID, field: name, valueJSON: value,
                            timestamp: HybridTimestamp(rawValue: timestamp), transaction: transaction, index: index,
                            count: deltaCount),
                        documentDeltas: documentDeltas))
            }
        }
        return rows.count - before
    }
}

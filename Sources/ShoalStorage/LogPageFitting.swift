package import ShoalCRDT

/// What rows of the change log a page takes (`SyncStore.logPage`), the same for every
/// store: rows whole, until `limit` deltas, then more to finish the transaction the
/// limit falls in while within `stretch` deltas and `byteLimit` bytes of values, and
/// one row at least, whatever its size.
package struct LogPageFitting {
    let limit: Int
    let stretch: Int
    let byteLimit: Int
    /// The page's rows so far.
    package private(set) var rows: [LogRow] = []
    /// The transaction of the first row left out; nil while every row fitted.
    package private(set) var next: TransactionID?
    private var bytes = 0

    package init(limit: Int, stretch: Int, byteLimit: Int) {
        self.limit = limit
        self.stretch = stretch
        self.byteLimit = byteLimit
        rows.reserveCapacity(min(limit, 4096))
    }

    /// Offers the next row of the log, which `decode` appends (returning how many deltas):
    /// decoded onto the page's end, and taken off again when it does not fit. Returns
    /// false once the page is full (`next` names the row's transaction): offer no more.
    package mutating func offer(_ decode: (inout [LogRow]) throws -> Int) rethrows -> Bool {
        let start = rows.count
        let previous = rows.last?.delta.transaction
        guard try decode(&rows) > 0 else { return true }
        let first = rows[start]
        var size = 0
        for i in start..<rows.count { size += rows[i].delta.valueJSON.utf8.count }
        let full = start >= limit && first.delta.transaction != previous
        if start > 0 && (full || rows.count > stretch || bytes + size > byteLimit) {
            next = first.delta.transaction
            rows.removeSubrange(start...)
            return false
        }
        bytes += size
        return true
    }
}

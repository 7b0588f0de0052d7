package import ShoalCRDT

/// The rules of change-log compaction and of forgetting deleted documents, for an
/// engine that decides them in Swift (PostgreSQL; SQLite states the same rules in SQL,
/// `DocumentStore+Compaction.swift`, and the conformance suites run both).
///
/// A transaction's entry for a document is *superseded* when each register it wrote
/// now holds another transaction's write, or the document's tombstone, written by
/// another transaction, is at least as new (a DELETE hides it for ever). A transaction
/// leaves the log only whole: when every entry of it is superseded and all its rows
/// lie at or below the compaction point, and never the log's last transaction.
///
/// Documents and registers are told apart byte by byte (`DocumentBytes`,
/// `RegisterKey`), as the tables tell them apart.
package enum LogCompaction {
    /// What compaction needs of a register: which transaction wrote it, and when.
    package struct RegisterWriter: Sendable, Hashable {
        package var transaction: TransactionID
        package var timestamp: HybridTimestamp

        package init(transaction: TransactionID, timestamp: HybridTimestamp) {
            self.transaction = transaction
            self.timestamp = timestamp
        }
    }

    /// One transaction's writes to one document, as its log rows hold them.
    package struct Entry: Sendable {
        package var document: DocumentRef
        package var writes: [(field: String, timestamp: HybridTimestamp)]
    }

    /// A logged transaction as compaction sees it: its entries, by document in log
    /// order, and its highest row.
    package struct Logged: Sendable {
        package var id: TransactionID
        package var entries: [Entry] = []
        package var highestSequence: UInt64 = 0

        /// The documents it wrote.
        package var documents: Set<DocumentBytes> { Set(entries.map { DocumentBytes($0.document) }) }
    }

    /// Groups log rows (whole transactions' rows, in log order) by transaction and
    /// document.
    package static func transactions(of rows: [LogRow]) -> [Logged] {
        var order: [TransactionID] = []
        var logged: [TransactionID: Logged] = [:]
        for row in rows {
            let id = row.delta.transaction
            if logged[id] == nil {
                order.append(id)
                logged[id] = Logged(id: id)
            }
            let document = DocumentRef(collection: row.delta.collection, id: row.delta.documentID)
            let write = (field: row.delta.field, timestamp: row.delta.timestamp)
            logged[id]!.highestSequence = max(logged[id]!.highestSequence, row.sequence)
            if let last = logged[id]!.entries.last, DocumentBytes(last.document) == DocumentBytes(document) {
                logged[id]!.entries[logged[id]!.entries.count - 1].writes.append(write)
            } else {
                logged[id]!.entries.append(Entry(document: document, writes: [write]))
            }
        }
        return order.map { logged[$0]! }
    }

    /// Whether `entry` of `transaction` is superseded by the current `registers`.
    package static func isSuperseded(_ entry: Entry, of transaction: TransactionID, registers: [RegisterKey: RegisterWriter]) -> Bool {
        entry.writes.allSatisfy { !superseding($0, of: entry.document, by: transaction, registers: registers).isEmpty }
    }

    /// The transactions whose registers supersede `write` of `transaction` to `document`:
    /// the field's writer, and the tombstone's when it is at least as new, other than
    /// `transaction`.
    static func superseding(
        _ write: (field: String, timestamp: HybridTimestamp), of document: DocumentRef, by transaction: TransactionID,
        registers: [RegisterKey: RegisterWriter]
    ) -> Set<TransactionID> {
        var by: Set<TransactionID> = []
        if let register = registers[RegisterKey(document, write.field)], register.transaction != transaction {
            by.insert(register.transaction)
        }
        if let tombstone = registers[RegisterKey(document, RegisterName.tombstone)], tombstone.transaction != transaction,
            tombstone.timestamp >= write.timestamp
        {
            by.insert(tombstone.transaction)
        }
        return by
    }

    /// What superseded the entries of `logged`, by collection: recorded in its `txn`
    /// row before it leaves the log (`recorded(_:adding:)`).
    package static func supersession(of logged: Logged, registers: [RegisterKey: RegisterWriter]) -> [String: Set<TransactionID>] {
        var by: [String: Set<TransactionID>] = [:]
        for entry in logged.entries {
            for write in entry.writes {
                let writers = superseding(write, of: entry.document, by: logged.id, registers: registers)
                if !writers.isEmpty { by[entry.document.collection, default: []].formUnion(writers) }
            }
        }
        return by
    }

    /// What compaction recorded of a transaction (its `txn` row's `supersession`, encoded
    /// verdicts) with, per collection, the transactions that superseded it
    /// (`SUPERSEDED`; `UNKNOWN` past `StoredTransaction.supersessionLimit` of them), so
    /// that a peer that asks about it later (holding it in part: PROTOCOL.md 8.8, 8.9)
    /// learns what to apply to complete it, instead of nothing to go on.
    ///
    /// Kept apart from the `rest` an apply recorded: an `UNKNOWN` there says this node
    /// may lack documents of the collection, one here says it held them and compaction
    /// took them out, and only the first leaves out what an offer should bring
    /// (PROTOCOL.md 8.11).
    package static func recorded(_ supersession: String, adding by: [String: Set<TransactionID>]) -> String {
        var verdicts = Verdict.decode(supersession)
        for (collection, writers) in by.sorted(by: { $0.key < $1.key }) {
            verdicts.append(
                writers.count > StoredTransaction.supersessionLimit
                    ? Verdict(collection: collection, coverage: .unknown)
                    : Verdict(collection: collection, coverage: .superseded(writers.sorted())))
        }
        return Verdict.encode(verdicts)
    }

    /// Of `candidates` (deleted documents past the horizon), those that may be forgotten:
    /// every logged transaction that wrote one (`writers`) may leave with it, lying at
    /// or below `point` and holding nothing else current (each other entry superseded,
    /// or of a document forgotten with it). Dropping one candidate can keep another's
    /// transaction, so it repeats until nothing changes.
    package static func forgettable(
        _ candidates: [DocumentRef], writers: [Logged], point: UInt64, registers: [RegisterKey: RegisterWriter]
    ) -> [DocumentRef] {
        struct Judged {
            var documents: Set<DocumentBytes>
            var highest: UInt64
            var current: Set<DocumentBytes>
        }
        let judged = writers.map { logged in
            Judged(
                documents: logged.documents, highest: logged.highestSequence,
                current: Set(
                    logged.entries.filter { !isSuperseded($0, of: logged.id, registers: registers) }.map { DocumentBytes($0.document) }))
        }
        var forget = Set(candidates.map(DocumentBytes.init))
        var changed = true
        while changed {
            changed = false
            for logged in judged where !logged.documents.isDisjoint(with: forget) {
                if !(logged.highest <= point && logged.current.isSubset(of: forget)) {
                    let kept = logged.documents.intersection(forget)
                    forget.subtract(kept)
                    changed = changed || !kept.isEmpty
                }
            }
        }
        return candidates.filter { forget.contains(DocumentBytes($0)) }
    }
}

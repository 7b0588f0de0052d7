import ShoalCRDT
import ShoalStorage
import GRDB

/// One row of `txn_piece`, the durable buffer: a delta of a transaction waiting for
/// coverage. The apply that empties the buffer and the record read back after a
/// restart both read it through here.
struct BufferedDelta: Sendable {
    var index: UInt32
    var document: DocumentRef
    /// How many deltas the transaction wrote to the document.
    var documentDeltas: UInt32
    var field: String
    var valueJSON: String
    var timestamp: HybridTimestamp

    static let table = "txn_piece"

    enum Column: Int32, HotColumn {
        case index, collection, documentID, documentDeltas, field, value, timestamp

        var name: String {
            switch self {
            case .index: "idx"
            case .collection: "collection"
            case .documentID: "doc_id"
            case .documentDeltas: "doc_deltas"
            case .field: "name"
            case .value: "value"
            case .timestamp: "ts"
            }
        }
    }

    static let ofTransaction = "SELECT \(Column.selection) FROM txn_piece WHERE origin = ? AND seq = ? ORDER BY idx"

    init(_ row: HotStatement.Row) throws(ShoalError) {
        index = try row.unsigned(Column.index, of: Self.table)
        document = DocumentRef(collection: row.text(Column.collection), id: row.text(Column.documentID))
        documentDeltas = try row.unsigned(Column.documentDeltas, of: Self.table)
        field = row.text(Column.field)
        valueJSON = row.text(Column.value)
        timestamp = HybridTimestamp(rawValue: row.bitPattern(Column.timestamp))
    }

    /// As a delta of transaction `id`, which wrote `count` deltas in all.
    func delta(of id: TransactionID, count: UInt32) -> Delta {
        Delta(
            collection: document.collection, documentID: document.id, field: field, valueJSON: valueJSON,
            timestamp: timestamp, transaction: id, index: index, count: count)
    }

    /// Every buffered delta of transaction `id`, in index order.
    static func forEach(_ db: Database, of id: TransactionID, _ body: (BufferedDelta) throws -> Void) throws {
        var statement = try HotStatement(db, sql: ofTransaction, transaction: id)
        try statement.query { row in
            try body(BufferedDelta(row))
            return true
        }
    }
}

/// One row of `txn_context`: a context field that came with a waiting transaction.
struct BufferedContextField: Sendable {
    var field: ContextField

    static let table = "txn_context"

    enum Column: Int32, HotColumn {
        case collection, documentID, field, value, timestamp, origin, sequence

        var name: String {
            switch self {
            case .collection: "collection"
            case .documentID: "doc_id"
            case .field: "name"
            case .value: "value"
            case .timestamp: "ts"
            case .origin: "src_origin"
            case .sequence: "src_seq"
            }
        }
    }

    static let ofTransaction = "SELECT \(Column.selection) FROM txn_context WHERE origin = ? AND seq = ?"

    init(_ row: HotStatement.Row) throws(ShoalError) {
        field = ContextField(
            document: DocumentRef(collection: row.text(Column.collection), id: row.text(Column.documentID)),
            field: row.text(Column.field), valueJSON: row.text(Column.value),
            timestamp: HybridTimestamp(rawValue: row.bitPattern(Column.timestamp)),
            transaction: TransactionID(
                origin: SiteID(row.bitPattern(Column.origin)), sequence: try row.unsigned(Column.sequence, of: Self.table)))
    }

    /// Every buffered context field of transaction `id`.
    static func forEach(_ db: Database, of id: TransactionID, _ body: (ContextField) throws -> Void) throws {
        var statement = try HotStatement(db, sql: ofTransaction, transaction: id)
        try statement.query { row in
            try body(BufferedContextField(row).field)
            return true
        }
    }
}

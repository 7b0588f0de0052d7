import Logging
import NIOCore
import ShoalCRDT
import ShoalStorage
import PostgresNIO

/// The rows `PostgresStore` reads, each shape with one decoder that names its columns.
extension PostgresStore {
    /// One row of `change_log`: a run of one transaction's documents, its entries packed.
    struct LogRecord: Sendable {
        var sequence: UInt64
        var transaction: TransactionID
        var deltaCount: UInt32
        var entries: ByteBuffer

        /// Appends its deltas to `rows`, in stored order; returns how many.
        @discardableResult
        func decode(into rows: inout [LogRow]) throws -> Int {
            do {
                return try entries.withUnsafeReadableBytes { bytes in
                    try LogRow.decode(sequence: sequence, transaction: transaction, deltaCount: deltaCount, entries: bytes, into: &rows)
                }
            } catch {
                throw ShoalError(.database, "change_log row \(sequence) does not decode: \(error)")
            }
        }
    }

    /// The rows of `change_log` that `condition` (SQL after WHERE, values written in
    /// by the caller: integers only) picks, in the order it gives.
    static func logRows(_ connection: HubConnection, _ condition: String, logger: Logger) async throws -> [LogRecord] {
        let rows = try await connection.query(
            PostgresQuery(unsafeSQL: "SELECT seq, txn_site, txn_seq, txn_count, entries FROM change_log WHERE \(condition)"),
            logger: logger)
        var records: [LogRecord] = []
        for (seq, site, sequence, count, entries) in try rows.decode((Int64, Int64, Int64, Int64, ByteBuffer).self) {
            records.append(
                LogRecord(
                    sequence: try Stored.unsigned(seq, "change_log", "seq"),
                    transaction: TransactionID(
                        origin: SiteID(UInt64(bitPattern: site)), sequence: try Stored.unsigned(sequence, "change_log", "txn_seq")),
                    deltaCount: try Stored.unsigned(count, "change_log", "txn_count"), entries: entries))
        }
        return records
    }

    /// The records of `txn` of the transactions `ids` (one with none is left out).
    static func storedTransactions(
        _ connection: HubConnection, _ ids: [TransactionID], logger: Logger
    ) async throws -> [TransactionID: StoredTransaction] {
        guard !ids.isEmpty else { return [:] }
        let (sites, sequences) = columns(ids)
        var binds = PostgresBindings()
        binds.append(sites)
        binds.append(sequences)
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: "\(StoredTransactionRow.select) WHERE (origin, seq) IN (SELECT * FROM UNNEST($1::bigint[], $2::bigint[]))",
                binds: binds), logger: logger)
        var records: [TransactionID: StoredTransaction] = [:]
        for row in try rows.decode(StoredTransactionRow.Columns.self) {
            let record = try StoredTransactionRow.make(row)
            records[record.id] = record
        }
        return records
    }

    /// The registers of `documents`, each document's in name order (a document with
    /// none is left out). A collection whose name holds U+0000 holds none on a hub
    /// (`DocumentLimits.collectionNamesHoldNul`), and PostgreSQL's text could not even
    /// name it in a query: such a document is left out unasked, so that the transaction
    /// writing it is planned, and refused whole.
    static func registerRows(
        _ connection: HubConnection, of documents: [DocumentRef], logger: Logger
    ) async throws -> [DocumentRef: [FieldRecord]] {
        let documents = documents.filter { !$0.collection.utf8.contains(0) }
        guard !documents.isEmpty else { return [:] }
        let collections = documents.map(\.collection), keys = documents.map(\.id)
        let rows = try await connection.query(
            """
            SELECT f.collection, f.doc_id, f.name, f.value, f.ts, f.site, f.txn_site, f.txn_seq
            FROM (SELECT DISTINCT * FROM UNNEST(\(collections)::text[], \(keys)::text[])) AS t(c, k)
            JOIN field f ON f.collection = t.c AND f.doc_id = t.k
            ORDER BY f.collection, f.doc_id, f.name
            """, logger: logger)
        var fields: [DocumentRef: [FieldRecord]] = [:]
        for (collection, key, name, value, ts, site, txnSite, txnSeq) in try rows.decode(
            (String, String, ByteBuffer, String, Int64, Int64, Int64, Int64).self)
        {
            let state = RegisterState(
                json: value,
                version: RegisterVersion(timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: ts)), site: SiteID(UInt64(bitPattern: site))),
                transaction: TransactionID(origin: SiteID(UInt64(bitPattern: txnSite)), sequence: try Stored.unsigned(txnSeq, "field", "txn_seq")))
            fields[DocumentRef(collection: collection, id: key), default: []].append(FieldRecord(name: Stored.name(name), state: state))
        }
        return fields
    }

    /// A delta of the durable buffer, with its document and how many deltas its
    /// transaction wrote to that document.
    struct BufferedRow {
        var document: DocumentRef
        var documentDeltas: UInt32
        var delta: Delta
    }

    /// What the durable buffer holds of transaction `id`, in index order.
    static func bufferedDeltas(
        _ connection: HubConnection, of id: TransactionID, deltaCount: UInt32 = 0, logger: Logger
    ) async throws -> [BufferedRow] {
        let rows = try await connection.query(
            """
            SELECT idx, collection, doc_id, doc_deltas, name, value, ts FROM txn_piece
            WHERE origin = \(Int64(bitPattern: id.origin.rawValue)) AND seq = \(Int64(bitPattern: id.sequence)) ORDER BY idx
            """, logger: logger)
        var buffered: [BufferedRow] = []
        for (index, collection, key, documentDeltas, name, value, ts) in try rows.decode(
            (Int64, String, String, Int64, ByteBuffer, String, Int64).self)
        {
            let document = DocumentRef(collection: collection, id: key)
            buffered.append(
                BufferedRow(
                    document: document, documentDeltas: try Stored.unsigned(documentDeltas, "txn_piece", "doc_deltas"),
                    delta: Delta(
                        collection: collection, documentID: key, field: Stored.name(name), valueJSON: value,
                        timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: ts)), transaction: id,
                        index: try Stored.unsigned(index, "txn_piece", "idx"), count: deltaCount)))
        }
        return buffered
    }

    /// The context fields the durable buffer holds for transaction `id`.
    static func bufferedContext(_ connection: HubConnection, of id: TransactionID, logger: Logger) async throws -> [ContextField] {
        let rows = try await connection.query(
            """
            SELECT collection, doc_id, name, value, ts, src_origin, src_seq FROM txn_context
            WHERE origin = \(Int64(bitPattern: id.origin.rawValue)) AND seq = \(Int64(bitPattern: id.sequence))
            ORDER BY collection, doc_id, name
            """, logger: logger)
        var context: [ContextField] = []
        for (collection, key, name, value, ts, origin, sequence) in try rows.decode(
            (String, String, ByteBuffer, String, Int64, Int64, Int64).self)
        {
            context.append(
                ContextField(
                    document: DocumentRef(collection: collection, id: key), field: Stored.name(name), valueJSON: value,
                    timestamp: HybridTimestamp(rawValue: UInt64(bitPattern: ts)),
                    transaction: TransactionID(
                        origin: SiteID(UInt64(bitPattern: origin)), sequence: try Stored.unsigned(sequence, "txn_context", "src_seq"))))
        }
        return context
    }
}

/// A row of `txn` (`StoredTransaction`), read by its columns' names.
enum StoredTransactionRow {
    static let select = """
        SELECT origin, seq, delta_count, document_count, collections, state, rest, reports, first_seen, supersession FROM txn
        """
    typealias Columns = (Int64, Int64, Int64, Int64, String, Int64, String, String, Int64, String)

    static func make(_ row: Columns) throws -> StoredTransaction {
        let id = TransactionID(origin: SiteID(UInt64(bitPattern: row.0)), sequence: try Stored.unsigned(row.1, "txn", "seq"))
        guard let state = Int(exactly: row.5).flatMap(TransactionRecord.State.init(rawValue:)) else {
            throw ShoalError(.database, "table txn, column state holds \(row.5) for transaction \(id), where 0 to 3 belongs")
        }
        return StoredTransaction(
            id: id, deltaCount: try Stored.unsigned(row.2, "txn", "delta_count"),
            documentCount: try Stored.unsigned(row.3, "txn", "document_count"), collections: CollectionCount.decode(row.4) ?? [],
            state: state, rest: Verdict.decode(row.6) + Verdict.decode(row.9), reports: TransactionRecord.Report.decode(row.7),
            firstSeen: UInt64(bitPattern: row.8))
    }
}

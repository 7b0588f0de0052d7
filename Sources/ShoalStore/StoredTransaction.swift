import ShoalCRDT
import ShoalStorage
import GRDB

extension StoredTransaction {
    static let table = "txn"

    enum Column: Int32, HotColumn {
        case origin, sequence, deltaCount, documentCount, collections, state, rest, reports, firstSeen, supersession

        var name: String {
            switch self {
            case .origin: "origin"
            case .sequence: "seq"
            case .deltaCount: "delta_count"
            case .documentCount: "document_count"
            case .collections: "collections"
            case .state: "state"
            case .rest: "rest"
            case .reports: "reports"
            case .firstSeen: "first_seen"
            case .supersession: "supersession"
            }
        }
    }

    static let select = "SELECT \(Column.selection) FROM txn"
    static let byID = "\(select) WHERE origin = ? AND seq = ?"
    static let unfinishedSQL = "\(select) WHERE state IN (0, 2)"

    init(_ row: HotStatement.Row) throws(ShoalError) {
        let id = TransactionID(origin: SiteID(row.bitPattern(Column.origin)), sequence: try row.unsigned(Column.sequence, of: Self.table))
        self.init(
            id: id, deltaCount: try row.unsigned(Column.deltaCount, of: Self.table),
            documentCount: try row.unsigned(Column.documentCount, of: Self.table),
            collections: CollectionCount.decode(row.text(Column.collections)) ?? [],
            state: try Self.state(row.int64(Column.state), of: id),
            rest: Verdict.decode(row.text(Column.rest)) + Verdict.decode(row.text(Column.supersession)),
            reports: TransactionRecord.Report.decode(row.text(Column.reports)),
            firstSeen: try row.unsigned(Column.firstSeen, of: Self.table))
    }

    /// A value of column `state` as the state it stands for.
    static func state(_ value: Int64, of id: TransactionID) throws(ShoalError) -> TransactionRecord.State {
        guard let state = Int(exactly: value).flatMap(TransactionRecord.State.init(rawValue:)) else {
            throw ShoalError(
                .database,
                "table txn, column state holds \(value) for transaction \(id), where 0 to 3 belongs: \(StoredInteger.damaged)")
        }
        return state
    }

    /// The row of transaction `id`, nil when this node has none.
    static func fetch(_ db: Database, _ id: TransactionID) throws -> StoredTransaction? {
        var statement = try HotStatement(db, sql: byID, transaction: id)
        var found: StoredTransaction?
        try statement.query { row in
            found = try StoredTransaction(row)
            return false
        }
        return found
    }

    /// Every transaction waiting or partial: what the inbound pipeline starts from.
    static func unfinished(_ db: Database) throws -> [StoredTransaction] {
        var statement = try HotStatement(db, sql: unfinishedSQL)
        var found: [StoredTransaction] = []
        try statement.query { row in
            found.append(try StoredTransaction(row))
            return true
        }
        return found
    }
}

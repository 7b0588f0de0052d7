import ShoalCRDT
import ShoalStorage
import GRDB
import GRDBSQLite

/// The statements run once per field or per delta (register upserts, change-log
/// appends, register loads) bind their parameters straight through SQLite's C API.
///
/// GRDB's `execute(arguments:)` builds a `StatementArguments` array of existentials
/// for every call and checks it against the statement; at six fields a document and
/// three statements a field that was a quarter of a local write's time. These
/// statements are still prepared and cached by GRDB (`cachedStatement`); only binding
/// and stepping skip it. Shoal uses no GRDB observation, which is the one thing that
/// needs GRDB to see each execution.
///
/// Every C call's result code is checked: a bind, a step or a reset that fails throws
/// a `DatabaseError` with SQLite's code and message and the statement's SQL.
struct HotStatement {
    let statement: Statement
    private var handle: OpaquePointer { statement.sqliteStatement }
    private var index: Int32 = 0

    init(_ db: Database, sql: String) throws {
        statement = try db.cachedStatement(sql: sql)
    }

    /// `sql`, whose first two parameters are a transaction's origin and sequence, with
    /// those of `id` bound.
    init(_ db: Database, sql: String, transaction id: TransactionID) throws {
        try self.init(db, sql: sql)
        try bind(id.origin.rawValue)
        try bind(id.sequence)
    }

    /// Binds the next parameter.
    mutating func bind(_ text: String) throws {
        index += 1
        var text = text
        let handle = handle, index = index
        let code = text.withUTF8 { bytes in
            if let base = bytes.baseAddress, !bytes.isEmpty {
                base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                    sqlite3_bind_text(handle, index, $0, Int32(bytes.count), Self.transient)
                }
            } else {
                sqlite3_bind_text(handle, index, "", 0, nil)
            }
        }
        try check(code, binding: index)
    }

    mutating func bind(_ bytes: [UInt8]) throws {
        index += 1
        let handle = handle, index = index
        let code = bytes.withUnsafeBytes { raw in
            // A zero-length blob still binds a blob, not NULL.
            sqlite3_bind_blob(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(raw.count), Self.transient)
        }
        try check(code, binding: index)
    }

    mutating func bind(_ integer: Int64) throws {
        index += 1
        try check(sqlite3_bind_int64(handle, index, integer), binding: index)
    }

    mutating func bind(_ integer: Int) throws { try bind(Int64(integer)) }

    mutating func bind(_ integer: UInt64) throws { try bind(Int64(bitPattern: integer)) }

    /// Runs a statement that returns no row, with the parameters bound so far, and
    /// makes it ready to bind again.
    mutating func run() throws {
        let code = sqlite3_step(handle)
        guard code == SQLITE_DONE else { throw failed(code) }
        try reset()
    }

    /// Runs a query, handing each row to `row` until it returns false or the rows
    /// end, and makes the statement ready to bind again.
    mutating func query(_ row: (Row) throws -> Bool) throws {
        while true {
            let code = sqlite3_step(handle)
            if code == SQLITE_DONE { break }
            guard code == SQLITE_ROW else { throw failed(code) }
            let more: Bool
            do {
                more = try row(Row(handle))
            } catch {
                abandon()
                throw error
            }
            if !more { break }
        }
        try reset()
    }

    /// Makes the statement ready to bind again; throws what SQLite says went wrong.
    private mutating func reset() throws {
        index = 0
        let code = sqlite3_reset(handle)
        guard code == SQLITE_OK else { throw error(code) }
    }

    /// A failed step's error, read before the statement is reset (SQLite's reset gives
    /// the same code again, which adds nothing).
    private mutating func failed(_ code: Int32) -> DatabaseError {
        let error = error(code)
        abandon()
        return error
    }

    /// Resets the statement on the way out of a failure already being thrown.
    private mutating func abandon() {
        index = 0
        _ = sqlite3_reset(handle)
    }

    private mutating func check(_ code: Int32, binding parameter: Int32) throws {
        guard code != SQLITE_OK else { return }
        let error = error(code, detail: "binding parameter \(parameter)")
        abandon()
        throw error
    }

    private func error(_ code: Int32, detail: String? = nil) -> DatabaseError {
        let connection = sqlite3_db_handle(handle)
        var message = connection.map { String(cString: sqlite3_errmsg($0)) }
        if let detail { message = "\(message ?? "error") (\(detail))" }
        return DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: statement.sql)
    }

    /// SQLite copies the bytes it is given: Swift strings do not outlive the call.
    private static let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

    /// A row being stepped over, valid until the next step. Records read it through
    /// their own `Column` enums (`HotColumn`): a column's position is its case's.
    struct Row {
        let handle: OpaquePointer
        init(_ handle: OpaquePointer) { self.handle = handle }

        func text(_ column: some HotColumn) -> String {
            guard let bytes = sqlite3_column_text(handle, column.rawValue) else { return "" }
            let count = Int(sqlite3_column_bytes(handle, column.rawValue))
            return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
        }

        func int64(_ column: some HotColumn) -> Int64 { sqlite3_column_int64(handle, column.rawValue) }

        /// An unsigned 64-bit value stored as its `Int64` bit pattern (site IDs, timestamps).
        func bitPattern(_ column: some HotColumn) -> UInt64 { UInt64(bitPattern: int64(column)) }

        /// A count or a sequence: a negative or too large value throws, naming `table` and the column.
        func unsigned<T: FixedWidthInteger & UnsignedInteger>(
            _ column: some HotColumn, of table: String, as type: T.Type = T.self
        ) throws(ShoalError) -> T {
            try StoredInteger.unsigned(int64(column), table: table, column: column.name)
        }

        /// A blob column's bytes, valid until the next step.
        func blob(_ column: some HotColumn) -> UnsafeRawBufferPointer {
            let bytes = sqlite3_column_blob(handle, column.rawValue)
            let count = Int(sqlite3_column_bytes(handle, column.rawValue))
            guard let bytes, count > 0 else { return UnsafeRawBufferPointer(start: nil, count: 0) }
            return UnsafeRawBufferPointer(start: bytes, count: count)
        }

        func isNull(_ column: some HotColumn) -> Bool { sqlite3_column_type(handle, column.rawValue) == SQLITE_NULL }
    }
}

/// The columns a record reads through a `HotStatement`, in the order of its SELECT
/// list: a case's raw value is its position, and `selection` writes the list, so
/// the two cannot drift apart.
protocol HotColumn: CaseIterable, RawRepresentable where RawValue == Int32 {
    /// The column's name, or the SQL expression it is read from.
    var name: String { get }
}

extension HotColumn {
    /// Every column, in order, for a SELECT list.
    static var selection: String { allCases.map(\.name).joined(separator: ", ") }
}

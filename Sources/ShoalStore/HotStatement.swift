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
struct HotStatement {
    let statement: Statement
    private var handle: OpaquePointer { statement.sqliteStatement }
    private var index: Int32 = 0

    init(_ db: Database, sql: String) throws {
        statement = try db.cachedStatement(sql: sql)
    }

    /// Binds the next parameter.
    mutating func bind(_ text: String) {
        index += 1
        var text = text
        let handle = handle, index = index
        text.withUTF8 { bytes in
            if let base = bytes.baseAddress, !bytes.isEmpty {
                base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                    _ = sqlite3_bind_text(handle, index, $0, Int32(bytes.count), Self.transient)
                }
            } else {
                _ = sqlite3_bind_text(handle, index, "", 0, nil)
            }
        }
    }

    mutating func bind(_ bytes: [UInt8]) {
        index += 1
        let handle = handle, index = index
        bytes.withUnsafeBytes { raw in
            // A zero-length blob still binds a blob, not NULL.
            _ = sqlite3_bind_blob(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(raw.count), Self.transient)
        }
    }

    mutating func bind(_ integer: Int64) {
        index += 1
        sqlite3_bind_int64(handle, index, integer)
    }

    mutating func bind(_ integer: Int) { bind(Int64(integer)) }

    mutating func bind(_ integer: UInt64) { bind(Int64(bitPattern: integer)) }

    /// Runs a statement that returns no row, with the parameters bound so far, and
    /// makes it ready to bind again.
    mutating func run() throws {
        defer { reset() }
        let code = sqlite3_step(handle)
        guard code == SQLITE_DONE else { throw error(code) }
    }

    /// Runs a query, handing each row to `row` until it returns false or the rows
    /// end, and makes the statement ready to bind again.
    mutating func query(_ row: (Row) throws -> Bool) throws {
        defer { reset() }
        while true {
            let code = sqlite3_step(handle)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW else { throw error(code) }
            guard try row(Row(handle)) else { return }
        }
    }

    private mutating func reset() {
        sqlite3_reset(handle)
        index = 0
    }

    private func error(_ code: Int32) -> DatabaseError {
        let connection = sqlite3_db_handle(handle)
        let message = connection.map { String(cString: sqlite3_errmsg($0)) }
        return DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: statement.sql)
    }

    /// SQLite copies the bytes it is given: Swift strings do not outlive the call.
    private static let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

    /// A row being stepped over: columns read by position, valid until the next step.
    struct Row {
        let handle: OpaquePointer
        init(_ handle: OpaquePointer) { self.handle = handle }

        func text(_ column: Int32) -> String {
            guard let bytes = sqlite3_column_text(handle, column) else { return "" }
            let count = Int(sqlite3_column_bytes(handle, column))
            return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
        }

        func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

        /// A blob column's bytes, valid until the next step.
        func blob(_ column: Int32) -> UnsafeRawBufferPointer {
            let bytes = sqlite3_column_blob(handle, column)
            let count = Int(sqlite3_column_bytes(handle, column))
            guard let bytes, count > 0 else { return UnsafeRawBufferPointer(start: nil, count: 0) }
            return UnsafeRawBufferPointer(start: bytes, count: count)
        }

        func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    }
}

import GRDB
import ShoalStorage

/// A row of one table (or one query's result) decoded by column name, every
/// conversion checked: what no version of Shoal writes (a NULL where a value belongs,
/// a negative count) throws a `ShoalError` naming the table and the column, where a
/// subscript of GRDB's `Row` would trap.
///
/// Records decode themselves through it in their `init(row:)`, by their `Columns`.
struct StoredRow {
    let row: Row
    /// The table, or what the query reads, for errors.
    let table: String

    init(_ row: Row, of table: String) {
        self.row = row
        self.table = table
    }

    /// The value of `column` (an optional type takes NULL as nil).
    func value<Value: DatabaseValueConvertible>(_ column: some ColumnExpression, as type: Value.Type = Value.self) throws -> Value {
        do {
            return try row.decode(Value.self, forColumn: column)
        } catch {
            throw ShoalError(
                .database,
                "table \(table), column \(column.name) holds no \(Value.self) (\(error)): \(StoredInteger.damaged)")
        }
    }

    /// A count, a sequence or a time: a negative or too large value throws.
    func unsigned<T: FixedWidthInteger & UnsignedInteger>(_ column: some ColumnExpression, as type: T.Type = T.self) throws -> T {
        try StoredInteger.unsigned(value(column, as: Int64.self), table: table, column: column.name)
    }

    /// A length or a number of things, as an `Int`: a negative value throws.
    func count(_ column: some ColumnExpression) throws -> Int {
        Int(try unsigned(column, as: UInt64.self) & UInt64(Int64.max))
    }

    /// An unsigned 64-bit value stored as its `Int64` bit pattern (site IDs, timestamps).
    func bitPattern(_ column: some ColumnExpression) throws -> UInt64 {
        UInt64(bitPattern: try value(column, as: Int64.self))
    }
}

/// The conversions from SQLite's signed integers to the unsigned ones Shoal stores.
///
/// Site IDs and timestamps are `UInt64` bit patterns, any `Int64` a valid one; counts,
/// indexes, sequences and times in milliseconds are written as the non-negative
/// `Int64` they are, and read back checked.
enum StoredInteger {
    static let damaged = "the database file is damaged or was changed outside Shoal"

    static func unsigned<T: FixedWidthInteger & UnsignedInteger>(
        _ value: Int64, table: String, column: String, as type: T.Type = T.self
    ) throws(ShoalError) -> T {
        guard let converted = T(exactly: value) else {
            throw ShoalError(
                .database, "table \(table), column \(column) holds \(value), where a whole number from 0 to \(T.max) belongs: \(damaged)")
        }
        return converted
    }
}

import GRDB
import ShoalStorage

/// One INSERT for each number of rows from 1 to `maximumRows`, prepared when first
/// used: what the writers use to put several rows in one statement.
///
/// SQLite runs a statement's preamble and opens its cursors once per execution, and
/// parameters shared by every row (written `?1`, `?2`, ... ahead of the others) are
/// bound once. For a document's six registers that saved about a tenth of what a
/// node's statements for the document cost (Benchmarks/RESULTS.md, 20:45 UTC).
struct MultiRowStatements {
    /// Element `rows - 1`: the SQL for `rows` rows.
    private let sql: [String]
    private var statements: [HotStatement?]

    /// `sql` from `statements(upTo:_:)`, kept in a static so it is built once.
    init(_ sql: [String]) {
        self.sql = sql
        statements = Array(repeating: nil, count: sql.count)
    }

    /// The SQL for 1 to `maximumRows` rows, `make(rows)` for each.
    static func statements(upTo maximumRows: Int, _ make: (Int) -> String) -> [String] {
        (1...maximumRows).map(make)
    }

    /// `count` copies of `row`, for a VALUES clause.
    static func values(_ row: String, count: Int) -> String {
        Array(repeating: row, count: count).joined(separator: ", ")
    }

    /// Runs the statement for `rows` rows once `bind` has bound its parameters.
    mutating func run(_ db: Database, rows: Int, _ bind: (inout HotStatement) throws -> Void) throws {
        var statement = try statements[rows - 1].take() ?? HotStatement(db, sql: sql[rows - 1])
        defer { statements[rows - 1] = statement }
        try bind(&statement)
        try statement.run()
    }
}

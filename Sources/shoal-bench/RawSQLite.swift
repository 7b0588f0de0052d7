import Foundation
import ShoalStore
import GRDB
import ShoalTesting

/// The limit: SQLite through GRDB, upserting the same documents into the tables Shoal
/// stores them in (one `field` row per field, `_id` included, and one `document`
/// row with the body), with prepared statements, in transactions of 1, of 100, and
/// all in one. No CRDT, no change log, no sync: what a store of these documents
/// cannot beat.
enum RawSQLite {
    struct Figure: Sendable {
        var perTransaction: String
        var documents: Int
        var seconds: Double
        var rowsPerDocument: Int
        var documentsPerSecond: Double { Double(documents) / seconds }
        var rowsPerSecond: Double { documentsPerSecond * Double(rowsPerDocument) }
    }

    static func measure(plan: Plan) throws -> [Figure] {
        [
            try run(documents: plan.singleWrites, perTransaction: 1, label: "1"),
            try run(documents: plan.documents, perTransaction: 100, label: "100"),
            try run(documents: plan.documents, perTransaction: plan.documents, label: "all"),
        ]
    }

    static func run(documents: Int, perTransaction: Int, label: String) throws -> Figure {
        let directory = TemporaryDirectory(prefix: "shoal-bench-sqlite")
        defer { directory.remove() }
        // Shoal creates its schema; then the plain connection writes into it.
        try DocumentStore(directory: directory.path).close()
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let pool = try DatabasePool(path: directory.path + "/shoal.sqlite", configuration: configuration)
        defer { try? pool.close() }
        let start = ContinuousClock.now
        var first = 0
        while first < documents {
            let end = min(first + perTransaction, documents)
            try pool.write { db in
                let field = try db.cachedStatement(
                    sql: """
                        INSERT INTO field (collection, doc_id, name, value, ts, site, txn_seq, txn_index, txn_count, txn_site)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT (collection, doc_id, name) DO UPDATE SET value = excluded.value, ts = excluded.ts,
                            site = excluded.site, txn_seq = excluded.txn_seq, txn_index = excluded.txn_index,
                            txn_count = excluded.txn_count, txn_site = excluded.txn_site
                        """)
                let body = try db.cachedStatement(
                    sql: """
                        INSERT INTO document (collection, doc_id, body, deleted) VALUES (?, ?, ?, 0)
                        ON CONFLICT (collection, doc_id) DO UPDATE SET body = excluded.body, deleted = 0
                        """)
                for n in first..<end {
                    let key = "\"d\(n)\""
                    let json = Workload.json(n..<(n + 1))
                    let fields: [(String, String)] = [
                        ("_id", key), ("color", "\"\(["red", "green", "blue"][n % 3])\""), ("n", "\(n)"),
                        ("ok", n % 2 == 0 ? "true" : "false"), ("size", "\(n % 7)"), ("title", "\"document \(n)\""),
                    ]
                    for (index, (name, value)) in fields.enumerated() {
                        try field.execute(arguments: ["docs", key, name, value, n, 1, n, index, fields.count, 1])
                    }
                    try body.execute(arguments: ["docs", key, String(json.dropFirst().dropLast())])
                }
            }
            first = end
        }
        return Figure(
            perTransaction: label, documents: documents, seconds: seconds(ContinuousClock.now - start), rowsPerDocument: 7)
    }
}

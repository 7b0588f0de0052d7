import Foundation
import GRDB
import ShoalCRDT
@testable import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Logging
import Testing

/// Rows are decoded once per shape, every conversion checked: a row no version of
/// Shoal writes (planted here with raw SQL) fails the read with a `ShoalError` naming
/// the table and the column, where a positional read converted to an unsigned type
/// trapped; and every SQLite call `HotStatement` makes has its result code checked.
@Suite struct StoredRowTests {
    static let waiting = TransactionID(origin: SiteID(42), sequence: 7)
    static let document = DocumentRef(collection: "c", id: "\"d\"")

    /// A store holding transaction `waiting` in its durable buffer (three deltas to
    /// one document), another's transaction applied, a peer's acknowledgement and an
    /// attachment.
    static func withStore(_ body: (DocumentStore) async throws -> Void) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try DocumentStore(directory: directory.path)
        defer { store.close() }
        let id = waiting
        let deltas = (0..<3).map { i in
            Delta(
                collection: document.collection, documentID: document.id, field: "f\(i)", valueJSON: "\"é\(i)\"",
                timestamp: HybridTimestamp(rawValue: 1 << 30 + UInt64(i)), transaction: id, index: UInt32(i), count: 3)
        }
        let record = TransactionRecord(
            id: id, deltaCount: 3, documentCount: 1, collections: CollectionCount.manifest(documents: [("c", 3)]),
            state: .waiting, firstSeen: 1)
        _ = try await store.writeInbound { writer async throws(ShoalError) in
            try await writer.save(record)
            try await writer.buffer(deltas, documentDeltaCounts: [document: 3], context: [], of: id)
        }
        let other = DocumentRef(collection: "c", id: "\"e\"")
        let applied = TransactionID(origin: SiteID(43), sequence: 1)
        try await store.applyRemote(
            [
                TransactionPiece(
                    id: applied, deltaCount: 1, documentCount: 1, collections: CollectionCount.manifest(documents: [("c", 1)]),
                    deltas: [
                        Delta(
                            collection: other.collection, documentID: other.id, field: "n", valueJSON: "1",
                            timestamp: HybridTimestamp(rawValue: 1 << 30), transaction: applied, index: 0, count: 1)
                    ],
                    documentDeltaCounts: [other: 1], isLast: true)
            ], from: SiteID(43))
        try await store.savePeerAcknowledgements([PeerAcknowledgement(peer: SiteID(43), through: 1, heardAt: Date())])
        _ = try await store.putAttachment([1, 2, 3])
        try await body(store)
    }

    /// The buffered deltas read back the same through both readers of `txn_piece`:
    /// the record the pipeline restarts from, and the apply that empties the buffer.
    @Test func bufferedDeltasReadBackAsWritten() async throws {
        try await Self.withStore { store in
            let records = try await store.transactionRecords()
            let record = try #require(records.first { $0.id == Self.waiting })
            #expect(record.documents[Self.document]?.expected == 3)
            #expect(record.documents[Self.document]?.received == [0, 1, 2])
            #expect(record.bufferedBytes == 3 * "\"é0\"".utf8.count)
            _ = try await store.writeInbound { writer async throws(ShoalError) in
                try await writer.apply(
                    record, deltas: [], documentDeltaCounts: [:], context: [], buffered: true, state: .applied, rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
            }
            #expect(try await store.execute("SELECT * FROM c WHERE _id = 'd'").items.map(\.canonicalJSON)
                == [#"{"_id":"d","f0":"é0","f1":"é1","f2":"é2"}"#])
            #expect(try await store.transactionRecords().isEmpty)
        }
    }

    /// A damaged row, planted with raw SQL, and the read that meets it.
    struct Damage: Sendable, CustomTestStringConvertible {
        var sql: String
        var table: String
        var column: String
        var read: @Sendable (DocumentStore) async throws -> Void

        var testDescription: String { "\(table).\(column)" }
    }

    static let damages: [Damage] = [
        Damage(sql: "UPDATE txn SET delta_count = -1 WHERE origin = 42", table: "txn", column: "delta_count") { store in
            _ = try await store.transactionRecords()
        },
        Damage(sql: "UPDATE txn SET first_seen = -5 WHERE origin = 42", table: "txn", column: "first_seen") { store in
            _ = try await store.transactionRecords()
        },
        Damage(sql: "UPDATE txn SET state = 9 WHERE origin = 43", table: "txn", column: "state") { store in
            _ = try await store.writeInbound { writer async throws(ShoalError) in try await writer.state(of: TransactionID(origin: SiteID(43), sequence: 1)) }
        },
        Damage(sql: "UPDATE txn_piece SET idx = -1 WHERE idx = 2", table: "txn_piece", column: "idx") { store in
            _ = try await store.transactionRecords()
        },
        Damage(sql: "UPDATE txn_piece SET doc_deltas = 1 << 40", table: "txn_piece", column: "doc_deltas") { store in
            _ = try await store.transactionRecords()
        },
        Damage(sql: "UPDATE change_log SET txn_count = -1", table: "change_log", column: "txn_count") { store in
            _ = try await store.changes(after: 0, limit: 100, subscriptions: ReplicationTests.everything())
        },
        Damage(sql: "UPDATE change_log SET txn_seq = -3", table: "change_log", column: "txn_seq") { store in
            _ = try await store.changes(after: 0, limit: 100, subscriptions: ReplicationTests.everything())
        },
        Damage(sql: "UPDATE field SET txn_seq = -2", table: "field", column: "txn_seq") { store in
            _ = try await store.execute("UPDATE c SET n = 2 WHERE _id = 'e'")
        },
        Damage(sql: "UPDATE peer_ack SET through = -1", table: "peer_ack", column: "through") { store in
            _ = try await store.peerAcknowledgements()
        },
        Damage(sql: "UPDATE attachment SET length = -1", table: "attachment", column: "length") { store in
            _ = try await store.collectAttachments(horizon: .seconds(1))
        },
        Damage(
            sql: "INSERT INTO peer_cursor (peer, subscription_key, through) VALUES (43, 'k', -1)", table: "peer_cursor",
            column: "through"
        ) { store in
            _ = try await store.resumePoint(peer: SiteID(43), subscriptionKey: "k")
        },
        Damage(
            sql: "UPDATE shoal_meta SET value = -1 WHERE key = 'transaction_counter'", table: "shoal_meta",
            column: "transaction_counter"
        ) { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': '\(UUID())'})")
        },
    ]

    /// Each damaged row fails its read with an error naming its table and column.
    @Test(arguments: damages)
    func aDamagedRowFailsItsReadNamingTableAndColumn(_ damage: Damage) async throws {
        try await Self.withStore { store in
            try await damage.read(store)
            try await store.write { db in try db.execute(sql: damage.sql) }
            let error = await #expect(throws: ShoalError.self) { try await damage.read(store) }
            #expect(error?.code == .database)
            #expect(error?.message.contains("table \(damage.table)") == true, "\(error?.message ?? "")")
            #expect(error?.message.contains(damage.column) == true, "\(error?.message ?? "")")
        }
    }

    /// A bind past the statement's parameters fails at that bind with SQLite's code and
    /// message, and the statement binds and runs again afterwards.
    @Test func aFailedBindThrowsSQLitesErrorAndLeavesTheStatementUsable() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try DocumentStore(directory: directory.path)
        defer { store.close() }
        try await store.write { db in
            var statement = try HotStatement(db, sql: "SELECT ? + 1 AS n")
            try statement.bind(1)
            let error = #expect(throws: DatabaseError.self) { try statement.bind(2) }
            #expect(error?.resultCode == .SQLITE_RANGE)
            #expect(error?.message?.contains("binding parameter 2") == true, "\(error?.message ?? "")")
            #expect(error?.message?.contains("out of range") == true, "\(error?.message ?? "")")
            try statement.bind(41)
            var answer: Int64?
            try statement.query { row in
                answer = row.int64(Probe.n)
                return true
            }
            #expect(answer == 42)
        }
    }

    /// A step that fails (a constraint) throws SQLite's message, and the statement is
    /// reset for the next use.
    @Test func aFailedStepThrowsSQLitesErrorAndLeavesTheStatementUsable() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try DocumentStore(directory: directory.path)
        defer { store.close() }
        try await store.write { db in
            var insert = try HotStatement(db, sql: "INSERT INTO subscription (id, query, arguments) VALUES (?, 'q', '{}')")
            try insert.bind("a")
            try insert.run()
            try insert.bind("a")
            let error = #expect(throws: DatabaseError.self) { try insert.run() }
            #expect(error?.resultCode == .SQLITE_CONSTRAINT)
            #expect(error?.message?.contains("UNIQUE constraint failed") == true, "\(error?.message ?? "")")
            try insert.bind("b")
            try insert.run()
            #expect(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM subscription") == 2)
        }
    }

    /// The one column `SELECT ? + 1 AS n` has.
    enum Probe: Int32, HotColumn {
        case n
        var name: String { "n" }
    }
}

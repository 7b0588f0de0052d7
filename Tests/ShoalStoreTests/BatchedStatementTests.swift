import Foundation
import GRDB
import ShoalCRDT
@testable import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// The writes that put several rows in one statement: a document's registers
/// (`RegisterRows.Upserts`), the bodies of a remote apply (`RegisterRows.Bodies`) and
/// a transaction's change-log rows (`LogAppender`), at and around their statement sizes.
@Suite struct BatchedStatementTests {
    /// Every register row of `store`, as `doc_id name value`, in key order.
    static func fieldRows(_ store: DocumentStore) async throws -> [String] {
        try await store.read { db in
            try Row.fetchAll(db, sql: "SELECT doc_id, name, value FROM field ORDER BY collection, doc_id, name").map {
                "\($0[0] as String) \($0[1] as String) \($0[2] as String)"
            }
        }
    }

    /// A document of `count` fields besides `_id`, written, then half its fields
    /// updated, is stored whole on the writer and on a replica, register by register.
    @Test(arguments: [1, 6, 7, 8, 9, 16, 17, 30])
    func aDocumentOfAnyNumberOfFieldsIsStoredWhole(count: Int) async throws {
        try await Self.withWriterAndReplica { writer, replica in
            let fields = (0..<count).map { "'f\($0)': \($0)" }.joined(separator: ", ")
            _ = try await writer.execute("INSERT INTO c DOCUMENTS ([{'_id': 'a', \(fields)}, {'_id': 'b', 'x': 1}])")
            let updates = stride(from: 0, to: count, by: 2).map { "f\($0) = \(1000 + $0)" }.joined(separator: ", ")
            _ = try await writer.execute("UPDATE c SET \(updates) WHERE _id = 'a'")

            var expected = ["\"_id\":\"a\""]
            for f in (0..<count).sorted(by: { "f\($0)" < "f\($1)" }) { expected.append("\"f\(f)\":\(f % 2 == 0 ? 1000 + f : f)") }
            let body = "{" + expected.joined(separator: ",") + "}"
            #expect(try await writer.execute("SELECT * FROM c WHERE _id = 'a'").items.map(\.canonicalJSON) == [body])
            let rows = try await Self.fieldRows(writer)
            #expect(rows.count == count + 1 + 2)

            let outcome = try await replica.applyRemote(
                try await writer.changes(after: 0, limit: 1000, subscriptions: ReplicationTests.everything()).pieces, from: writer.siteID)
            #expect(outcome.won == count + 1 + 2 + (count + 1) / 2)
            #expect(try await replica.execute("SELECT * FROM c ORDER BY _id").items.map(\.canonicalJSON)
                == (try await writer.execute("SELECT * FROM c ORDER BY _id").items.map(\.canonicalJSON)))
            #expect(try await Self.fieldRows(replica) == rows)
        }
    }

    /// Remote transactions over many documents, the second deleting one of them
    /// between live ones, leave the replica's bodies as the writer's (the deleted one
    /// flagged), and log a row per transaction, numbered on from the replica's log.
    @Test(arguments: [1, 8, 9, 20])
    func remoteTransactionsOverManyDocumentsApplyWhole(documents: Int) async throws {
        try await Self.withWriterAndReplica { writer, replica in
            // The replica's own log comes first: the applied rows follow it.
            _ = try await replica.execute("INSERT INTO mine DOCUMENTS ({'_id': 'm'})")
            let docs = (0..<documents).map { "{'_id': 'd\($0)', 'n': \($0)}" }.joined(separator: ", ")
            var through: UInt64 = 0
            for statement in ["INSERT INTO c DOCUMENTS ([\(docs)])", "UPDATE c SET m = 1; DELETE FROM c WHERE _id = 'd\(documents / 2)'"] {
                _ = try await writer.execute(statement)
                let page = try await writer.changes(after: through, limit: 1000, subscriptions: ReplicationTests.everything())
                #expect(page.pieces.count == 1)
                _ = try await replica.applyRemote(page.pieces, from: writer.siteID)
                through = page.through
            }

            let items = try await replica.execute("SELECT * FROM c ORDER BY n").items.map(\.canonicalJSON)
            #expect(items == (try await writer.execute("SELECT * FROM c ORDER BY n").items.map(\.canonicalJSON)))
            #expect(items.count == documents - 1)
            // Every body row as the writer's, the deleted document's flag included.
            let bodies = try await Self.bodyRows(replica)
            #expect(bodies == (try await Self.bodyRows(writer)))
            #expect(bodies.count == documents && bodies.filter { $0.hasSuffix(" deleted") }.count == 1)
            let site = Int64(bitPattern: writer.siteID.rawValue)
            let rows = try await replica.read { db in
                try Row.fetchAll(db, sql: "SELECT seq, documents FROM change_log WHERE txn_site = ? ORDER BY seq", arguments: [site])
                    .map { [$0[0] as Int64, $0[1] as Int64] }
            }
            #expect(rows == [[2, Int64(documents)], [3, Int64(documents)]])
            #expect(try await replica.lastSequence() == 3)
        }
    }

    /// Runs `body` on two empty stores, a writer and a replica, and removes them after.
    static func withWriterAndReplica(_ body: (DocumentStore, DocumentStore) async throws -> Void) async throws {
        let dirs = (0..<2).map { _ in TemporaryDirectory() }
        defer { dirs.forEach { $0.remove() } }
        let writer = try DocumentStore(directory: dirs[0].path)
        let replica = try DocumentStore(directory: dirs[1].path)
        defer { [writer, replica].forEach { $0.close() } }
        try await body(writer, replica)
    }

    /// Every body row of collection `c` of `store`, in key order: `doc_id body` for a
    /// live document, `doc_id deleted` for a deleted one (whose kept body is the last
    /// one its holder saw, which a transaction that writes it before deleting it can
    /// make differ from node to node).
    static func bodyRows(_ store: DocumentStore) async throws -> [String] {
        try await store.read { db in
            try Row.fetchAll(db, sql: "SELECT doc_id, deleted, body FROM document WHERE collection = 'c' ORDER BY doc_id").map {
                "\($0[0] as String) \($0[1] as Int == 1 ? "deleted" : $0[2] as String)"
            }
        }
    }

    /// `LogAppender` writes a row per run of `documentsPerRow` documents, or fewer once
    /// a row's bytes reach `bytesPerRow`; numbers its rows on from the log's last; and
    /// keeps each entry's document, count and deltas, in order.
    @Test func logRowsHoldRunsOfDocumentsNumberedOnFromTheLogsLast() throws {
        let queue = try DatabaseQueue()
        try DocumentStore.migrator.migrate(queue)
        let perRow = LogAppender.documentsPerRow
        let big = LogAppender.bytesPerRow / 3 + 1
        try queue.write { db in
            var empty = LogAppender(db, site: 7, sequence: 1, deltaCount: 0)
            try empty.finish()
            #expect(empty.first == nil && empty.last == nil)

            // (transaction, documents, bytes of each document's deltas, rows expected)
            let cases: [(sequence: Int, count: Int, size: Int, rows: [Int])] = [
                (1, 1, 3, [1]), (2, perRow, 3, [perRow]), (3, perRow + 1, 3, [perRow, 1]), (4, 2 * perRow + 5, 3, [perRow, perRow, 5]),
                (5, 7, big, [3, 3, 1]),
            ]
            for c in cases {
                let before = try Int64.fetchOne(db, sql: "SELECT COALESCE(MAX(seq), 0) FROM change_log")!
                var log = LogAppender(db, site: 7, sequence: UInt64(c.sequence), deltaCount: 2 * c.count)
                func deltas(_ n: Int) -> [UInt8] { [UInt8(truncatingIfNeeded: n)] + Array(repeating: 1, count: c.size - 1) }
                for n in 0..<c.count {
                    try log.append(DocumentRef(collection: "c", id: "\"d\(n)\""), deltaCount: 2, deltas(n))
                }
                try log.finish()
                #expect(log.first == UInt64(before + 1) && log.last == UInt64(before) + UInt64(c.rows.count), "\(c)")
                let rows = try Row.fetchAll(
                    db, sql: "SELECT seq, txn_site, txn_seq, txn_count, documents, entries FROM change_log WHERE txn_seq = ? ORDER BY seq",
                    arguments: [c.sequence])
                #expect(rows.map { $0[0] as Int64 } == (1...c.rows.count).map { before + Int64($0) }, "\(c)")
                #expect(rows.map { $0[4] as Int } == c.rows, "\(c)")
                #expect(rows.allSatisfy { $0[1] as Int64 == 7 && $0[3] as Int64 == Int64(2 * c.count) })
                var entries: [(String, UInt32, [UInt8])] = []
                for row in rows {
                    try (row[5] as Data).withUnsafeBytes { bytes in
                        try LogEntries.forEach(bytes) { collection, id, count, packed in
                            #expect(collection == "c")
                            entries.append((id, count, [UInt8](packed)))
                        }
                    }
                }
                #expect(entries.map(\.0) == (0..<c.count).map { "\"d\($0)\"" }, "\(c)")
                #expect(entries.allSatisfy { $0.1 == 2 })
                #expect(entries.map(\.2) == (0..<c.count).map(deltas), "\(c)")
            }
        }
    }
}

import Foundation
import GRDB
import ShoalCRDT
@testable import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// The change log's packed rows (`LogEntries` of `PackedDeltas`): one row per run of
/// a transaction's documents, and the migrations that pack a log of one row per
/// delta, then of one row per document.
@Suite struct PackedLogTests {
    @Test func deltasRoundTripInOrderAndMalformedBytesAreRefused() throws {
        var packed = PackedDeltas()
        let deltas: [(UInt32, UInt64, String, String)] = [
            (0, 1, "_id", "\"a\""), (7, UInt64.max, "nämé", ""), (300, 1 << 40, "", "{\"k\":[1,2]}"), (2, 0, "~x", "~00ff"),
        ]
        for (index, timestamp, name, value) in deltas { packed.append(index: index, timestamp: timestamp, name: name, value: value) }
        #expect(packed.count == 4)
        var decoded: [(UInt32, UInt64, String, String)] = []
        try packed.bytes.withUnsafeBytes { bytes in
            try PackedDeltas.forEach(bytes) { decoded.append(($0, $1, $2, $3)) }
            #expect(try PackedDeltas.indexes(bytes) == [0, 7, 300, 2])
        }
        #expect(decoded.map(\.0) == deltas.map(\.0) && decoded.map(\.1) == deltas.map(\.1))
        #expect(decoded.map(\.2) == deltas.map(\.2) && decoded.map(\.3) == deltas.map(\.3))
        // Cut anywhere inside the last delta, the bytes do not decode.
        for cut in 1..<6 {
            let truncated = Array(packed.bytes.dropLast(cut))
            #expect(throws: PackedDeltas.Malformed.self) {
                try truncated.withUnsafeBytes { try PackedDeltas.forEach($0) { _, _, _, _ in } }
            }
        }
        packed.removeAll()
        #expect(packed.isEmpty && packed.bytes.isEmpty)
    }

    /// Entries round-trip with their documents, counts and deltas; the collection's
    /// name is read again where it changes; cut short, they do not decode.
    @Test func entriesRoundTripInOrderAndMalformedBytesAreRefused() throws {
        let documents: [(DocumentRef, Int, [UInt8])] = [
            (DocumentRef(collection: "c", id: "\"a\""), 3, [1, 2, 3]), (DocumentRef(collection: "c", id: "\"b\""), 1, []),
            (DocumentRef(collection: "dé", id: "7"), 300, Array(repeating: 9, count: 200)), (DocumentRef(collection: "c", id: "\"a\""), 1, [4]),
        ]
        var bytes: [UInt8] = []
        for (document, count, deltas) in documents { LogEntries.append(document, documentDeltas: count, deltas: deltas, to: &bytes) }
        var decoded: [(DocumentRef, Int, [UInt8])] = []
        try bytes.withUnsafeBytes { raw in
            try LogEntries.forEach(raw) { decoded.append((DocumentRef(collection: $0, id: $1), Int($2), [UInt8]($3))) }
        }
        #expect(decoded.map(\.0) == documents.map(\.0) && decoded.map(\.1) == documents.map(\.1) && decoded.map(\.2) == documents.map(\.2))
        for cut in 1..<4 {
            let truncated = Array(bytes.dropLast(cut))
            #expect(throws: PackedDeltas.Malformed.self) {
                try truncated.withUnsafeBytes { try LogEntries.forEach($0) { _, _, _, _ in } }
            }
        }
    }

    /// A transaction that writes a document, another, then the first again logs one
    /// row, an entry per document; a page hands its deltas back in transaction order.
    @Test func aTransactionLogsAnEntryPerDocumentAndPagesKeepItsOrder() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        _ = try await store.execute(
            "INSERT INTO c DOCUMENTS ({'_id': 'a', 'x': 1}); INSERT INTO c DOCUMENTS ({'_id': 'b', 'x': 2}); UPDATE c SET y = 3 WHERE _id = 'a'")
        #expect(try await store.lastSequence() == 1)
        #expect(try await store.storageStatus().changeLogRows == 1)
        var everything = SubscriptionSet()
        try everything.add(query: "SELECT * FROM c")
        let page = try await store.changes(after: 0, limit: 100, subscriptions: everything)
        #expect(page.deltas.map(\.index) == Array(0..<5))
        #expect(page.deltas.map(\.field) == ["_id", "x", "_id", "x", "y"])
        #expect(page.pieces.first?.documentDeltaCounts == [DocumentRef(collection: "c", id: "\"a\""): 3, DocumentRef(collection: "c", id: "\"b\""): 2])
        // The manifest counts the document it came back to once.
        #expect(page.pieces.first?.collections == [CollectionCount(collection: "c", documents: 2, deltas: 5)])
    }

    /// A store whose log has a row per delta (before `v12-packed-log`) opens with a row
    /// per run of a transaction's documents, holding the same deltas; each packed row
    /// takes the largest sequence of the rows it replaces.
    @Test func anOlderLogIsPackedWhenTheStoreOpens() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let queue = try DatabaseQueue(path: dir.path + "/shoal.sqlite")
        try DocumentStore.migrator.migrate(queue, upTo: "v11-freshness")
        let site: Int64 = 0x1234
        // Transaction 1 writes a (_id, x), b (_id), then a (y); transaction 2 writes b (x).
        let rows: [(seq: Int64, doc: String, name: String, value: String, txn: Int64, index: Int64, count: Int64, docDeltas: Int64)] = [
            (1, "\"a\"", "_id", "\"a\"", 1, 0, 4, 3), (2, "\"a\"", "x", "1", 1, 1, 4, 3), (3, "\"b\"", "_id", "\"b\"", 1, 2, 4, 1),
            (4, "\"a\"", "y", "2", 1, 3, 4, 3), (5, "\"b\"", "x", "5", 2, 0, 1, 1),
        ]
        try await queue.write { db in
            for r in rows {
                try db.execute(
                    sql: """
                        INSERT INTO change_log (seq, collection, doc_id, name, value, ts, txn_site, txn_seq, txn_index, txn_count, doc_deltas)
                        VALUES (?, 'c', ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [r.seq, r.doc, r.name, r.value, 1000 + r.seq, site, r.txn, r.index, r.count, r.docDeltas])
            }
            try db.execute(sql: "INSERT INTO document (collection, doc_id, body) VALUES ('c', '\"a\"', '{\"_id\":\"a\",\"x\":1,\"y\":2}'), ('c', '\"b\"', '{\"_id\":\"b\",\"x\":5}')")
        }
        try queue.close()

        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        #expect(
            try await Self.rows(store) == ["4 1: \"b\"/1 \"a\"/3", "5 2: \"b\"/1"],
            "transaction 1's row (seq 4, the largest): b's entry (seq 3 in v12), a's; b's of 2")
        var everything = SubscriptionSet()
        try everything.add(query: "SELECT * FROM c")
        let page = try await store.changes(after: 0, limit: 100, subscriptions: everything)
        let got = page.deltas.map { "\($0.transaction.sequence):\($0.index) \($0.documentID).\($0.field)=\($0.valueJSON)@\($0.timestamp.rawValue)" }
        #expect(got == [
            "1:0 \"a\"._id=\"a\"@1001", "1:1 \"a\".x=1@1002", "1:2 \"b\"._id=\"b\"@1003", "1:3 \"a\".y=2@1004", "2:0 \"b\".x=5@1005",
        ])
        // A peer whose cursor was inside transaction 1 (after sequence 2) gets a's row again.
        let resumed = try await store.changes(after: 2, limit: 100, subscriptions: everything)
        #expect(resumed.deltas.filter { $0.transaction.sequence == 1 }.count == 4)
        #expect(try await store.lastSequence() == 5)
        let next = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'z'})")
        #expect(next.transactionID != nil)
        #expect(try await store.lastSequence() == 6, "no sequence is handed out twice")
    }

    /// Rests recorded before compaction's verdicts were kept apart (`v19-supersession`):
    /// every `UNKNOWN` of an applied transaction moves to `supersession`, since the two
    /// cannot be told apart; a partial one's stays, recorded again when it completes.
    @Test func anOlderRestGivesItsUnknownsToSupersession() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let queue = try DatabaseQueue(path: dir.path + "/shoal.sqlite")
        try DocumentStore.migrator.migrate(queue, upTo: "v18-peer-refusals")
        let filter = SubscriptionFilter([.init(query: "SELECT * FROM cars", argumentsJSON: "")])
        let covered = Verdict(collection: "boats", coverage: .notCovered(filter))
        let unknown = Verdict(collection: "cars", coverage: .unknown)
        let rests = [Verdict.encode([covered, unknown]), Verdict.encode([unknown]), Verdict.encode([covered]), "", #"[{"c":"x","u":true}"#]
        try await queue.write { db in
            for (i, rest) in rests.enumerated() {
                try db.execute(
                    sql: "INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest) VALUES (7, ?, 1, 1, '', 1, ?)",
                    arguments: [i, rest])
            }
            // A partial transaction's rest is recorded again when it completes: it stays.
            try db.execute(
                sql: "INSERT INTO txn (origin, seq, delta_count, document_count, collections, state, rest) VALUES (8, 1, 1, 1, '', 2, ?)",
                arguments: [Verdict.encode([unknown])])
        }
        try queue.close()
        let store = try DocumentStore(directory: dir.path)
        store.close()
        let migrated = try DatabaseQueue(path: dir.path + "/shoal.sqlite")
        defer { try? migrated.close() }
        let read = try await migrated.read { db in
            try Row.fetchAll(db, sql: "SELECT rest, supersession FROM txn WHERE origin = 7 ORDER BY seq").map {
                [Verdict.decode($0["rest"]), Verdict.decode($0["supersession"])]
            }
        }
        #expect(read == [[[covered], [unknown]], [[], [unknown]], [[covered], []], [[], []], [[], []]])
        let partial = try await migrated.read { db in try String.fetchOne(db, sql: "SELECT rest FROM txn WHERE origin = 8") }
        #expect(partial.map(Verdict.decode) == [unknown], "a partial transaction's rest stays")
        let raw = try await migrated.read { db in try String.fetchOne(db, sql: "SELECT rest FROM txn WHERE origin = 7 AND seq = 4") }
        #expect(raw == #"[{"c":"x","u":true}"#, "a rest that cannot be read stays as it is, and the store opens")
    }

    /// Each row of the log: its sequence, transaction, and each entry's key and count.
    static func rows(_ store: DocumentStore) async throws -> [String] {
        try await store.read { db in
            try Row.fetchAll(db, sql: "SELECT seq, txn_seq, documents, entries FROM change_log ORDER BY seq").map { row in
                let entries: Data = row[3]
                var documents: [String] = []
                try entries.withUnsafeBytes { bytes in
                    try LogEntries.forEach(bytes) { _, id, count, _ in documents.append("\(id)/\(count)") }
                }
                #expect(documents.count == row[2] as Int)
                return "\(row[0] as Int64) \(row[1] as Int64): " + documents.joined(separator: " ")
            }
        }
    }

    /// A store whose log has a row per document (`v12-packed-log`) opens with a row per
    /// run of up to `LogAppender.documentsPerRow` documents of a transaction, each
    /// taking the largest sequence of the rows it replaces; a transaction's rows that
    /// other rows separate stay apart. A page reads the same deltas as before.
    @Test func aLogOfARowPerDocumentIsPackedByTransactionWhenTheStoreOpens() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let queue = try DatabaseQueue(path: dir.path + "/shoal.sqlite")
        try DocumentStore.migrator.migrate(queue, upTo: "v12-packed-log")
        let site: Int64 = 0x1234
        let perRow = LogAppender.documentsPerRow
        // Transaction 1 writes documents 0 ..< perRow + 2 (seq 1 ...), transaction 2
        // document 0 again, then a late row of transaction 1 (a piece applied later).
        let rows: [(seq: Int, doc: Int, txn: Int, count: Int)] =
            (0..<(perRow + 2)).map { ($0 + 1, $0, 1, perRow + 4) } + [(perRow + 3, 0, 2, 1), (perRow + 4, perRow + 2, 1, perRow + 4)]
        try await queue.write { db in
            for r in rows {
                var packed = PackedDeltas()
                packed.append(index: UInt32(r.txn == 2 ? 0 : r.doc), timestamp: UInt64(1000 + r.seq), name: "x", value: "\(r.seq)")
                try db.execute(
                    sql: """
                        INSERT INTO change_log (seq, collection, doc_id, txn_site, txn_seq, txn_count, doc_deltas, deltas)
                        VALUES (?, 'c', ?, ?, ?, ?, 1, ?)
                        """,
                    arguments: [r.seq, "\"d\(r.doc)\"", site, r.txn, r.count, Data(packed.bytes)])
                try db.execute(
                    sql: "INSERT OR REPLACE INTO document (collection, doc_id, body) VALUES ('c', ?, '{}')", arguments: ["\"d\(r.doc)\""])
            }
        }
        try queue.close()

        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        let packed = try await Self.rows(store)
        #expect(packed.count == 4)
        #expect(packed[0].hasPrefix("\(perRow) 1: \"d0\"/1 \"d1\"/1 ") && packed[0].hasSuffix("\"d\(perRow - 1)\"/1"))
        #expect(packed[1] == "\(perRow + 2) 1: \"d\(perRow)\"/1 \"d\(perRow + 1)\"/1")
        #expect(packed[2] == "\(perRow + 3) 2: \"d0\"/1")
        #expect(packed[3] == "\(perRow + 4) 1: \"d\(perRow + 2)\"/1")
        var everything = SubscriptionSet()
        try everything.add(query: "SELECT * FROM c")
        let page = try await store.changes(after: 0, limit: 1000, subscriptions: everything)
        #expect(page.deltas.map(\.valueJSON) == rows.map { "\($0.seq)" })
        #expect(page.through == UInt64(perRow + 4))
        let next = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'z'})")
        #expect(next.transactionID != nil)
        #expect(try await store.lastSequence() == UInt64(perRow + 5), "no sequence is handed out twice")
    }

    /// A document's deltas that arrive split over two applies, overlapping, are each
    /// logged once: the second row holds only what the first did not.
    @Test func aDocumentSplitOverTwoAppliesIsLoggedOnceAcrossTwoRows() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let writer = try DocumentStore(directory: a.path), relay = try DocumentStore(directory: b.path)
        defer { writer.close(); relay.close() }
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'p': 1, 'q': 2})")
        var everything = SubscriptionSet()
        try everything.add(query: "SELECT * FROM c")
        let whole = try #require(try await writer.changes(after: 0, limit: 100, subscriptions: everything).pieces.first)
        #expect(whole.deltas.map(\.index) == [0, 1, 2])
        var head = whole, tail = whole
        head.deltas = Array(whole.deltas[0...1])
        tail.deltas = Array(whole.deltas[1...2])
        #expect(try await relay.applyRemote([head], from: writer.siteID).logged == 2)
        #expect(try await relay.applyRemote([tail], from: writer.siteID).logged == 1, "index 1 is held already")
        #expect(try await relay.applyRemote([whole], from: writer.siteID).logged == 0)
        #expect(try await relay.storageStatus().changeLogRows == 2)
        let relayed = try await relay.changes(after: 0, limit: 100, subscriptions: everything)
        #expect(relayed.deltas.map(\.index).sorted() == [0, 1, 2])
        #expect(try await relay.execute("SELECT * FROM c").items == [["_id": "x", "p": 1, "q": 2]])
    }

    /// A row whose deltas do not decode is never judged superseded: compaction keeps
    /// it, where the same row intact goes.
    @Test func compactionKeepsARowItCannotRead() async throws {
        for corrupt in [false, true] {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let store = try DocumentStore(directory: dir.path)
            defer { store.close() }
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'x': 1})")
            _ = try await store.execute("UPDATE c SET x = 2 WHERE _id = 'a'")
            _ = try await store.execute("UPDATE c SET x = 3 WHERE _id = 'a'")
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'z'})")
            // Row 2 (x = 2) is superseded by row 3; cut short, its bytes do not decode.
            if corrupt {
                try await store.write { db in
                    try db.execute(sql: "UPDATE change_log SET entries = substr(entries, 1, length(entries) - 1) WHERE seq = 2")
                }
            }
            #expect(try await store.compactChangeLog(through: 3).rowsRemoved == (corrupt ? 0 : 1), "corrupt: \(corrupt)")
        }
    }
    /// Forgetting deleted documents reads each row's entries; a row of a candidate's
    /// transaction that does not decode names no document, holds its transaction, and
    /// the deleted document stays (no crash on its missing names).
    @Test func forgettingKeepsADocumentWhoseTransactionHasARowItCannotRead() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let now = Locked<UInt64>(1_700_000_000_000)
        let store = try DocumentStore(directory: dir.path, wallClock: { now.withLock { $0 } })
        defer { store.close() }
        let perRow = LogAppender.documentsPerRow
        let docs: [Value] = (0...perRow).map { ["_id": .string("d\($0)")] }
        _ = try await store.execute("INSERT INTO c DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])  // rows 1 and 2
        now.withLock { $0 += 1_000 }
        _ = try await store.execute("DELETE FROM c WHERE _id = 'd\(perRow)'")  // row 3
        _ = try await store.execute("INSERT INTO other DOCUMENTS ({'_id': 'z'})")  // row 4, the last
        try await store.write { db in
            try db.execute(sql: "UPDATE change_log SET entries = substr(entries, 1, length(entries) - 1) WHERE seq = 1")
        }
        let report = try await store.forgetDeletedDocuments(deletedBefore: now.withLock { $0 } + 1_000, through: 4)
        #expect(report.documents == 0)
        let kept = try await store.retained(DocumentRef(collection: "c", id: "\"d\(perRow)\""))
        #expect(kept.registers > 0 && kept.logRows == 2, "its INSERT's second row and its DELETE: \(kept)")
    }
}

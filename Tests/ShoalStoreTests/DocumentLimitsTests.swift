import Foundation
import GRDB
import Logging
import ShoalCRDT
import ShoalTesting
import Testing

@testable import ShoalStore
import ShoalStorage
import ShoalSync

/// What a store can hold of one document (`DocumentLimits`), on every path that
/// writes one: a local statement refuses what could not be read back, a received
/// transaction that would write it is refused whole, and a document an older version
/// stored past the limits is read around and can still be repaired, deleted or evicted.
@Suite struct DocumentLimitsTests {
    /// `p.p.….p`, `levels` names long.
    static func path(_ levels: Int) -> String { Array(repeating: "p", count: levels).joined(separator: ".") }

    /// An array nested `levels` deep: `[[…[1]…]]`.
    static func nested(_ levels: Int) -> Value {
        var value: Value = .int(1)
        for _ in 0..<levels { value = .array([value]) }
        return value
    }

    @Test(arguments: [0, 1, 10, 127, 128, 129, 300])
    func theDepthOfATextIsItsDeepestBracket(levels: Int) {
        #expect(JSON.nestingDepth(of: Self.nested(levels).canonicalJSON) == levels)
        // Brackets inside strings do not count.
        #expect(JSON.nestingDepth(of: Value.object(["s": .string(String(repeating: "[{", count: levels))]).canonicalJSON) == 1)
    }

    @Test func aFieldPath128LevelsDeepIsWrittenAnd129IsRefused() async throws {
        try await TransactionTests.withStore { store in
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({'_id': 'x'})")
            // The document is the first level, and the last name holds a number: a path of
            // 128 names nests 128 objects deep.
            _ = try await store.execute("UPDATE t SET \(Self.path(128)) = 1 WHERE _id = 'x'")
            let error = try await #require(throws: ShoalError.self) {
                try await store.execute("UPDATE t SET \(Self.path(129)) = 1 WHERE _id = 'x'")
            }
            #expect(error.code == .invalidDocument)
            #expect(error.message.contains("document \"x\" in t cannot be written: it would nest deeper than 128 levels"), "\(error.message)")
            // Nothing of it was written, and the collection reads as before.
            #expect(try await store.execute("SELECT COUNT(*) FROM t").items == [["$1": 1]])
            #expect(try await store.execute("SELECT _id FROM t").items == [["_id": "x"]])
            #expect(JSON.nestingDepth(of: try await store.execute("SELECT * FROM t").items[0].canonicalJSON) == 128)
        }
    }

    @Test func aValueTooDeepForItsDocumentIsRefused() async throws {
        try await TransactionTests.withStore { store in
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({'_id': 'x', 'f': :v})", arguments: ["v": Self.nested(127)])
            for statement in [
                "UPDATE t SET f = :v WHERE _id = 'x'", "INSERT INTO t DOCUMENTS ({'_id': 'y', 'f': :v})",
                "INSERT INTO t DOCUMENTS ({'_id': 'x', 'f': :v}) ON ID CONFLICT DO UPDATE",
            ] {
                let error = try await #require(throws: ShoalError.self, "\(statement)") {
                    try await store.execute(statement, arguments: ["v": Self.nested(128)])
                }
                #expect(error.code == .invalidDocument)
            }
            #expect(try await store.execute("SELECT _id FROM t").items == [["_id": "x"]])
        }
    }

    /// Two documents of one remote transaction, one of them too deep to hold.
    static func deepTransaction(_ origin: SiteID, sequence: UInt64 = 1) -> (TransactionRecord, [Delta]) {
        let id = TransactionID(origin: origin, sequence: sequence)
        let deep = Array(repeating: "p", count: 129).joined(separator: String(RegisterName.pathSeparator))
        let deltas = [
            Delta(collection: "t", documentID: "\"fine\"", field: "_id", valueJSON: "\"fine\"", timestamp: HybridTimestamp(rawValue: 100 << 16), transaction: id, index: 0, count: 3),
            Delta(collection: "t", documentID: "\"deep\"", field: "_id", valueJSON: "\"deep\"", timestamp: HybridTimestamp(rawValue: 100 << 16), transaction: id, index: 1, count: 3),
            Delta(collection: "t", documentID: "\"deep\"", field: deep, valueJSON: "1", timestamp: HybridTimestamp(rawValue: 100 << 16), transaction: id, index: 2, count: 3),
        ]
        let record = TransactionRecord(
            id: id, deltaCount: 3, documentCount: 2, collections: [CollectionCount(collection: "t", documents: 2, deltas: 3)],
            state: .applied, firstSeen: 0)
        return (record, deltas)
    }

    @Test func aReceivedTransactionThatWouldWriteTooDeepIsRefusedWholeAndWritesNothing() async throws {
        try await TransactionTests.withStore { store in
            let (record, deltas) = Self.deepTransaction(SiteID(0xA))
            let before = try await store.lastSequence()
            let (refusal, _) = try await store.writeInbound { writer async throws(ShoalError) in
                let refusal = try await writer.apply(
                    record, deltas: deltas, documentDeltaCounts: [DocumentRef(collection: "t", id: "\"fine\""): 1, DocumentRef(collection: "t", id: "\"deep\""): 2],
                    context: [], buffered: false, state: .applied, rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
                if let refusal { try await writer.refuse(record, reason: refusal.description) }
                return refusal
            }
            #expect(refusal?.document == DocumentRef(collection: "t", id: "\"deep\""))
            #expect(refusal?.reason == .tooDeep(limit: 128))
            #expect(try await store.lastSequence() == before, "nothing logged, so nothing relayed")
            #expect(try await store.execute("SELECT _id FROM t").items.isEmpty, "not even the document that fits")
            let (state, _) = try await store.writeInbound { writer async throws(ShoalError) in try await writer.state(of: record.id) }
            #expect(state == .refused)
            #expect(try await store.transactionRecords().isEmpty, "a refused transaction does not wait")
        }
    }

    @Test func aReceivedDocumentOverTheHardLimitIsRefused() async throws {
        try await TransactionTests.withStore { store in
            _ = try await store.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = 50")
            _ = try await store.execute("ALTER SYSTEM SET document_size_hard_limit_bytes = 100")
            let id = TransactionID(origin: SiteID(0xA), sequence: 1)
            let value = Value.string(String(repeating: "y", count: 200)).canonicalJSON
            let deltas = [
                Delta(collection: "t", documentID: "\"big\"", field: "v", valueJSON: value, timestamp: HybridTimestamp(rawValue: 1 << 16), transaction: id, index: 0, count: 1)
            ]
            let record = TransactionRecord(
                id: id, deltaCount: 1, documentCount: 1, collections: [CollectionCount(collection: "t", documents: 1, deltas: 1)],
                state: .applied, firstSeen: 0)
            let (refusal, _) = try await store.writeInbound { writer async throws(ShoalError) in
                try await writer.apply(
                    record, deltas: deltas, documentDeltaCounts: [DocumentRef(collection: "t", id: "\"big\""): 1], context: [],
                    buffered: false, state: .applied, rest: [], limits: store.systemParameters.documentLimits, logger: Logger(label: "shoal.test"))
            }
            // `{"_id":"big","v":"yyy…"}`: the body with its `_id`, 18 bytes, the 200 y and the closing 2.
            #expect(refusal?.reason == .tooLarge(bytes: 220, limit: 100))
            #expect(refusal?.description == "document \"big\" in t: it would be 220 bytes, over the hard limit of 100 bytes (document_size_hard_limit_bytes)")
        }
    }

    /// A document an older version stored past the limits: its body cannot be read back.
    /// Queries leave it out (and log it), the sync reader sends it rather than failing,
    /// and statements that name it by `_id` repair, delete or evict it.
    @Test func aDocumentStoredTooDeepByAnOlderVersionIsReadAroundAndCanBeRepaired() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try DocumentStore(directory: dir.path)
            for id in ["a", "b", "c", "ok"] {
                _ = try await store.execute("INSERT INTO t DOCUMENTS ({'_id': '\(id)', 'n': 1})")
                if id != "ok" { _ = try await store.execute("UPDATE t SET \(Self.path(128)) = 1 WHERE _id = '\(id)'") }
            }
            store.close()
        }
        // What an older version could write: one level more, in the registers and the body.
        let pool = try DatabasePool(path: dir.path + "/shoal.sqlite")
        try await pool.write { db in
            for id in ["a", "b", "c"] {
                let key = "\"\(id)\""
                let row = try Row.fetchOne(
                    db, sql: "SELECT name, ts, site, txn_seq, txn_site FROM field WHERE collection = 't' AND doc_id = ? AND value = '1' AND name != 'n'",
                    arguments: [key])!
                let name: String = row[0]
                try db.execute(
                    sql: "UPDATE field SET name = ? WHERE collection = 't' AND doc_id = ? AND name = ?",
                    arguments: [name + String(RegisterName.pathSeparator) + "p", key, name])
                var deep = "1"
                for _ in 0..<128 { deep = "{\"p\":\(deep)}" }
                try db.execute(
                    sql: "UPDATE document SET body = ? WHERE collection = 't' AND doc_id = ?",
                    arguments: ["{\"_id\":\"\(id)\",\"n\":1,\"p\":\(deep)}", key])
            }
        }
        try pool.close()
        let records = LogRecords()
        let store = try DocumentStore(directory: dir.path, logger: Logger(label: "t") { _ in CapturingLogHandler(records: records) })
        defer { store.close() }
        #expect(try await store.execute("SELECT _id FROM t").items == [["_id": "ok"]])
        let count = try await store.execute("SELECT COUNT(*) FROM t").items
        #expect(count == [["$1": 1]], "\(count)")
        #expect(records.warnings.contains { $0.contains("3 document(s) of t cannot be read") }, "\(records.warnings)")
        // The sync reader sends what it cannot judge, rather than failing the session.
        var filtered = SubscriptionSet()
        try filtered.add(query: "SELECT * FROM t WHERE n = 1")
        let page = try await store.changes(after: 0, limit: 1000, subscriptions: filtered)
        #expect(Set(page.pieces.flatMap(\.deltas).map(\.documentID)) == ["\"a\"", "\"b\"", "\"c\"", "\"ok\""])
        // Repaired by _id: the field too deep unset.
        _ = try await store.execute("UPDATE t UNSET p WHERE _id = 'a'")
        #expect(try await store.execute("SELECT * FROM t WHERE _id = 'a'").items == [["_id": "a", "n": 1]])
        // Deleted and evicted by _id.
        #expect(try await store.execute("DELETE FROM t WHERE _id = 'b'").mutatedDocumentIDs == ["b"])
        store.peerHoldings.note(SiteID(0xB), through: try await store.lastSequence(), subscriptions: try TransactionTests.everything("t"))
        #expect(try await store.execute("EVICT FROM t WHERE _id = 'c'").mutatedDocumentIDs == ["c"])
        #expect(try await store.execute("SELECT _id FROM t ORDER BY _id").items == [["_id": "a"], ["_id": "ok"]])
    }
}

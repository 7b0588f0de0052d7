import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// Change-log compaction: whole transactions that hold no current value leave the
/// log, and a replica built from the compacted log equals one built from all of it.
@Suite struct CompactionTests {
    typealias Engine = StoreConformanceTests.Engine

    static func pieces(_ store: any NodeStore) async throws -> [TransactionPiece] {
        try await store.changes(after: 0, limit: 1_000_000, subscriptions: ReplicationTests.everything()).pieces
    }

    static func contents(_ store: any DocumentDatabase) async throws -> [String] {
        try await store.execute("SELECT * FROM c ORDER BY _id").items.map(\.canonicalJSON)
    }

    static func compact(_ store: any NodeStore, through point: UInt64) async throws -> CompactionReport {
        try await store.compactChangeLog(after: 0, through: point, progress: { _, _ in })
    }

    /// A fresh replica that applied `pieces`, one batch each.
    static func replica(of pieces: [TransactionPiece]) async throws -> [String] {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let replica = try DocumentStore(directory: dir.path)
        defer { replica.close() }
        for (i, piece) in pieces.enumerated() {
            _ = try await replica.applyRemote([piece], from: SiteID(99), subscriptionKey: "k", through: UInt64(i + 1))
        }
        return try await contents(replica)
    }

    @Test(arguments: Engine.allCases)
    func aTransactionGoesOnlyWhenEveryRegisterItWroteWasOverwritten(engine: Engine) async throws {
        try await engine.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'x': 1, 'y': 1})")  // T1
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'b', 'x': 1})")  // T2
            _ = try await store.execute("UPDATE c SET x = 2 WHERE _id = 'a'")  // T3
            _ = try await store.execute("UPDATE c SET x = 2 WHERE _id = 'b'")  // T4
            _ = try await store.execute("UPDATE c SET x = 3, y = 3 WHERE _id = 'a'")  // T5
            _ = try await store.execute("UPDATE c SET x = 3 WHERE _id = 'b'")  // T6
            let before = try await Self.pieces(store)
            let expected = try await Self.contents(store)
            #expect(before.count == 6)
            let last = try await store.lastSequence()

            // Through T3's row: T3 goes (T5 overwrote it). T4, overwritten by T6 as wholly,
            // stays, since its row lies above the point. T1 and T2 hold their documents' _id.
            // Each transaction wrote one document: one log row each.
            let partial = try await Self.compact(store, through: 3)
            let afterPartial = try await Self.pieces(store)
            #expect(afterPartial.map(\.id) == [before[0], before[1], before[3], before[4], before[5]].map(\.id), "\(partial)")
            #expect(partial.transactionsRemoved == 1 && partial.rowsRemoved == 1)

            let report = try await Self.compact(store, through: last)
            let after = try await Self.pieces(store)
            // T4 goes now; T1 and T2 hold _id (and T1 nothing else), T5 a's x and y, T6 b's x.
            #expect(after.map(\.id) == [before[0], before[1], before[4], before[5]].map(\.id), "\(report)")
            #expect(try await Self.contents(store) == expected, "compaction changes no document")
            #expect(try await Self.replica(of: after) == expected, "the compacted log rebuilds the same documents")
            let status = try await store.storageStatus()
            #expect(status.compactedThrough == last && status.changeLogRows == UInt64(after.count))
            #expect(status.compactedAt != nil)
            // Nothing more to do the second time.
            #expect(try await Self.compact(store, through: last).rowsRemoved == 0)
        }
    }

    /// A document whose only live register is its `_id` still exists on a replica of
    /// the compacted log: the creating transaction holds the `_id` and stays, however
    /// the document's other fields were overwritten or removed since.
    @Test(arguments: Engine.allCases)
    func aDocumentLeftWithOnlyItsIdStaysOnAReplica(engine: Engine) async throws {
        try await engine.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'd2', 'f0': null})")
            _ = try await store.execute("UPDATE c SET f1 = 1 WHERE _id = 'd2'")
            _ = try await store.execute("UPDATE c SET f0 = 2 WHERE _id = 'd2'")
            _ = try await store.execute("UPDATE c UNSET f0 WHERE _id = 'd2'; UPDATE c UNSET f1 WHERE _id = 'd2'")
            let expected = try await Self.contents(store)
            #expect(expected == ["{\"_id\":\"d2\"}"])
            let report = try await Self.compact(store, through: try await store.lastSequence())
            #expect(report.transactionsRemoved == 2, "the SET transactions went; the INSERT and the UNSETs stay: \(report)")
            #expect(try await Self.replica(of: try await Self.pieces(store)) == expected)
        }
    }

    /// A DELETE hides every earlier write to its document for ever: the transactions
    /// that wrote only deleted documents leave the log, the DELETE stays, and a
    /// replica of the compacted log holds the same (no resurrected document).
    @Test(arguments: Engine.allCases)
    func writesHiddenByADeleteLeaveTheLog(engine: Engine) async throws {
        try await engine.withStore { store in
            for i in 0..<10 {
                _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': :id, 'x': 1, 'm': {'k': 1}})", arguments: ["id": .string("d\(i)")])
            }
            _ = try await store.execute("UPDATE c APPLY n INCREMENT BY 2 WHERE _id = 'd0'")
            _ = try await store.execute("DELETE FROM c WHERE _id = 'd0'; DELETE FROM c WHERE _id = 'd1'")
            // Written again after its DELETE: d1 lives, with only what came after.
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'd1', 'y': 2}) ON ID CONFLICT DO UPDATE")
            let before = try await Self.pieces(store)
            let expected = try await Self.contents(store)
            #expect(before.count == 13)
            let report = try await Self.compact(store, through: try await store.lastSequence())
            let after = try await Self.pieces(store)
            #expect(report.transactionsRemoved == 3, "d0's and d1's inserts and d0's increment went: \(report)")
            #expect(after.map(\.id) == before.dropFirst(2).filter { $0.id != before[10].id }.map(\.id))
            #expect(try await Self.replica(of: after) == expected)
            #expect(expected.count == 9 && !expected.contains { $0.contains("\"d0\"") })
        }
    }

    /// The registers a tombstone hides go; the tombstone, the registers written after
    /// it, and every query's answer stay, on this store and on a replica.
    @Test(arguments: Engine.allCases)
    func registersATombstoneHidesArePurged(engine: Engine) async throws {
        try await engine.withStore { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'gone', 'x': 1, 'm': {'k': 1}}), ({'_id': 'back', 'x': 1, 'y': 1})")
            _ = try await store.execute("UPDATE c APPLY n INCREMENT BY 2 WHERE _id = 'gone'")
            _ = try await store.execute("DELETE FROM c WHERE _id = 'gone'; DELETE FROM c WHERE _id = 'back'")
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'back', 'y': 2}) ON ID CONFLICT DO UPDATE")
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'kept', 'x': 1})")
            let expected = try await Self.contents(store)
            let pieces = try await Self.pieces(store)
            let purged = try await store.purgeHiddenRegisters()
            // gone: _id, x, m (one register holding the object) and this site's n
            // contribution; back: x (its _id and y were written again, after the DELETE).
            #expect(purged == 5, "\(purged)")
            #expect(try await store.purgeHiddenRegisters() == 0, "nothing more the second time")
            #expect(try await Self.contents(store) == expected)
            #expect(try await store.execute("SELECT * FROM c WHERE _id = 'gone'").items.isEmpty)
            // A replica that receives everything, hidden writes included, shows the same.
            #expect(try await Self.replica(of: pieces) == expected)
            // Writing the deleted document again starts from nothing hidden.
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'gone', 'z': 3}) ON ID CONFLICT DO UPDATE; UPDATE c APPLY n INCREMENT BY 1 WHERE _id = 'gone'")
            let again = try await store.execute("SELECT * FROM c WHERE _id = 'gone'").items.map(\.canonicalJSON)
            #expect(again == ["{\"_id\":\"gone\",\"n\":1,\"z\":3}"], "\(again)")
        }
    }

    /// Random writes, updates, deletes and counter increments over a few documents:
    /// compacting through any point keeps every transaction above it and rebuilds
    /// the same documents.
    @Test(arguments: Engine.allCases, [UInt64(1), 2, 3, 4])
    func theCompactedLogRebuildsTheSameDocuments(engine: Engine, seed: UInt64) async throws {
        try await engine.withStore { store in
            var rng = SplitMix(state: seed)
            for _ in 0..<120 {
                let id = "d\(rng.next() % 6)"
                switch rng.next() % 5 {
                case 0:
                    _ = try await store.execute("DELETE FROM c WHERE _id = :id", arguments: ["id": .string(id)])
                case 1:
                    _ = try await store.execute(
                        "INSERT INTO c DOCUMENTS ({'_id': :id}) ON ID CONFLICT DO NOTHING; UPDATE c APPLY n INCREMENT BY 1 WHERE _id = :id",
                        arguments: ["id": .string(id)])
                default:
                    _ = try await store.execute(
                        "INSERT INTO c DOCUMENTS ({'_id': :id, 'f\(rng.next() % 3)': :v, 'm': {'k\(rng.next() % 3)': :v}}) ON ID CONFLICT DO UPDATE",
                        arguments: ["id": .string(id), "v": .int(Int64(rng.next() % 100))])
                }
            }
            let expected = try await Self.contents(store)
            let full = try await Self.pieces(store)
            #expect(try await Self.replica(of: full) == expected)
            let last = try await store.lastSequence()
            let point = last / 2 + rng.next() % (last / 2)
            let report = try await Self.compact(store, through: point)
            let compacted = try await Self.pieces(store)
            #expect(report.transactionsRemoved > 0, "some transaction was wholly overwritten (\(report))")
            #expect(compacted.count == full.count - Int(report.transactionsRemoved))
            #expect(try await Self.contents(store) == expected)
            #expect(try await Self.replica(of: compacted) == expected, "seed \(seed), through \(point)")
            let all = try await Self.compact(store, through: last)
            #expect(try await Self.replica(of: try await Self.pieces(store)) == expected, "seed \(seed), through the end (\(all))")
        }
    }
}

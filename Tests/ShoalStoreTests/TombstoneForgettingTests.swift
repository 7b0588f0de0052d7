import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// Forgetting deleted documents after the tombstone horizon (DATA_MODEL.md §18): a
/// document deleted before the cut-off and not written since loses its tombstone,
/// its registers, its body and its DELETE transaction, once compaction removed
/// that transaction whole; nothing else changes.
@Suite struct TombstoneForgettingTests {
    typealias Engine = StoreConformanceTests.Engine

    /// A wall clock the test moves by hand.
    final class ManualClock: Sendable {
        let now = Locked<UInt64>(1_700_000_000_000)
        func set(_ millis: UInt64) { now.withLock { $0 = millis } }
        var read: @Sendable () -> UInt64 { { [now] in now.withLock { $0 } } }
    }

    static func ref(_ id: String) -> DocumentRef { DocumentRef(collection: "c", id: "\"\(id)\"") }

    static let t0: UInt64 = 1_700_000_000_000

    @Test(arguments: Engine.allCases)
    func aDocumentDeletedBeforeTheCutOffIsForgottenWithItsDelete(engine: Engine) async throws {
        let clock = ManualClock()
        try await engine.withStore(wallClock: clock.read) { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'gone', 'x': 1, 'm': {'k': 1}})")
            for id in ["back", "mixed", "late"] {
                _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': :id, 'x': 1})", arguments: ["id": .string(id)])
            }
            // Created in one transaction with `kept`, whose _id that transaction holds for as long as it lives.
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'kept', 'x': 1}), ({'_id': 'sibling', 'x': 1})")
            _ = try await store.execute("UPDATE c APPLY n INCREMENT BY 2 WHERE _id = 'gone'")
            clock.set(Self.t0 + 1_000)
            _ = try await store.execute("DELETE FROM c WHERE _id = 'gone'")
            _ = try await store.execute("DELETE FROM c WHERE _id = 'sibling'")
            _ = try await store.execute("DELETE FROM c WHERE _id = 'back'")
            // One transaction deletes `mixed` and writes `kept`: it holds kept's x, so it stays.
            _ = try await store.execute("DELETE FROM c WHERE _id = 'mixed'; UPDATE c SET x = 2 WHERE _id = 'kept'")
            clock.set(Self.t0 + 2_000)
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'back', 'y': 2}) ON ID CONFLICT DO UPDATE")
            clock.set(Self.t0 + 5_000)
            _ = try await store.execute("DELETE FROM c WHERE _id = 'late'")
            let visible = try await CompactionTests.contents(store)
            #expect(visible == ["{\"_id\":\"back\",\"y\":2}", "{\"_id\":\"kept\",\"x\":2}"])

            // The cut-off lies between the first deletes and `late`'s.
            let cutOff = Self.t0 + 3_000
            let last = try await store.lastSequence()
            _ = try await CompactionTests.compact(store, through: last)
            _ = try await store.purgeHiddenRegisters()
            let report = try await store.forgetDeletedDocuments(deletedBefore: cutOff, through: last)
            #expect(report.documents == 1, "\(report)")
            #expect(report.forgottenThroughMillis == Self.t0 + 1_000)
            let gone = try await Engine.retained(store, Self.ref("gone"))
            #expect(gone.registers == 0 && !gone.body && gone.logRows == 0, "\(gone)")
            // Written again after its DELETE, deleted after the cut-off, or written by a
            // transaction that still holds a current value: kept, tombstone and all.
            for id in ["back", "late", "mixed", "sibling"] {
                let kept = try await Engine.retained(store, Self.ref(id))
                #expect(kept.registers > 0 && kept.body && kept.logRows > 0, "\(id): \(kept)")
            }
            #expect(try await CompactionTests.contents(store) == visible, "no live document changes")
            #expect(try await CompactionTests.replica(of: try await CompactionTests.pieces(store)) == visible)
            let status = try await store.storageStatus()
            #expect(status.documentsForgotten == 1 && status.forgottenThroughMillis == Self.t0 + 1_000)
            #expect(try store.savedFreshness().forgottenThrough == Self.t0 + 1_000)

            // Once `kept` is written again, the mixed transaction holds nothing current and goes, and `mixed` with it.
            clock.set(Self.t0 + 6_000)
            _ = try await store.execute("UPDATE c SET x = 3 WHERE _id = 'kept'")
            let second = try await store.forgetDeletedDocuments(deletedBefore: cutOff, through: try await store.lastSequence())
            #expect(second.documents == 1, "\(second)")
            let mixed = try await Engine.retained(store, Self.ref("mixed"))
            #expect(mixed.registers == 0 && !mixed.body && mixed.logRows == 0, "\(mixed)")
            #expect(try await store.storageStatus().documentsForgotten == 2)
            #expect(
                try await store.forgetDeletedDocuments(deletedBefore: cutOff, through: try await store.lastSequence()).documents == 0,
                "nothing more the second time")

            // A forgotten document can be written again like a new one.
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'gone', 'z': 3}); UPDATE c APPLY n INCREMENT BY 1 WHERE _id = 'gone'")
            let again = try await store.execute("SELECT * FROM c WHERE _id = 'gone'").items.map(\.canonicalJSON)
            #expect(again == ["{\"_id\":\"gone\",\"n\":1,\"z\":3}"], "\(again)")
        }
    }

    /// A DELETE above the compaction point (a peer has not acknowledged it) is not
    /// forgotten, however old: that peer may not have it yet.
    @Test(arguments: Engine.allCases)
    func aDeleteAboveTheCompactionPointIsKept(engine: Engine) async throws {
        let clock = ManualClock()
        try await engine.withStore(wallClock: clock.read) { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'gone', 'x': 1})")
            let point = try await store.lastSequence()
            _ = try await store.execute("DELETE FROM c WHERE _id = 'gone'")
            let cutOff = Self.t0 + 10_000
            #expect(try await store.forgetDeletedDocuments(deletedBefore: cutOff, through: point).documents == 0)
            #expect(try await Engine.retained(store, Self.ref("gone")).registers > 0)
            #expect(try await store.storageStatus().forgottenThroughMillis == 0)
            // Before the DELETE's time nothing is forgotten either, through the whole log.
            let last = try await store.lastSequence()
            #expect(try await store.forgetDeletedDocuments(deletedBefore: Self.t0, through: last).documents == 0)
            #expect(try await Engine.retained(store, Self.ref("gone")).logRows == 2, "the rows of the INSERT (_id, x) and of the DELETE stay")
            // Nor while the DELETE is the log's last transaction (its sequence would be reused).
            #expect(try await store.forgetDeletedDocuments(deletedBefore: cutOff, through: last).documents == 0)
            // With both, and a later transaction, it goes, and both its transactions.
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'next', 'x': 1})")
            #expect(try await store.forgetDeletedDocuments(deletedBefore: cutOff, through: try await store.lastSequence()).documents == 1)
            #expect(try await Engine.retained(store, Self.ref("gone")) == (0, false, 0))
        }
    }

    /// UNSET and map-entry removals before the cut-off leave no register; later ones
    /// stay; no body changes, and `forgotten_through` covers the newest one forgotten.
    @Test(arguments: Engine.allCases)
    func removalsBeforeTheCutOffAreForgotten(engine: Engine) async throws {
        let clock = ManualClock()
        try await engine.withStore(wallClock: clock.read) { store in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'd', 'x': 1, 'y': 1, 'z': 1})")
            // Entries written into a missing field make it a map, with a register per entry.
            _ = try await store.execute("UPDATE c SET m.a = 1, m.b = 1 WHERE _id = 'd'")
            clock.set(Self.t0 + 1_000)
            _ = try await store.execute("UPDATE c UNSET x WHERE _id = 'd'")
            _ = try await store.execute("UPDATE c UNSET m.a WHERE _id = 'd'")
            clock.set(Self.t0 + 5_000)
            _ = try await store.execute("UPDATE c UNSET y WHERE _id = 'd'")
            let body = try await CompactionTests.contents(store)
            #expect(body == ["{\"_id\":\"d\",\"m\":{\"b\":1},\"z\":1}"], "\(body)")
            let before = try await Engine.retained(store, Self.ref("d")).registers
            #expect(try await store.forgetRemovals(removedBefore: Self.t0) == 0, "none before the first")
            #expect(try await store.forgetRemovals(removedBefore: Self.t0 + 3_000) == 2, "x and m.a")
            #expect(try await Engine.retained(store, Self.ref("d")).registers == before - 2)
            #expect(try await CompactionTests.contents(store) == body)
            #expect(try await store.storageStatus().forgottenThroughMillis == Self.t0 + 1_000)
            #expect(try await store.forgetRemovals(removedBefore: Self.t0 + 3_000) == 0, "nothing more the second time")
            // A replica of the log shows the same document: the rows that wrote the removals stay.
            #expect(try await CompactionTests.replica(of: try await CompactionTests.pieces(store)) == body)
            // The field can be written again.
            _ = try await store.execute("UPDATE c SET x = 2 WHERE _id = 'd'")
            #expect(try await CompactionTests.contents(store) == ["{\"_id\":\"d\",\"m\":{\"b\":1},\"x\":2,\"z\":1}"])
        }
    }

    /// A store keeps freshness from its creation; its entries are saved only upward.
    @Test func freshnessIsKeptFromCreationAndSavedOnlyUpward() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let before = HybridLogicalClock.systemMilliseconds()
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        #expect(try await store.freshSince() >= before)
        #expect(try store.savedFreshness().entries.isEmpty)
        #expect(try await store.holdsOthersWrites() == false)
        #expect(store.lastCommittedSequence == 0)
        try await store.saveFreshness([SiteID(2): 10])
        try await store.saveFreshness([SiteID(2): 5, SiteID(3): 7])
        #expect(try store.savedFreshness().entries == [SiteID(2): 10, SiteID(3): 7])
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'd'}); DELETE FROM c WHERE _id = 'd'")
        #expect(try await store.holdsOthersWrites() == false, "its own writes only")
        #expect(store.lastCommittedSequence == (try await store.lastSequence()))
        // One remote transaction, and it holds another node's write (an EVICT would not change that).
        let other = TransactionID(origin: SiteID(0x77), sequence: 1)
        let piece = TransactionPiece(
            id: other, deltaCount: 1, documentCount: 1, collections: [CollectionCount(collection: "c", documents: 1, deltas: 1)],
            deltas: [
                Delta(
                    collection: "c", documentID: "\"r\"", field: "x", valueJSON: "1", timestamp: HybridTimestamp(rawValue: 1 << 20),
                    transaction: other, index: 0, count: 1)
            ], documentDeltaCounts: [DocumentRef(collection: "c", id: "\"r\""): 1], isLast: true)
        _ = try await store.applyRemote([piece], from: SiteID(0x77), subscriptionKey: "k", through: 1)
        #expect(try await store.holdsOthersWrites())
        _ = try await store.execute("EVICT FROM c WHERE _id = 'r'")
        #expect(try await store.holdsOthersWrites(), "EVICT keeps the log and the transaction's row")
    }
}

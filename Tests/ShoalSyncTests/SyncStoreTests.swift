import Foundation
import ShoalCRDT
import ShoalStore
import ShoalSync
import ShoalTesting
import Synchronization
import Testing

/// Sync reaches the store only through `SyncStore`: a store of another kind (here
/// one that forwards to a `DocumentStore` and counts what it is asked) sits under
/// the same sessions and pipeline.
@Suite struct SyncStoreTests {
    final class CountingStore: SyncStore {
        let base: DocumentStore
        let commits = Mutex(0)
        let pages = Mutex(0)
        init(_ base: DocumentStore) { self.base = base }

        var siteID: SiteID { base.siteID }
        var clock: HybridLogicalClock { base.clock }
        var systemParameters: SystemParameters { base.systemParameters }
        var mayLackOwnTransactions: Bool { base.mayLackOwnTransactions }
        func cursor(peer: SiteID, subscriptionKey: String) async throws(StoreError) -> UInt64 {
            try await base.cursor(peer: peer, subscriptionKey: subscriptionKey)
        }
        func changes(
            after sequence: UInt64, limit: Int, byteLimit: Int, subscriptions: SubscriptionSet, excludingOrigin peer: SiteID?,
            continuing: Set<TransactionID>, resuming: Bool
        ) async throws(StoreError) -> ChangeLogPage {
            pages.withLock { $0 += 1 }
            return try await base.changes(
                after: sequence, limit: limit, byteLimit: byteLimit, subscriptions: subscriptions, excludingOrigin: peer,
                continuing: continuing, resuming: resuming)
        }
        func transactionPieces(
            _ id: TransactionID, subscriptions: SubscriptionSet, collections: Set<String>, byteLimit: Int
        ) async throws(StoreError) -> [TransactionPiece] {
            try await base.transactionPieces(id, subscriptions: subscriptions, collections: collections, byteLimit: byteLimit)
        }
        func listenToChangeLog(
            _ handler: @escaping @Sendable (UInt64) -> Void, closed: @escaping @Sendable () -> Void
        ) -> ChangeFeedListening {
            base.listenToChangeLog(handler, closed: closed)
        }
        func cursorResets() -> AsyncStream<UInt64> { base.cursorResets() }
        var lastCommittedSequence: UInt64 { base.lastCommittedSequence }
        func holdsOthersWrites() async throws(StoreError) -> Bool { try await base.holdsOthersWrites() }
        func transactionRecords() async throws(StoreError) -> [TransactionRecord] { try await base.transactionRecords() }
        func writeInbound<T: Sendable>(
            _ body: @escaping @Sendable (any InboundWriting) throws -> T
        ) async throws(StoreError) -> (T, ApplyOutcome) {
            commits.withLock { $0 += 1 }
            return try await base.writeInbound(body)
        }
        func attachmentLength(hash: String) async throws(StoreError) -> Int? { try await base.attachmentLength(hash: hash) }
        func attachmentWriter(fetching hash: String) async throws(StoreError) -> AttachmentWriter {
            try await base.attachmentWriter(fetching: hash)
        }
        func attachmentChunk(hash: String, offset: Int, maximum: Int) async throws(StoreError) -> (total: Int, bytes: [UInt8])? {
            try await base.attachmentChunk(hash: hash, offset: offset, maximum: maximum)
        }
    }

    /// 600 one-document transactions reach a node whose engine runs on another store,
    /// and its pipeline commits many of them per write transaction (group commit); its
    /// own write goes back out through the same store.
    @Test func anotherStoreRunsUnderTheEngineAndCommitsAreGrouped() async throws {
        let a = try TestNode(name: "a", subscriptions: ["SELECT * FROM notes"])
        let directory = TemporaryDirectory(prefix: "shoal-b")
        let bStore = try DocumentStore(directory: directory.path)
        let counting = CountingStore(bStore)
        let b = SyncEngine(store: counting, configuration: SyncConfiguration(nodeName: "b"))
        defer {
            a.remove()
            bStore.close()
            directory.remove()
        }
        try b.subscribe("SELECT * FROM notes")
        _ = try await bStore.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-b', 'n': -1})")
        for i in 0..<600 {
            _ = try await a.store.execute("INSERT INTO notes DOCUMENTS ({'_id': :id, 'n': :n})", arguments: ["id": .string("n\(i)"), "n": .int(Int64(i))])
        }
        try await InProcessMesh.withLink(a.sync, b) { () async throws in
            let arrived = try await InProcessMesh.eventually(timeout: .seconds(60)) {
                try await bStore.collectionCounts().first?.documents == 601
            }
            #expect(arrived)
            let back = try await InProcessMesh.eventually {
                try await a.store.execute("SELECT * FROM notes WHERE _id = 'from-b'").items.count == 1
            }
            #expect(back, "A reads B's log through the protocol")
        }
        let applied = try await bStore.execute("SELECT * FROM notes WHERE n = 599").items
        #expect(applied == [["_id": "n599", "n": 599]])
        let commits = counting.commits.withLock { $0 }
        #expect(commits >= 1 && commits <= 60, "600 transactions in \(commits) commits: the pipeline groups them")
        #expect(counting.pages.withLock { $0 } >= 1)
    }
}

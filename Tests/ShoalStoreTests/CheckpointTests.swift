import Foundation
import GRDB
import ShoalCRDT
@testable import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// The write-ahead log is copied back into the database beside the writer
/// (`runCheckpoints`), not inside the commit that fills it past 1,000 pages.
@Suite struct CheckpointTests {
    static func databaseBytes(_ dir: TemporaryDirectory, _ suffix: String = "") throws -> Int {
        try FileManager.default.attributesOfItem(atPath: dir.path + "/shoal.sqlite" + suffix)[.size] as? Int ?? -1
    }

    /// 900 documents of about 1 KB (each in its body, its register and its log row), in
    /// three transactions: past 1,000 pages of log, below the inline limit.
    static func fill(_ store: DocumentStore, prefix: String = "d") async throws {
        let text = String(repeating: "x", count: 1_000)
        for batch in 0..<3 {
            let docs: [Value] = (0..<300).map { i in ["_id": .string("\(prefix)\(batch)-\(i)"), "text": .string(text)] }
            _ = try await store.execute("INSERT INTO docs DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
        }
    }

    @Test func commitsLeaveTheLogAloneAndRunCheckpointsCopiesIt() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-checkpoint")
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        let pages = try await store.pool.write { db in try Int.fetchOne(db, sql: "PRAGMA wal_autocheckpoint") }
        #expect(pages == DocumentStore.inlineCheckpointPages)
        let before = try Self.databaseBytes(dir)
        try await Self.fill(store)
        // A frame is a 4 KiB page and a 24-byte header, after the log's 32-byte header.
        let frames = (try Self.databaseBytes(dir, "-wal") - 32) / (4_096 + 24)
        #expect(frames > 1_000 && frames < DocumentStore.inlineCheckpointPages, "\(frames) frames")
        #expect(try Self.databaseBytes(dir) == before, "no commit copied the log into the database")

        let checkpoints = Task { await store.runCheckpoints(interval: .milliseconds(20)) }
        defer { checkpoints.cancel() }
        #expect(try await InProcessMesh.eventually(timeout: .seconds(30)) { try Self.databaseBytes(dir) > before + 1_000_000 })
        #expect(try await store.execute("SELECT COUNT(*) AS n FROM docs").items == [["n": 900]])
    }

    /// `shoal compact --vacuum` truncates the log even while `runCheckpoints` copies it:
    /// the VACUUM's checkpoint waits its turn instead of giving up.
    @Test func vacuumTruncatesTheLogBesideRunningCheckpoints() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-checkpoint")
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        let checkpoints = Task { await store.runCheckpoints(interval: .milliseconds(1)) }
        defer { checkpoints.cancel() }
        for round in 0..<5 {
            try await Self.fill(store, prefix: "r\(round)-")
            _ = try await store.execute("DELETE FROM docs WHERE _id > ''")
            try await store.vacuum()
            #expect(try Self.databaseBytes(dir, "-wal") == 0, "round \(round): the log is truncated")
        }
    }

    @Test func runCheckpointsEndsWhenTheStoreCloses() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-checkpoint")
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        let checkpoints = Task { await store.runCheckpoints(interval: .milliseconds(10)) }
        _ = try await store.execute("INSERT INTO docs DOCUMENTS ({'_id': 'a'})")
        await store.shutdown()
        await checkpoints.value
    }
}

import Foundation
import GRDB
import ShoalCRDT
@testable import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// Attachments of any size: stored in chunks as they stream in, served across chunk
/// boundaries, resumed after an interruption, and collected once nothing names them.
@Suite struct AttachmentStoreTests {
    static func bytes(_ count: Int, seed: Int = 0) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: ($0 &+ seed) &* 131 &+ ($0 >> 9)) }
    }

    typealias Engine = StoreConformanceTests.Engine

    @Test(arguments: Engine.allCases)
    func partsOfAnySizeAreReadBackAcrossTheirBoundaries(engine: Engine) async throws {
        try await engine.withStore { store in
            let whole = Self.bytes(2_400_005)
            var writer = try await store.attachmentWriter()
            for range in [0..<300_000, 300_000..<1_348_576, 1_348_576..<1_348_581, 1_348_581..<2_400_005] {
                try await writer.append(Array(whole[range]))
            }
            #expect(try await store.attachmentLength(hash: AttachmentToken.hash(of: whole)) == nil, "not an attachment before finish")
            let token = try await writer.finish(metadata: ["name": "x.bin"])
            #expect(token.hash == AttachmentToken.hash(of: whole) && token.length == whole.count)
            for (offset, maximum) in [(0, 1 << 20), (299_990, 20), (1_348_570, 100), (2_400_000, 1 << 20), (2_400_005, 10), (9_999_999, 10)] {
                let chunk = try #require(try await store.attachmentChunk(hash: token.hash, offset: offset, maximum: maximum))
                let start = min(offset, whole.count)
                #expect(chunk.total == whole.count)
                #expect(chunk.bytes == Array(whole[start..<min(start + maximum, whole.count)]), "\(offset) + \(maximum)")
            }
            let again = try await store.putAttachment(whole)
            #expect(again.hash == token.hash, "the same bytes put twice are one attachment")
            let empty = try await store.putAttachment([])
            #expect(try await store.attachmentChunk(hash: empty.hash, offset: 0, maximum: 10).map(\.total) == 0)
            #expect(try await store.attachmentChunk(hash: AttachmentToken.hash(of: [9]), offset: 0, maximum: 10) == nil)
        }
    }

    @Test func aFetchResumesAfterTheNodeRestarted() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let whole = Self.bytes(3_000_000, seed: 7)
        let hash = AttachmentToken.hash(of: whole)
        do {
            let store = try DocumentStore(directory: dir.path)
            var first = try await store.attachmentWriter(fetching: hash)
            try await first.append(Array(whole[0..<1_200_000]))
            store.close()  // interrupted: the node stopped
        }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        var resumed = try await store.attachmentWriter(fetching: hash)
        #expect(resumed.received == 1_200_000, "the second fetch starts after what the first stored")
        try await resumed.append(Array(whole[1_200_000...]))
        _ = try await resumed.finish()
        #expect(try await store.attachmentChunk(hash: hash, offset: 0, maximum: .max)?.bytes == whole)
    }

    @Test(arguments: Engine.allCases)
    func aFetchResumesWhereTheLastOneStoppedAndChecksTheHash(engine: Engine) async throws {
        try await engine.withStore { store in
            let whole = Self.bytes(3_000_000, seed: 7)
            let hash = AttachmentToken.hash(of: whole)
            var first = try await store.attachmentWriter(fetching: hash)
            try await first.append(Array(whole[0..<1_200_000]))
            // The first fetch stopped (its peer went away); the next picks up its bytes.
            var resumed = try await store.attachmentWriter(fetching: hash)
            #expect(resumed.blob == first.blob && resumed.received == 1_200_000, "the second fetch starts after what the first stored")
            #expect(try await store.attachmentWriter(resuming: first.blob)?.expectedHash == hash)
            try await resumed.append(Array(whole[1_200_000...]))
            _ = try await resumed.finish()
            #expect(try await store.attachmentChunk(hash: hash, offset: 0, maximum: .max)?.bytes == whole)
            #expect(try await store.attachmentWriter(resuming: first.blob) == nil, "a finished fetch leaves no staging entry")

            // Bytes that do not hash to what was asked for are dropped, and the next fetch starts over.
            let other = AttachmentToken.hash(of: Self.bytes(10, seed: 1))
            var wrong = try await store.attachmentWriter(fetching: other)
            try await wrong.append(Self.bytes(10, seed: 2))
            await #expect(throws: ShoalError.self) { _ = try await wrong.finish() }
            #expect(try await store.attachmentLength(hash: other) == nil)
            #expect(try await store.attachmentWriter(fetching: other).received == 0)
            // A part that does not follow on is refused and changes nothing.
            var writer = try await store.attachmentWriter()
            try await writer.append([1, 2, 3])
            await #expect(throws: ShoalError.self) { try await writer.store.appendStaged(blob: writer.blob, offset: 2, bytes: [9]) }
            await #expect(throws: ShoalError.self) { try await writer.store.appendStaged(blob: 987_654, offset: 0, bytes: [9]) }
            let continued = try #require(try await store.attachmentWriter(resuming: writer.blob))
            #expect(continued.received == 3 && continued.expectedHash == nil)
            var more = continued
            try await more.append([4])
            #expect(try await more.finish().hash == AttachmentToken.hash(of: [1, 2, 3, 4]), "a continued upload hashes what came before")
        }
    }

    /// Bytes no live document names go once they have been unnamed for the horizon;
    /// named ones stay, and naming them again resets the wait.
    @Test(arguments: Engine.allCases)
    func bytesNoDocumentNamesAreCollectedAfterTheHorizon(engine: Engine) async throws {
        try await engine.withStore { store in
            var keptWriter = try await store.attachmentWriter()
            try await keptWriter.append(Self.bytes(1_500_000, seed: 1))
            let kept = try await keptWriter.finish()
            let loose = try await store.putAttachment(Self.bytes(1_000, seed: 2))
            _ = try await store.execute(
                "INSERT INTO COLLECTION photos (file ATTACHMENT) DOCUMENTS ({'_id': 'p', 'file': :t})", arguments: ["t": kept.value])
            // A token in a deleted document, and text that only looks like one, name nothing.
            _ = try await store.execute(
                "INSERT INTO COLLECTION photos (file ATTACHMENT) DOCUMENTS ({'_id': 'gone', 'file': :t})", arguments: ["t": loose.value])
            _ = try await store.execute("DELETE FROM photos WHERE _id = 'gone'")
            _ = try await store.execute(
                "INSERT INTO notes DOCUMENTS ({'_id': 'n', 'text': :t})", arguments: ["t": .string("{\"attachment\":\"\(loose.hash)\"")])
            let horizon = Duration.seconds(60)
            // Taken before the put below, which is stamped with the real clock: it was last
            // touched at t0 or after. (Taken after it, a loaded machine that took more than
            // a second to return from the put let the sweep at t0 + 59 take it already.)
            let t0 = Date()
            var abandoned = try await store.attachmentWriter()
            try await abandoned.append([1, 2, 3])
            #expect(try await store.collectAttachments(horizon: horizon, now: t0).deleted.isEmpty, "the first sweep only marks")
            let early = try await store.collectAttachments(horizon: horizon, now: t0 + 59)
            #expect(early.deleted.isEmpty && early.abandonedStagings == 0)
            let swept = try await store.collectAttachments(horizon: horizon, now: t0 + 61)
            #expect(swept.deleted == [loose.hash] && swept.deletedBytes == 1_000)
            // The put was touched between t0 and now: a sweep a horizon after now takes
            // it, unless the one at t0 + 61 did.
            let late = try await store.collectAttachments(horizon: horizon, now: Date() + 61)
            #expect(swept.abandonedStagings + late.abandonedStagings == 1, "a put left untouched for the horizon goes too")
            #expect(try await store.attachmentLength(hash: loose.hash) == nil)
            #expect(try await store.attachmentLength(hash: kept.hash) == 1_500_000)
            #expect(try await store.attachmentWriter(resuming: abandoned.blob) == nil)

            _ = try await store.execute("DELETE FROM photos WHERE _id = 'p'")
            #expect(try await store.collectAttachments(horizon: horizon, now: t0 + 100).deleted.isEmpty)
            // Named again before the horizon: the wait starts over once it is unnamed again.
            _ = try await store.execute(
                "INSERT INTO COLLECTION photos (file ATTACHMENT) DOCUMENTS ({'_id': 'q', 'file': :t})", arguments: ["t": kept.value])
            #expect(try await store.collectAttachments(horizon: horizon, now: t0 + 150).deleted.isEmpty)
            _ = try await store.execute("UPDATE photos SET file = 'none' WHERE _id = 'q'")
            #expect(try await store.collectAttachments(horizon: horizon, now: t0 + 200).deleted.isEmpty)
            #expect(try await store.collectAttachments(horizon: horizon, now: t0 + 259).deleted.isEmpty)
            #expect(try await store.collectAttachments(horizon: horizon, now: t0 + 261).deleted == [kept.hash])
            #expect(
                try await store.stagedAttachmentBytes(blob: keptWriter.blob, from: 0, count: 10).isEmpty,
                "no chunk outlives its attachment")
        }
    }

    /// A database from before chunked attachments keeps its attachments readable.
    @Test func attachmentsStoredWholeBeforeChunksAreMigrated() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let whole = Self.bytes(70_000, seed: 3)
        let hash = AttachmentToken.hash(of: whole)
        do {
            let pool = try DatabasePool(path: dir.path + "/shoal.sqlite")
            try DocumentStore.migrator.migrate(pool, upTo: "v7-evicted-counters")
            try await pool.write { db in
                try db.execute(sql: "INSERT INTO attachment (hash, length, data) VALUES (?, ?, ?)", arguments: [hash, whole.count, Data(whole)])
            }
            try pool.close()
        }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        #expect(try await store.attachmentChunk(hash: hash, offset: 60_000, maximum: 20_000)?.bytes == Array(whole[60_000...]))
        let next = try await store.putAttachment([4, 5, 6])
        #expect(try await store.attachmentChunk(hash: next.hash, offset: 0, maximum: 10)?.bytes == [4, 5, 6])
    }
}

import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// EVICT forgets a node's copies of documents without telling anyone; what this node
/// issued before must still hold after it, and after a restart.
@Suite struct EvictTests {
    /// A wall clock an hour ahead of this machine's: far past the drift peers adopt.
    static let anHourAhead: @Sendable () -> UInt64 = { HybridLogicalClock.systemMilliseconds() + 3_600_000 }

    @Test func theClockStartsAboveWhatItIssuedBeforeAnEvictAndARestart() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let replica = try DocumentStore(directory: b.path)
        defer { replica.close() }
        let ahead = try DocumentStore(directory: a.path, wallClock: Self.anHourAhead)
        _ = try await ahead.execute("INSERT INTO c DOCUMENTS ({'_id': 'k', 'v': 1})")
        try await CounterTests.sync(ahead, replica)
        _ = try await ahead.execute("EVICT FROM c WHERE _id = 'k'")
        ahead.close()
        // Reopened with the wall clock an hour behind its last write, and nothing in `field`.
        let writer = try DocumentStore(directory: a.path)
        defer { writer.close() }
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'k', 'v': 2}) ON ID CONFLICT DO UPDATE")
        try await CounterTests.sync(writer, replica)
        #expect(try await replica.execute("SELECT * FROM c").items == [["_id": "k", "v": 2]], "the new write is newer than the old one")
        try await CounterTests.sync(replica, writer)
        #expect(try await writer.execute("SELECT * FROM c").items == [["_id": "k", "v": 2]])
    }

    /// Increments made after an EVICT and before peers send the document back add to
    /// the ones made before it, with or without a base, on every replica.
    @Test func incrementsAfterAnEvictAddToTheOnesBefore() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let writer = try DocumentStore(directory: a.path), peer = try DocumentStore(directory: b.path)
        defer { writer.close(); peer.close() }
        _ = try await writer.execute(
            "INSERT INTO c DOCUMENTS ({'_id': 'plain'}), ({'_id': 'based', 'n': 10}); UPDATE c APPLY n INCREMENT BY 5")
        try await CounterTests.sync(writer, peer)
        _ = try await writer.execute("EVICT FROM c")
        for (id, by) in [("plain", 2), ("based", 2), ("based", 1)] {
            _ = try await writer.execute(
                "INSERT INTO c DOCUMENTS ({'_id': :id}) ON ID CONFLICT DO NOTHING; UPDATE c APPLY n INCREMENT BY :by WHERE _id = :id",
                arguments: ["id": .string(id), "by": .int(Int64(by))])
        }
        #expect(
            try await writer.execute("SELECT * FROM c WHERE _id = 'plain'").items == [["_id": "plain", "n": 7]],
            "without a base, the counter shows at once")
        try await MapTests.exchange(writer, peer)  // peer's copy refills the writer
        for store in [writer, peer] {
            #expect(
                try await store.execute("SELECT * FROM c ORDER BY _id").items == [["_id": "based", "n": 18], ["_id": "plain", "n": 7]])
        }
    }
}

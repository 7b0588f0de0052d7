import ShoalCRDT
import ShoalStore
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
}

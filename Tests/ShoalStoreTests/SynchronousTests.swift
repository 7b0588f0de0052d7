import Foundation
import GRDB
@testable import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// `shoal run --synchronous full`: the store's writer runs with `PRAGMA synchronous =
/// FULL`; the default is NORMAL.
@Suite struct SynchronousTests {
    /// The writer connection's mode (readers write nothing, so theirs does not matter).
    static func synchronous(_ store: DocumentStore) throws -> Int {
        try store.pool.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    @Test func fullWhenAskedNormalOtherwise() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-synchronous")
        defer { dir.remove() }
        let full = try DocumentStore(directory: dir.path + "/full", synchronousFull: true)
        defer { full.close() }
        _ = try await full.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
        #expect(try Self.synchronous(full) == 2, "2 is FULL")
        let normal = try DocumentStore(directory: dir.path + "/normal")
        defer { normal.close() }
        #expect(try Self.synchronous(normal) == 1, "1 is NORMAL")
        #expect(try await full.execute("SELECT * FROM cars").items.count == 1)
    }
}

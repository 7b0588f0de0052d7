import Shoal
import Foundation
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// The node's policy around forgetting deleted documents (DATA_MODEL.md §18): with no
/// tombstone horizon nothing is forgotten, and with one a compaction forgets what was
/// deleted before it and tells the handshake.
@Suite struct TombstoneHorizonTests {
    static func node(_ dir: String, tombstoneHorizon: Duration?) throws -> ShoalNode {
        try ShoalNode(
            configuration: NodeConfiguration(
                dataDirectory: dir, listen: HostAndPort(host: "127.0.0.1", port: 0), name: "solo", discovery: false,
                compactionInterval: nil, compactionHorizon: .seconds(1), tombstoneHorizon: tombstoneHorizon))
    }

    static func deleteOne(_ node: ShoalNode) async throws {
        _ = try await node.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'gone'})")
        _ = try await node.store.execute("DELETE FROM cars WHERE _id = 'gone'")
        // Not the log's last transaction, which always stays.
        _ = try await node.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'kept'})")
    }

    @Test func onlyAHorizonForgetsAndTheHandshakeHearsOfIt() async throws {
        let dirs = TemporaryDirectory(prefix: "shoal-tombstones")
        defer { dirs.remove() }
        let keeping = try Self.node(dirs.path + "/keeping", tombstoneHorizon: nil)
        let forgetting = try Self.node(dirs.path + "/forgetting", tombstoneHorizon: .seconds(1))
        try await Self.deleteOne(keeping)
        try await Self.deleteOne(forgetting)
        // Both DELETEs past a one-second horizon (however slowly this runs, under a sanitizer too).
        try await Task.sleep(for: .milliseconds(1_200))
        let kept = try await keeping.compact()
        #expect(kept.documentsForgotten == 0 && keeping.sync.freshness.forgottenThrough == 0, "no horizon: tombstones stay")
        #expect(try await keeping.storage.storageStatus().documentsForgotten == 0)
        let forgot = try await forgetting.compact()
        #expect(forgot.documentsForgotten == 1, "\(forgot)")
        #expect(forgetting.sync.freshness.forgottenThrough > 0, "the handshake now refuses stale peers")
        #expect(try await forgetting.storage.storageStatus().documentsForgotten == 1)
        #expect(try await forgetting.compact().documentsForgotten == 0, "nothing more the second time")
    }
}

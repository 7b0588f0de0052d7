import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// A session's lane into the inbound pipeline: once its link closed, what it still had
/// queued is applied but files no cursor (docs/ROUTES.md, "Bounds"). The offers that
/// held its cursor below transactions not delivered yet are forgotten with the link, so
/// a cursor filed then could pass them, and the peer would never offer them again.
@Suite struct InboundLaneTests {
    /// Enqueues an empty batch of `peer` through `lane` filing `through` under `key`, and
    /// waits until it is durable.
    static func commit(_ node: TestNode, peer: SiteID, key: String, through: UInt64, lane: InboundPipeline.Lane) async throws {
        let epoch = try await node.store.resumePoint(peer: peer, subscriptionKey: key).epoch
        let result = await withCheckedContinuation { (done: CheckedContinuation<Result<Void, ShoalError>, Never>) in
            node.sync.pipeline.enqueue(
                InboundPipeline.Item(source: peer, pieces: [], cursor: (key, through, epoch), lane: lane, done: { done.resume(returning: $0) }))
        }
        try result.get()
    }

    @Test func aLaneStoppedWhenItsLinkClosedAppliesButFilesNoCursor() async throws {
        let node = try TestNode(name: "a", subscriptions: ["SELECT * FROM cars"])
        defer { node.remove() }
        let peer = SiteID(0x42)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await node.sync.run() }
            let open = InboundPipeline.Lane()
            try await Self.commit(node, peer: peer, key: "k", through: 10, lane: open)
            #expect(try await node.store.cursor(peer: peer, subscriptionKey: "k") == 10)
            #expect(open.recordsCursors)

            let closed = InboundPipeline.Lane()
            closed.stopRecordingCursors()
            try await Self.commit(node, peer: peer, key: "k", through: 20, lane: closed)
            #expect(!closed.recordsCursors)
            #expect(try await node.store.cursor(peer: peer, subscriptionKey: "k") == 10, "the closed link's batch moved no cursor")

            // The next session's lane files again.
            try await Self.commit(node, peer: peer, key: "k", through: 15, lane: InboundPipeline.Lane())
            #expect(try await node.store.cursor(peer: peer, subscriptionKey: "k") == 15)
            group.cancelAll()
        }
    }
}

import Foundation
import NIOCore
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// A receiver whose limits are smaller than its sender's: the sender fits its frames
/// to what the receiver said in its Hello, and what the receiver cannot hold is
/// refused whole there and reported, while the link goes on (PROTOCOL.md §8.3, §8.8).
@Suite struct PeerLimitsSyncTests {
    static func value(_ bytes: Int) -> Value { .string(String(repeating: "v", count: bytes)) }

    @Test func aReceiverWithASmallFrameLimitGetsEverythingItCanHoldInFramesItTakes() async throws {
        let frameLimit = 4096
        let a = try TestNode(name: "a")
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM cars"]) {
            $0.limits = WireLimits(maximumFrameSize: frameLimit, maximumInflatedSize: frameLimit)
        }
        defer {
            a.remove()
            b.remove()
        }
        // 100 documents of about 1 KB in one transaction: many frames' worth.
        let docs = (0..<100).map { i in Value.object(["_id": .string("car-\(i)"), "v": Self.value(1000)]) }
        _ = try await a.store.execute("INSERT INTO cars DOCUMENTS (:d)", arguments: ["d": .array(docs)])
        // One document with a value that fits no frame of b's, beside one that fits.
        let tooLarge = try await a.store.execute(
            "INSERT INTO cars DOCUMENTS ({'_id': 'huge', 'v': :v}), ({'_id': 'beside', 'v': 1})", arguments: ["v": Self.value(10_000)])
        _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'after', 'v': 2})")
        let largest = Locked(0)
        let connection = InMemoryConnection(observeFromA: { frame in
            largest.withLock { $0 = max($0, frame.payload.readableBytes) }
        })
        try await InProcessMesh.withLink(a.sync, b.sync, connection: connection) {
            let arrived = try await InProcessMesh.eventually {
                try await b.store.execute("SELECT COUNT(*) FROM cars").items == [["$1": 101]]
                    && b.sync.pipeline.status.refused == 1
            }
            let count = try await b.store.execute("SELECT COUNT(*) FROM cars").items
            #expect(arrived, "\(count), refused \(b.sync.pipeline.status.refused)")
        }
        #expect(largest.withLock { $0 } <= frameLimit, "a frame of \(largest.withLock { $0 }) bytes to a peer that takes \(frameLimit)")
        // The transaction with the value b cannot take is refused whole: `beside` is not there.
        let ids = Set(try await b.store.execute("SELECT _id FROM cars").items.compactMap { $0["_id"]?.stringValue })
        #expect(!ids.contains("huge") && !ids.contains("beside") && ids.contains("after") && ids.contains("car-99"))
        let refusal = try #require(b.sync.pipeline.status.recentRefusals.first)
        #expect(refusal.id == tooLarge.transactionID)
        #expect(refusal.reason.contains("over what this node said it takes"), "\(refusal.reason)")
        #expect(refusal.from == [a.store.siteID])
    }

    /// a – b – c, b relaying `cars` for c without subscribing to it, and taking smaller
    /// frames than a value of a's. b holds the transaction in part (what fits), so what
    /// it passes on must say why the rest is missing: b waits for a's last piece before
    /// applying, and c refuses the transaction whole rather than waiting for ever for a
    /// document no path can bring it.
    @Test func aRelayWithSmallerFramesPassesOnWhyItLacksADocument() async throws {
        let frameLimit = 4096
        let a = try TestNode(name: "a")
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM boats"]) {
            $0.limits = WireLimits(maximumFrameSize: frameLimit, maximumInflatedSize: frameLimit)
        }
        let c = try TestNode(name: "c", subscriptions: ["SELECT * FROM cars"])
        defer {
            a.remove()
            b.remove()
            c.remove()
        }
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            try await InProcessMesh.withLink(c.sync, b.sync) { () async throws in
                // One document: a small field that fits b's frames and one that does not.
                let large = try await a.store.execute(
                    "INSERT INTO cars DOCUMENTS ({'_id': 'huge', 'v': {'t': 'x', 'pad': :v}})", arguments: ["v": Self.value(10_000)])
                _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'after', 'v': 2})")
                let settled = try await InProcessMesh.eventually {
                    let ids = try await c.store.execute("SELECT _id FROM cars").items
                    return ids == [["_id": "after"]] && c.sync.pipeline.status.refused == 1
                }
                let status = c.sync.pipeline.status
                #expect(settled, "c: refused \(status.refused), waiting \(status.waiting.map(\.id)), partial \(status.partial.map(\.id))")
                #expect(status.waiting.isEmpty && status.partial.isEmpty)
                let refusal = try #require(c.sync.pipeline.status.recentRefusals.first)
                #expect(refusal.id == large.transactionID)
                #expect(refusal.reason.contains("or over what a relay between them takes"), "\(refusal.reason)")
            }
        }
    }

    @Test func aTransactionOverTheReceiversDocumentLimitIsRefusedWholeAndTheLinkGoesOn() async throws {
        let a = try TestNode(name: "a")
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM docs"])
        defer {
            a.remove()
            b.remove()
        }
        _ = try await b.store.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = 50")
        _ = try await b.store.execute("ALTER SYSTEM SET document_size_hard_limit_bytes = 300")
        try await InProcessMesh.withLink(a.sync, b.sync) {
            // Said in b's Hello: a withholds the document and says why.
            let first = try await a.store.execute(
                "INSERT INTO docs DOCUMENTS ({'_id': 'big', 'v': :v}), ({'_id': 'small', 'v': 1})", arguments: ["v": Self.value(500)])
            #expect(try await InProcessMesh.eventually { b.sync.pipeline.status.refused == 1 })
            // Lowered after the Hello: a sends it, and b's applier refuses it.
            _ = try await b.store.execute("ALTER SYSTEM SET document_size_hard_limit_bytes = 100")
            let second = try await a.store.execute(
                "INSERT INTO docs DOCUMENTS ({'_id': 'medium', 'v': :v}), ({'_id': 'small2', 'v': 1})", arguments: ["v": Self.value(200)])
            _ = try await a.store.execute("INSERT INTO docs DOCUMENTS ({'_id': 'later', 'v': 2})")
            let done = try await InProcessMesh.eventually {
                let ids = try await b.store.execute("SELECT _id FROM docs").items
                return b.sync.pipeline.status.refused == 2 && ids == [["_id": "later"]]
            }
            let ids = try await b.store.execute("SELECT _id FROM docs").items
            #expect(done, "\(ids), refused \(b.sync.pipeline.status.refused)")
            let refusals = b.sync.pipeline.status.recentRefusals
            #expect(refusals.map(\.id) == [first.transactionID, second.transactionID])
            #expect(refusals.last?.reason == "document \"medium\" in docs: it would be 223 bytes, over the hard limit of 100 bytes (document_size_hard_limit_bytes)")
            // The peer's status says so, and the session stayed up.
            let peer = b.sync.peers().first { $0.siteID == a.store.siteID }
            #expect(peer?.state == "connected")
            #expect(peer?.lastError?.contains("refused transaction \(second.transactionID!)") == true, "\(peer?.lastError ?? "none")")
            // And a is told, in b's Ack (PROTOCOL.md §8.8): its status for b names it.
            let told = try await InProcessMesh.eventually {
                a.sync.peers().first { $0.siteID == b.store.siteID }?.lastError?.contains(
                    "it refused transaction \(second.transactionID!) whole: this node cannot hold it: document \"medium\"") == true
            }
            #expect(told, "\(a.sync.peers().map { $0.lastError ?? "none" })")
            #expect(a.sync.peers().first { $0.siteID == b.store.siteID }?.lastError?.contains("(LIMIT_EXCEEDED)") == true)
        }
    }
}

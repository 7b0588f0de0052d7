import Shoal
import ShoalTesting
import Synchronization
import Testing

/// The README's embedding example, run: two nodes in one process over real TCP on 127.0.0.1.
@Suite struct EmbeddingTests {
    @Test func anAppEmbedsTwoNodesThatSync() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-embed")
        defer { dir.remove() }
        let alpha = try ShoalNode(
            configuration: NodeConfiguration(
                dataDirectory: dir.path + "/alpha", listen: HostAndPort(host: "127.0.0.1", port: 0), name: "alpha",
                discovery: false))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await alpha.run() }
            let alphaAddress = await alpha.ready()
            #expect(alphaAddress.port != 0)
            let beta = try ShoalNode(
                configuration: NodeConfiguration(
                    dataDirectory: dir.path + "/beta", listen: HostAndPort(host: "127.0.0.1", port: 0), name: "beta",
                    peers: [alphaAddress], subscriptions: ["SELECT * FROM cars"], discovery: false))
            group.addTask { try await beta.run() }
            _ = await beta.ready()

            let result = try await alpha.store.execute(
                "INSERT INTO cars DOCUMENTS (:car)", arguments: ["car": ["_id": "a", "color": "blue"]])
            #expect(result.transactionID?.origin == alpha.siteID)
            #expect(try await InProcessMesh.eventually {
                try await beta.store.execute("SELECT * FROM cars").items == [["_id": "a", "color": "blue"]]
            })
            #expect(beta.sync.peers().contains { $0.siteID == alpha.siteID && $0.state == "connected" })

            // The embedded API: a subscription registered at run time, and an observer.
            let boats = try beta.sync.registerSubscription("SELECT * FROM boats WHERE size > :min", arguments: ["min": 2])
            let seen = Mutex<[Observation]>([])
            let observer = try beta.store.registerObserver("SELECT * FROM boats") { o in seen.withLock { $0.append(o) } }
            defer { observer.cancel() }
            #expect(await InProcessMesh.eventually { seen.withLock { $0.count } == 1 }, "the current result first")
            let write = try await alpha.store.execute("INSERT INTO boats DOCUMENTS ({'_id': 'big', 'size': 9}), ({'_id': 'small', 'size': 1})")
            #expect(await InProcessMesh.eventually { seen.withLock { $0.last?.items.count } == 1 })
            #expect(seen.withLock { $0.last?.transactions } == [write.transactionID!])
            boats.cancel()
            #expect(!beta.sync.subscriptions.entries.contains { $0.id == boats.id })
            group.cancelAll()
        }
    }
}

import Shoal
import ShoalTesting
import ShoalWire
import ShoalCRDT
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
            let seen = Locked<[Observation]>([])
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

    /// `exec` requests run as transactions: with the hint they carry, behind the
    /// writer an app holds, and read-only when asked.
    @Test func execRequestsRunAsTransactionsWithTheirHint() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-embed")
        defer { dir.remove() }
        let node = try ShoalNode(
            configuration: NodeConfiguration(
                dataDirectory: dir.path, listen: HostAndPort(host: "127.0.0.1", port: 0), name: "solo", discovery: false))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await node.run() }
            let client = AdminClient(node: await node.ready(), meshKey: nil, timeout: .seconds(30))
            let appInside = Latch()
            group.addTask {
                try await node.store.transaction(hint: "app") { tx in
                    _ = try await tx.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
                    appInside.open()
                    // Commit only once the CLI's request is waiting, hint and all.
                    #expect(await InProcessMesh.eventually {
                        node.store.runningTransactions.contains { $0.hint == "from the CLI" && !$0.isReadOnly }
                    })
                    return .commit
                }
            }
            try await appInside.wait()
            let update = try await client.exec("UPDATE cars SET color = 'red'", hint: "from the CLI")
            #expect(update.mutatedDocumentIDs == ["\"a\""], "it ran after the app's transaction committed")
            #expect(update.transactionID == "\(node.siteID):2")

            let refused = await #expect(throws: NodeError.self) {
                try await client.exec("SELECT * FROM cars; DELETE FROM cars", hint: "report", readOnly: true)
            }
            #expect(refused?.message.contains("DELETE FROM cars writes, but transaction") == true, "\(refused?.message ?? "")")
            #expect(refused?.message.contains("(hint 'report') is read-only") == true)
            let read = try await client.exec("SELECT color FROM cars", readOnly: true)
            #expect(read.itemsJSON == [#"{"color":"red"}"#] && read.transactionID == nil)
            group.cancelAll()
        }
    }
}

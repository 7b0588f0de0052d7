import Shoal
import ShoalNode
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
            let alphaAddress = try await alpha.ready()
            #expect(alphaAddress.port != 0)
            let beta = try ShoalNode(
                configuration: NodeConfiguration(
                    dataDirectory: dir.path + "/beta", listen: HostAndPort(host: "127.0.0.1", port: 0), name: "beta",
                    peers: [alphaAddress], subscriptions: ["SELECT * FROM cars"], discovery: false))
            group.addTask { try await beta.run() }
            _ = try await beta.ready()

            let result = try await alpha.store.execute(
                "INSERT INTO cars DOCUMENTS (:car)", arguments: ["car": ["_id": "a", "color": "blue"]])
            #expect(result.transactionID?.origin == alpha.siteID)
            #expect(try await InProcessMesh.eventually {
                try await beta.store.execute("SELECT * FROM cars").items == [["_id": "a", "color": "blue"]]
            })
            #expect(beta.sync.peers().contains { $0.siteID == alpha.siteID && $0.state == "connected" })

            // The embedded API: a subscription registered at run time, and an observer.
            let boats = try beta.sync.registerSubscription("SELECT * FROM boats WHERE size > :min", arguments: ["min": 2])
            let seen = Locked<[QueryUpdate]>([])
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

    /// Sync stops and starts again on one running node: stopped, its sessions close,
    /// peers are refused and it dials none, while its store goes on; started, what was
    /// written meanwhile comes. A node runs once: a second `run()` says so.
    @Test func syncStopsAndStartsAgainAndANodeRunsOnce() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-embed")
        defer { dir.remove() }
        let alpha = try ShoalNode(
            configuration: NodeConfiguration(
                dataDirectory: dir.path + "/alpha", listen: HostAndPort(host: "127.0.0.1", port: 0), name: "alpha",
                subscriptions: ["SELECT * FROM cars"]))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await alpha.run() }
            let alphaAddress = try await alpha.ready()
            let beta = try ShoalNode(
                configuration: NodeConfiguration(
                    dataDirectory: dir.path + "/beta", listen: HostAndPort(host: "127.0.0.1", port: 0), name: "beta",
                    peers: [alphaAddress], subscriptions: ["SELECT * FROM cars"]))
            group.addTask { try await beta.run() }
            _ = try await beta.ready()
            func cars() async throws -> Int { try await beta.store.execute("SELECT * FROM cars").items.count }
            _ = try await alpha.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'before'})")
            #expect(try await InProcessMesh.eventually { try await cars() == 1 })

            await beta.sync.stopSync()
            #expect(beta.sync.isSyncStopped)
            #expect(await InProcessMesh.eventually { !beta.sync.isConnected(to: alpha.siteID) })
            _ = try await alpha.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'while-stopped'})")
            try await Task.sleep(for: .seconds(1))
            #expect(try await cars() == 1, "nothing comes while sync is stopped")
            #expect(!beta.sync.isConnected(to: alpha.siteID), "nor does it dial")
            _ = try await beta.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'local'})")

            beta.sync.startSync()
            #expect(try await InProcessMesh.eventually { try await cars() == 3 })
            #expect(try await InProcessMesh.eventually {
                try await alpha.store.execute("SELECT * FROM cars").items.count == 3
            })
            group.cancelAll()
        }
        await #expect { try await alpha.run() } throws: {
            ($0 as? ShoalError)?.code == .stopped && ($0 as? ShoalError)?.message.contains("has run already") == true
        }
    }

    /// The listen port taken: `ready()` throws what `run()` throws (in words, no stray
    /// parenthesis), a waiter cancelled before the node listens is released at once,
    /// and after the node stopped `ready()` says so instead of waiting for ever.
    @Test func readyTellsWhyANodeDidNotStartAndHonoursCancellation() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-embed")
        defer { dir.remove() }
        let first = try ShoalNode(
            configuration: NodeConfiguration(
                dataDirectory: dir.path + "/first", listen: HostAndPort(host: "127.0.0.1", port: 0), name: "first",
                discovery: false))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await first.run() }
            let taken = try await first.ready()
            let second = try ShoalNode(
                configuration: NodeConfiguration(
                    dataDirectory: dir.path + "/second", listen: taken, name: "second", discovery: false))
            // A waiter cancelled before anything happens returns at once.
            let early = Task { try await second.ready() }
            early.cancel()
            await #expect { try await early.value } throws: { ($0 as? ShoalError)?.code == .cancelled }
            // run() fails on the port; ready() throws the same error.
            let waiting = Task { try await second.ready() }
            var ran: ShoalError?
            do { try await second.run() } catch let error as ShoalError { ran = error }
            let message = try #require(ran?.message)
            #expect(message == "cannot listen on \(taken): Address already in use (errno 98)", "\(message)")
            await #expect { try await waiting.value } throws: { ($0 as? ShoalError)?.message == message }
            await #expect { try await second.ready() } throws: { ($0 as? ShoalError)?.message == message }
            group.cancelAll()
        }
        await #expect { try await first.ready() } throws: { ($0 as? ShoalError)?.code == .stopped }
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
            let client = AdminClient(node: try await node.ready(), meshKey: nil, timeout: .seconds(30))
            let appInside = Latch()
            group.addTask {
                try await node.store.transaction(hint: "app") { tx in
                    _ = try await tx.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
                    appInside.open()
                    // Commit only once the CLI's request is waiting, hint and all.
                    #expect(await InProcessMesh.eventually {
                        node.storage.runningTransactions.contains { $0.hint == "from the CLI" && !$0.isReadOnly }
                    })
                    return .commit
                }
            }
            try await appInside.wait()
            let update = try await client.exec("UPDATE cars SET color = 'red'", hint: "from the CLI")
            #expect(update.mutatedDocumentIDs == ["\"a\""], "it ran after the app's transaction committed")
            #expect(update.transactionID == "\(node.siteID):2")

            let refused = await #expect(throws: ShoalError.self) {
                try await client.exec("SELECT * FROM cars; DELETE FROM cars", hint: "report", readOnly: true)
            }
            #expect(refused?.message.contains("DELETE FROM cars writes, but it runs in read-only transaction 'report'") == true, "\(refused?.message ?? "")")
            #expect(refused?.message.contains("runs in read-only transaction 'report'; nothing ran") == true)
            let read = try await client.exec("SELECT color FROM cars", readOnly: true)
            #expect(read.itemsJSON == [#"{"color":"red"}"#] && read.transactionID == nil)
            group.cancelAll()
        }
    }
}

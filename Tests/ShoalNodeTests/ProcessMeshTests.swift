import Foundation
import ShoalNode
import ShoalTesting
import Testing

extension ProcessSuites {
/// Real `shoal` processes on 127.0.0.1, driven through the CLI as a user would.
@Suite(.serialized) struct ProcessMeshTests {
    static func documents(_ node: NodeProcess, _ query: String = "SELECT * FROM cars") throws -> [[String: Any]] {
        let output = try node.exec(query)
        guard output.status == 0,
            let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any],
            let items = object["items"] as? [[String: Any]]
        else {
            throw NodeProcessError(message: "exec failed (\(output.status)): \(output.stderr)")
        }
        return items
    }

    static func peers(_ node: NodeProcess) throws -> [[String: Any]] {
        try node.status()["peers"] as? [[String: Any]] ?? []
    }

    /// Commits a subscriber wants none of cost it no frame each: A writes 200
    /// transactions to a collection B does not subscribe to, and B takes in a few
    /// frames' worth of bytes from A meanwhile at most (before, an empty batch for
    /// every commit, each committed on B and acknowledged). B still gets the next car.
    @Test func commitsASubscriberWantsNoneOfCostItNoFrameEach() async throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        let b = try NodeProcess(
            name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address, "--subscribe", "SELECT * FROM cars"])
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'one'})").status == 0)
        #expect(try eventually { try Self.documents(b).count == 1 })
        let aSite = try #require(try a.status()["siteID"] as? String)
        func bytesFromA() throws -> Int { try Self.peers(b).first { $0["siteID"] as? String == aSite }?["bytesIn"] as? Int ?? -1 }
        let before = try bytesFromA()
        let toA = AdminClient(node: try HostAndPort(parsing: a.address), timeout: .seconds(60))
        try await toA.withSession { session in
            for i in 0..<200 {
                _ = try await session.exec("INSERT INTO boats DOCUMENTS ({'_id': :id})", argumentsJSON: "{\"id\":\"b\(i)\"}")
            }
        }
        let during = try bytesFromA() - before
        #expect(before > 0 && during < 400, "\(during) bytes from A during 200 commits B wants none of")
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'two'})").status == 0)
        #expect(try eventually { try Self.documents(b).count == 2 })
    }

    @Test func twoNodesReplicateAndResumeAfterARestart() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        let bArguments = ["--peer", a.address, "--subscribe", "SELECT * FROM cars"]
        var b: NodeProcess? = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: bArguments)

        let insert = try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'one', 'color': 'blue'})")
        #expect(insert.status == 0, "\(insert.stderr)")
        let result = try JSONSerialization.jsonObject(with: Data(insert.stdout.utf8)) as? [String: Any]
        #expect(result?["mutatedDocumentIDs"] as? [String] == ["one"])
        #expect((result?["transactionID"] as? String)?.hasSuffix(":1") == true)
        #expect(try eventually { try Self.documents(b!).count == 1 })
        #expect(try Self.documents(b!).first?["color"] as? String == "blue")

        // Each side shows the other as a connected peer.
        let aStatus = try a.status(), bStatus = try b!.status()
        let aSite = try #require(aStatus["siteID"] as? String), bSite = try #require(bStatus["siteID"] as? String)
        #expect(try eventually {
            try Self.peers(a).contains { $0["siteID"] as? String == bSite && $0["state"] as? String == "connected" }
        })
        let seenByB = try #require(try Self.peers(b!).first { $0["siteID"] as? String == aSite })
        #expect(seenByB["state"] as? String == "connected" && seenByB["name"] as? String == "alpha")
        #expect((seenByB["bytesIn"] as? Int ?? 0) > 0)
        let subscriptions = aStatus["subscriptions"] as? [[String: Any]] ?? []
        #expect(subscriptions.contains { $0["origin"] as? String == bSite && $0["query"] as? String == "SELECT * FROM cars" })
        #expect((bStatus["collections"] as? [String: [String: Any]])?["cars"]?["documents"] as? Int == 1)

        // Kill the receiver outright, write while it is down, start it again.
        b!.crash()
        b = nil
        for i in 0..<5 {
            #expect(try a.exec("INSERT INTO cars DOCUMENTS (:d)", args: "{\"d\": {\"_id\": \"while-down-\(i)\"}}").status == 0)
        }
        let restarted = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: bArguments)
        #expect(try restarted.status()["siteID"] as? String == bSite, "the site ID survives a restart")
        #expect(try eventually { try Self.documents(restarted).count == 6 })
        #expect(try a.exec("UPDATE cars SET color = 'red' WHERE _id = 'one'").status == 0)
        #expect(try eventually { try Self.documents(restarted, "SELECT * FROM cars WHERE color = 'red'").count == 1 })
        let ids = try Self.documents(restarted).compactMap { $0["_id"] as? String }
        #expect(ids.count == Set(ids).count && ids.count == 6, "no document is duplicated")
        // Log rows, one per document per transaction: the first insert, the five later
        // ones, the update; nothing applied twice.
        #expect(try restarted.status()["changeLogSequence"] as? Int == 7)

        #expect(restarted.interrupt() == 0, "SIGINT stops cleanly")
        #expect(restarted.log().contains("stopped"))
        #expect(a.interrupt() == 0)
    }

    @Test func garbageAndHugeFrameClaimsCloseOnlyThatConnection() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        let b = try NodeProcess(
            name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address, "--subscribe", "SELECT * FROM cars"])
        #expect(try eventually { try Self.peers(a).contains { $0["state"] as? String == "connected" } })

        // Plain garbage: the node answers with an Error frame (type 0x03) and closes.
        let garbage = try RawSocket.exchange(port: a.port, bytes: Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(garbage.closedByNode)
        #expect(RawSocket.frameTypes(garbage.reply) == [0x01, 0x03], "its Hello, then an Error")
        #expect(String(decoding: garbage.reply, as: UTF8.self).contains("not a Shoal frame"))

        // A header claiming a 4 GiB payload is refused after its 8 bytes.
        let huge = try RawSocket.exchange(port: a.port, bytes: [0x53, 0x01, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF])
        #expect(huge.closedByNode)
        #expect(RawSocket.frameTypes(huge.reply) == [0x01, 0x03])
        #expect(String(decoding: huge.reply, as: UTF8.self).contains("announces 4294967295 payload bytes"))

        // Truncated: a header and a byte of its 64-byte payload, then the client stops
        // sending: the node says why before it closes.
        let truncated = try RawSocket.exchange(
            port: a.port, bytes: [0x53, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x08], finish: true)
        #expect(truncated.closedByNode)
        #expect(RawSocket.frameTypes(truncated.reply) == [0x01, 0x03])
        #expect(String(decoding: truncated.reply, as: UTF8.self).contains("connection ended inside a frame"))

        // The real peer is still served.
        #expect(a.isRunning)
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'after-garbage'})").status == 0)
        #expect(try eventually { try Self.documents(b).count == 1 })
    }

    @Test func aWrongMeshKeyIsRefusedAndNothingSyncs() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let keyA = dirs.path + "/a.key", keyB = dirs.path + "/b.key"
        try writePrivateFile(keyA, "alpha-secret-key-0123456789")
        try writePrivateFile(keyB, "another-secret-key-987654321")
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a", extra: ["--mesh-key-file", keyA])
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'secret'})", extra: ["--mesh-key-file", keyA]).status == 0)
        let b = try NodeProcess(
            name: "beta", dataDirectory: dirs.path + "/b",
            extra: ["--mesh-key-file", keyB, "--peer", a.address, "--subscribe", "SELECT * FROM cars"])
        #expect(eventually(10) { b.log().contains("MESH_KEY_MISMATCH") || a.log().contains("MESH_KEY_MISMATCH") })
        // A logs the refusal with B's site ID and address.
        let bStatus = try ShoalBinary.run(["status", "--node", b.address, "--mesh-key-file", keyB, "--json"])
        let bSite = try #require(
            (try JSONSerialization.jsonObject(with: Data(bStatus.stdout.utf8)) as? [String: Any])?["siteID"] as? String)
        #expect(eventually(10) {
            a.log().split(separator: "\n").contains { $0.contains("refusing a peer") && $0.contains("shoal.peer.site=\(bSite)") && $0.contains("shoal.peer.address=127.0.0.1:") }
        }, "\(a.log())")
        let bDocs = try ShoalBinary.run(["exec", "--node", b.address, "--mesh-key-file", keyB, "--json", "SELECT * FROM cars"])
        #expect(bDocs.stdout.contains("\"items\":[]"))
        // The CLI without the key is refused with a clear message.
        let noKey = try a.exec("SELECT * FROM cars")
        #expect(noKey.status != 0)
        #expect(noKey.stderr.contains("mesh key mismatch"))
        #expect(a.isRunning && b.isRunning)
    }

    @Test func badStatementsExitNonZeroWithThePosition() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        let bad = try a.exec("SELECT * FORM cars")
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("line 1, column 10"), "\(bad.stderr)")
        #expect(bad.stdout.isEmpty)
        let conflict = try a.exec("INSERT INTO c DOCUMENTS ({'_id': 'x'}); INSERT INTO c DOCUMENTS ({'_id': 'x'})")
        #expect(conflict.status != 0 && conflict.stderr.contains("already exists"))
        #expect(try Self.documents(a, "SELECT * FROM c").isEmpty, "the failed transaction left nothing behind")
        let badArgs = try ShoalBinary.run(["exec", "--node", a.address, "--args", "[1]", "SELECT * FROM c"])
        #expect(badArgs.status != 0 && badArgs.stderr.contains("not a JSON object"), "\(badArgs.stderr)")
        let nobody = try ShoalBinary.run(["status", "--node", "127.0.0.1:1"])
        #expect(nobody.status != 0 && nobody.stderr.contains("cannot reach a Shoal node at 127.0.0.1:1"))
        let human = try ShoalBinary.run(["status", "--node", a.address])
        #expect(human.status == 0 && human.stdout.contains("Node alpha") && human.stdout.contains("Collections"))
    }
}
}

extension ProcessSuites.ProcessMeshTests {
    @Test func subscribeAndObserveOnARunningNode() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        var b: NodeProcess? = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address])
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'early', 'color': 'red'})").status == 0)

        // beta starts with no subscription; one added at run time fetches what alpha already has.
        let added = try ShoalBinary.run(["subscribe", "--node", b!.address, "--json", "SELECT * FROM cars"])
        #expect(added.status == 0, "\(added.stderr)")
        let id = try #require((try JSONSerialization.jsonObject(with: Data(added.stdout.utf8)) as? [String: Any])?["id"] as? String)
        #expect(try eventually { try Self.documents(b!).count == 1 })

        // observe streams one JSON line per change.
        let observer = try ChildProcess(
            ShoalBinary.path, ["observe", "--node", b!.address, "--json", "SELECT * FROM cars ORDER BY _id"], stdout: .pipe)
        defer {
            observer.send(SIGTERM)
            observer.wait()
        }
        let lines = LineCollector(observer.output!)
        #expect(eventually { lines.lines.count >= 1 })
        let write = try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'late', 'color': 'blue'})")
        let transaction = try #require(
            (try JSONSerialization.jsonObject(with: Data(write.stdout.utf8)) as? [String: Any])?["transactionID"] as? String)
        #expect(eventually { lines.lines.count >= 2 })
        let second = try #require(lines.lines.dropFirst().first)
        let observed = try #require(try JSONSerialization.jsonObject(with: Data(second.utf8)) as? [String: Any])
        #expect((observed["items"] as? [[String: Any]])?.count == 2)
        #expect(observed["transactionIDs"] as? [String] == [transaction], "the remote transaction that changed the result")

        // The subscription survives a restart of beta.
        b!.stop()
        b = nil
        let restarted = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address])
        let subscriptions = try restarted.status()["subscriptions"] as? [[String: Any]] ?? []
        #expect(subscriptions.contains { $0["id"] as? String == id && $0["origin"] as? String == "local" })
        let removed = try ShoalBinary.run(["unsubscribe", "--node", restarted.address, id])
        #expect(removed.status == 0 && removed.stdout.contains("unsubscribed \(id)"))
        let missing = try ShoalBinary.run(["unsubscribe", "--node", restarted.address, id])
        #expect(missing.status != 0 && missing.stderr.contains("no subscription"))
    }
}

/// Collects a child's output as it arrives, and its lines.
final class LineCollector: @unchecked Sendable {
    // `buffer`, `all`, `collected` and `finished` are touched only under `lock`.
    private let lock = NSLock()
    private var buffer = ""
    private var all = ""
    private var collected: [String] = []
    private var finished = false

    /// Reads `pipe` on a thread of its own until the child closes it.
    init(_ pipe: ChildPipe) {
        Thread.detachNewThread { [self] in
            while case let data = pipe.read(), !data.isEmpty {
                let text = String(decoding: data, as: UTF8.self)
                locked {
                    all += text
                    buffer += text
                    while let newline = buffer.firstIndex(of: "\n") {
                        collected.append(String(buffer[..<newline]))
                        buffer = String(buffer[buffer.index(after: newline)...])
                    }
                }
            }
            locked { finished = true }
        }
    }

    /// The complete lines so far.
    var lines: [String] { locked { collected } }
    /// Everything read so far.
    var text: String { locked { all } }
    /// Whether the child has closed its end.
    var isFinished: Bool { locked { finished } }

    private func locked<T>(_ body: () -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body()
    }
}

extension ProcessSuites.ProcessMeshTests {
    @Test func countersIncrementedOfflineConvergeToTheSum() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let subscribe = ["--subscribe", "SELECT * FROM counters"]
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a", extra: subscribe)
        var b: NodeProcess? = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: subscribe)
        // Apart: both create the same counter (no initial value needed) and count.
        for _ in 0..<3 {
            #expect(try a.exec("INSERT INTO counters DOCUMENTS ({'_id': 'hits'}) ON ID CONFLICT DO NOTHING; UPDATE counters APPLY n INCREMENT BY 2 WHERE _id = 'hits'").status == 0)
        }
        for by in [5, -1] {
            let r = try b!.exec("INSERT INTO counters DOCUMENTS ({'_id': 'hits'}) ON ID CONFLICT DO NOTHING; UPDATE counters APPLY n PN_INCREMENT BY :by WHERE _id = 'hits'", args: "{\"by\": \(by)}")
            #expect(r.status == 0, "\(r.stderr)")
        }
        #expect(try Self.documents(a, "SELECT n FROM counters").first?["n"] as? Int == 6)
        #expect(try Self.documents(b!, "SELECT n FROM counters").first?["n"] as? Int == 4)
        // Together: beta restarts with alpha as its peer; both end at 6 + 4.
        b!.stop()
        b = nil
        let joined = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: subscribe + ["--peer", a.address])
        #expect(try eventually { try Self.documents(a, "SELECT n FROM counters").first?["n"] as? Int == 10 })
        #expect(try eventually { try Self.documents(joined, "SELECT n FROM counters").first?["n"] as? Int == 10 })

        // A map edited on both sides while apart keeps both peers' fields.
        joined.stop()
        let apart = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: subscribe)
        #expect(try a.exec("UPDATE counters SET props.alpha = 'a' WHERE _id = 'hits'").status == 0)
        #expect(try apart.exec("UPDATE counters SET props.beta = 'b', props.shared.depth = 2 WHERE _id = 'hits'").status == 0)
        apart.stop()
        let rejoined = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: subscribe + ["--peer", a.address])
        for node in [a, rejoined] {
            #expect(try eventually {
                let props = try Self.documents(node, "SELECT props FROM counters").first?["props"] as? [String: Any]
                return props?["alpha"] as? String == "a" && props?["beta"] as? String == "b"
                    && (props?["shared"] as? [String: Any])?["depth"] as? Int == 2
            })
        }
    }
}

extension ProcessSuites.ProcessMeshTests {
    @Test func attachmentsPutOnOneNodeAreFetchedThroughAnother() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        let b = try NodeProcess(
            name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address, "--subscribe", "SELECT * FROM cars"])
        let source = dirs.path + "/photo.bin"
        let bytes = Data((0..<1_300_000).map { UInt8(truncatingIfNeeded: $0 * 7) })
        #expect(FileManager.default.createFile(atPath: source, contents: bytes))
        let put = try ShoalBinary.run(["attachment", "put", "--node", a.address, source])
        #expect(put.status == 0, "\(put.stderr)")
        let token = put.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let id = try #require((try JSONSerialization.jsonObject(with: Data(token.utf8)) as? [String: Any])?["attachment"] as? String)
        #expect(try a.exec(
            "INSERT INTO COLLECTION cars (photo ATTACHMENT) DOCUMENTS ({'_id': 'a', 'photo': :t})", args: "{\"t\": \(token)}").status == 0)
        #expect(try eventually { try Self.documents(b).first?["photo"] != nil })

        let target = dirs.path + "/fetched.bin"
        let get = try ShoalBinary.run(["attachment", "get", "--node", b.address, id, target])
        #expect(get.status == 0, "\(get.stderr)")
        #expect(get.stderr.contains("received 1048576 of 1300000 bytes"), "progress is shown")
        #expect(FileManager.default.contents(atPath: target) == bytes)
        let missing = try ShoalBinary.run(["attachment", "get", "--node", b.address, String(repeating: "a", count: 64), target + "2"])
        #expect(missing.status != 0 && missing.stderr.contains("could send it"))
        #expect(!FileManager.default.fileExists(atPath: target + "2"))
    }
}

extension ProcessSuites.ProcessMeshTests {
    @Test func execTakesAHintAndRunsReadOnlyWhenAsked() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'one', 'color': 'blue'})").status == 0)

        let read = try a.exec("SELECT * FROM cars", extra: ["--read-only", "--hint", "nightly report"])
        #expect(read.status == 0, "\(read.stderr)")
        let readResult = try JSONSerialization.jsonObject(with: Data(read.stdout.utf8)) as? [String: Any]
        #expect((readResult?["items"] as? [[String: Any]])?.first?["color"] as? String == "blue")
        #expect(readResult?["transactionID"] is NSNull)

        // A statement that writes fails the whole request: exit status 1, the store's message, nothing written.
        let refused = try a.exec(
            "SELECT * FROM cars; UPDATE cars SET color = 'red'", extra: ["--read-only", "--hint", "nightly report"])
        #expect(refused.status == 1)
        #expect(refused.stdout.isEmpty)
        #expect(refused.stderr.contains("UPDATE cars SET color = 'red' writes, but it runs in read-only transaction"), "\(refused.stderr)")
        #expect(refused.stderr.contains("runs in read-only transaction 'nightly report'; nothing ran"))
        #expect(try Self.documents(a).first?["color"] as? String == "blue")

        // With a hint alone, a write commits as usual.
        let write = try a.exec("UPDATE cars SET color = 'red'", extra: ["--hint", "repaint"])
        #expect(write.status == 0, "\(write.stderr)")
        let writeResult = try JSONSerialization.jsonObject(with: Data(write.stdout.utf8)) as? [String: Any]
        #expect((writeResult?["transactionID"] as? String)?.hasSuffix(":2") == true)

        // System parameters through the CLI.
        let show = try a.exec("ALTER SYSTEM SET transaction_trace_interval_ms = 250; SHOW ALL")
        #expect(show.status == 0, "\(show.stderr)")
        #expect(show.stdout.contains(#"{"name":"transaction_trace_interval_ms","value":250}"#), "\(show.stdout)")
        let unknown = try a.exec("SHOW transaction_timeout")
        #expect(unknown.status == 1 && unknown.stderr.contains("unknown system parameter 'transaction_timeout'"))
        #expect(a.interrupt() == 0)
    }
}

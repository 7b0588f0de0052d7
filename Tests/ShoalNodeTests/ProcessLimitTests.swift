import Foundation
import ShoalStore
import ShoalStorage
import ShoalNode
import ShoalTesting
import ShoalWire
import Testing

extension ProcessSuites {
/// The node's limits set by `shoal run` flags, with real processes: each at its edge.
@Suite(.serialized) struct ProcessLimitTests {
    @Test func queryLengthSubscriptionsAndDocumentSizeAtTheirEdges() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let node = try NodeProcess(
            name: "limits", dataDirectory: dirs.path + "/n",
            extra: [
                "--max-query-length", "64", "--max-subscriptions-per-peer", "2", "--document-size-soft-limit", "100",
                "--document-size-hard-limit", "200",
            ])
        // Query text: 64 bytes pass, 65 do not.
        let at = "SELECT * FROM cars WHERE color = 'blue' AND doors > 2 -- abcdefg"
        #expect(at.utf8.count == 64)
        #expect(try node.exec(at).status == 0)
        let over = try node.exec(at + "i")
        #expect(over.status == 1)
        #expect(over.stderr.contains("the statement text is 65 bytes; this node takes at most 64 (--max-query-length)"), "\(over.stderr)")

        // Subscriptions: two, not three (the same one again is no new one).
        for c in ["a", "b", "b"] {
            let added = try ShoalBinary.run(["subscribe", "--node", node.address, "SELECT * FROM \(c)"])
            #expect(added.status == 0, "\(added.stderr)")
        }
        let third = try ShoalBinary.run(["subscribe", "--node", node.address, "SELECT * FROM c"])
        #expect(third.status == 1)
        #expect(third.stderr.contains("this node has 2 subscriptions, as many as a peer takes in one Subscribe (--max-subscriptions-per-peer)"))

        // Documents: {"_id":"d","v":"x…"} is 18 bytes plus the string, so 182 x make 200.
        func insert(_ id: String, _ n: Int) throws -> ShoalBinary.Output {
            try node.exec("INSERT INTO docs DOCUMENTS ({'_id': :id, 'v': :v})", args: "{\"id\": \"\(id)\", \"v\": \"\(String(repeating: "x", count: n))\"}")
        }
        #expect(try insert("d", 182).status == 0)
        let tooBig = try insert("e", 183)
        #expect(tooBig.status == 1)
        #expect(tooBig.stderr.contains("document \"e\" in docs would be 201 bytes, over the hard limit of 200 bytes"), "\(tooBig.stderr)")
        #expect(try ProcessMeshTests.documents(node, "SELECT _id FROM docs").count == 1)
        #expect(node.log().contains("document \"d\" in docs is 200 bytes, over the soft limit of 100 bytes (document_size_soft_limit_bytes)"))
        let shown = try node.exec("SHOW document_size_hard_limit_bytes")
        #expect(shown.stdout.contains("{\"name\":\"document_size_hard_limit_bytes\",\"value\":200}"))
    }

    /// A peer's transaction over the receiver's hard limit closes that session with
    /// LIMIT_EXCEEDED, logged with the peer's address; the receiver keeps serving.
    /// A receiver with a lower document size limit than its sender: the transaction
    /// with a document it cannot hold is refused whole and reported (status, log,
    /// the peer's last error), and everything after it still arrives.
    @Test func aReceivedDocumentOverTheHardLimitIsRefusedWholeAndSyncGoesOn() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        let big = try a.exec(
            "INSERT INTO docs DOCUMENTS ({'_id': 'big', 'v': :v}), ({'_id': 'beside', 'v': 1})",
            args: "{\"v\": \"\(String(repeating: "y", count: 500))\"}")
        #expect(big.status == 0)
        let b = try NodeProcess(
            name: "beta", dataDirectory: dirs.path + "/b",
            extra: ["--peer", a.address, "--subscribe", "SELECT * FROM docs", "--document-size-hard-limit", "300"])
        #expect(try a.exec("INSERT INTO docs DOCUMENTS ({'_id': 'after'})").status == 0)
        #expect(eventually(20) { (try? ProcessMeshTests.documents(b, "SELECT _id FROM docs").count) == 1 })
        #expect(try ProcessMeshTests.documents(b, "SELECT _id FROM docs").map { $0["_id"] as? String } == ["after"])
        let transactions = try #require(try b.status()["transactions"] as? [String: Any])
        #expect(transactions["refused"] as? Int == 1)
        let refusal = try #require((transactions["refusals"] as? [[String: Any]])?.first)
        #expect((refusal["reason"] as? String)?.contains("over what this node said it takes") == true, "\(refusal)")
        let peer = try #require(try ProcessMeshTests.peers(b).first { $0["state"] as? String == "connected" })
        #expect((peer["lastError"] as? String)?.contains("refused transaction") == true, "\(peer)")
        #expect(b.log().contains("refused a remote transaction whole"))
        // a is told in b's Ack (PROTOCOL.md §8.8): its log and its status for b say so.
        #expect(eventually(20) { a.log().contains("peer beta refused transaction") }, "\(a.log())")
        let told = try #require(try ProcessMeshTests.peers(a).first { $0["state"] as? String == "connected" })
        #expect((told["lastError"] as? String)?.hasSuffix("(LIMIT_EXCEEDED)") == true, "\(told)")
        // One session all along: no reconnect loop.
        #expect(b.log().components(separatedBy: "peer connected").count == 2, "\(b.log())")
        #expect(b.isRunning && a.isRunning)
    }

    /// A receiver with `--max-frame-size 65536` (the README's example) and a sender
    /// committing 100 documents of 2 KB in one transaction: every frame fits the
    /// receiver, which gets everything, on one session.
    @Test func aReceiverWithASmallFrameLimitReceivesLargeTransactions() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        let b = try NodeProcess(
            name: "beta", dataDirectory: dirs.path + "/b",
            extra: ["--peer", a.address, "--subscribe", "SELECT * FROM docs", "--max-frame-size", "65536"])
        let value = String(repeating: "z", count: 2000)
        let docs = (0..<100).map { "{\"_id\": \"d\($0)\", \"v\": \"\(value)\"}" }.joined(separator: ",")
        let arguments = dirs.path + "/docs.json"
        try "{\"d\": [\(docs)]}".write(toFile: arguments, atomically: true, encoding: .utf8)
        #expect(try a.exec("INSERT INTO docs DOCUMENTS (:d)", args: "@" + arguments).status == 0)
        #expect(try a.exec("INSERT INTO docs DOCUMENTS ({'_id': 'after'})").status == 0)
        #expect(eventually(30) { (try? ProcessMeshTests.documents(b, "SELECT _id FROM docs").count) == 101 })
        #expect(!b.log().contains("FRAME_TOO_LARGE") && !a.log().contains("FRAME_TOO_LARGE"))
        #expect(b.log().components(separatedBy: "peer connected").count == 2, "one session: \(b.log())")
    }

    @Test func adminConnectionsBeyondTheLimitAreRefusedUntilOneEnds() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let node = try NodeProcess(name: "busy", dataDirectory: dirs.path + "/n", extra: ["--max-admin-connections", "1"])
        #expect(try node.exec("SELECT * FROM cars").status == 0, "one at a time is within the limit")
        // An observe holds its connection for as long as it runs.
        let observer = try ChildProcess(
            ShoalBinary.path, ["observe", "--node", node.address, "--json", "SELECT * FROM cars"], stdout: .pipe)
        let lines = LineCollector(observer.output!)
        #expect(eventually { lines.lines.count >= 1 })
        let refused = try node.exec("SELECT * FROM cars")
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("this node serves at most 1 admin connections at once (--max-admin-connections)"), "\(refused.stderr)")
        observer.send(SIGTERM)
        observer.wait()
        #expect(try eventually { try node.exec("SELECT * FROM cars").status == 0 }, "served again once the observer left")
    }

    /// Every request on a refused admin connection reports the refusal, a Ping as much
    /// as an exec, even when the node closed before the request could be written.
    @Test func eachRequestOnARefusedAdminConnectionSaysWhy() async throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let node = try NodeProcess(name: "busy", dataDirectory: dirs.path + "/n", extra: ["--max-admin-connections", "1"])
        let client = AdminClient(node: try HostAndPort(parsing: node.address), timeout: .seconds(30))
        let expected = "this node serves at most 1 admin connections at once (--max-admin-connections); try again later"
        try await client.withSession { held in
            try await held.ping()
            for round in 0..<10 {
                // Alternate: write at once, or after the node has surely closed.
                let delay: Duration = round.isMultiple(of: 2) ? .zero : .milliseconds(50)
                do {
                    try await client.withSession { refused in
                        try await Task.sleep(for: delay)
                        try await refused.ping()
                    }
                    Issue.record("round \(round): a ping on a refused connection succeeded")
                } catch let error as ShoalError {
                    #expect(error.code == .requestFailed, "round \(round): \(error)")
                    #expect(error.message == expected, "round \(round)")
                }
                do {
                    _ = try await client.withSession { refused in
                        try await Task.sleep(for: delay)
                        return try await refused.exec("SELECT * FROM cars")
                    }
                    Issue.record("round \(round): an exec on a refused connection succeeded")
                } catch let error as ShoalError {
                    #expect(error.code == .requestFailed, "round \(round): \(error)")
                    #expect(error.message == expected, "round \(round)")
                }
            }
            try await held.ping()
        }
    }

    /// Random text that deflate cannot shrink much (6 bits per character).
    static func noise(_ count: Int) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var random = SystemRandomNumberGenerator()
        var bytes = [UInt8](repeating: 0, count: count)
        for i in 0..<count { bytes[i] = alphabet[Int(random.next() & 63)] }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Pending outbound bytes: a peer that subscribes and then reads nothing (while it
    /// keeps pinging, so it never looks idle) fills its connection past
    /// `--max-pending-outbound-bytes`; after the idle timeout the node cuts it off,
    /// and serves everyone else meanwhile.
    @Test func aPeerThatReadsNothingIsCutOffOnceItsPendingBytesStayOverTheLimit() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(
            name: "alpha", dataDirectory: dirs.path + "/a", extra: ["--max-pending-outbound-bytes", "65536", "--idle-timeout", "3"])
        // About 12 MB that compresses little: more than the kernel's socket buffers hold.
        for batch in 0..<12 {
            let docs = (0..<10).map { "{\"_id\": \"\(batch)-\($0)\", \"v\": \"\(Self.noise(100_000))\"}" }
            let file = dirs.path + "/batch.json"
            try "{\"docs\": [\(docs.joined(separator: ","))]}".write(toFile: file, atomically: false, encoding: .utf8)
            let written = try ShoalBinary.run(["exec", "--node", a.address, "--args", "@" + file, "INSERT INTO blobs DOCUMENTS (:docs)"])
            #expect(written.status == 0, "\(written.stderr)")
        }
        let stalled = try RawPeer(port: a.port, receiveBuffer: 4096)
        try stalled.handshake()
        try stalled.send(RawPeer.subscribe(["SELECT * FROM blobs"]))
        let started = Date()
        var nonce: UInt64 = 0
        var cutOff = false
        while Date().timeIntervalSince(started) < 30 {
            nonce += 1
            var ping = Shoal_V1_Ping()
            ping.nonce = nonce
            if (try? stalled.send(.ping(ping))) == nil { break }  // the node closed the connection
            if a.log().contains("closing a connection whose peer has read nothing") {
                cutOff = true
                break
            }
            // Others are served meanwhile.
            #expect(try a.exec("SELECT COUNT(*) FROM blobs").status == 0)
            usleep(500_000)
        }
        #expect(cutOff, "\(a.log().suffix(2000))")
        let seconds = Date().timeIntervalSince(started)
        #expect(seconds >= 3, "not before the idle timeout (\(seconds) s)")
        #expect(a.log().contains("(--max-pending-outbound-bytes)"))
        #expect(a.isRunning)
        #expect(try eventually(10) { (try a.status()["peers"] as? [[String: Any]] ?? []).isEmpty }, "the session is gone")
    }
}
}

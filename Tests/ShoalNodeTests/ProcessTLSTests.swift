import Foundation
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

extension ProcessSuites {
    /// TLS links between real `shoal` processes on 127.0.0.1, with certificates the
    /// test makes through `shoal cert` (PROTOCOL.md §17).
    @Suite(.serialized) struct ProcessTLSTests {
        static func items(_ node: NodeProcess) throws -> [[String: Any]] {
            try ProcessMeshTests.documents(node, "SELECT * FROM items")
        }

        static func peers(_ node: NodeProcess) throws -> [[String: Any]] { try ProcessMeshTests.peers(node) }

        /// A node on TLS links with the certificate `files`, reached by the CLI with `client`.
        static func node(
            _ name: String, _ dir: String, files: TLSFiles?, client: TLSFiles?, _ extra: [String] = []
        ) throws -> NodeProcess {
            let node = try NodeProcess(
                name: name, dataDirectory: dir + "/\(name)-data",
                extra: ["--subscribe", "SELECT * FROM items"] + (files?.arguments ?? []) + extra)
            node.clientArguments = client?.arguments ?? []
            return node
        }

        @Test func aMeshOfThreeSyncsOverTLSAndKnowsPeersByTheirCertificates() throws {
            let dir = TemporaryDirectory(prefix: "shoal-tls")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let cli = try pki.issue("cli")
            let n1 = try Self.node("n1", dir.path, files: try pki.issue("n1"), client: cli)
            let n2 = try Self.node("n2", dir.path, files: try pki.issue("n2"), client: cli, ["--peer", n1.address])
            let n3 = try Self.node("n3", dir.path, files: try pki.issue("n3"), client: cli, ["--peer", n2.address])
            #expect(n1.log().contains("links are TLS 1.3, this node is n1"))

            #expect(try n1.exec("INSERT INTO items DOCUMENTS ({'_id': 'from-n1'})").status == 0)
            #expect(try n3.exec("INSERT INTO items DOCUMENTS ({'_id': 'from-n3'})").status == 0)
            for node in [n1, n2, n3] {
                #expect(try eventually(30) { try Self.items(node).count == 2 }, "\(node.name): \(node.log())")
            }
            let status = try n2.status()
            #expect(status["links"] as? String == "tls")
            #expect(status["tlsIdentity"] as? String == "n2")
            let identities = Set(try Self.peers(n2).filter { $0["state"] as? String == "connected" }.compactMap { $0["tlsIdentity"] as? String })
            #expect(identities == ["n1", "n3"])

            // The CLI without the TLS flags cannot reach a TLS node, and says why.
            let plain = try ShoalBinary.run(["status", "--node", n1.address])
            #expect(plain.status != 0)
            #expect(plain.stderr.contains("TLS"), "\(plain.stderr)")
        }

        /// A TLS node dials a peer with a certificate of another CA, an expired one, one
        /// not yet valid and a plaintext one: each is refused with the reason in the
        /// dialer's status, each refused node says so too, and none gets a document.
        @Test func strangersAreRefusedWithTheReasonOnBothSides() throws {
            let dir = TemporaryDirectory(prefix: "shoal-tls")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let cli = try pki.issue("cli")
            let other = try MeshPKI(in: dir.path, ca: "ca-other", name: "other CA")
            let otherCLI = try other.issue("other-cli")

            let stranger = try Self.node("stranger", dir.path, files: try other.issue("stranger"), client: otherCLI)
            let expired = try Self.node(
                "expired", dir.path, files: try pki.issue("expired", ["--valid-from", "2020-01-01", "--days", "1"]), client: cli)
            let early = try Self.node(
                "early", dir.path, files: try pki.issue("early", ["--valid-from", "2090-01-01"]), client: cli)
            let plaintext = try Self.node("plaintext", dir.path, files: nil, client: nil)
            let refused = [stranger, expired, early, plaintext]
            let hub = try Self.node(
                "hub", dir.path, files: try pki.issue("hub"), client: cli, refused.flatMap { ["--peer", $0.address] })
            #expect(try hub.exec("INSERT INTO items DOCUMENTS ({'_id': 'secret'})").status == 0)

            let reasons = [
                stranger.address: "was not issued by this mesh's CA (test mesh CA)",
                expired.address: "(expired) expired at 2020-01-02",
                early.address: "(early) is not valid before 2090-01-01",
                plaintext.address: "does not speak TLS",
            ]
            var errors: [String: String] = [:]
            let seen = try eventually(30) {
                errors = [:]
                for peer in try Self.peers(hub) {
                    if let address = peer["address"] as? String, let error = peer["lastError"] as? String { errors[address] = error }
                }
                return reasons.allSatisfy { address, reason in errors[address]?.contains(reason) == true }
            }
            #expect(seen, "\(errors)")
            #expect(try Self.peers(hub).allSatisfy { $0["state"] as? String != "connected" })

            // The refused side: the node dialed by the hub logs or records the refusal.
            #expect(eventually(10) { stranger.log().contains("refused this side's certificate") }, "\(stranger.log())")
            #expect(eventually(10) { expired.log().contains("refused this side's certificate") }, "\(expired.log())")
            #expect(eventually(10) { plaintext.log().contains("not a Shoal frame but TLS") }, "\(plaintext.log())")
            for node in [stranger, plaintext] {
                #expect(try Self.items(node).isEmpty, "\(node.name) holds a document of the hub")
            }
            // A CLI checks a node's certificate as a peer does.
            let toExpired = try expired.exec("SELECT * FROM items")
            #expect(toExpired.status != 0 && toExpired.stderr.contains("its certificate (expired) expired at"), "\(toExpired.stderr)")
        }

        /// A plaintext node dialing a TLS one is refused at the TLS handshake, says so in
        /// its status, and gets no Shoal frame from it: neither does a raw Hello.
        @Test func aPlaintextPeerReachingATLSNodeGetsNoShoalByte() throws {
            let dir = TemporaryDirectory(prefix: "shoal-tls")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let cli = try pki.issue("cli")
            let hub = try Self.node("hub", dir.path, files: try pki.issue("hub"), client: cli)
            #expect(try hub.exec("INSERT INTO items DOCUMENTS ({'_id': 'secret'})").status == 0)
            let plaintext = try Self.node("plaintext", dir.path, files: nil, client: nil, ["--peer", hub.address])
            var error = ""
            #expect(
                try eventually(30) {
                    error = try Self.peers(plaintext).first { $0["address"] as? String == hub.address }?["lastError"] as? String ?? ""
                    return error.contains("TLS")
                }, "\(error)")
            #expect(eventually(10) { hub.log().contains("does not speak TLS") }, "\(hub.log())")
            #expect(try Self.items(plaintext).isEmpty)

            // Bytes of a Shoal frame, as a plaintext node's Hello starts: whatever comes
            // back is TLS (an alert) or nothing, never a Shoal frame.
            let (reply, _) = try RawSocket.exchange(port: hub.port, bytes: [0x53, 0x01, 0, 0, 0, 0, 0, 4, 1, 2, 3, 4], timeout: 5)
            #expect(reply.first != 0x53)
            #expect(RawSocket.frameTypes(reply).isEmpty || reply.first == 0x15, "\(reply)")
        }

        /// A recording proxy between two nodes: with TLS it never sees the document's
        /// distinctive value, without TLS it does (so the check can fail).
        @Test(arguments: [true, false])
        func anEavesdropperOnTheLinkReadsNothingOverTLS(tls: Bool) throws {
            let dir = TemporaryDirectory(prefix: "shoal-tls")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let cli = try pki.issue("cli")
            let a = try Self.node("a", dir.path, files: tls ? try pki.issue("a") : nil, client: tls ? cli : nil)
            let proxy = try LoopbackProxy(to: a.port, recording: true)
            defer { proxy.stop() }
            let b = try Self.node("b", dir.path, files: tls ? try pki.issue("b") : nil, client: tls ? cli : nil, ["--peer", proxy.address])
            let secret = "distinctive-\(UInt64.random(in: 1...UInt64.max))"
            #expect(try a.exec("INSERT INTO items DOCUMENTS ({'_id': 'x', 'note': '\(secret)'})").status == 0)
            #expect(try eventually(30) { try Self.items(b).first?["note"] as? String == secret })
            let wire = proxy.transcript()
            #expect(wire.count > 100)
            let seen = wire.count >= secret.utf8.count && (0...(wire.count - secret.utf8.count)).contains { i in
                wire[i..<(i + secret.utf8.count)].elementsEqual(secret.utf8)
            }
            #expect(seen == !tls, "the value \(tls ? "crossed the TLS link in the clear" : "did not cross the plaintext link")")
        }

        /// SIGHUP re-reads the certificate files: new connections see the new name, the
        /// live session goes on; files that do not load leave the ones in use.
        @Test func sighupReloadsTheCertificateForNewConnectionsAndLiveSessionsGoOn() throws {
            let dir = TemporaryDirectory(prefix: "shoal-tls")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let cli = try pki.issue("cli")
            let files = try pki.issue("a")
            let a = try Self.node("a", dir.path, files: files, client: cli)
            let b = try Self.node("b", dir.path, files: try pki.issue("b"), client: cli, ["--peer", a.address])
            func sessionWithA() throws -> [String: Any]? {
                try Self.peers(b).first { $0["state"] as? String == "connected" && $0["siteID"] as? String != nil }
            }
            #expect(try eventually(30) { try sessionWithA()?["tlsIdentity"] as? String == "a" })
            let before = try #require(try sessionWithA()?["bytesIn"] as? Int)

            let renewed = try pki.issue("a-renewed")
            for (from, to) in [(renewed.certificate, files.certificate), (renewed.key, files.key)] {
                try FileManager.default.removeItem(atPath: to)
                try FileManager.default.copyItem(atPath: from, toPath: to)
                chmod(to, 0o600)
            }
            a.signal(SIGHUP)
            #expect(try eventually(10) { try a.status()["tlsIdentity"] as? String == "a-renewed" }, "\(a.log())")
            #expect(a.log().contains("reloaded the TLS files: new connections present a-renewed"))
            #expect(a.isRunning)
            // The session that was up goes on: still the old name, and more bytes over it.
            #expect(try a.exec("INSERT INTO items DOCUMENTS ({'_id': 'after-reload'})").status == 0)
            #expect(try eventually(20) { try Self.items(b).count == 1 })
            let session = try #require(try sessionWithA())
            #expect(session["tlsIdentity"] as? String == "a" && (session["bytesIn"] as? Int ?? 0) > before)

            try writePrivateFile(files.key, "not a key")
            a.signal(SIGHUP)
            #expect(eventually(10) { a.log().contains("the TLS files were not reloaded, the ones in use stay") }, "\(a.log())")
            #expect(try a.status()["tlsIdentity"] as? String == "a-renewed")
        }
    }
}

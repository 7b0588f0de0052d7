import Foundation
import NIOCore
import NIOEmbedded
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing
import SwiftASN1
import X509

@testable import ShoalNode

extension ProcessSuites {
    /// TLS between two ends in one process: `LinkTLS` on a pair of embedded channels
    /// whose bytes the test carries across, and two embedded nodes on loopback TCP.
    @Suite(.serialized) struct LinkTLSTests {
        /// Runs a TLS handshake between `dialer` and `acceptor` on embedded channels and
        /// returns what each side's handshake future gave: the peer's name or the error.
        static func handshake(dialer: LinkTLS, acceptor: LinkTLS) throws -> (dialer: Result<String, any Error>, acceptor: Result<String, any Error>) {
            let client = EmbeddedChannel(), server = EmbeddedChannel()
            let clientDone = try dialer.secure(client, dialing: true, timeout: .seconds(10)).map(\.name)
            let serverDone = try acceptor.secure(server, dialing: false, timeout: .seconds(10)).map(\.name)
            let address = try SocketAddress(ipAddress: "127.0.0.1", port: 7470)
            _ = server.connect(to: address)
            _ = client.connect(to: address)
            let results = Locked<(Result<String, any Error>?, Result<String, any Error>?)>((nil, nil))
            clientDone.whenComplete { result in results.withLock { $0.0 = result } }
            serverDone.whenComplete { result in results.withLock { $0.1 = result } }
            for _ in 0..<20 where results.withLock({ $0.0 == nil || $0.1 == nil }) {
                // The certificate check completes a promise; its continuation is a task on the loop.
                client.embeddedEventLoop.run()
                server.embeddedEventLoop.run()
                while let bytes = try? client.readOutbound(as: ByteBuffer.self) { _ = try? server.writeInbound(bytes) }
                while let bytes = try? server.readOutbound(as: ByteBuffer.self) { _ = try? client.writeInbound(bytes) }
                if !client.isActive, server.isActive { server.close(promise: nil) }
                if !server.isActive, client.isActive { client.close(promise: nil) }
            }
            // Closed without `finish()`, which would run the ten-second handshake timer.
            client.close(promise: nil)
            server.close(promise: nil)
            let (dialed, accepted) = results.withLock { $0 }
            return (try #require(dialed), try #require(accepted))
        }

        static func message(_ result: Result<String, any Error>) -> String {
            switch result {
            case .success(let name): "identified as \(name)"
            case .failure(let error): (error as? ShoalError)?.message ?? "\(error)"
            }
        }

        @Test func bothSidesLearnTheOthersNameAndStrangersAreRefusedWithTheReason() throws {
            let dir = TemporaryDirectory(prefix: "shoal-link-tls")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let alpha = try LinkTLS(files: try pki.issue("alpha"))
            let beta = try LinkTLS(files: try pki.issue("beta"))
            let expired = try LinkTLS(files: try pki.issue("expired", ["--valid-from", "2021-03-01", "--days", "1"]))
            let stranger = try LinkTLS(files: try MeshPKI(in: dir.path, ca: "ca2", name: "other CA").issue("stranger"))

            let good = try Self.handshake(dialer: alpha, acceptor: beta)
            #expect(try good.dialer.get() == "beta")
            #expect(try good.acceptor.get() == "alpha")

            // The acceptor checks the dialer's certificate and says why it refuses it.
            let old = try Self.handshake(dialer: expired, acceptor: beta)
            #expect(Self.message(old.acceptor).contains("its certificate (expired) expired at 2021-03-02"), "\(Self.message(old.acceptor))")
            // The dialer checks the acceptor's first, before it shows its own.
            let strange = try Self.handshake(dialer: alpha, acceptor: stranger)
            #expect(
                Self.message(strange.dialer).contains("its certificate (stranger) was not issued by this mesh's CA (test mesh CA)"),
                "\(Self.message(strange.dialer))")
            #expect(Self.message(strange.acceptor).contains("refused this side's certificate"), "\(Self.message(strange.acceptor))")
        }

        /// A certificate whose serial number the revocation file names is refused by the
        /// side that checks it, with its name and serial, however the file writes it.
        @Test func aRevokedCertificateIsRefusedWithItsSerial() throws {
            let dir = TemporaryDirectory(prefix: "shoal-link-tls")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let lost = try pki.issue("till-9")
            var files = try pki.issue("hub")
            files.revoked = dir.path + "/revoked.txt"
            let kept = try pki.issue("till-1")
            let serial = LinkTLS.serialText(
                try Certificate(pemEncoded: String(contentsOfFile: lost.certificate, encoding: .utf8)).serialNumber.bytes)
            // As openssl prints it: upper case, with a prefix; and with colons, after a comment.
            let colons = stride(from: 0, to: serial.count, by: 2).map { i -> String in
                let start = serial.index(serial.startIndex, offsetBy: i)
                return String(serial[start..<serial.index(start, offsetBy: min(2, serial.count - i))])
            }.joined(separator: ":")
            for line in ["serial=\(serial.uppercased())", "# lost on 2026-11-28\n\(colons)  # till 9"] {
                try line.write(toFile: dir.path + "/revoked.txt", atomically: true, encoding: .utf8)
                let hub = try LinkTLS(files: files)
                let refused = try Self.handshake(dialer: try LinkTLS(files: lost), acceptor: hub)
                #expect(
                    Self.message(refused.acceptor).contains("its certificate (till-9, serial \(serial)) is revoked"),
                    "\(Self.message(refused.acceptor))")
                #expect(try Self.handshake(dialer: try LinkTLS(files: kept), acceptor: hub).acceptor.get() == "till-1")
            }
        }

        @Test(arguments: [
            ("serial=0A1B", ["a1b"]), ("0a:1b\n\n  # nothing\n00ff", ["a1b", "ff"]), ("00", ["0"]), ("ABC", ["abc"]),
        ])
        func aRevocationFileReadsSerialsInHex(text: String, serials: [String]) throws {
            #expect(try LinkTLS.revokedSerials(text) == Set(serials))
        }

        @Test func aRevocationFileLineThatIsNotHexIsRefusedWithItsNumber() {
            #expect {
                _ = try LinkTLS.revokedSerials("0a1b\nnot-a-serial")
            } throws: { ($0 as? ShoalError)?.message.contains("line 2 of the revoked certificates file") == true }
        }

        /// Two nodes embedded in one process, on loopback TCP with TLS: they sync, and each
        /// knows the other by its certificate.
        @Test func twoEmbeddedNodesSyncOverTLS() async throws {
            let dir = TemporaryDirectory(prefix: "shoal-link-tls")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let loopback = HostAndPort(host: "127.0.0.1", port: 0)
            let alpha = try ShoalNode(
                configuration: NodeConfiguration(
                    dataDirectory: dir.path + "/alpha", listen: loopback, name: "alpha", discovery: false,
                    tls: try pki.issue("alpha")))
            #expect(alpha.linkSecurity == "tls" && alpha.tlsIdentity == "alpha")
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await alpha.run() }
                let beta = try ShoalNode(
                    configuration: NodeConfiguration(
                        dataDirectory: dir.path + "/beta", listen: loopback, name: "beta", peers: [try await alpha.ready()],
                        subscriptions: ["SELECT * FROM cars"], discovery: false, tls: try pki.issue("beta")))
                group.addTask { try await beta.run() }
                _ = try await beta.ready()
                _ = try await alpha.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
                #expect(try await InProcessMesh.eventually { try await beta.store.execute("SELECT * FROM cars").items.count == 1 })
                #expect(beta.sync.peers().contains { $0.state == "connected" && $0.tlsIdentity == "alpha" })
                #expect(alpha.sync.peers().contains { $0.state == "connected" && $0.tlsIdentity == "beta" })
                let status = try await AdminClient(node: try await alpha.ready(), tls: try pki.issue("cli")).status()
                #expect(status.linkSecurity == "tls" && status.tlsIdentity == "alpha")
                group.cancelAll()
            }
        }

        /// A certificate revoked while its peer is connected: the reload that reads the
        /// new list closes that peer's live session (and only its), and its redials are
        /// refused, while a session of a peer not revoked goes on.
        @Test func aReloadThatRevokesALiveSessionsCertificateClosesIt() async throws {
            let dir = TemporaryDirectory(prefix: "shoal-link-tls")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let loopback = HostAndPort(host: "127.0.0.1", port: 0)
            var hubFiles = try pki.issue("hub")
            hubFiles.revoked = dir.path + "/revoked.txt"
            try "# none yet\n".write(toFile: dir.path + "/revoked.txt", atomically: true, encoding: .utf8)
            let hub = try ShoalNode(
                configuration: NodeConfiguration(
                    dataDirectory: dir.path + "/hub", listen: loopback, name: "hub", discovery: false, tls: hubFiles))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await hub.run() }
                var tills: [ShoalNode] = []
                var lostCertificate = ""
                for name in ["till-1", "till-9"] {
                    let files = try pki.issue(name)
                    lostCertificate = files.certificate
                    let till = try ShoalNode(
                        configuration: NodeConfiguration(
                            dataDirectory: dir.path + "/" + name, listen: loopback, name: name, peers: [try await hub.ready()],
                            subscriptions: ["SELECT * FROM menu"], discovery: false, tls: files))
                    group.addTask { try await till.run() }
                    _ = try await till.ready()
                    tills.append(till)
                }
                func connected(_ name: String) -> Bool { hub.sync.peers().contains { $0.state == "connected" && $0.tlsIdentity == name } }
                #expect(try await InProcessMesh.eventually { connected("till-1") && connected("till-9") })
                let lost = try Certificate(pemEncoded: String(contentsOfFile: lostCertificate, encoding: .utf8))
                try "\(LinkTLS.serialText(lost.serialNumber.bytes))\n".write(toFile: dir.path + "/revoked.txt", atomically: true, encoding: .utf8)
                #expect(try hub.reloadTLS() == "hub")
                #expect(try await InProcessMesh.eventually { !connected("till-9") })
                _ = try await hub.store.execute("INSERT INTO menu DOCUMENTS ({'_id': 'soup'})")
                #expect(try await InProcessMesh.eventually { try await tills[0].store.execute("SELECT * FROM menu").items.count == 1 })
                #expect(connected("till-1"), "the session of a peer not revoked goes on")
                // till-9 redials every few seconds: each is refused, so it never gets the soup.
                try await Task.sleep(for: .seconds(2))
                #expect(!connected("till-9"))
                #expect(try await tills[1].store.execute("SELECT * FROM menu").items.isEmpty)
                group.cancelAll()
            }
        }
    }
}

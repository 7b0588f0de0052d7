import Foundation
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

extension ProcessSuites {
/// Peers that complete a real handshake and then break the protocol, against a real
/// node: each gets an Error frame and is disconnected, the node logs it with the
/// peer's address, and a well-behaved peer syncing meanwhile never notices.
@Suite(.serialized) struct ProcessProtocolBreakerTests {
    /// One transaction (origin `site`, sequence 1) writing `deltas` deltas to one car, as the wire carries it.
    static func piece(site: UInt64, collection: String = "cars", manifest: [(String, UInt32, UInt32)]? = nil, deltas: Int = 1)
        -> Shoal_V1_TransactionPiece
    {
        var p = Shoal_V1_TransactionPiece()
        p.originSite = site
        p.originSequence = 1
        let counts = manifest ?? [(collection, 1, UInt32(deltas))]
        p.deltaCount = counts.reduce(0) { $0 + $1.2 }
        p.documentCount = counts.reduce(0) { $0 + $1.1 }
        p.collections = counts.map { c in
            var m = Shoal_V1_CollectionCount()
            m.collection = c.0
            m.documents = c.1
            m.deltas = c.2
            return m
        }
        var d = Shoal_V1_DocumentDeltas()
        d.collection = collection
        d.documentID = "\"raw\""
        d.deltaCount = UInt32(deltas)
        d.deltas = (0..<deltas).map { i in
            var f = Shoal_V1_FieldDelta()
            f.field = "f\(i)"
            f.valueJson = Data("1".utf8)
            f.index = UInt32(i)
            return f
        }
        p.documents = [d]
        p.last = true
        p.baseTimestamp = UInt64(Date().timeIntervalSince1970 * 1000) << 16
        return p
    }

    static func batch(_ pieces: [Shoal_V1_TransactionPiece], through: UInt64 = 1, generation: UInt64 = 1) -> WireMessage {
        var b = Shoal_V1_DeltaBatch()
        b.pieces = pieces
        b.throughSequence = through
        b.subscribeGeneration = generation
        return .deltaBatch(b)
    }

    @Test func peersThatBreakTheProtocolAreDisconnectedAndOthersAreServed() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a", extra: ["--subscribe", "SELECT * FROM cars"])
        let b = try NodeProcess(
            name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address, "--subscribe", "SELECT * FROM cars"])
        var written = 0
        func stillSyncing() throws -> Bool {
            written += 1
            guard try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'ok-\(written)'})").status == 0 else { return false }
            return try eventually { try ProcessMeshTests.documents(b, "SELECT * FROM cars WHERE _id = 'ok-\(written)'").count == 1 }
        }
        #expect(try stillSyncing())

        let site = UInt64.random(in: 1...UInt64.max)
        let manifestOneDelta = [("cars", UInt32(1), UInt32(1))]
        let cases: [(name: String, send: [WireMessage], code: Shoal_V1_ErrorCode, message: String)] = [
            ("a Hello after the handshake", [.hello(Shoal_V1_Hello())], .protocolViolation,
             "unexpected Hello frame in an established session"),
            ("a batch for a collection never asked for", [Self.batch([Self.piece(site: site, collection: "boats")])],
             .protocolViolation, "carries collection 'boats', which this node did not subscribe to"),
            ("a batch answering a Subscribe never sent", [Self.batch([Self.piece(site: site)], generation: 7)],
             .protocolViolation, "DeltaBatch answers Subscribe generation 7, but the latest sent is 1"),
            ("an Ack for a batch never sent", [.ack({ var a = Shoal_V1_Ack(); a.throughSequence = 99; return a }())],
             .protocolViolation, "Ack for sequence 99, which no unacknowledged DeltaBatch carries"),
            ("a manifest that contradicts its deltas",
             [Self.batch([{ var p = Self.piece(site: site, manifest: manifestOneDelta, deltas: 1); p.documents[0].deltaCount = 1; p.documents[0].deltas += p.documents[0].deltas; return p }()])],
             .protocolViolation, "carries 2 deltas of document \"raw\", which it says has 1"),
            ("a document whose deltas exceed its collection's count",
             [Self.batch([{ var p = Self.piece(site: site, manifest: [("cars", 1, 1), ("boats", 1, 2)], deltas: 2); p.documents[0].deltaCount = 2; return p }()])],
             .protocolViolation, "deltas contradict its manifest: document \"raw\" in 'cars' with 2 deltas"),
            ("garbage after the handshake", [], .malformedFrame, "not a Shoal frame"),
        ]
        for breaker in cases {
            let raw = try RawPeer(port: a.port)
            try raw.handshake()
            // The node subscribes first; wait for it so "the latest sent" is generation 1.
            guard case .subscribe? = try raw.receive() else {
                Issue.record("\(breaker.name): expected the node's Subscribe first")
                continue
            }
            if breaker.send.isEmpty {
                try raw.sendBytes(Array("GET / HTTP/1.1\r\n\r\n".utf8))
            }
            for message in breaker.send { try raw.send(message) }
            let error = try raw.errorBeforeClose()
            #expect(error?.code == breaker.code, "\(breaker.name): \(String(describing: error))")
            #expect(error?.message.contains(breaker.message) == true, "\(breaker.name): \(error?.message ?? "no Error")")
            #expect(error?.fatal == true)
            let port = raw.localPort
            #expect(
                eventually(5) {
                    a.log().split(separator: "\n").contains { $0.contains("shoal.peer.address=127.0.0.1:\(port)") && $0.contains(breaker.message) }
                }, "\(breaker.name): logged with the peer's address")
            #expect(a.isRunning)
            #expect(try stillSyncing(), "\(breaker.name): the real peer is still served")
        }
        // Nothing a breaker sent reached the store.
        #expect(try ProcessMeshTests.documents(a, "SELECT * FROM cars WHERE _id = 'raw'").isEmpty)
    }
}
}

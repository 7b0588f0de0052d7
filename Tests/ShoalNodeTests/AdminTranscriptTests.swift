import Foundation
import NIOCore
import Shoal
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalCRDT
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// The admin transcripts of the conformance kit (entries of kind `admin-transcript`,
/// PROTOCOL.md §15.6), replayed against a node in this process over loopback TCP: the
/// client's frames (`>`) go out as written, and each frame the node sends must be the
/// next `<` line, or match its `<~` rule (the node's site, nonce, transaction IDs,
/// ages and the client's address differ from run to run).
///
/// The transcript is recorded from a node the same way, its varying fields set to the
/// values the file shows; SHOAL_WRITE_VECTORS=1 writes it.
@Suite struct AdminTranscriptTests {
    static let path = "v4/admin-transaction.transcript"
    static let codec = MessageCodec()

    @Test(arguments: VectorManifest.entries(.adminTranscript))
    func replay(_ entry: VectorManifest.Entry) async throws {
        guard !VectorManifest.writing else { return }
        let transcript = try Transcript(parsing: String(contentsOf: VectorManifest.url(entry.file), encoding: .utf8))
        #expect(transcript.version.map(entry.holds(at:)) == true)
        try await TransactionHolderTests.withNode { _, client in
            let port = client.node.port
            let lines = transcript.lines.map { $0 }
            // The frames the node sends, one for each line that expects one (nil: it had closed).
            let received = try await Self.offThePool { () throws -> [[UInt8]?] in
                let peer = try RawPeer(port: port)
                var received: [[UInt8]?] = []
                for (_, line) in lines {
                    switch line {
                    case .received(let bytes): try peer.sendBytes(bytes)
                    case .sent, .closed: received.append(try peer.receiveFrame())
                    default: break
                    }
                }
                return received
            }
            var next = received.makeIterator()
            for (number, line) in lines {
                switch line {
                case .sent(let expected, let except):
                    let sent = try #require(next.next() ?? nil, "line \(number): the node closed the connection")
                    if except.isEmpty {
                        #expect(try Self.message(sent) == Self.message(expected), "line \(number)")
                        #expect(sent == expected, "line \(number): the node sends other bytes")
                    } else {
                        #expect(ProtoJSON.equal(try Self.message(sent), try Self.message(expected), except: except), "line \(number)")
                    }
                case .closed:
                    #expect(next.next() ?? nil == nil, "line \(number): the node has not closed")
                case .received, .version, .site, .peer:
                    break
                default:
                    Issue.record("line \(number): not a line of an admin transcript")
                }
            }
        }
    }

    /// Runs blocking socket I/O on a thread of its own: on the concurrency pool it would
    /// hold one of its threads (two on a 2-core machine) from the node it talks to.
    static func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    @Test func theNodeRecordsTheTranscript() async throws {
        let recorded = try await Self.record()
        if VectorManifest.writing {
            try recorded.write(to: VectorManifest.url(Self.path), atomically: true, encoding: .utf8)
        } else {
            // The varying fields are set to fixed values, so the node must record the file itself.
            #expect(recorded == (try String(contentsOf: VectorManifest.url(Self.path), encoding: .utf8)))
        }
    }

    @Test func theScenarioIsTheEntry() {
        #expect(VectorManifest.entries(.adminTranscript).map(\.file) == [Self.path])
    }

    static func message(_ bytes: [UInt8]) throws -> WireMessage {
        var buffer = ByteBuffer(bytes: bytes)
        return try codec.decode(try #require(try FrameDecoder().next(from: &buffer)))
    }

    static func frame(_ message: WireMessage) -> [UInt8] {
        var buffer = ByteBuffer()
        codec.encode(message).encode(into: &buffer)
        return Array(buffer.readableBytesView)
    }

    static func request(_ id: UInt64, _ fill: (inout Shoal_V1_AdminRequest) -> Void) -> [UInt8] {
        var request = Shoal_V1_AdminRequest()
        request.requestID = id
        fill(&request)
        return frame(.adminRequest(request))
    }

    /// The node's frame with what varies from run to run set to the values the file
    /// shows, and the fields another implementation need not match.
    static func normalized(_ bytes: [UInt8]) throws -> (bytes: [UInt8], except: [String]) {
        switch try message(bytes) {
        case .hello(var hello):
            hello.siteID = 0x0123_4567_89ab_cdef
            hello.nonce = Data((0..<32).map { UInt8($0) })
            hello.nodeName = "alpha"
            hello.listenAddress = "127.0.0.1:7470"
            return (frame(.hello(hello)), ["site_id", "nonce", "node_name", "listen_address"])
        case .adminResponse(var response) where response.transaction.id != "":
            var except = ["transaction.id", "transaction.client"]
            response.transaction.id = "00112233445566778899aabbccddeeff"
            response.transaction.client = "127.0.0.1:54321"
            if !response.transaction.transactionID.isEmpty {
                response.transaction.transactionID = "0123456789abcdef:1"
                except.append("transaction.transaction_id")
            }
            if response.transaction.ageSeconds > 0 {
                response.transaction.ageSeconds = 1.5
                except.append("transaction.age_seconds")
            }
            return (frame(.adminResponse(response)), except)
        case .adminResponse(let response):
            if case .error? = response.response { return (bytes, ["error.message"]) }
            return (bytes, [])
        default:
            return (bytes, [])
        }
    }

    /// An admin client's session with a node of this version, recorded from the node.
    static func record() async throws -> String {
        var text = ""
        try await TransactionHolderTests.withNode { _, client in
            let port = client.node.port
            text = try await offThePool { try script(port: port) }
        }
        return text
    }

    static func script(port: Int) throws -> String {
        var w = Transcript.Writer()
        let peer = try RawPeer(port: port)
        func send(_ bytes: [UInt8]) throws {
            try peer.sendBytes(bytes)
            w.line(.received(bytes))
        }
        func answer() throws {
            guard let frame = try peer.receiveFrame() else { throw KitError("the node closed the connection") }
            let (bytes, except) = try normalized(frame)
            w.line(.sent(bytes, except: except))
        }
        w.comment(
            """
            An admin client's session with a node of this version, from the node's side: '>' frames the
            client sends, '<' frames the node answers with (PROTOCOL.md 15.6). The client has no key and
            connects over loopback, so neither side proves one (6.2 #8, 6.4). Recorded from a reference
            node; what varies from run to run is set to fixed values, and '<~' names those fields.
            """)
        w.line(.version(4))
        w.line(.site(SiteID(0x0123_4567_89ab_cdef)))
        w.line(.peer(SiteID(0)))
        w.comment(
            """
            The handshake: the node's Hello comes at once, versions 1 to 4; the client's is the CLI's (site 0,
            role ADMIN, no mesh name, versions 1 to 4), and they agree on 4. Both Proofs are empty.
            """)
        try answer()
        var handshake = HandshakeStateMachine(
            configuration: .init(siteID: SiteID(0), nodeName: "shoal-cli", meshName: "", meshKey: nil, role: .admin),
            nonce: [UInt8](repeating: 9, count: 32))
        guard case .send(let hello)? = handshake.start().first else { throw KitError("no Hello") }
        try send(frame(hello))
        try answer()
        try send(frame(.proof(Shoal_V1_Proof())))
        w.comment(
            """
            BEGIN: the connection now holds a read-write transaction, with the node's writer (10.1). Its id and
            the client's address are the node's own.
            """)
        try send(request(1) { $0.begin = { var b = Shoal_V1_BeginRequest(); b.hint = "nightly fix"; return b }() })
        try answer()
        w.comment("Two statements run in it: the INSERT has no transaction ID yet, and the SELECT sees its write.")
        try send(
            request(2) {
                var e = Shoal_V1_ExecRequest()
                e.statements = "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': :c})"
                e.argumentsJson = "{\"c\":\"red\"}"
                $0.exec = e
            })
        try answer()
        try send(request(3) { var e = Shoal_V1_ExecRequest(); e.statements = "SELECT * FROM cars"; $0.exec = e })
        try answer()
        w.comment("A client that waits for a person keeps the connection with Pings; the node echoes each (section 9).")
        var ping = Shoal_V1_Ping()
        ping.nonce = 1
        ping.sentAtMicros = 5_000_000
        try send(frame(.ping(ping)))
        try answer()
        usleep(20_000)
        w.comment(
            """
            COMMIT: the transaction's ID (SITE:SEQUENCE, the node's site and its first transaction) and how long it
            was open come back with the same id.
            """)
        try send(request(4) { $0.commit = Shoal_V1_CommitRequest() })
        try answer()
        w.comment(
            """
            A ROLLBACK with no transaction held is refused in an AdminResponse error (EXECUTION_FAILED, not fatal),
            and the connection stays open (section 10); its text is the node's own.
            """)
        try send(request(5) { $0.rollback = Shoal_V1_RollbackRequest() })
        try answer()
        return w.text
    }
}

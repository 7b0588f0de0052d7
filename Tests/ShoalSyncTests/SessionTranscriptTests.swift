import Foundation
import NIOCore
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import SwiftProtobuf
import Testing

/// The session transcripts of the conformance kit (entries of kind
/// `session-transcript`, PROTOCOL.md §15.6), replayed against the session state
/// machine: frames in, frames out, with the local events between them. The reference
/// reproduces every frame byte for byte, also where another implementation need only
/// match the `<~` rule.
///
/// The transcripts come from the scenarios below: the version 2 one from pieces built
/// here, the version 3 ones from `SessionHarness`, two machines with real stores. Each
/// scenario must still record exactly its file, and SHOAL_WRITE_VECTORS=1 writes them.
@Suite struct SessionTranscriptTests {
    struct Scenario: Sendable {
        var path: String
        var record: @Sendable () async throws -> String
    }

    static let scenarios: [Scenario] = [
        Scenario(path: "v2/session-sync.transcript", record: { versionTwoSession() }),
        Scenario(path: "v3/sync-split-transaction.transcript", record: splitTransaction),
        Scenario(path: "v3/sync-resume.transcript", record: resume),
        Scenario(path: "v3/sync-protocol-violation.transcript", record: protocolViolation),
    ]

    @Test(arguments: VectorManifest.entries(.sessionTranscript))
    func replay(_ entry: VectorManifest.Entry) throws {
        // The scenario writes it, and replays what it wrote.
        guard !VectorManifest.writing else { return }
        let text = try String(contentsOf: VectorManifest.url(entry.file), encoding: .utf8)
        let transcript = try Transcript(parsing: text)
        #expect(transcript.version.map(entry.holds(at:)) == true, "the transcript's version is not the entry's")
        try Self.replay(transcript)
    }

    /// The node, driven through the scenario, still sends exactly what the file says.
    @Test(arguments: scenarios.map(\.path))
    func theScenarioRecordsItsTranscript(_ path: String) async throws {
        let scenario = try #require(Self.scenarios.first { $0.path == path })
        let recorded = try await scenario.record()
        let url = VectorManifest.url(path)
        if VectorManifest.writing {
            try recorded.write(to: url, atomically: true, encoding: .utf8)
            try Self.replay(try Transcript(parsing: recorded))
        } else {
            let file = try String(contentsOf: url, encoding: .utf8)
            #expect(recorded == file, "the scenario records another transcript than \(path)")
        }
    }

    @Test func theScenariosAreTheEntries() {
        #expect(Set(Self.scenarios.map(\.path)) == Set(VectorManifest.entries(.sessionTranscript).map(\.file)))
    }

    // MARK: Replay

    static let codec = MessageCodec()

    static func bytes(_ message: WireMessage) -> [UInt8] {
        var buffer = ByteBuffer()
        codec.encode(message).encode(into: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// Plays a transcript against a session machine, node A's side.
    static func replay(_ transcript: Transcript) throws {
        var version: UInt32 = 2
        var peer: SiteID?
        var limits = PeerLimits.unknown
        var own = SubscriptionSet()
        var machine: SessionStateMachine?
        var now: UInt64 = 0
        var outbound: [[UInt8]] = []
        var pendingPage: SessionStateMachine.PageRequest?
        var pendingCursor: SubscriptionSet?
        var closed = false

        func run(_ event: SessionStateMachine.Event) throws {
            if machine == nil {
                let site = try #require(peer, "no peer line before the first event")
                machine = SessionStateMachine(configuration: .init(peer: site, version: version, peerLimits: limits))
            }
            for action in machine!.handle(event, now: now) {
                switch action {
                case .send(let m): outbound.append(bytes(m.wire))
                case .sendBatch(let batch):
                    var buffer = ByteBuffer()
                    codec.encode(.deltaBatch, payload: batch.payload()).encode(into: &buffer)
                    outbound.append(Array(buffer.readableBytesView))
                case .readPage(let r): pendingPage = r
                case .readCursor(let s, _): pendingCursor = s
                case .close(let e):
                    if let e, !e.fromPeer { outbound.append(bytes(e.frame)) }
                    closed = true
                default: break
                }
            }
        }

        for (number, line) in transcript.lines {
            let at = "line \(number)"
            switch line {
            case .version(let v): version = v
            case .site: break
            case .peer(let site): peer = site
            case .limits(let frame, let document): limits = PeerLimits(maximumFrameSize: frame, documentSizeHardLimit: document)
            case .own(let query): try own.add(query: query)
            case .cursor(let cursor):
                if pendingCursor == nil { try run(.ownSubscriptionsChanged(own, fromStart: false)) }
                let set = try #require(pendingCursor, "\(at): A asks for no cursor")
                pendingCursor = nil
                try run(.cursorRead(set, resumeAfter: cursor))
            case .log(let end): try run(.logAdvanced(end))
            case .tick(let micros):
                now = micros
                try run(.tick)
            case .durable: try run(.batchDurable())
            case .page(let payload):
                let request = try #require(pendingPage, "\(at): A reads no page")
                pendingPage = nil
                let batch = try Shoal_V1_DeltaBatch(serializedBytes: payload)
                let pieces = try PieceCodec.decode(
                    batch.pieces, filters: batch.filters, receiver: request.subscriptions.filter,
                    collections: request.subscriptions.collections, encoding: PieceCodec.DeltaEncoding(version: version))
                try run(.pageRead(ChangeLogPage(pieces: pieces, through: batch.throughSequence), ticket: request.ticket))
            case .received(let frameBytes):
                var buffer = ByteBuffer(bytes: frameBytes)
                let frame = try #require(try FrameDecoder().next(from: &buffer), "\(at)")
                let (type, payload) = try codec.payload(frame)
                if type == .deltaBatch {
                    try run(.receivedDeltaBatch(Array(payload.readableBytesView)))
                } else {
                    try run(SessionStateMachine.Event(received: try codec.decode(type, payload)))
                }
            case .sent(let expected, let except):
                guard !outbound.isEmpty else {
                    Issue.record("\(at): A sends nothing here")
                    continue
                }
                let sent = outbound.removeFirst()
                #expect(sent == expected, "\(at): A sends other bytes")
                // What another implementation must match, checked as it would be.
                var expectedBuffer = ByteBuffer(bytes: expected)
                var sentBuffer = ByteBuffer(bytes: sent)
                if let e = try FrameDecoder().next(from: &expectedBuffer), let s = try FrameDecoder().next(from: &sentBuffer) {
                    #expect(ProtoJSON.equal(try codec.decode(s), try codec.decode(e), except: except), "\(at)")
                }
            case .closed:
                #expect(closed, "\(at): A has not closed")
            }
        }
        #expect(outbound.isEmpty, "A sends \(outbound.count) frames the transcript does not list")
    }

    // MARK: Version 2: pieces built here

    static let cars = "SELECT * FROM cars"
    static let a = SiteID(0xA), b = SiteID(0xB)

    static func set(_ queries: [String]) -> SubscriptionSet {
        var s = SubscriptionSet()
        for q in queries { try! s.add(query: q) }
        return s
    }

    static func piece(_ origin: SiteID, _ seq: UInt64, documents: [String], collection: String = "cars") -> TransactionPiece {
        let id = TransactionID(origin: origin, sequence: seq)
        let deltas = documents.enumerated().map { i, doc in
            Delta(
                collection: collection, documentID: "\"\(doc)\"", field: "color", valueJSON: "\"red\"",
                timestamp: HybridTimestamp(rawValue: (UInt64(1_700_000_000_000) << 16) + UInt64(i)), transaction: id,
                index: UInt32(i), count: UInt32(documents.count))
        }
        var counts: [DocumentRef: UInt32] = [:]
        for d in deltas { counts[DocumentRef(collection: collection, id: d.documentID)] = 1 }
        return TransactionPiece(
            id: id, deltaCount: UInt32(documents.count), documentCount: UInt32(documents.count),
            collections: [CollectionCount(collection: collection, documents: UInt32(documents.count), deltas: UInt32(documents.count))],
            deltas: deltas, documentDeltaCounts: counts,
            verdicts: [Verdict(collection: collection, coverage: .notCovered(set([cars]).filter))], isLast: true)
    }

    static func batch(_ pieces: [TransactionPiece], through: UInt64, generation: UInt64) -> Shoal_V1_DeltaBatch {
        OutboundBatch(
            pieces: pieces, receiver: set([cars]).filter, encoding: .absolute, throughSequence: through,
            subscribeGeneration: generation
        ).message
    }

    /// A page of A's log, as the `page` line carries it.
    static func page(_ pieces: [TransactionPiece], through: UInt64) -> [UInt8] {
        OutboundBatch(pieces: pieces, receiver: set([cars]).filter, encoding: .absolute, throughSequence: through, subscribeGeneration: 0)
            .payload()
    }

    static func subscribe(_ queries: [String], resumeAfter: UInt64, generation: UInt64) -> WireMessage {
        var s = Shoal_V1_Subscribe()
        s.subscriptions = set(queries).entries.map { e in
            var w = Shoal_V1_Subscription()
            w.id = e.id
            w.query = e.query
            return w
        }
        s.resumeAfter = resumeAfter
        s.generation = generation
        return .subscribe(s)
    }

    static func ack(_ through: UInt64) -> WireMessage {
        var m = Shoal_V1_Ack()
        m.throughSequence = through
        return .ack(m)
    }

    static func ping(_ nonce: UInt64, _ at: UInt64) -> Shoal_V1_Ping {
        var p = Shoal_V1_Ping()
        p.nonce = nonce
        p.sentAtMicros = at
        return p
    }

    /// The version 2 session: what each side sends is built here from pieces, and the
    /// replay checks that the machine sends the same.
    static func versionTwoSession() -> String {
        let ownPiece = piece(a, 1, documents: ["a1", "a2"])
        let theirPiece = piece(b, 1, documents: ["b1"])
        let later = piece(a, 2, documents: ["a3"])
        let foreign = piece(b, 2, documents: ["x"], collection: "boats")
        var w = Transcript.Writer()
        w.comment(
            """
            A version 2 sync session of node A (site 000000000000000a) with peer B (site 000000000000000b),
            after the handshake: deltas travel with index and timestamp_offset (PROTOCOL.md 8.3). The lines
            are those of PROTOCOL.md section 15.6.
            """)
        w.line(.version(2))
        w.line(.site(a))
        w.line(.peer(b))
        w.line(.own(cars))
        w.comment("A asks for cars, from the start: no cursor is stored yet.")
        w.line(.cursor(0))
        w.line(.sent(bytes(subscribe([cars], resumeAfter: 0, generation: 1)), except: []))
        w.comment(
            """
            B asks A for cars too. A's log has 3 rows: the first two hold other collections, the third
            transaction A:1 (2 cars); A reads a page of it and sends what B wants.
            """)
        w.line(.received(bytes(subscribe([cars], resumeAfter: 0, generation: 1))))
        w.line(.log(3))
        w.line(.page(page([ownPiece], through: 3)))
        w.line(.sent(bytes(.deltaBatch(batch([ownPiece], through: 3, generation: 1))), except: []))
        w.comment("B streams its transaction B:1; A acknowledges it once it is durable, not before.")
        w.line(.received(bytes(.deltaBatch(batch([theirPiece], through: 2, generation: 1)))))
        w.line(.durable)
        w.line(.sent(bytes(ack(2)), except: []))
        w.line(.received(bytes(ack(3))))
        w.comment("A's log grows by A:2.")
        w.line(.log(4))
        w.line(.page(page([later], through: 4)))
        w.line(.sent(bytes(.deltaBatch(batch([later], through: 4, generation: 1))), except: []))
        w.comment("Keepalive: A pings at 5 s and answers B's Ping.")
        w.line(.tick(5_000_000))
        w.line(.sent(bytes(.ping(ping(1, 5_000_000))), except: []))
        w.line(.received(bytes(.pong(ping(1, 5_000_000)))))
        w.line(.received(bytes(.ping(ping(7, 4_990_001)))))
        w.line(.sent(bytes(.pong(ping(7, 4_990_001))), except: []))
        w.line(.received(bytes(ack(4))))
        w.comment("B resubscribes (generation 2) from A's sequence 3: A restarts there, leaving B's own writes out.")
        w.line(.received(bytes(subscribe([cars], resumeAfter: 3, generation: 2))))
        w.line(.page(page([later], through: 4)))
        w.line(.sent(bytes(.deltaBatch(batch([later], through: 4, generation: 2))), except: []))
        w.comment("A batch for a collection A never asked for breaks the protocol: the Error's text is the node's own.")
        w.line(.received(bytes(.deltaBatch(batch([foreign], through: 3, generation: 1)))))
        w.line(
            .sent(
                bytes(
                    .fatal(
                        .protocolViolation,
                        "DeltaBatch: transaction 000000000000000b:2 carries collection 'boats', which this node did not subscribe to")),
                except: ["message"]))
        w.line(.closed)
        return w.text
    }

    // MARK: Version 3: two machines with real stores

    /// An INSERT of `count` red cars, `PREFIX1` to `PREFIXcount`, each with a note of `noteLength` letters.
    static func insertCars(_ prefix: String, count: Int, noteLength: Int) -> String {
        let note = String(repeating: "n", count: noteLength)
        let documents = (1...count).map { i in "({'_id': '\(prefix)\(i)', 'color': 'red', 'note': '\(note)'})" }
        return "INSERT INTO cars DOCUMENTS " + documents.joined(separator: ", ")
    }

    @Sendable static func splitTransaction() async throws -> String {
        let h = try SessionHarness(
            version: 3, limitsOfA: PeerLimits(maximumFrameSize: 2048, documentSizeHardLimit: 4 << 20),
            limitsOfB: PeerLimits(maximumFrameSize: 1024, documentSizeHardLimit: 4 << 20))
        h.comment(
            """
            A version 3 sync session of node A with peer B, after the handshake, in which a transaction of
            each travels in several frames. B said in its Hello that it takes frames of at most 1024 bytes
            (limits), A that it takes 2048: each side cuts what it sends to fit the other (PROTOCOL.md 8.3,
            "Fitting the receiver"). Recorded from two reference nodes' session machines and stores.
            """)
        h.header()
        h.comment("Both subscribe to cars, from the start.")
        try h.subscribe(.a, [cars])
        try h.subscribe(.b, [cars])
        try await h.settle()
        h.comment(
            """
            A commits A:1, eight cars with a note each, in one row of its log. The page holds one piece of
            about 1.4 KB, more than B takes: A cuts it by documents into batches under 1024 bytes. Each part
            but the last is not last, has no verdicts, and carries the sequence before the page (0), so that
            B's cursor does not pass what it holds; the last part is last, carries the verdict cars
            NOT_COVERED filter 0 and through_sequence 1. B acknowledges each, Ack 0 included.
            """)
        try await h.commit(.a, insertCars("a", count: 8, noteLength: 150))
        try await h.settle()
        h.comment(
            """
            B commits B:1, six cars with longer notes, and cuts it to fit A. A hands each part to its
            pipeline and acknowledges it once durable: the parts wait in the durable buffer until the
            last one makes B:1 whole (PROTOCOL.md 8.8).
            """)
        try await h.commit(.b, insertCars("b", count: 6, noteLength: 300))
        try await h.settle()
        try await h.settleDurably(.a)
        return h.writer.text
    }

    @Sendable static func resume() async throws -> String {
        // A reads pages of about 16 deltas, so its 130-car transaction goes in two pages.
        let h = try SessionHarness(version: 3, batchSizeOfA: 16)
        h.recording = false
        try h.subscribe(.a, [cars])
        try h.subscribe(.b, [cars])
        try await h.settle()
        try await h.commit(.b, insertCars("b", count: 2, noteLength: 3))
        try await h.commit(.b, insertCars("c", count: 1, noteLength: 3))
        try await h.settle()
        try await h.settleDurably(.a)
        // B holds the first page of A:1 durably, and drops the second with the connection.
        h.b.autoDurable = false
        try await h.commit(.a, insertCars("a", count: 130, noteLength: 1))
        try await h.commit(.a, insertCars("d", count: 1, noteLength: 1))
        try await h.settle()
        h.durable(.b)
        try await h.settle()
        try await h.commit(.b, insertCars("e", count: 1, noteLength: 3))
        h.reconnect()
        h.b.autoDurable = true
        try await h.announceLog(.b)
        h.recording = true
        h.comment(
            """
            A version 3 sync session of node A with peer B that resumes an earlier one. In that session A
            received B:1 and B:2 (rows 1 and 2 of B's log) and stored cursor 2 for its set; B received the
            first page of A:1, a transaction of 130 cars in two rows of A's log (128 cars in row 1, 2 in
            row 2), and acknowledged it (through_sequence 1) before the connection dropped, losing the
            second page (A:1's last piece and A:2, row 3) before B had it durable. Since then B committed
            B:3 (row 3 of its log). Recorded from two reference nodes' session machines and stores.
            """)
        h.header()
        h.comment("A's log ends at row 3. A resumes B's log after its stored cursor, and B sends it B:3.")
        try await h.announceLog(.a)
        try h.subscribe(.a, [cars])
        try await h.settle()
        h.comment(
            """
            B resumes after A's row 1, inside A:1's run: A's first page starts inside a transaction sent
            before, so its piece of A:1 is the last, with the verdicts, though it carries only the two cars
            of row 2 (PROTOCOL.md 8.3, "last"). B gets only what follows its cursor.
            """)
        try h.subscribe(.b, [cars])
        try await h.settle()
        try await h.settleDurably(.a)
        return h.writer.text
    }

    @Sendable static func protocolViolation() async throws -> String {
        let h = try SessionHarness(version: 3)
        h.comment(
            """
            A version 3 sync session of node A with a peer B that breaks the protocol: it sends a DeltaBatch
            written for version 2, with each delta's index and timestamp_offset, which a version 3 session
            refuses (PROTOCOL.md 8.3). A sends a fatal Error and closes; the Error's text is the node's own
            (an implementation matches its code and fatal, section 11). Recorded from a reference node's
            session machine; B's batch is its store's page encoded as version 2 would.
            """)
        h.header()
        try h.subscribe(.a, [cars])
        try h.subscribe(.b, [cars])
        try await h.settle()
        _ = try await h.b.store.execute(insertCars("b", count: 2, noteLength: 3))
        let read = try await h.b.store.changes(after: 0, limit: 2048, subscriptions: set([cars]))
        let wrong = OutboundBatch(
            pieces: try h.relabel(read.pieces, receiver: set([cars])), receiver: set([cars]).filter, encoding: .absolute,
            throughSequence: read.through, subscribeGeneration: 1)
        h.comment("B's transaction B:1, two cars, with version 2 fields: the second delta has index 1.")
        h.inject(codec.encode(.deltaBatch, payload: wrong.payload()))
        try await h.settle()
        return h.writer.text
    }
}

import Foundation
import NIOCore
import ShoalCRDT
import ShoalStore
import ShoalSync
import ShoalWire
import Testing

/// `Protocol/vectors/session-sync.transcript` replayed against the session state
/// machine: frames in, frames out, with the local events between them (PROTOCOL.md
/// §15.6). SHOAL_WRITE_VECTORS=1 writes the file from the scenario below.
@Suite struct SessionTranscriptTests {
    static var file: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Protocol/vectors/session-sync.transcript")
    }

    static let codec = MessageCodec()
    static let cars = "SELECT * FROM cars"
    static let a = SiteID(0xA), b = SiteID(0xB)

    static func hex(_ message: WireMessage) -> String {
        var buffer = ByteBuffer()
        codec.encode(message).encode(into: &buffer)
        return buffer.readableBytesView.map { String(format: "%02x", $0) }.joined(separator: " ")
    }

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

    static func batch(_ pieces: [TransactionPiece], through: UInt64, generation: UInt64) -> WireMessage {
        let (wire, filters) = PieceCodec.encode(pieces, receiver: set([cars]).filter)
        var batch = Shoal_V1_DeltaBatch()
        batch.pieces = wire
        batch.filters = filters
        batch.throughSequence = through
        batch.subscribeGeneration = generation
        return .deltaBatch(batch)
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

    /// The scenario, as lines of the transcript format.
    static func scenario() -> String {
        let ownPiece = piece(a, 1, documents: ["a1", "a2"])
        let theirPiece = piece(b, 1, documents: ["b1"])
        let later = piece(a, 2, documents: ["a3"])
        let foreign = piece(b, 2, documents: ["x"], collection: "boats")
        var lines = [
            "# A sync session of node A (site 000000000000000a) with peer B (site 000000000000000b), after the handshake.",
            "# Lines: 'peer SITE', 'own QUERY' (A's subscriptions), 'cursor N' (the cursor A holds for its set,",
            "# answering its cursor read), 'log N' (A's change log now ends at N), 'tick MICROS' (A's session clock),",
            "# 'durable' (A's commit of the oldest batch it received is done), '> HEX' (a frame A receives),",
            "# '< HEX' (a frame A must send next), 'closed' (A must now close). A publisher's page is whatever",
            "# the next '<' DeltaBatch carries. See PROTOCOL.md section 15.6.",
            "peer 000000000000000b",
            "own \(cars)",
            "# A asks for cars, from the start: no cursor is stored yet.",
            "cursor 0",
            "< \(hex(subscribe([cars], resumeAfter: 0, generation: 1)))",
            "# B asks A for cars too; A's log holds transaction A:1 (2 cars) in rows 1-3.",
            "> \(hex(subscribe([cars], resumeAfter: 0, generation: 1)))",
            "log 3",
            "< \(hex(batch([ownPiece], through: 3, generation: 1)))",
            "# B streams its transaction B:1; A acknowledges it once it is durable, not before.",
            "> \(hex(batch([theirPiece], through: 2, generation: 1)))",
            "durable",
            "< \(hex(ack(2)))",
            "> \(hex(ack(3)))",
            "# A's log grows by A:2.",
            "log 4",
            "< \(hex(batch([later], through: 4, generation: 1)))",
            "# Keepalive: A pings at 5 s and answers B's Ping.",
            "tick 5000000",
            "< \(hex(.ping(ping(1, 5_000_000))))",
            "> \(hex(.pong(ping(1, 5_000_000))))",
            "> \(hex(.ping(ping(7, 4_990_001))))",
            "< \(hex(.pong(ping(7, 4_990_001))))",
            "> \(hex(ack(4)))",
            "# B resubscribes (generation 2) from A's sequence 3: A restarts there, leaving B's own writes out.",
            "> \(hex(subscribe([cars], resumeAfter: 3, generation: 2)))",
            "< \(hex(batch([later], through: 4, generation: 2)))",
            "# A batch for a collection A never asked for breaks the protocol.",
            "> \(hex(batch([foreign], through: 3, generation: 1)))",
            "< \(hex(.fatal(.protocolViolation, "DeltaBatch: transaction 000000000000000b:2 carries collection 'boats', which this node did not subscribe to")))",
            "closed",
        ]
        lines.append("")
        return lines.joined(separator: "\n")
    }

    static func frame(_ hex: Substring) throws -> WireMessage {
        let bytes = try hex.split(separator: " ").map { try #require(UInt8($0, radix: 16)) }
        var buffer = ByteBuffer(bytes: bytes)
        let frame = try #require(try FrameDecoder().next(from: &buffer))
        return try codec.decode(frame)
    }

    @Test func theTranscriptReplaysAgainstTheStateMachine() throws {
        if ProcessInfo.processInfo.environment["SHOAL_WRITE_VECTORS"] == "1" {
            try Self.scenario().write(to: Self.file, atomically: true, encoding: .utf8)
        }
        let text = try String(contentsOf: Self.file, encoding: .utf8)
        var machine: SessionStateMachine?
        var own: [String] = []
        var now: UInt64 = 0
        var outbound: [WireMessage] = []
        var pendingPage: SessionStateMachine.PageRequest?
        var pendingCursor: SubscriptionSet?
        var closed = false

        func run(_ event: SessionStateMachine.Event) {
            for action in machine!.handle(event, now: now) {
                switch action {
                case .send(let m): outbound.append(m)
                case .sendBatch(let batch): outbound.append(.deltaBatch(batch.message))
                case .readPage(let r): pendingPage = r
                case .readCursor(let s, _): pendingCursor = s
                case .close(let e):
                    if let e, !e.fromPeer { outbound.append(e.frame) }
                    closed = true
                default: break
                }
            }
        }

        for (number, line) in text.split(separator: "\n").enumerated() where !line.hasPrefix("#") {
            let word = line.prefix { $0 != " " }
            let rest = line.dropFirst(word.count + 1)
            let context = Comment(rawValue: "line \(number + 1): \(line.prefix(60))")
            switch word {
            case "peer":
                machine = SessionStateMachine(configuration: .init(peer: try #require(SiteID(hex: rest))))
            case "own":
                own.append(String(rest))
            case "cursor":
                if pendingCursor == nil { run(.ownSubscriptionsChanged(Self.set(own), fromStart: false)) }
                let set = try #require(pendingCursor, context)
                pendingCursor = nil
                run(.cursorRead(set, resumeAfter: try #require(UInt64(rest))))
            case "log":
                run(.logAdvanced(try #require(UInt64(rest))))
            case "tick":
                now = try #require(UInt64(rest))
                run(.tick)
            case "durable":
                run(.batchDurable)
            case ">":
                run(.received(try Self.frame(rest)))
            case "<":
                let expected = try Self.frame(rest)
                if outbound.isEmpty, case .deltaBatch(let batch) = expected, let request = pendingPage {
                    // The publisher's page is what this batch carries.
                    pendingPage = nil
                    let pieces = try PieceCodec.decode(
                        batch.pieces, filters: batch.filters, receiver: request.subscriptions.filter,
                        collections: request.subscriptions.collections)
                    run(.pageRead(ChangeLogPage(pieces: pieces, through: batch.throughSequence), ticket: request.ticket))
                }
                #expect(!outbound.isEmpty, context)
                if !outbound.isEmpty { #expect(outbound.removeFirst() == expected, context) }
            case "closed":
                #expect(closed, context)
            default:
                Issue.record("unknown transcript line \(number + 1): \(line)")
            }
        }
        #expect(outbound.isEmpty, "frames sent that the transcript does not list: \(outbound)")
        #expect(closed)
    }
}

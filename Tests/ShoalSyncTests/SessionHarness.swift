import Foundation
import NIOCore
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire

/// Two nodes' session machines back to back, each with a real store behind it, driven
/// one event at a time: what `PeerSession` does for a session, with the clock and the
/// order of events in the scenario's hands, so that the frames come out the same on
/// every run. It records node A's side as a transcript (PROTOCOL.md §15.6).
///
/// ```
///  scenario ─ commit ─► store A ─ page ─► machine A ─ frames ─► machine B ◄─ page ─ store B
///                                            ▲  └──────── recorded ──────┘ │
///                                            └──────────── frames ─────────┘
/// ```
///
/// Each store has a random site; the pieces its pages hold are relabeled with the
/// sites the transcript names (A = 000000000000000a, B = 000000000000000b) before a
/// machine sees them. Both clocks stand still at 1 700 000 000 000 ms, so timestamps
/// count up from it.
final class SessionHarness {
    enum Who { case a, b }

    struct Side {
        var machine: SessionStateMachine
        let store: DocumentStore
        let label: SiteID
        let configuration: SessionStateMachine.Configuration
        var own = SubscriptionSet()
        /// Cursors on the peer's log by subscription-set key, as the pipeline records
        /// them once a batch is durable: they outlive a session.
        var cursors: [String: UInt64] = [:]
        var pendingCursor: SubscriptionSet?
        var pendingPage: SessionStateMachine.PageRequest?
        /// Batches submitted and not yet durable, oldest first.
        var submitted: [SessionStateMachine.InboundBatch] = []
        /// Frames on their way to this side.
        var inbox: [[UInt8]] = []
        var closed = false
        /// Whether batches it receives are made durable at once (B), or only when the
        /// scenario says (A, for the transcript's `durable` lines).
        var autoDurable: Bool
    }

    static let wallClock: UInt64 = 1_700_000_000_000
    let codec = MessageCodec()
    let version: UInt32
    var a: Side
    var b: Side
    let directories: [TemporaryDirectory]
    var now: UInt64 = 0
    /// Whether A's side is written to the transcript (a session before the recorded one is not).
    var recording = true
    var writer = Transcript.Writer()

    init(
        version: UInt32, limitsOfA: PeerLimits = .unknown, limitsOfB: PeerLimits = .unknown, batchSizeOfA: Int = 2048
    ) throws {
        self.version = version
        directories = [TemporaryDirectory(prefix: "shoal-transcript-a"), TemporaryDirectory(prefix: "shoal-transcript-b")]
        let clock: @Sendable () -> UInt64 = { SessionHarness.wallClock }
        let (labelA, labelB) = (SiteID(0xA), SiteID(0xB))
        let configA = SessionStateMachine.Configuration(peer: labelB, batchSize: batchSizeOfA, version: version, peerLimits: limitsOfB)
        let configB = SessionStateMachine.Configuration(peer: labelA, version: version, peerLimits: limitsOfA)
        a = Side(
            machine: SessionStateMachine(configuration: configA),
            store: try DocumentStore(directory: directories[0].path, wallClock: clock), label: labelA, configuration: configA,
            autoDurable: false)
        b = Side(
            machine: SessionStateMachine(configuration: configB),
            store: try DocumentStore(directory: directories[1].path, wallClock: clock), label: labelB, configuration: configB,
            autoDurable: true)
    }

    deinit {
        a.store.close()
        b.store.close()
        for directory in directories { directory.remove() }
    }

    var labels: [UInt64: UInt64] {
        [a.store.siteID.rawValue: a.label.rawValue, b.store.siteID.rawValue: b.label.rawValue]
    }

    func write(_ line: Transcript.Line) { if recording { writer.line(line) } }
    func comment(_ text: String) { if recording { writer.comment(text) } }

    /// The transcript's first lines: A's and B's sites and what B said it can take.
    func header() {
        write(.version(version))
        write(.site(a.label))
        write(.peer(b.label))
        let limits = a.configuration.peerLimits
        if limits.areKnown { write(.limits(frame: limits.maximumFrameSize, document: limits.documentSizeHardLimit)) }
    }

    subscript(who: Who) -> Side {
        get { who == .a ? a : b }
        set { if who == .a { a = newValue } else { b = newValue } }
    }

    /// The side's own subscriptions: the machine asks for its cursor, which `settle` reads.
    func subscribe(_ who: Who, _ queries: [String]) throws {
        var set = SubscriptionSet()
        for query in queries { try set.add(query: query) }
        self[who].own = set
        if who == .a { for entry in set.entries { write(.own(entry.query)) } }
        handle(who, .ownSubscriptionsChanged(set, fromStart: false))
    }

    /// Runs statements on the side's store and tells its machine where the log ends now.
    func commit(_ who: Who, _ statements: String) async throws {
        _ = try await self[who].store.execute(statements)
        try await announceLog(who)
    }

    func announceLog(_ who: Who) async throws {
        let end = try await self[who].store.lastSequence()
        if who == .a { write(.log(end)) }
        handle(who, .logAdvanced(end))
    }

    func tick(_ who: Who, to micros: UInt64) {
        now = micros
        if who == .a { write(.tick(micros)) }
        handle(who, .tick)
    }

    /// The oldest batch A received is durable: its cursor recorded, then its Ack.
    func durable(_ who: Who) {
        guard !self[who].submitted.isEmpty else { return }
        let batch = self[who].submitted.removeFirst()
        if let key = batch.cursorKey { self[who].cursors[key] = max(self[who].cursors[key] ?? 0, batch.through) }
        if who == .a { write(.durable) }
        handle(who, .batchDurable())
    }

    /// Makes each batch the side received durable, oldest first, settling after each.
    func settleDurably(_ who: Who) async throws {
        while !self[who].submitted.isEmpty {
            durable(who)
            try await settle()
        }
    }

    /// A frame arrives at A from B, as written here rather than by B's machine.
    func inject(_ frame: Frame) {
        var buffer = ByteBuffer()
        frame.encode(into: &buffer)
        a.inbox.append(Array(buffer.readableBytesView))
        deliver(to: .a)
    }

    /// The connection drops: frames on the way and batches not yet durable are lost,
    /// cursors stay. Then both sides start a new session, each with its subscriptions.
    func reconnect() {
        for who in [Who.a, .b] {
            self[who].machine = SessionStateMachine(configuration: self[who].configuration)
            self[who].inbox = []
            self[who].submitted = []
            self[who].pendingCursor = nil
            self[who].pendingPage = nil
            self[who].closed = false
        }
        now = 0
    }

    /// Answers reads and carries frames until nothing more happens.
    func settle() async throws {
        var progressed = true
        while progressed {
            progressed = false
            for who in [Who.a, .b] where !self[who].closed {
                if let set = self[who].pendingCursor {
                    self[who].pendingCursor = nil
                    let cursor = self[who].cursors[set.key] ?? 0
                    if who == .a { write(.cursor(cursor)) }
                    handle(who, .cursorRead(set, resumeAfter: cursor))
                    progressed = true
                }
                if let request = self[who].pendingPage {
                    self[who].pendingPage = nil
                    let page = try await self.page(who, request)
                    if who == .a {
                        let payload = OutboundBatch(
                            pieces: page.pieces, receiver: request.subscriptions.filter, encoding: self[who].configuration.deltaEncoding,
                            throughSequence: page.through, subscribeGeneration: 0
                        ).payload()
                        write(.page(payload))
                    }
                    handle(who, .pageRead(page, ticket: request.ticket))
                    progressed = true
                }
            }
            if !b.inbox.isEmpty {
                deliver(to: .b)
                progressed = true
            }
            if !a.inbox.isEmpty {
                deliver(to: .a)
                progressed = true
            }
        }
    }

    /// The page a request asks for, read from the side's store, its sites relabeled.
    func page(_ who: Who, _ request: SessionStateMachine.PageRequest) async throws -> ChangeLogPage {
        let read = try await self[who].store.changes(
            after: request.after, limit: request.limit, byteLimit: request.byteLimit, subscriptions: request.subscriptions,
            continuing: request.continuing, resuming: request.resuming)
        return ChangeLogPage(pieces: try relabel(read.pieces, receiver: request.subscriptions), through: read.through)
    }

    /// `pieces` with every store's site replaced by the transcript's name for it.
    func relabel(_ pieces: [TransactionPiece], receiver: SubscriptionSet) throws -> [TransactionPiece] {
        let labels = self.labels
        func label(_ site: UInt64) -> UInt64 { labels[site] ?? site }
        var (wire, filters) = PieceCodec.encode(pieces, receiver: receiver.filter)
        for i in wire.indices {
            wire[i].originSite = label(wire[i].originSite)
            for j in wire[i].context.indices {
                for k in wire[i].context[j].fields.indices {
                    wire[i].context[j].fields[k].originSite = label(wire[i].context[j].fields[k].originSite)
                }
            }
            for j in wire[i].verdicts.indices {
                for k in wire[i].verdicts[j].supersededBy.indices {
                    wire[i].verdicts[j].supersededBy[k].originSite = label(wire[i].verdicts[j].supersededBy[k].originSite)
                }
            }
        }
        return try PieceCodec.decode(wire, filters: filters, receiver: receiver.filter, collections: receiver.collections)
    }

    /// Hands the next frame of the side's inbox to its machine.
    func deliver(to who: Who) {
        let bytes = self[who].inbox.removeFirst()
        guard !self[who].closed else { return }
        if who == .a { write(.received(bytes)) }
        var buffer = ByteBuffer(bytes: bytes)
        do {
            let frame = try FrameDecoder().next(from: &buffer)!
            let (type, payload) = try codec.payload(frame)
            if type == .deltaBatch {
                handle(who, .receivedDeltaBatch(Array(payload.readableBytesView)))
            } else {
                handle(who, SessionStateMachine.Event(received: try codec.decode(type, payload)))
            }
        } catch {
            handle(who, SessionStateMachine.Event(received: .fatal(.malformedFrame, "\(error)")))
        }
    }

    /// Feeds one event to a side's machine and carries out what it asks for.
    func handle(_ who: Who, _ event: SessionStateMachine.Event) {
        let actions = self[who].machine.handle(event, now: now)
        let other: Who = who == .a ? .b : .a
        for action in actions {
            switch action {
            case .send(let message):
                send(who, to: other, codec.encode(message.wire), except: Self.variable(message.wire))
            case .sendBatch(let batch):
                send(who, to: other, codec.encode(.deltaBatch, payload: batch.payload()), except: [])
            case .readCursor(let set, _):
                self[who].pendingCursor = set
            case .readPage(let request):
                self[who].pendingPage = request
            case .submit(let batch):
                self[who].submitted.append(batch)
                if self[who].autoDurable { durable(who) }
            case .close(let error):
                if let error, !error.fromPeer {
                    send(who, to: other, codec.encode(error.frame), except: Self.variable(error.frame))
                }
                self[who].closed = true
                if who == .a { write(.closed) }
            default:
                break
            }
        }
    }

    /// What another implementation need not reproduce of a frame: an Error's text.
    static func variable(_ message: WireMessage) -> [String] {
        if case .error = message { return ["message"] }
        return []
    }

    func send(_ who: Who, to other: Who, _ frame: Frame, except: [String]) {
        var buffer = ByteBuffer()
        frame.encode(into: &buffer)
        let bytes = Array(buffer.readableBytesView)
        if who == .a { write(.sent(bytes, except: except)) }
        if !self[other].closed { self[other].inbox.append(bytes) }
    }
}

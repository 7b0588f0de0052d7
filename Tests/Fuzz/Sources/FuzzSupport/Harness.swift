import Foundation
import NIOCore
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStorage
import ShoalStore
import ShoalSync
import ShoalQuery
import ShoalWire

/// What each fuzz target does with one input. A function returns normally for any
/// input a node must survive; it traps (`precondition`) only when an invariant that
/// holds for every input is broken, so libFuzzer reports that input as a crash.
public enum Harness {
    /// Small limits, so the fuzzer reaches their edges.
    static let limits = WireLimits(maximumFrameSize: 1 << 16, maximumInflatedSize: 1 << 16)

    /// Bytes off the socket: frames decoded one after another, as the NIO handler
    /// does, then the end of the stream.
    public static func frameDecoder(_ data: [UInt8]) {
        let decoder = FrameDecoder(maximumFrameSize: limits.maximumFrameSize)
        var buffer = ByteBuffer(bytes: data)
        do {
            while let frame = try decoder.next(from: &buffer) {
                precondition(frame.payload.readableBytes <= limits.maximumFrameSize, "a frame over the limit was accepted")
            }
            try decoder.finish(leftover: buffer)
        } catch {
            // Refused with a WireError: what a node sends back as the Error frame.
        }
    }

    /// One frame after the handshake: the first byte is its type, the second its
    /// flags (bit 0) and the session's version (bit 1: 3, else 2), the rest its payload. A message that decodes is handed to a sync
    /// session's state machine (subscribed to cars and boats, mid-session), which
    /// checks it as a peer's frame (PieceCodec and all).
    public static func messages(_ data: [UInt8]) {
        guard data.count >= 2 else { return }
        let frame = Frame(type: data[0], flags: Frame.Flags(rawValue: data[1] & 0x01), payload: ByteBuffer(bytes: data[2...]))
        guard let message = try? MessageCodec(limits: limits).decode(frame) else { return }
        // The flags byte's bit 1 picks the session's version: 2 (absolute deltas) or 3 (stepped).
        var machine = SessionStateMachine(
            configuration: .init(
                peer: SiteID(0xB), version: data[1] & 0x02 == 0 ? 2 : 3))
        var own = SubscriptionSet()
        _ = try? own.add(query: "SELECT * FROM cars")
        _ = try? own.add(query: "SELECT * FROM boats WHERE size > 2")
        _ = machine.handle(.cursorRead(own, resumeAfter: 0), now: 0)
        _ = machine.handle(.logAdvanced(10), now: 1)
        for action in machine.handle(SessionStateMachine.Event(received: message), now: 2) {
            if case .submit(let batch) = action {
                for piece in batch.pieces {
                    precondition(piece.id.origin.rawValue != 0, "a piece of origin 0 got through")
                    precondition(piece.deltas.allSatisfy { $0.index < piece.deltaCount }, "a delta index past the count got through")
                }
            }
        }
    }

    /// A compressed DeltaBatch payload: inflated with the cap, never past it.
    public static func inflate(_ data: [UInt8]) {
        let frame = Frame(type: .deltaBatch, flags: .compressed, payload: ByteBuffer(bytes: data))
        do {
            _ = try MessageCodec(limits: limits).decode(frame)
        } catch {
            // Refused: corrupt, too large once inflated, or not a DeltaBatch.
        }
    }

    /// Any bytes as JSON: what parses re-encodes canonically, and the canonical form
    /// is a fixed point.
    public static func json(_ data: [UInt8]) {
        guard let value = try? JSON.parse(bytes: data) else { return }
        let canonical = value.canonicalJSON
        guard let again = try? JSON.parse(canonical) else {
            preconditionFailure("canonical JSON does not parse back: \(canonical)")
        }
        precondition(again.canonicalJSON == canonical, "canonical JSON is not a fixed point: \(canonical)")
    }

    /// Any text as DQL: parsed, and a statement that parses describes itself. A
    /// single SELECT is also evaluated against a small document.
    public static func dql(_ data: [UInt8]) {
        let text = String(decoding: data, as: UTF8.self)
        guard let statements = try? Parser.parseStatements(text) else { return }
        for parsed in statements {
            _ = String(describing: parsed.statement)
            if case .select(let select) = parsed.statement {
                _ = try? Evaluator.matches(select.whereClause, document: ["_id": "a", "n": 1, "tags": ["x"], "o": ["k": 2.5]], arguments: ["p": 1])
            }
        }
    }

    /// Any text as a permissions file (docs/PERMISSIONS.md) and as a config file: both
    /// read by Shoal's TOML reader, refused with a message or read; rules read hold: a
    /// name without wildcards matches itself, and a subscription set cut down for any
    /// name asks only for collections its rights let it read, each subscription whole
    /// or restricted by the rule's condition.
    public static func permissions(_ data: [UInt8]) {
        let text = String(decoding: data, as: UTF8.self)
        do {
            _ = try NodeSettings.parse(text, file: "/fuzz/shoal.toml")
        } catch {
            precondition(error.message.hasPrefix("/fuzz/shoal.toml"), "a config error that does not name its file: \(error.message)")
        }
        guard let rules = try? AccessRulesFile.parse(text, file: "fuzz.toml") else { return }
        var asked = SubscriptionSet()
        for query in ["SELECT * FROM menu", "SELECT * FROM orders WHERE total > 5 -- note", "SELECT * FROM `odd``name`", "SELECT * FROM staff"] {
            _ = try? asked.add(query: query)
        }
        for rule in rules.rules {
            if !rule.pattern.contains("*"), !rule.pattern.contains("?") {
                precondition(AccessRules.matches(rule.pattern, rule.pattern), "a name does not match itself: \(rule.pattern)")
            }
            let rights = rules.rights(of: rule.pattern)
            let cut = rights.cut(asked)
            if case .collections(let readable) = rights.read {
                precondition(cut.collections.isSubset(of: Set(readable.keys)), "a cut set asks for what the rule does not let it read")
            }
            _ = rights.forbiddenWrites(["menu", "orders", "staff"])
        }
    }

    /// A DeltaBatch payload (its first byte picks the session's version: even 2,
    /// odd 3), read straight into pieces (`DeltaBatchReader`) and, beside it, decoded
    /// by SwiftProtobuf and checked from the messages. The reader refuses what
    /// SwiftProtobuf refuses, and what both read is the same batch.
    public static func batchReader(_ data: [UInt8]) {
        guard let first = data.first else { return }
        let payload = Array(data.dropFirst())
        let encoding: PieceCodec.DeltaEncoding = first & 1 == 0 ? .absolute : .stepped
        var own = SubscriptionSet()
        _ = try? own.add(query: "SELECT * FROM cars")
        _ = try? own.add(query: "SELECT * FROM boats WHERE size > 2")
        let direct: (UInt64, UInt64, Bool, [TransactionPiece])?
        do {
            let batch = try DeltaBatchReader(payload: payload)
            let pieces = try batch.pieces(receiver: own.filter, collections: own.collections, encoding: encoding)
            direct = (batch.header.throughSequence, batch.header.subscribeGeneration, batch.header.hasVersion1Transactions, pieces)
        } catch {
            direct = nil
        }
        guard let message = try? Shoal_V1_DeltaBatch(serializedBytes: payload) else {
            precondition(direct == nil, "the reader accepted a payload SwiftProtobuf refuses")
            return
        }
        let checked = try? PieceCodec.decode(
            message.pieces, filters: message.filters, receiver: own.filter, collections: own.collections, encoding: encoding)
        guard let checked else {
            precondition(direct == nil, "the reader accepted a batch that breaks a rule")
            return
        }
        guard let direct else { preconditionFailure("the reader refused a batch SwiftProtobuf's messages pass") }
        precondition(
            direct.0 == message.throughSequence && direct.1 == message.subscribeGeneration
                && direct.2 == !message.transactions.isEmpty,
            "the reader read other numbers than SwiftProtobuf")
        precondition(direct.3 == checked, "the reader read other pieces than SwiftProtobuf's messages give")
    }

    /// A sequence of pieces, from the protobuf form of a DeltaBatch: each decoded and
    /// checked as a peer's (PieceCodec), then handed to a coverage assembler from one
    /// of three peers, deciding after each as the inbound pipeline does. Whatever
    /// arrives, every decision names a transaction the assembler holds (a refusal one
    /// it has just let go of), none is applied twice or after it was refused, and once
    /// the coverage wait has passed nothing is left waiting.
    public static func coverage(_ data: [UInt8]) {
        guard let batch = try? Shoal_V1_DeltaBatch(serializedBytes: data) else { return }
        var own = SubscriptionSet()
        _ = try? own.add(query: "SELECT * FROM cars")
        _ = try? own.add(query: "SELECT * FROM boats WHERE size > 2")
        var assembler = CoverageAssembler(
            configuration: .init(maximumWait: .seconds(30), maximumTransactions: 8, maximumBytes: 1 << 14))
        var applied: Set<TransactionID> = []
        var now: UInt64 = 1_000
        func decide(at time: UInt64) {
            for decision in assembler.decide(subscriptions: own, now: time, isApplied: { applied.contains($0) }) {
                switch decision {
                case .apply(let ids):
                    for id in ids {
                        precondition(assembler.records[id] != nil, "applying \(id), which the assembler does not hold")
                        precondition(applied.insert(id).inserted, "\(id) applied twice")
                        assembler.remove(id)
                    }
                case .applyPartially(let id, _):
                    precondition(assembler.records[id] != nil, "applying \(id) in part, which the assembler does not hold")
                    assembler.releaseBuffer(id)
                case .completed(let id):
                    precondition(assembler.records[id] != nil, "completing \(id), which the assembler does not hold")
                    precondition(applied.insert(id).inserted, "\(id) completed after it was applied")
                    assembler.remove(id)
                case .ask(let id, _):
                    assembler.noteAsked(id, peers: [SiteID(0xC)])
                case .refuse(let record, _):
                    // The assembler lets go of what it refuses as it decides (the decision carries the record).
                    precondition(assembler.records[record.id] == nil, "refused \(record.id), which the assembler still holds")
                    precondition(!applied.contains(record.id), "\(record.id) refused after it was applied")
                }
            }
        }
        for (i, wire) in batch.pieces.enumerated() {
            let filters = batch.filters
            // Version 2 and 3 sessions read a delta's index and timestamp differently (PROTOCOL.md §8.3).
            let encoding: PieceCodec.DeltaEncoding = batch.throughSequence % 2 == 0 ? .absolute : .stepped
            guard
                let pieces = try? PieceCodec.decode(
                    [wire], filters: filters, receiver: own.filter, collections: own.collections, encoding: encoding)
            else { continue }
            for piece in pieces where !applied.contains(piece.id) {
                _ = assembler.add(piece, from: SiteID(UInt64(0xA + i % 3)), now: now)
                decide(at: now)
            }
            now += 500
        }
        decide(at: now + 31_000)
        decide(at: now + 62_000)
        precondition(assembler.waitingCount == 0, "\(assembler.waitingCount) transaction(s) still wait after the coverage wait")
    }
}

import Foundation
import ShoalTesting
import SwiftProtobuf
import Testing

@testable import ShoalWire

/// The batch encoder against SwiftProtobuf's own: random batches, with every field set
/// or left at its default, values at the edges of their encodings, rare messages and
/// unknown fields; the bytes must be the same. `SHOAL_ENCODER_SEED` replays a run.
@Suite struct DeltaBatchEncoderTests {
    /// A field SwiftProtobuf keeps as unknown (number 15, a varint), on a message decoded with it.
    static func withUnknown<M: Message>(_ message: M, _ rng: inout SplitMix) -> M {
        guard rng.next() % 5 == 0 else { return message }
        var copy = message
        try? copy.merge(serializedBytes: [0x78, UInt8(rng.next() % 128)])
        return copy
    }

    static func number(_ rng: inout SplitMix) -> UInt64 {
        switch rng.next() % 5 {
        case 0: return 0
        case 1: return rng.next() % 128
        case 2: return rng.next() % 20_000
        case 3: return UInt64.max - rng.next() % 3
        default: return rng.next() >> (rng.next() % 64)
        }
    }

    static func text(_ rng: inout SplitMix) -> String {
        ["", "a", "cars", "\"d\(rng.next() % 1000)\"", "é\u{1F600}", String(repeating: "x", count: 130)][Int(rng.next() % 6)]
    }

    static func fieldDelta(_ rng: inout SplitMix) -> Shoal_V1_FieldDelta {
        var f = Shoal_V1_FieldDelta()
        f.field = text(&rng)
        f.valueJson = Data(text(&rng).utf8)
        f.timestampOffset = Int64(bitPattern: number(&rng))
        f.index = UInt32(truncatingIfNeeded: number(&rng))
        f.indexStep = Int32(truncatingIfNeeded: Int64(bitPattern: number(&rng)))
        f.timestampStep = Int64(bitPattern: number(&rng))
        return withUnknown(f, &rng)
    }

    static func piece(_ rng: inout SplitMix) -> Shoal_V1_TransactionPiece {
        var p = Shoal_V1_TransactionPiece()
        p.originSite = number(&rng)
        p.originSequence = number(&rng)
        p.deltaCount = UInt32(truncatingIfNeeded: number(&rng))
        p.documentCount = UInt32(truncatingIfNeeded: number(&rng))
        p.collections = (0..<rng.next() % 3).map { _ in
            var c = Shoal_V1_CollectionCount()
            c.collection = text(&rng)
            c.documents = UInt32(truncatingIfNeeded: number(&rng))
            c.deltas = UInt32(truncatingIfNeeded: number(&rng))
            return withUnknown(c, &rng)
        }
        p.documents = (0..<rng.next() % 4).map { _ in
            var d = Shoal_V1_DocumentDeltas()
            d.collection = text(&rng)
            d.documentID = text(&rng)
            d.deltaCount = UInt32(truncatingIfNeeded: number(&rng))
            d.deltas = (0..<rng.next() % 5).map { _ in fieldDelta(&rng) }
            return withUnknown(d, &rng)
        }
        p.verdicts = (0..<rng.next() % 3).map { _ in
            var v = Shoal_V1_Verdict()
            v.collection = text(&rng)
            v.coverage = [.unspecified, .notCovered, .superseded, .unknown][Int(rng.next() % 4)]
            v.filter = UInt32(truncatingIfNeeded: number(&rng))
            if v.coverage == .superseded {
                var r = Shoal_V1_TransactionRef()
                r.originSite = number(&rng)
                r.originSequence = number(&rng)
                v.supersededBy = [r]
            }
            return v
        }
        p.last = rng.next() % 2 == 0
        p.baseTimestamp = number(&rng)
        p.context = (0..<rng.next() % 2).map { _ in
            var c = Shoal_V1_ContextDocument()
            c.collection = text(&rng)
            c.documentID = text(&rng)
            return c
        }
        return withUnknown(p, &rng)
    }

    static func batch(_ rng: inout SplitMix) -> Shoal_V1_DeltaBatch {
        var b = Shoal_V1_DeltaBatch()
        b.throughSequence = number(&rng)
        b.subscribeGeneration = number(&rng)
        b.pieces = (0..<rng.next() % 4).map { _ in piece(&rng) }
        if rng.next() % 4 == 0 {
            var t = Shoal_V1_TransactionDeltas()
            t.originSite = number(&rng)
            t.deltaCount = UInt32(truncatingIfNeeded: number(&rng))
            b.transactions = [t]
        }
        if rng.next() % 4 == 0 {
            var q = Shoal_V1_Subscription()
            q.query = text(&rng)
            var f = Shoal_V1_SubscriptionFilter()
            f.subscriptions = [q]
            b.filters = [f]
        }
        return withUnknown(b, &rng)
    }

    @Test func randomBatchesEncodeAsSwiftProtobufEncodesThem() throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["SHOAL_ENCODER_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        var rng = SplitMix(state: seed)
        var mismatches = 0
        for n in 0..<2_000 where mismatches == 0 {
            let batch = Self.batch(&rng)
            let expected: [UInt8] = try batch.serializedBytes()
            if try DeltaBatchEncoder.encode(batch) != expected {
                mismatches += 1
                Issue.record("case \(n) (seed \(seed)) encodes differently: \(batch)")
            }
        }
        #expect(mismatches == 0, "seed \(seed)")
    }

    @Test func anEmptyBatchIsNoBytes() throws {
        #expect(try DeltaBatchEncoder.encode(Shoal_V1_DeltaBatch()).isEmpty)
    }
}

import Foundation
import NIOCore
import CompressNIO
import ShoalWire
import Testing

@Suite struct MessageCodecTests {
    let codec = MessageCodec()

    /// A version 2 DeltaBatch: one transaction setting "color" to "blue" on `deltas` cars.
    static func batch(deltas: Int) -> Shoal_V1_DeltaBatch {
        var batch = Shoal_V1_DeltaBatch()
        var t = Shoal_V1_TransactionPiece()
        t.originSite = 0x1122_3344_5566_7788
        t.originSequence = 9
        t.deltaCount = UInt32(deltas)
        t.documentCount = UInt32(deltas)
        var count = Shoal_V1_CollectionCount()
        count.collection = "cars"
        count.documents = UInt32(deltas)
        count.deltas = UInt32(deltas)
        t.collections = [count]
        t.baseTimestamp = UInt64(1_700_000_000_000) << 16
        for i in 0..<deltas {
            var d = Shoal_V1_DocumentDeltas()
            d.collection = "cars"
            d.documentID = "\"car-\(i)\""
            d.deltaCount = 1
            var f = Shoal_V1_FieldDelta()
            f.field = "color"
            f.valueJson = Data("\"blue\"".utf8)
            f.timestampOffset = Int64(i)
            f.index = UInt32(i)
            d.deltas = [f]
            t.documents.append(d)
        }
        t.last = true
        batch.pieces = [t]
        batch.throughSequence = UInt64(deltas)
        batch.subscribeGeneration = 1
        return batch
    }

    @Test func smallPayloadsTravelUncompressed() throws {
        var ack = Shoal_V1_Ack()
        ack.throughSequence = 77
        let frame = codec.encode(.ack(ack))
        #expect(frame.flags == [])
        #expect(frame.type == MessageType.ack.rawValue)
        #expect(try codec.decode(frame) == .ack(ack))
    }

    /// A payload serialized already, that deflate cannot shrink, travels as it is and
    /// whole, though compressing it was tried.
    @Test func anIncompressiblePayloadTravelsUncompressedAndWhole() {
        var random = SystemRandomNumberGenerator()
        let bytes = (0..<4096).map { _ in UInt8.random(in: 0...255, using: &random) }
        let frame = codec.encode(.deltaBatch, payload: bytes)
        #expect(frame.flags == [])
        #expect(frame.type == MessageType.deltaBatch.rawValue)
        #expect(Array(frame.payload.readableBytesView) == bytes)
    }

    @Test func largePayloadsAreCompressedAndRoundTrip() throws {
        let message = WireMessage.deltaBatch(Self.batch(deltas: 200))
        let frame = codec.encode(message)
        #expect(frame.flags.contains(.compressed))
        let plain = MessageCodec(limits: WireLimits(compressionThreshold: .max)).encode(message)
        #expect(plain.flags == [])
        #expect(frame.payload.readableBytes < plain.payload.readableBytes / 4)
        #expect(try codec.decode(frame) == message)
    }

    /// A small compressed frame that inflates past the cap is refused, not allocated.
    @Test func capsTheInflatedSize() throws {
        var zeros = ByteBuffer(repeating: 0, count: 4 << 20)
        let bomb = try zeros.compress(with: .zlib())
        #expect(bomb.readableBytes < 8 * 1024)
        let small = MessageCodec(limits: WireLimits(maximumInflatedSize: 1 << 20))
        let frame = Frame(type: .deltaBatch, flags: .compressed, payload: bomb)
        #expect(throws: WireError(.decompressionFailed, "DeltaBatch frame inflates beyond the limit of 1048576 bytes")) {
            try small.decode(frame)
        }
    }

    @Test func rejectsCorruptCompressedPayloads() {
        let frame = Frame(type: .deltaBatch, flags: .compressed, payload: ByteBuffer(bytes: [0x78, 0x9C, 0xFF, 0xFF, 0x00, 0x13]))
        #expect {
            try codec.decode(frame)
        } throws: { error in
            (error as? WireError)?.code == .decompressionFailed
        }
    }

    @Test func rejectsUnknownTypesAndMalformedPayloads() {
        #expect(throws: WireError(.unknownMessageType, "unknown message type 0x7f")) {
            try codec.decode(Frame(type: 0x7F, payload: ByteBuffer()))
        }
        // Field 1 as a varint that never ends.
        let garbage = Frame(type: .hello, payload: ByteBuffer(bytes: [0x08, 0xFF, 0xFF]))
        #expect {
            try codec.decode(garbage)
        } throws: { error in
            (error as? WireError)?.code == .malformedPayload
        }
    }
}

import Foundation
import NIOCore
import ShoalWire
import Testing

/// The wire limits at their edge: a frame and an inflated payload of exactly the
/// limit pass, one byte more is refused.
@Suite struct WireLimitTests {
    @Test func aFrameOfExactlyTheLimitIsDecodedAndOneByteMoreIsRefused() throws {
        let limit = 4096
        let decoder = FrameDecoder(maximumFrameSize: limit)
        var atLimit = ByteBuffer(bytes: [0x53, 0x04, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00] + [UInt8](repeating: 0, count: limit))
        #expect(try decoder.next(from: &atLimit)?.payload.readableBytes == limit)
        var over = ByteBuffer(bytes: [0x53, 0x04, 0x00, 0x00, 0x00, 0x00, 0x10, 0x01])
        #expect(throws: WireError(.frameTooLarge, "frame type 0x04 announces 4097 payload bytes; the limit is 4096")) {
            try decoder.next(from: &over)
        }
    }

    @Test func aPayloadInflatingToExactlyTheCapIsDecodedAndOneByteMoreIsRefused() throws {
        let message = WireMessage.deltaBatch(MessageCodecTests.batch(deltas: 200))
        let frame = MessageCodec().encode(message)
        #expect(frame.flags.contains(.compressed))
        let inflated = MessageCodec(limits: WireLimits(compressionThreshold: .max)).encode(message).payload.readableBytes
        let exact = MessageCodec(limits: WireLimits(maximumInflatedSize: inflated))
        #expect(try exact.decode(frame) == message)
        let short = MessageCodec(limits: WireLimits(maximumInflatedSize: inflated - 1))
        #expect(throws: WireError(.decompressionFailed, "DeltaBatch frame inflates beyond the limit of \(inflated - 1) bytes")) {
            try short.decode(frame)
        }
    }

    /// A connection's first two frames (the handshake's Hello and Proof) are held to
    /// the handshake's limit; every later one to the full limit, at once.
    @Test func aConnectionTakesLargeFramesOnlyAfterItsHandshakeFrames() throws {
        var decoder = FrameByteDecoder(limit: FrameSizeLimit(handshake: 1024, full: 4096))
        func frame(_ length: Int, whole: Bool = true) -> ByteBuffer {
            var buffer = ByteBuffer(bytes: [0x53, 0x04, 0x00, 0x00] + withUnsafeBytes(of: UInt32(length).bigEndian) { Array($0) })
            if whole { buffer.writeBytes([UInt8](repeating: 0, count: length)) }
            return buffer
        }
        var hello = frame(1024)
        #expect(try decoder.decode(buffer: &hello)?.payload.readableBytes == 1024)
        var over = frame(1025, whole: false)
        #expect(throws: WireError(.frameTooLarge, "frame type 0x04 announces 1025 payload bytes; the limit is 1024 during the handshake")) {
            try decoder.decode(buffer: &over)
        }
        var proof = frame(10)
        #expect(try decoder.decode(buffer: &proof)?.payload.readableBytes == 10)
        // The third frame: a request the client sent once it had the node's Proof.
        var request = frame(4096)
        #expect(try decoder.decode(buffer: &request)?.payload.readableBytes == 4096)
        var overFull = frame(4097, whole: false)
        #expect(throws: WireError(.frameTooLarge, "frame type 0x04 announces 4097 payload bytes; the limit is 4096")) {
            try decoder.decode(buffer: &overFull)
        }
        // A node whose own limit is below the handshake's keeps its own.
        #expect(WireLimits(maximumFrameSize: 2048).connectionLimit().limit(afterFrames: 0) == 2048)
        #expect(WireLimits.default.connectionLimit().limit(afterFrames: 0) == WireLimits.maximumHandshakeFrameSize)
    }
}

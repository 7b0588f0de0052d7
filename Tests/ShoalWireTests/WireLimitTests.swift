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

    /// Before the handshake a connection's frames are held to the handshake's limit;
    /// once it is established, to the full one.
    @Test func aConnectionTakesLargeFramesOnlyAfterItsHandshake() throws {
        let limit = FrameSizeLimit(handshake: 1024, full: 4096)
        var decoder = FrameByteDecoder(limit: limit)
        func header(_ length: Int) -> ByteBuffer {
            ByteBuffer(bytes: [0x53, 0x04, 0x00, 0x00] + withUnsafeBytes(of: UInt32(length).bigEndian) { Array($0) })
        }
        var atHandshakeLimit = header(1024)
        atHandshakeLimit.writeBytes([UInt8](repeating: 0, count: 1024))
        #expect(try decoder.decode(buffer: &atHandshakeLimit)?.payload.readableBytes == 1024)
        var over = header(1025)
        #expect(throws: WireError(.frameTooLarge, "frame type 0x04 announces 1025 payload bytes; the limit is 1024 until the handshake completes")) {
            try decoder.decode(buffer: &over)
        }
        limit.establish()
        var large = header(4096)
        large.writeBytes([UInt8](repeating: 0, count: 4096))
        #expect(try decoder.decode(buffer: &large)?.payload.readableBytes == 4096)
        var overFull = header(4097)
        #expect(throws: WireError(.frameTooLarge, "frame type 0x04 announces 4097 payload bytes; the limit is 4096")) {
            try decoder.decode(buffer: &overFull)
        }
        // A node whose own limit is below the handshake's keeps its own.
        #expect(WireLimits(maximumFrameSize: 2048).connectionLimit().current == 2048)
        #expect(WireLimits.default.connectionLimit().current == WireLimits.maximumHandshakeFrameSize)
    }
}

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
}

import NIOCore
import ShoalWire
import Testing

@Suite struct FrameDecoderTests {
    let decoder = FrameDecoder(maximumFrameSize: 1 << 20)

    func bytes(_ b: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: b) }

    @Test func roundTripsFramesOfEverySize() throws {
        for size in [0, 1, 7, 8, 1000, 70_000] {
            let payload = ByteBuffer(bytes: (0..<size).map { UInt8(truncatingIfNeeded: $0 * 7) })
            let frame = Frame(type: .deltaBatch, flags: size > 100 ? .compressed : [], payload: payload)
            var wire = ByteBuffer()
            frame.encode(into: &wire)
            #expect(wire.readableBytes == Frame.headerSize + size)
            let decoded = try #require(try decoder.next(from: &wire))
            #expect(decoded == frame)
            #expect(wire.readableBytes == 0)
        }
    }

    @Test func waitsForTheWholeFrameAcrossPartialReads() throws {
        var wire = ByteBuffer()
        Frame(type: .ping, payload: ByteBuffer(bytes: [1, 2, 3, 4, 5])).encode(into: &wire)
        Frame(type: .pong, payload: ByteBuffer(bytes: [9])).encode(into: &wire)
        let all = Array(wire.readableBytesView)
        var buffer = ByteBuffer()
        var frames: [Frame] = []
        for byte in all {
            buffer.writeInteger(byte)
            while let frame = try decoder.next(from: &buffer) { frames.append(frame) }
        }
        #expect(frames.map(\.type) == [MessageType.ping.rawValue, MessageType.pong.rawValue])
        #expect(frames[0].payload == ByteBuffer(bytes: [1, 2, 3, 4, 5]))
    }

    /// A header that claims 4 GiB is refused after its 8 bytes, before any allocation.
    @Test func rejectsAnOversizedClaimBeforeTheBodyArrives() throws {
        var buffer = bytes([0x53, 0x07, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF])
        #expect(throws: WireError(.frameTooLarge, "frame type 0x07 announces 4294967295 payload bytes; the limit is 1048576")) {
            try decoder.next(from: &buffer)
        }
        var justOver = bytes([0x53, 0x07, 0x00, 0x00, 0x00, 0x10, 0x00, 0x01])
        #expect(throws: WireError.self) { try decoder.next(from: &justOver) }
        var atLimit = bytes([0x53, 0x07, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00])
        #expect(try decoder.next(from: &atLimit) == nil, "at the limit it waits for the body")
    }

    @Test(arguments: [
        ([0x47, 0x45, 0x54, 0x20, 0x2F, 0x20, 0x48, 0x54] as [UInt8], "not a Shoal frame: first byte is 0x47, expected 0x53"),
        ([0x53, 0x01, 0x00, 0x01, 0, 0, 0, 0], "frame type 0x01: reserved header byte is 0x01, expected 0"),
        ([0x53, 0x01, 0x02, 0x00, 0, 0, 0, 0], "frame type 0x01: unknown flags 0x02"),
    ])
    func rejectsGarbageHeaders(header: [UInt8], message: String) {
        var buffer = bytes(header)
        #expect(throws: WireError(.malformedFrame, message)) { try decoder.next(from: &buffer) }
    }

    @Test func reportsATruncatedFrameAtEndOfStream() throws {
        var buffer = bytes([0x53, 0x01, 0x00, 0x00, 0, 0, 0, 10, 1, 2, 3])
        #expect(try decoder.next(from: &buffer) == nil)
        #expect(throws: WireError.self) { try decoder.finish(leftover: buffer) }
        #expect(throws: Never.self) { try decoder.finish(leftover: ByteBuffer()) }
    }
}

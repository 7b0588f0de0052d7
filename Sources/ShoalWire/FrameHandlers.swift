public import NIOCore

/// The NIO inbound half: bytes in, `Frame`s out, via `FrameDecoder`, each header
/// checked against the connection's `FrameSizeLimit` for its place on the connection.
public struct FrameByteDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = Frame
    var decoder: FrameDecoder
    let limit: FrameSizeLimit
    /// Frames decoded so far.
    var decoded = 0

    public init(limit: FrameSizeLimit) {
        self.limit = limit
        self.decoder = FrameDecoder(maximumFrameSize: limit.limit(afterFrames: 0))
    }

    public init(maximumFrameSize: Int) {
        self.init(limit: FrameSizeLimit(maximumFrameSize))
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> Frame? {
        decoder.maximumFrameSize = limit.limit(afterFrames: decoded)
        decoder.limitNote = decoded < FrameSizeLimit.handshakeFrames && limit.handshake < limit.full ? " during the handshake" : ""
        guard let frame = try decoder.next(from: &buffer) else { return nil }
        decoded += 1
        return frame
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> Frame? {
        if let frame = try decode(buffer: &buffer) { return frame }
        try decoder.finish(leftover: buffer)
        return nil
    }
}

/// The NIO outbound half: `Frame`s in, bytes out.
public struct FrameByteEncoder: MessageToByteEncoder {
    public typealias OutboundIn = Frame

    public init() {}

    public func encode(data: Frame, out: inout ByteBuffer) throws {
        data.encode(into: &out)
    }
}

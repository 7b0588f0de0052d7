public import NIOCore

/// The NIO inbound half: bytes in, `Frame`s out, via `FrameDecoder`, each header
/// checked against the connection's `FrameSizeLimit` as it is now.
public struct FrameByteDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = Frame
    var decoder: FrameDecoder
    let limit: FrameSizeLimit

    public init(limit: FrameSizeLimit) {
        self.limit = limit
        self.decoder = FrameDecoder(maximumFrameSize: limit.current)
    }

    public init(maximumFrameSize: Int) {
        self.init(limit: FrameSizeLimit(maximumFrameSize))
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> Frame? {
        decoder.maximumFrameSize = limit.current
        decoder.limitNote = limit.isHandshake ? " until the handshake completes" : ""
        return try decoder.next(from: &buffer)
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

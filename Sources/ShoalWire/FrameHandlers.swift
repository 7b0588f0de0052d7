public import NIOCore

/// The NIO inbound half: bytes in, `Frame`s out, via `FrameDecoder`.
public struct FrameByteDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = Frame
    let decoder: FrameDecoder

    public init(maximumFrameSize: Int) {
        self.decoder = FrameDecoder(maximumFrameSize: maximumFrameSize)
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> Frame? {
        try decoder.next(from: &buffer)
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> Frame? {
        if let frame = try decoder.next(from: &buffer) { return frame }
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

public import NIOCore

/// Cuts frames out of a byte stream, one step at a time.
///
/// The header is validated, and the announced length checked against the limit,
/// before any payload is awaited or allocated: a peer that claims a 4 GiB frame is
/// refused after 8 bytes.
public struct FrameDecoder: Sendable {
    public var maximumFrameSize: Int
    /// Said after the limit in the error, when the limit is not the node's usual one.
    public var limitNote = ""

    public init(maximumFrameSize: Int = WireLimits.default.maximumFrameSize) {
        self.maximumFrameSize = maximumFrameSize
    }

    /// The next whole frame in `buffer`, consuming it; `nil` when more bytes are needed.
    public func next(from buffer: inout ByteBuffer) throws(WireError) -> Frame? {
        if let tls = Self.tlsRecord(buffer) { throw tls }
        guard buffer.readableBytes >= Frame.headerSize else { return nil }
        let start = buffer.readerIndex
        let magic = buffer.getInteger(at: start, as: UInt8.self)!
        let type = buffer.getInteger(at: start + 1, as: UInt8.self)!
        let rawFlags = buffer.getInteger(at: start + 2, as: UInt8.self)!
        let reserved = buffer.getInteger(at: start + 3, as: UInt8.self)!
        let length = buffer.getInteger(at: start + 4, endianness: .big, as: UInt32.self)!
        guard magic == Frame.magic else {
            throw WireError(.malformedFrame, "not a Shoal frame: first byte is 0x\(hex(magic)), expected 0x53")
        }
        guard reserved == 0 else {
            throw WireError(.malformedFrame, "frame type 0x\(hex(type)): reserved header byte is 0x\(hex(reserved)), expected 0")
        }
        let flags = Frame.Flags(rawValue: rawFlags)
        guard Frame.Flags.known.isSuperset(of: flags) else {
            throw WireError(.malformedFrame, "frame type 0x\(hex(type)): unknown flags 0x\(hex(rawFlags))")
        }
        guard UInt64(length) <= UInt64(maximumFrameSize) else {
            throw WireError(
                .frameTooLarge,
                "frame type 0x\(hex(type)) announces \(length) payload bytes; the limit is \(maximumFrameSize)\(limitNote)")
        }
        guard buffer.readableBytes >= Frame.headerSize + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: Frame.headerSize)
        let payload = buffer.readSlice(length: Int(length))!
        return Frame(type: type, flags: flags, payload: payload)
    }

    /// Called when the stream ends: leftover bytes mean a truncated frame.
    public func finish(leftover buffer: ByteBuffer) throws(WireError) {
        if let tls = Self.tlsRecord(buffer) { throw tls }
        if buffer.readableBytes > 0 {
            throw WireError(.truncatedFrame, "connection ended inside a frame (\(buffer.readableBytes) bytes left over)")
        }
    }
}

extension FrameDecoder {
    /// The error for bytes that open a TLS record (a handshake, 0x16, or an alert,
    /// 0x15, then version 3.x) where a frame should be: the other side's links are
    /// TLS and this side's plaintext (PROTOCOL.md §17). Nil for anything else.
    static func tlsRecord(_ buffer: ByteBuffer) -> WireError? {
        guard buffer.readableBytes >= 2, let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self),
            first == 0x15 || first == 0x16, buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self) == 0x03
        else { return nil }
        return WireError(
            .malformedFrame,
            "not a Shoal frame but TLS (a \(first == 0x16 ? "handshake" : "alert") record): the other side's links are TLS and this side's are plaintext; give this side --tls-cert, --tls-key and --tls-ca")
    }
}

func hex(_ byte: UInt8) -> String {
    let s = String(byte, radix: 16)
    return s.count == 1 ? "0" + s : s
}

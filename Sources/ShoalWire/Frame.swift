public import NIOCore

/// One frame as it travels: a type, flags and a payload.
///
/// ```
///  0        1        2        3        4        5        6        7
/// +--------+--------+--------+--------+--------+--------+--------+--------+
/// |  0x53  |  type  | flags  |  0x00  |     payload length (u32, BE)      |
/// +--------+--------+--------+--------+--------+--------+--------+--------+
/// |  payload (length bytes; zlib stream when flags bit 0 is set) ...      |
/// +-----------------------------------------------------------------------+
/// ```
public struct Frame: Sendable, Hashable {
    /// The first header byte, ASCII 'S'.
    public static let magic: UInt8 = 0x53
    public static let headerSize = 8

    public struct Flags: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// The payload is a zlib (RFC 1950) stream.
        public static let compressed = Flags(rawValue: 0x01)
        public static let known: Flags = [.compressed]
    }

    /// The raw type byte; `MessageType(rawValue:)` names it when known.
    public var type: UInt8
    public var flags: Flags
    public var payload: ByteBuffer

    public init(type: UInt8, flags: Flags = [], payload: ByteBuffer) {
        self.type = type
        self.flags = flags
        self.payload = payload
    }

    public init(type: MessageType, flags: Flags = [], payload: ByteBuffer) {
        self.init(type: type.rawValue, flags: flags, payload: payload)
    }

    /// Bytes this frame occupies on the wire.
    public var wireSize: Int { Frame.headerSize + payload.readableBytes }

    /// Appends the header and payload to `buffer`.
    public func encode(into buffer: inout ByteBuffer) {
        buffer.reserveCapacity(minimumWritableBytes: wireSize)
        buffer.writeInteger(Frame.magic)
        buffer.writeInteger(type)
        buffer.writeInteger(flags.rawValue)
        buffer.writeInteger(UInt8(0))
        buffer.writeInteger(UInt32(payload.readableBytes), endianness: .big)
        var payload = payload
        buffer.writeBuffer(&payload)
    }
}

/// The message types of the protocol, carried in the header's type byte.
/// `transactionRequest` and `transactionPieces` exist from version 2 on, `routeUpdate`
/// from version 4.
public enum MessageType: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case hello = 0x01
    case proof = 0x02
    case error = 0x03
    case ping = 0x04
    case pong = 0x05
    case subscribe = 0x06
    case deltaBatch = 0x07
    case ack = 0x08
    case attachmentRequest = 0x09
    case attachmentChunk = 0x0A
    case transactionRequest = 0x0B
    case transactionPieces = 0x0C
    case routeUpdate = 0x0D
    case adminRequest = 0x10
    case adminResponse = 0x11

    public var description: String {
        switch self {
        case .hello: return "Hello"
        case .proof: return "Proof"
        case .error: return "Error"
        case .ping: return "Ping"
        case .pong: return "Pong"
        case .subscribe: return "Subscribe"
        case .deltaBatch: return "DeltaBatch"
        case .ack: return "Ack"
        case .attachmentRequest: return "AttachmentRequest"
        case .attachmentChunk: return "AttachmentChunk"
        case .transactionRequest: return "TransactionRequest"
        case .transactionPieces: return "TransactionPieces"
        case .routeUpdate: return "RouteUpdate"
        case .adminRequest: return "AdminRequest"
        case .adminResponse: return "AdminResponse"
        }
    }
}

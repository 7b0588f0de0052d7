/// Everything the wire layer rejects, with a code that maps onto the protocol's
/// `ErrorCode` and a message that names the offending frame.
public struct WireError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: Sendable, Hashable {
        /// The header is not a Shoal frame header (bad magic, reserved bits set).
        case malformedFrame
        /// The header announces more payload than the limit allows.
        case frameTooLarge
        /// The message type is not one this version knows.
        case unknownMessageType
        /// The payload does not decode as the message its type names.
        case malformedPayload
        /// A compressed payload is corrupt or inflates beyond the limit.
        case decompressionFailed
        /// The connection ended in the middle of a frame.
        case truncatedFrame
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }

    /// The protocol error code a peer is told.
    public var protocolCode: Shoal_V1_ErrorCode {
        switch code {
        case .frameTooLarge: return .frameTooLarge
        case .malformedFrame, .unknownMessageType, .malformedPayload, .decompressionFailed, .truncatedFrame:
            return .malformedFrame
        }
    }
}

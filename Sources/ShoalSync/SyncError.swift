public import ShoalCRDT
public import ShoalWire

/// Why a session ended or a sync step failed, in words an operator can act on.
public struct SyncError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The protocol error code the peer is (or was) told.
    public var code: Shoal_V1_ErrorCode
    public var message: String
    /// True when the other side sent this error to us.
    public var fromPeer: Bool
    /// The other side's site, when the handshake got far enough to learn it.
    public var peer: SiteID?

    public init(_ code: Shoal_V1_ErrorCode, _ message: String, fromPeer: Bool = false, peer: SiteID? = nil) {
        self.code = code
        self.message = message
        self.fromPeer = fromPeer
        self.peer = peer
    }

    public var description: String {
        fromPeer ? "peer closed the session: \(message) (\(code.name))" : "\(message) (\(code.name))"
    }
}

extension Shoal_V1_ErrorCode {
    /// The code's name as PROTOCOL.md spells it.
    public var name: String {
        switch self {
        case .unspecified: return "UNSPECIFIED"
        case .protocolViolation: return "PROTOCOL_VIOLATION"
        case .unsupportedVersion: return "UNSUPPORTED_VERSION"
        case .meshMismatch: return "MESH_MISMATCH"
        case .meshKeyMismatch: return "MESH_KEY_MISMATCH"
        case .frameTooLarge: return "FRAME_TOO_LARGE"
        case .malformedFrame: return "MALFORMED_FRAME"
        case .invalidQuery: return "INVALID_QUERY"
        case .internal: return "INTERNAL"
        case .shuttingDown: return "SHUTTING_DOWN"
        case .duplicateSession: return "DUPLICATE_SESSION"
        case .executionFailed: return "EXECUTION_FAILED"
        case .limitExceeded: return "LIMIT_EXCEEDED"
        case .UNRECOGNIZED(let n): return "UNRECOGNIZED(\(n))"
        }
    }
}

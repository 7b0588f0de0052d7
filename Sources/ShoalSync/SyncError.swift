public import ShoalCRDT
package import ShoalWire

/// Why a session ended or a sync step failed, in words an operator can act on.
public struct SyncError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The protocol's error codes (PROTOCOL.md §11), as Shoal names them.
    public enum Code: Sendable, Hashable {
        case unspecified
        case protocolViolation
        case unsupportedVersion
        case meshMismatch
        case meshKeyMismatch
        case frameTooLarge
        case malformedFrame
        case invalidQuery
        case `internal`
        case shuttingDown
        case duplicateSession
        case executionFailed
        case limitExceeded
        case staleReplica
        /// The sender's rights on this node do not allow what it asked (PROTOCOL.md §17).
        case permissionDenied
        /// The request may or may not have been applied, and the node cannot tell (a
        /// hub's COMMIT whose answer was lost; PROTOCOL.md §11).
        case outcomeUnknown
        /// A code this version does not know, by its number.
        case unrecognized(Int)
    }

    /// The protocol error code the peer is (or was) told.
    public var code: Code
    public var message: String
    /// True when the other side sent this error to us.
    public var fromPeer: Bool
    /// The other side's site, when the handshake got far enough to learn it.
    public var peer: SiteID?

    public init(_ code: Code, _ message: String, fromPeer: Bool = false, peer: SiteID? = nil) {
        self.code = code
        self.message = message
        self.fromPeer = fromPeer
        self.peer = peer
    }

    public var description: String {
        fromPeer ? "peer closed the session: \(message) (\(code.name))" : "\(message) (\(code.name))"
    }
}

extension SyncError.Code {
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
        case .staleReplica: return "STALE_REPLICA"
        case .permissionDenied: return "PERMISSION_DENIED"
        case .outcomeUnknown: return "OUTCOME_UNKNOWN"
        case .unrecognized(let n): return "UNRECOGNIZED(\(n))"
        }
    }

    package init(wire: Shoal_V1_ErrorCode) {
        switch wire {
        case .unspecified: self = .unspecified
        case .protocolViolation: self = .protocolViolation
        case .unsupportedVersion: self = .unsupportedVersion
        case .meshMismatch: self = .meshMismatch
        case .meshKeyMismatch: self = .meshKeyMismatch
        case .frameTooLarge: self = .frameTooLarge
        case .malformedFrame: self = .malformedFrame
        case .invalidQuery: self = .invalidQuery
        case .internal: self = .internal
        case .shuttingDown: self = .shuttingDown
        case .duplicateSession: self = .duplicateSession
        case .executionFailed: self = .executionFailed
        case .limitExceeded: self = .limitExceeded
        case .staleReplica: self = .staleReplica
        case .permissionDenied: self = .permissionDenied
        case .outcomeUnknown: self = .outcomeUnknown
        case .UNRECOGNIZED(let n): self = .unrecognized(n)
        }
    }

    package var wire: Shoal_V1_ErrorCode {
        switch self {
        case .unspecified: return .unspecified
        case .protocolViolation: return .protocolViolation
        case .unsupportedVersion: return .unsupportedVersion
        case .meshMismatch: return .meshMismatch
        case .meshKeyMismatch: return .meshKeyMismatch
        case .frameTooLarge: return .frameTooLarge
        case .malformedFrame: return .malformedFrame
        case .invalidQuery: return .invalidQuery
        case .internal: return .internal
        case .shuttingDown: return .shuttingDown
        case .duplicateSession: return .duplicateSession
        case .executionFailed: return .executionFailed
        case .limitExceeded: return .limitExceeded
        case .staleReplica: return .staleReplica
        case .permissionDenied: return .permissionDenied
        case .outcomeUnknown: return .outcomeUnknown
        case .unrecognized(let n): return .UNRECOGNIZED(n)
        }
    }
}

extension SyncError {
    /// An error the other side sent in an Error frame.
    package init(received error: Shoal_V1_Error) {
        self.init(Code(wire: error.code), error.message, fromPeer: true)
    }

    /// What the wire layer refused, as the peer is told.
    package init(_ error: WireError) {
        self.init(Code(wire: error.protocolCode), error.message)
    }

    /// The Error frame that tells the other side.
    package var frame: WireMessage { .fatal(code.wire, message) }
}

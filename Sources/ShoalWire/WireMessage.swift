/// A decoded protocol message: the frame type and its protobuf payload together.
public enum WireMessage: Sendable, Equatable {
    case hello(Shoal_V1_Hello)
    case proof(Shoal_V1_Proof)
    case error(Shoal_V1_Error)
    case ping(Shoal_V1_Ping)
    case pong(Shoal_V1_Ping)
    case subscribe(Shoal_V1_Subscribe)
    case deltaBatch(Shoal_V1_DeltaBatch)
    case ack(Shoal_V1_Ack)
    case attachmentRequest(Shoal_V1_AttachmentRequest)
    case attachmentChunk(Shoal_V1_AttachmentChunk)
    case transactionRequest(Shoal_V1_TransactionRequest)
    case transactionPieces(Shoal_V1_TransactionPieces)
    case routeUpdate(Shoal_V1_RouteUpdate)
    case adminRequest(Shoal_V1_AdminRequest)
    case adminResponse(Shoal_V1_AdminResponse)

    public var type: MessageType {
        switch self {
        case .hello: return .hello
        case .proof: return .proof
        case .error: return .error
        case .ping: return .ping
        case .pong: return .pong
        case .subscribe: return .subscribe
        case .deltaBatch: return .deltaBatch
        case .ack: return .ack
        case .attachmentRequest: return .attachmentRequest
        case .attachmentChunk: return .attachmentChunk
        case .transactionRequest: return .transactionRequest
        case .transactionPieces: return .transactionPieces
        case .routeUpdate: return .routeUpdate
        case .adminRequest: return .adminRequest
        case .adminResponse: return .adminResponse
        }
    }

    /// A fatal error message with `code` and `message`.
    public static func fatal(_ code: Shoal_V1_ErrorCode, _ message: String) -> WireMessage {
        var e = Shoal_V1_Error()
        e.code = code
        e.message = message
        e.fatal = true
        return .error(e)
    }
}

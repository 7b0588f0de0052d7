import ShoalCRDT
import ShoalStore
import ShoalSync
import ShoalWire

/// Answers the CLI: `exec` runs statements on the store, `status` describes the node.
struct AdminService: AdminRequestHandler {
    let node: ShoalNode

    func handle(_ request: Shoal_V1_AdminRequest) async -> Shoal_V1_AdminResponse {
        var response = Shoal_V1_AdminResponse()
        response.requestID = request.requestID
        switch request.request {
        case .exec(let exec)?:
            do {
                response.exec = try await execute(exec)
            } catch {
                response.error = Self.error(
                    error.code == .invalidQuery ? .invalidQuery : .executionFailed, error.message)
            }
        case .status?:
            do {
                response.status = try await status()
            } catch {
                response.error = Self.error(.internal, error.message)
            }
        case nil:
            response.error = Self.error(.protocolViolation, "empty admin request")
        }
        return response
    }

    static func error(_ code: Shoal_V1_ErrorCode, _ message: String) -> Shoal_V1_Error {
        var e = Shoal_V1_Error()
        e.code = code
        e.message = message
        return e
    }

    func execute(_ request: Shoal_V1_ExecRequest) async throws(StoreError) -> Shoal_V1_ExecResponse {
        var arguments: [String: Value] = [:]
        if !request.argumentsJson.isEmpty {
            do {
                guard case .object(let object) = try JSON.parse(request.argumentsJson) else {
                    throw StoreError(.invalidQuery, "--args must be a JSON object, like {\"id\": \"a\"}")
                }
                arguments = object
            } catch let error as StoreError {
                throw error
            } catch {
                throw StoreError(.invalidQuery, "--args is not valid JSON: \(error)")
            }
        }
        let result = try await node.store.execute(request.statements, arguments: arguments)
        var response = Shoal_V1_ExecResponse()
        response.itemsJson = result.items.map(\.canonicalJSON)
        response.mutatedDocumentIds = result.mutatedDocumentIDs.map(\.canonicalJSON)
        response.transactionID = result.transactionID?.description ?? ""
        return response
    }

    func status() async throws(StoreError) -> Shoal_V1_StatusResponse {
        var status = Shoal_V1_StatusResponse()
        status.siteID = node.siteID.rawValue
        status.name = node.name
        status.listen = node.listenAddress?.description ?? node.configuration.listen.description
        status.meshName = node.configuration.meshName
        status.changeLogSequence = try await node.store.lastSequence()
        var subscriptions: [Shoal_V1_SubscriptionStatus] = node.sync.subscriptions.entries.map { entry in
            var s = Shoal_V1_SubscriptionStatus()
            s.id = entry.id
            s.query = entry.query
            s.origin = "local"
            return s
        }
        for peer in node.sync.peers() {
            var p = Shoal_V1_PeerStatus()
            p.siteID = peer.siteID?.rawValue ?? 0
            p.name = peer.name
            p.address = peer.address
            p.state = peer.state
            p.rttMillis = peer.rttMillis ?? 0
            p.bytesIn = peer.bytesIn
            p.bytesOut = peer.bytesOut
            p.direction = peer.direction.rawValue
            if peer.state != "admin" { status.peers.append(p) }
            for entry in peer.subscriptions {
                var s = Shoal_V1_SubscriptionStatus()
                s.id = entry.id
                s.query = entry.query
                s.origin = peer.siteID?.description ?? peer.address
                subscriptions.append(s)
            }
        }
        status.subscriptions = subscriptions
        status.collections = try await node.store.collectionCounts().map { c in
            var s = Shoal_V1_CollectionStatus()
            s.name = c.name
            s.documents = UInt64(c.documents)
            return s
        }
        return status
    }
}

import ShoalCRDT
import ShoalQuery
import ShoalStore
import ShoalSync
import ShoalWire
import Foundation

/// Answers the CLI: `exec` runs statements, `status` describes the node,
/// `subscribe`/`unsubscribe` change its saved subscriptions, `observe` streams a query's result.
struct AdminService: AdminRequestHandler {
    let node: ShoalNode

    func handle(
        _ request: Shoal_V1_AdminRequest, respond: @escaping @Sendable (Shoal_V1_AdminResponse) async throws -> Void
    ) async throws {
        var response = Shoal_V1_AdminResponse()
        response.requestID = request.requestID
        do throws(StoreError) {
            try checkQueryLength(request)
            switch request.request {
            case .exec(let exec)?:
                response.exec = try await execute(exec)
            case .status?:
                response.status = try await status()
            case .subscribe(let subscribe)?:
                response.subscription = try await self.subscribe(subscribe)
            case .unsubscribe(let unsubscribe)?:
                response.subscription = try await self.unsubscribe(unsubscribe)
            case .observe(let observe)?:
                let observations = try node.store.observe(
                    observe.query, arguments: try Self.arguments(observe.argumentsJson))
                do {
                    for try await observation in observations {
                        var message = Shoal_V1_Observation()
                        message.itemsJson = observation.items.map(\.canonicalJSON)
                        message.transactionIds = observation.transactions.map(\.description)
                        response.observation = message
                        try await respond(response)
                    }
                } catch let error as StoreError {
                    throw error
                } catch {
                    return  // the client went away
                }
                return
            case .attachmentPut(let put)?:
                let token = try await node.store.putAttachment(Array(put.data), metadata: try Self.arguments(put.metadataJson))
                var message = Shoal_V1_AttachmentToken()
                message.tokenJson = token.value.canonicalJSON
                response.attachment = message
            case .attachmentGet(let get)?:
                guard AttachmentToken(.string(get.hash)) != nil else {
                    throw StoreError(.invalidQuery, "'\(get.hash)' is not an attachment ID (64 hex digits, from the token's \"attachment\")")
                }
                _ = try await node.sync.fetchAttachment(hash: get.hash)
                var offset = 0
                var total = 0
                repeat {
                    guard let part = try await node.store.attachmentChunk(
                        hash: get.hash, offset: offset, maximum: Int(SyncEngine.attachmentChunkSize)),
                        !part.bytes.isEmpty || part.total == 0
                    else { break }
                    total = part.total
                    var chunk = Shoal_V1_AttachmentChunk()
                    chunk.requestID = request.requestID
                    chunk.hash = get.hash
                    chunk.found = true
                    chunk.offset = UInt64(offset)
                    chunk.totalLength = UInt64(total)
                    chunk.data = Data(part.bytes)
                    response.chunk = chunk
                    offset += part.bytes.count
                    do {
                        try await respond(response)
                    } catch {
                        return  // the client went away
                    }
                } while offset < total
                return
            case nil:
                response.error = Self.error(.protocolViolation, "empty admin request")
            }
        } catch {
            response.error = Self.error(error.code == .invalidQuery ? .invalidQuery : .executionFailed, error.message)
        }
        try await respond(response)
    }

    /// Refuses DQL text longer than `maximumQueryLength` before it is parsed.
    func checkQueryLength(_ request: Shoal_V1_AdminRequest) throws(StoreError) {
        let text: String
        switch request.request {
        case .exec(let exec)?: text = exec.statements
        case .observe(let observe)?: text = observe.query
        case .subscribe(let subscribe)?: text = subscribe.query
        default: return
        }
        let limit = node.sync.configuration.maximumQueryLength
        guard text.utf8.count <= limit else {
            throw StoreError(
                .invalidQuery,
                "the statement text is \(text.utf8.count) bytes; this node takes at most \(limit) (--max-query-length). Pass large values as arguments (--args @FILE)")
        }
    }

    static func arguments(_ json: String) throws(StoreError) -> [String: Value] {
        guard !json.isEmpty else { return [:] }
        do {
            guard case .object(let object) = try JSON.parse(json) else {
                throw StoreError(.invalidQuery, "arguments must be a JSON object, like {\"id\": \"a\"}")
            }
            return object
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.invalidQuery, "arguments are not valid JSON: \(error)")
        }
    }

    func subscribe(_ request: Shoal_V1_SubscribeRequest) async throws(StoreError) -> Shoal_V1_SubscriptionStatus {
        let arguments = try Self.arguments(request.argumentsJson)
        // Check, save, then go live: a subscription that runs is one that survives a restart.
        var check = SubscriptionSet()
        let parsed = try check.add(query: request.query, arguments: arguments)
        let limit = node.sync.configuration.maximumSubscriptionsPerPeer
        let own = node.sync.subscriptions.entries
        guard own.count < limit || own.contains(where: { $0.id == parsed.id }) else {
            throw StoreError(
                .tooLarge,
                "this node has \(own.count) subscriptions, as many as a peer takes in one Subscribe (--max-subscriptions-per-peer); remove one first")
        }
        try await node.store.saveSubscription(SavedSubscription(id: parsed.id, query: parsed.query, arguments: arguments))
        let entry = try node.sync.subscribe(request.query, arguments: arguments)
        var status = Shoal_V1_SubscriptionStatus()
        status.id = entry.id
        status.query = entry.query
        status.origin = "local"
        return status
    }

    func unsubscribe(_ request: Shoal_V1_UnsubscribeRequest) async throws(StoreError) -> Shoal_V1_SubscriptionStatus {
        guard let entry = node.sync.unsubscribe(request.idOrQuery) else {
            // A saved subscription that no longer parses is not live, but can still be removed.
            if try await node.store.removeSavedSubscription(id: request.idOrQuery) {
                var status = Shoal_V1_SubscriptionStatus()
                status.id = request.idOrQuery
                status.origin = "local"
                return status
            }
            throw StoreError(
                .invalidQuery,
                "no subscription has the ID or query '\(request.idOrQuery)' (shoal status lists them)")
        }
        try await node.store.removeSavedSubscription(id: entry.id)
        var status = Shoal_V1_SubscriptionStatus()
        status.id = entry.id
        status.query = entry.query
        status.origin = "local"
        return status
    }

    func transactionStatus() -> Shoal_V1_TransactionStatus {
        let pipeline = node.sync.pipeline.status
        let limits = node.sync.pipeline.configuration.coverage
        let now = Date().timeIntervalSince1970 * 1000
        func pending(_ p: InboundPipeline.Status.Pending) -> Shoal_V1_PendingTransaction {
            var t = Shoal_V1_PendingTransaction()
            t.id = p.id.description
            t.originSite = p.id.origin.rawValue
            t.haveDocuments = UInt64(p.haveDocuments)
            t.needDocuments = UInt64(p.needDocuments)
            t.ageSeconds = max(0, (now - Double(p.firstSeen)) / 1000)
            t.askedPeers = p.askedPeers.map(\.description)
            t.reason = p.reason
            t.missingCollections = p.missingCollections
            return t
        }
        var t = Shoal_V1_TransactionStatus()
        t.committedLocal = node.store.committedLocalTransactions
        t.appliedRemote = pipeline.appliedRemote
        t.waitingForCoverage = UInt64(pipeline.waiting.count)
        t.appliedPartial = UInt64(pipeline.partial.count)
        t.completedLater = pipeline.completedLater
        t.waiting = pipeline.waiting.map(pending)
        t.partial = pipeline.partial.map(pending)
        t.bufferedBytes = UInt64(pipeline.bufferedBytes)
        t.bufferedBytesLimit = UInt64(limits.maximumBytes)
        t.bufferedTransactionsLimit = UInt64(limits.maximumTransactions)
        t.overflows = pipeline.overflows
        return t
    }

    static func error(_ code: Shoal_V1_ErrorCode, _ message: String) -> Shoal_V1_Error {
        var e = Shoal_V1_Error()
        e.code = code
        e.message = message
        return e
    }

    /// Runs the statements in one transaction with the request's hint: read-only when
    /// the request asks for it, and also when no statement writes (a read need not
    /// wait for the writer).
    func execute(_ request: Shoal_V1_ExecRequest) async throws(StoreError) -> Shoal_V1_ExecResponse {
        let arguments = try Self.arguments(request.argumentsJson)
        let writes: Bool
        do throws(QueryError) {
            writes = try Parser.parse(request.statements).contains(where: \.isMutation)
        } catch {
            throw StoreError(error)
        }
        let (result, transaction): (QueryResult, Transaction)
        do {
            (result, transaction) = try await node.store.transaction(
                hint: request.hint.isEmpty ? nil : request.hint, isReadOnly: request.readOnly || !writes
            ) { tx in
                (try await tx.execute(request.statements, arguments: arguments), tx)
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.database, "exec failed: \(error)")
        }
        var response = Shoal_V1_ExecResponse()
        response.itemsJson = result.items.map(\.canonicalJSON)
        response.mutatedDocumentIds = result.mutatedDocumentIDs.map(\.canonicalJSON)
        response.transactionID = transaction.transactionID?.description ?? ""
        return response
    }

    func status() async throws(StoreError) -> Shoal_V1_StatusResponse {
        var status = Shoal_V1_StatusResponse()
        status.siteID = node.siteID.rawValue
        status.name = node.name
        status.listen = node.listenAddress?.description ?? node.configuration.listen.description
        status.meshName = node.configuration.meshName
        status.warnings = node.securityWarnings
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
        status.transactions = transactionStatus()
        status.collections = try await node.store.collectionCounts().map { c in
            var s = Shoal_V1_CollectionStatus()
            s.name = c.name
            s.documents = UInt64(c.documents)
            return s
        }
        return status
    }
}

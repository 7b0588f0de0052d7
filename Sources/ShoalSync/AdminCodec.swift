import ShoalCRDT
package import ShoalStorage
package import ShoalWire
import Foundation

// Admin requests and responses to and from their wire form (PROTOCOL.md §10).
// Only ShoalSync and ShoalNode see the generated messages; the CLI sees Shoal's types.

extension AdminRequest {
    /// The request a wire message carries, or nil when it carries none.
    package init?(wire: Shoal_V1_AdminRequest) {
        switch wire.request {
        case .exec(let e)?:
            self = .exec(statements: e.statements, argumentsJSON: e.argumentsJson, hint: e.hint.isEmpty ? nil : e.hint, readOnly: e.readOnly)
        case .status(let s)?: self = .status(digests: s.digests)
        case .subscribe(let s)?: self = .subscribe(query: s.query, argumentsJSON: s.argumentsJson)
        case .unsubscribe(let u)?: self = .unsubscribe(idOrQuery: u.idOrQuery)
        case .observe(let o)?: self = .observe(query: o.query, argumentsJSON: o.argumentsJson)
        case .page(let p)?: self = .page(query: p.query, argumentsJSON: p.argumentsJson, afterKey: p.afterKey, limit: Int(p.limit))
        case .attachmentPut(let p)?:
            self = .attachmentPut(
                AttachmentPutPart(
                    data: Array(p.data), metadataJSON: p.metadataJson, uploadID: p.uploadID, offset: p.offset, more: p.more))
        case .attachmentGet(let g)?: self = .attachmentGet(hash: g.hash, offset: g.offset)
        case .compact(let c)?: self = .compact(vacuum: c.vacuum)
        case .begin(let b)?: self = .begin(hint: b.hint.isEmpty ? nil : b.hint, readOnly: b.readOnly)
        case .commit?: self = .commit
        case .rollback?: self = .rollback
        case nil: return nil
        }
    }

    /// The wire form; a `budget` (PROTOCOL.md §10.2) is sent in whole milliseconds,
    /// at least 1, and none when it is nil.
    package func wire(requestID: UInt64 = 0, budget: Duration? = nil) -> Shoal_V1_AdminRequest {
        var request = Shoal_V1_AdminRequest()
        request.requestID = requestID
        if let budget { request.budgetMillis = UInt32(clamping: max(1, budget.wholeMilliseconds)) }
        switch self {
        case .exec(let statements, let argumentsJSON, let hint, let readOnly):
            var e = Shoal_V1_ExecRequest()
            e.statements = statements
            e.argumentsJson = argumentsJSON
            e.hint = hint ?? ""
            e.readOnly = readOnly
            request.exec = e
        case .status(let digests):
            var s = Shoal_V1_StatusRequest()
            s.digests = digests
            request.status = s
        case .subscribe(let query, let argumentsJSON):
            var s = Shoal_V1_SubscribeRequest()
            s.query = query
            s.argumentsJson = argumentsJSON
            request.subscribe = s
        case .unsubscribe(let idOrQuery):
            var u = Shoal_V1_UnsubscribeRequest()
            u.idOrQuery = idOrQuery
            request.unsubscribe = u
        case .observe(let query, let argumentsJSON):
            var o = Shoal_V1_ObserveRequest()
            o.query = query
            o.argumentsJson = argumentsJSON
            request.observe = o
        case .page(let query, let argumentsJSON, let afterKey, let limit):
            var p = Shoal_V1_PageRequest()
            p.query = query
            p.argumentsJson = argumentsJSON
            p.afterKey = afterKey
            p.limit = UInt32(clamping: limit)
            request.page = p
        case .attachmentPut(let part):
            var p = Shoal_V1_AttachmentPutRequest()
            p.data = Data(part.data)
            p.metadataJson = part.metadataJSON
            p.uploadID = part.uploadID
            p.offset = part.offset
            p.more = part.more
            request.attachmentPut = p
        case .attachmentGet(let hash, let offset):
            var g = Shoal_V1_AttachmentGetRequest()
            g.hash = hash
            g.offset = offset
            request.attachmentGet = g
        case .compact(let vacuum):
            var c = Shoal_V1_CompactRequest()
            c.vacuum = vacuum
            request.compact = c
        case .begin(let hint, let readOnly):
            var b = Shoal_V1_BeginRequest()
            b.hint = hint ?? ""
            b.readOnly = readOnly
            request.begin = b
        case .commit:
            request.commit = Shoal_V1_CommitRequest()
        case .rollback:
            request.rollback = Shoal_V1_RollbackRequest()
        }
        return request
    }
}

extension Deadline {
    /// The deadline of a request read at `start`, from its `budget_millis`; nil when it
    /// has none (0, as from a client that predates it).
    package init?(budgetOf wire: Shoal_V1_AdminRequest, from start: ContinuousClock.Instant = .now) {
        guard wire.budgetMillis > 0 else { return nil }
        self.init(budget: .milliseconds(wire.budgetMillis), from: start)
    }
}

extension AdminResponse {
    /// The response a wire message carries, or nil when it carries none.
    package init?(wire: Shoal_V1_AdminResponse) {
        switch wire.response {
        case .exec(let e)?:
            self = .exec(
                ExecResult(
                    itemsJSON: e.itemsJson, mutatedDocumentIDs: e.mutatedDocumentIds,
                    transactionID: e.transactionID.isEmpty ? nil : e.transactionID))
        case .page(let p)?: self = .page(PageResult(itemsJSON: p.itemsJson, lastKey: p.lastKey))
        case .status(let s)?: self = .status(NodeStatus(wire: s))
        case .error(let e)?: self = .failure(SyncError.Code(wire: e.code), e.message)
        case .subscription(let s)?: self = .subscription(SubscriptionInfo(wire: s))
        case .observation(let o)?: self = .observation(ObservationUpdate(itemsJSON: o.itemsJson, transactionIDs: o.transactionIds))
        case .attachment(let a)?: self = .attachment(tokenJSON: a.tokenJson)
        case .chunk(let c)?:
            self = .chunk(AttachmentPart(hash: c.hash, offset: c.offset, totalLength: c.totalLength, data: Array(c.data)))
        case .compaction(let c)?: self = .compaction(CompactionProgress(wire: c))
        case .transaction(let t)?:
            guard let transaction = SessionTransaction(wire: t) else { return nil }
            self = .transaction(transaction)
        case .upload(let u)?: self = .uploaded(uploadID: u.uploadID, received: u.received)
        case nil: return nil
        }
    }

    package func wire(requestID: UInt64) -> Shoal_V1_AdminResponse {
        var response = Shoal_V1_AdminResponse()
        response.requestID = requestID
        switch self {
        case .exec(let result):
            var e = Shoal_V1_ExecResponse()
            e.itemsJson = result.itemsJSON
            e.mutatedDocumentIds = result.mutatedDocumentIDs
            e.transactionID = result.transactionID ?? ""
            response.exec = e
        case .page(let result):
            var p = Shoal_V1_Page()
            p.itemsJson = result.itemsJSON
            p.lastKey = result.lastKey
            response.page = p
        case .status(let status):
            response.status = status.wire
        case .subscription(let info):
            response.subscription = info.wire
        case .observation(let update):
            var o = Shoal_V1_Observation()
            o.itemsJson = update.itemsJSON
            o.transactionIds = update.transactionIDs
            response.observation = o
        case .attachment(let tokenJSON):
            var a = Shoal_V1_AttachmentToken()
            a.tokenJson = tokenJSON
            response.attachment = a
        case .chunk(let part):
            var c = Shoal_V1_AttachmentChunk()
            c.requestID = requestID
            c.hash = part.hash
            c.found = true
            c.offset = part.offset
            c.totalLength = part.totalLength
            c.data = Data(part.data)
            response.chunk = c
        case .compaction(let progress):
            response.compaction = progress.wire
        case .transaction(let transaction):
            response.transaction = transaction.wire
        case .uploaded(let uploadID, let received):
            var u = Shoal_V1_AttachmentUpload()
            u.uploadID = uploadID
            u.received = received
            response.upload = u
        case .failure(let code, let message):
            var e = Shoal_V1_Error()
            e.code = code.wire
            e.message = message
            response.error = e
        }
        return response
    }
}

extension SessionTransaction {
    /// nil when the state is none of "open", "committed", "rolled_back".
    init?(wire t: Shoal_V1_SessionTransaction) {
        guard let state = State(rawValue: t.state) else { return nil }
        self.init(
            id: t.id, hint: t.hint.isEmpty ? nil : t.hint, isReadOnly: t.readOnly, state: state,
            transactionID: t.transactionID.isEmpty ? nil : t.transactionID, ageSeconds: t.ageSeconds, client: t.client)
    }

    var wire: Shoal_V1_SessionTransaction {
        var t = Shoal_V1_SessionTransaction()
        t.id = id
        t.hint = hint ?? ""
        t.readOnly = isReadOnly
        t.state = state.rawValue
        t.transactionID = transactionID ?? ""
        t.ageSeconds = ageSeconds
        t.client = client
        return t
    }
}

extension SubscriptionInfo {
    init(wire: Shoal_V1_SubscriptionStatus) {
        self.init(id: wire.id, query: wire.query, origin: wire.origin)
    }

    var wire: Shoal_V1_SubscriptionStatus {
        var s = Shoal_V1_SubscriptionStatus()
        s.id = id
        s.query = query
        s.origin = origin
        return s
    }
}

extension NodeStatus {
    init(wire s: Shoal_V1_StatusResponse) {
        self.init(
            siteID: SiteID(s.siteID), name: s.name, listen: s.listen, meshName: s.meshName,
            changeLogSequence: s.changeLogSequence,
            peers: s.peers.map { p in
                var peer = Peer(
                    siteID: p.siteID == 0 ? nil : SiteID(p.siteID), name: p.name, address: p.address, state: p.state,
                    direction: p.direction, rttMillis: p.rttMillis > 0 ? p.rttMillis : nil, bytesIn: p.bytesIn,
                    bytesOut: p.bytesOut, discovered: p.discovered)
                peer.deltasIn = p.deltasIn
                peer.deltasOut = p.deltasOut
                peer.deltasDuplicate = p.deltasDuplicate
                peer.routesGiven = p.routesGiven.isEmpty ? nil : p.routesGiven
                peer.routesAsked = p.routesAsked.isEmpty ? nil : p.routesAsked
                peer.offersReceived = p.offersReceived
                peer.grafts = p.grafts
                peer.lagDeltas = p.state == "connected" ? p.lagDeltas : nil
                peer.lastSeenMillisAgo = p.lastSeenMillisAgo >= 0 ? p.lastSeenMillisAgo : nil
                peer.listenAddress = p.listenAddress.isEmpty ? nil : p.listenAddress
                peer.lastError = p.lastError.isEmpty ? nil : p.lastError
                peer.tlsIdentity = p.tlsIdentity.isEmpty ? nil : p.tlsIdentity
                return peer
            },
            subscriptions: s.subscriptions.map(SubscriptionInfo.init(wire:)),
            collections: s.collections.map { Collection(name: $0.name, documents: $0.documents, digest: $0.digest.isEmpty ? nil : $0.digest) },
            transactions: Transactions(wire: s.transactions))
        warnings = s.warnings
        linkSecurity = s.linkSecurity
        tlsIdentity = s.tlsIdentity.isEmpty ? nil : s.tlsIdentity
        if s.hasStorage {
            let w = s.storage
            storage = Storage(
                storeBytes: w.storeBytes, changeLogRows: w.changeLogRows, compactedThrough: w.compactedThrough,
                compactedAtMillis: w.compactedAtMillis == 0 ? nil : w.compactedAtMillis,
                peerPositions: w.peerPositions.map {
                    PeerPosition(siteID: SiteID($0.siteID), through: $0.through, heardSecondsAgo: $0.heardSecondsAgo)
                }, documentsForgotten: w.documentsForgotten,
                forgottenThroughMillis: w.forgottenThroughMillis == 0 ? nil : w.forgottenThroughMillis,
                freshness: Freshness.entries(w.freshness))
            storage?.engine = w.engine
            storage?.location = w.location
            storage?.processes = Int(w.processes)
        }
    }

    var wire: Shoal_V1_StatusResponse {
        var s = Shoal_V1_StatusResponse()
        s.siteID = siteID.rawValue
        s.name = name
        s.listen = listen
        s.meshName = meshName
        s.changeLogSequence = changeLogSequence
        s.peers = peers.map { peer in
            var p = Shoal_V1_PeerStatus()
            p.siteID = peer.siteID?.rawValue ?? 0
            p.name = peer.name
            p.address = peer.address
            p.state = peer.state
            p.rttMillis = peer.rttMillis ?? 0
            p.bytesIn = peer.bytesIn
            p.bytesOut = peer.bytesOut
            p.direction = peer.direction
            p.discovered = peer.discovered
            p.deltasIn = peer.deltasIn
            p.deltasOut = peer.deltasOut
            p.deltasDuplicate = peer.deltasDuplicate
            p.routesGiven = peer.routesGiven ?? ""
            p.routesAsked = peer.routesAsked ?? ""
            p.offersReceived = peer.offersReceived
            p.grafts = peer.grafts
            p.lagDeltas = peer.lagDeltas ?? 0
            p.lastSeenMillisAgo = peer.lastSeenMillisAgo ?? -1
            p.listenAddress = peer.listenAddress ?? ""
            p.lastError = peer.lastError ?? ""
            p.tlsIdentity = peer.tlsIdentity ?? ""
            return p
        }
        s.subscriptions = subscriptions.map(\.wire)
        s.collections = collections.map { c in
            var w = Shoal_V1_CollectionStatus()
            w.name = c.name
            w.documents = c.documents
            w.digest = c.digest ?? ""
            return w
        }
        s.transactions = transactions.wire
        s.warnings = warnings
        s.linkSecurity = linkSecurity
        s.tlsIdentity = tlsIdentity ?? ""
        if let storage {
            var w = Shoal_V1_StorageStatus()
            w.storeBytes = storage.storeBytes
            w.changeLogRows = storage.changeLogRows
            w.compactedThrough = storage.compactedThrough
            w.compactedAtMillis = storage.compactedAtMillis ?? 0
            w.peerPositions = storage.peerPositions.map { p in
                var position = Shoal_V1_PeerPosition()
                position.siteID = p.siteID.rawValue
                position.through = p.through
                position.heardSecondsAgo = p.heardSecondsAgo
                return position
            }
            w.documentsForgotten = storage.documentsForgotten
            w.engine = storage.engine
            w.location = storage.location
            w.processes = UInt32(clamping: storage.processes)
            w.forgottenThroughMillis = storage.forgottenThroughMillis ?? 0
            w.freshness = Freshness.wire(storage.freshness)
            s.storage = w
        }
        return s
    }
}

extension CompactionProgress {
    init(wire c: Shoal_V1_CompactionProgress) {
        self.init()
        scannedThrough = c.scannedThrough
        through = c.through
        rowsBefore = c.rowsBefore
        rowsRemoved = c.rowsRemoved
        transactionsRemoved = c.transactionsRemoved
        done = c.done
        heldBy = c.heldBy.isEmpty ? nil : c.heldBy
        expiredPeers = c.expiredPeers
        storeBytesBefore = c.storeBytesBefore
        storeBytesAfter = c.storeBytesAfter
        vacuumed = c.vacuumed
        registersPurged = c.registersPurged
        documentsForgotten = c.documentsForgotten
    }

    var wire: Shoal_V1_CompactionProgress {
        var c = Shoal_V1_CompactionProgress()
        c.scannedThrough = scannedThrough
        c.through = through
        c.rowsBefore = rowsBefore
        c.rowsRemoved = rowsRemoved
        c.transactionsRemoved = transactionsRemoved
        c.done = done
        c.heldBy = heldBy ?? ""
        c.expiredPeers = expiredPeers
        c.storeBytesBefore = storeBytesBefore
        c.storeBytesAfter = storeBytesAfter
        c.vacuumed = vacuumed
        c.registersPurged = registersPurged
        c.documentsForgotten = documentsForgotten
        return c
    }
}

extension NodeStatus.Transactions {
    init(wire t: Shoal_V1_TransactionStatus) {
        self.init()
        committedLocal = t.committedLocal
        appliedRemote = t.appliedRemote
        waitingForCoverage = t.waitingForCoverage
        appliedPartial = t.appliedPartial
        completedLater = t.completedLater
        waiting = t.waiting.map(NodeStatus.Pending.init(wire:))
        partial = t.partial.map(NodeStatus.Pending.init(wire:))
        bufferedBytes = t.bufferedBytes
        bufferedBytesLimit = t.bufferedBytesLimit
        bufferedTransactionsLimit = t.bufferedTransactionsLimit
        overflows = t.overflows
        sessions = t.sessions.compactMap(SessionTransaction.init(wire:))
        refused = t.refused
        refusals = t.refusals.map { r in
            NodeStatus.Refused(
                id: r.id, origin: SiteID(r.originSite), reason: r.reason, ageSeconds: r.ageSeconds, fromPeers: r.fromPeers)
        }
    }

    var wire: Shoal_V1_TransactionStatus {
        var t = Shoal_V1_TransactionStatus()
        t.committedLocal = committedLocal
        t.appliedRemote = appliedRemote
        t.waitingForCoverage = waitingForCoverage
        t.appliedPartial = appliedPartial
        t.completedLater = completedLater
        t.waiting = waiting.map(\.wire)
        t.partial = partial.map(\.wire)
        t.bufferedBytes = bufferedBytes
        t.bufferedBytesLimit = bufferedBytesLimit
        t.bufferedTransactionsLimit = bufferedTransactionsLimit
        t.overflows = overflows
        t.sessions = sessions.map(\.wire)
        t.refused = refused
        t.refusals = refusals.map { r in
            var wire = Shoal_V1_RefusedTransaction()
            wire.id = r.id
            wire.originSite = r.origin.rawValue
            wire.reason = r.reason
            wire.ageSeconds = r.ageSeconds
            wire.fromPeers = r.fromPeers
            return wire
        }
        return t
    }
}

extension NodeStatus.Pending {
    init(wire p: Shoal_V1_PendingTransaction) {
        self.init(
            id: p.id, origin: SiteID(p.originSite), haveDocuments: p.haveDocuments, needDocuments: p.needDocuments,
            ageSeconds: p.ageSeconds, askedPeers: p.askedPeers, reason: p.reason, missingCollections: p.missingCollections)
    }

    var wire: Shoal_V1_PendingTransaction {
        var p = Shoal_V1_PendingTransaction()
        p.id = id
        p.originSite = origin.rawValue
        p.haveDocuments = haveDocuments
        p.needDocuments = needDocuments
        p.ageSeconds = ageSeconds
        p.askedPeers = askedPeers
        p.reason = reason
        p.missingCollections = missingCollections
        return p
    }
}

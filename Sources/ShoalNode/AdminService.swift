import ShoalCRDT
import ShoalQuery
import ShoalStorage
import ShoalSync
import Foundation
import Synchronization

/// Answers the CLI: `exec` runs statements, `status` describes the node,
/// `subscribe`/`unsubscribe` change its saved subscriptions, `observe` streams a query's result,
/// and `begin`, `commit` and `rollback` hold a transaction on one connection
/// (`AdminService.Connection`).
struct AdminService: AdminRequestHandler {
    let node: ShoalNode
    /// The transactions admin connections hold now, for status.
    let held = HeldTransactions()

    /// Serves one connection: its transaction, if it opens one, is held by a child
    /// task beside `body`, and rolled back once `body` ends, however it ends.
    func serve(client: String, role: PeerRights.AdminRole, _ body: (any AdminConnection) async throws -> Void) async throws {
        let holder = TransactionHolder(store: node.store, client: client, held: held)
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { await holder.run() }
            defer { holder.finish() }
            try await body(Connection(service: self, holder: holder, role: role))
        }
    }

    /// The requests of one admin connection, with the transaction it holds.
    struct Connection: AdminConnection {
        let service: AdminService
        let holder: TransactionHolder
        /// What the client's certificate lets it do here (`AccessRules`).
        let role: PeerRights.AdminRole
        /// Touched by one request at a time: requests of a connection are handled in order.
        let machine = Locked(AdminTransactionStateMachine())

        func handle(
            _ request: AdminRequest, deadline: Deadline?, respond: @escaping @Sendable (AdminResponse) async throws -> Void
        ) async throws {
            if let refusal = role.refusal(of: request) ?? AdminService.statementRefusal(request, role: role) {
                return try await respond(.failure(.permissionDenied, refusal))
            }
            let restricted = role.restricting(request)
            if restricted != request {
                // A write refused only because the role made the exec read-only says so.
                let original = respond
                let respond: @Sendable (AdminResponse) async throws -> Void = { response in
                    guard case .failure(let code, let message) = response else { return try await original(response) }
                    let role = " (this client's certificate gives it the admin role 'read' on this node: its queries run read-only)"
                    try await original(.failure(code, message + role))
                }
                return try await handle(restricted, deadline: deadline, respond: respond, role: role)
            }
            return try await handle(request, deadline: deadline, respond: respond, role: role)
        }

        private func handle(
            _ request: AdminRequest, deadline: Deadline?, respond: @escaping @Sendable (AdminResponse) async throws -> Void,
            role: PeerRights.AdminRole
        ) async throws {
            let action = machine.withLock { $0.receive(request) }
            let outcome: Result<AdminResponse, ShoalError>
            switch action {
            case .serve:
                return try await service.handle(request, deadline: deadline, respond: respond)
            case .refuse(let code, let message):
                return try await respond(.failure(code, message))
            case .begin(let hint, let readOnly):
                outcome = await holder.send(.begin(hint: hint, readOnly: readOnly))
                if case .success(.transaction(let open)) = outcome {
                    machine.withLock {
                        $0.began(TransactionInfo(id: open.id, hint: open.hint, isReadOnly: open.isReadOnly))
                    }
                }
            case .runInTransaction:
                guard case .exec(let statements, let argumentsJSON, _, _) = request else { return }
                do throws(ShoalError) {
                    try service.checkQueryLength(request)
                    outcome = await holder.send(.exec(statements: statements, arguments: try AdminService.arguments(argumentsJSON)))
                } catch {
                    outcome = .failure(error)
                }
            case .end(let ending):
                // A COMMIT past the request's budget rolls back instead (PROTOCOL.md §10.2).
                outcome = await holder.send(.end(ending, deadline: deadline))
                machine.withLock { $0.ended() }
            }
            switch outcome {
            case .success(let response): try await respond(response)
            case .failure(let error): try await respond(AdminService.failure(error))
            }
        }
    }

    /// Why a client of `role` may not run `request`'s statements: one that writes needs
    /// `.write`, `ALTER SYSTEM` needs `.operate`. Nil when it may, or when they do not
    /// parse (the store says why). A client of role `read` runs its execs read-only
    /// besides (`AdminRole.restricting`), so a write this misses is refused by the store.
    static func statementRefusal(_ request: AdminRequest, role: PeerRights.AdminRole) -> String? {
        guard role < .operate, case .exec(let text, _, _, _) = request,
            // Role write may do all but ALTER SYSTEM: no need to parse what cannot hold it.
            role < .write || text.localizedCaseInsensitiveContains("system"),
            let statements = try? Parser.parseStatements(text)
        else { return nil }
        let prefix = "this client's certificate gives it the admin role '\(role.rawValue)' on this node (its permissions file)"
        if statements.contains(where: { if case .system(.set) = $0.statement { true } else { false } }) {
            return prefix + ", and ALTER SYSTEM needs 'operate'"
        }
        if role < .write, let write = statements.first(where: { $0.statement.isMutation }) {
            let what =
                switch write.statement {
                case .insert: "INSERT on \(write.statement.collection)"
                case .update: "UPDATE on \(write.statement.collection)"
                case .delete: "DELETE on \(write.statement.collection)"
                case .evict: "EVICT on \(write.statement.collection)"
                default: "an index change"
                }
            return prefix + ", and \(what) needs 'write'"
        }
        return nil
    }

    /// A store error as the admin response that reports it: a write whose outcome the
    /// store cannot tell (`.timedOut`, a hub's lost COMMIT answer) as `OUTCOME_UNKNOWN`,
    /// so that a client does not take it for one refused and retry it.
    static func failure(_ error: ShoalError) -> AdminResponse {
        switch error.code {
        case .invalidQuery: .failure(.invalidQuery, error.message)
        case .timedOut: .failure(.outcomeUnknown, error.message)
        default: .failure(.executionFailed, error.message)
        }
    }

    /// Attachment puts in parts between two of their requests, by upload ID. One
    /// missing here (the node restarted) is picked up from its staging entry.
    let uploads = Locked<[UInt64: AttachmentWriter]>([:])

    /// Answers a request on a connection that holds no transaction; an exec that
    /// writes starts and commits only before `deadline` (PROTOCOL.md §10.2).
    func handle(
        _ request: AdminRequest, deadline: Deadline? = nil, respond: @escaping @Sendable (AdminResponse) async throws -> Void
    ) async throws {
        let response: AdminResponse
        do throws(ShoalError) {
            try checkQueryLength(request)
            switch request {
            case .exec(let statements, let argumentsJSON, let hint, let readOnly):
                response = .exec(
                    try await execute(statements, argumentsJSON: argumentsJSON, hint: hint, readOnly: readOnly, deadline: deadline))
            case .page(let query, let argumentsJSON, let afterKey, let limit):
                let page = try await node.storage.page(query, arguments: try Self.arguments(argumentsJSON), after: afterKey, limit: limit)
                response = .page(PageResult(itemsJSON: page.items.map(\.canonicalJSON), lastKey: page.lastKey ?? ""))
            case .status(let digests):
                response = .status(try await status(digests: digests))
            case .subscribe(let query, let argumentsJSON):
                response = .subscription(try await subscribe(query, argumentsJSON: argumentsJSON))
            case .unsubscribe(let idOrQuery):
                response = .subscription(try await unsubscribe(idOrQuery))
            case .observe(let query, let argumentsJSON):
                let observations = try node.storage.observe(query, arguments: try Self.arguments(argumentsJSON))
                do {
                    for try await observation in observations {
                        try await respond(
                            .observation(
                                ObservationUpdate(
                                    itemsJSON: observation.items.map(\.canonicalJSON),
                                    transactionIDs: observation.transactions.map(\.description))))
                    }
                } catch let error as ShoalError {
                    throw error
                } catch {
                    return  // the client went away
                }
                return
            case .attachmentPut(let part):
                response = try await putAttachment(part)
            case .compact(let vacuum):
                let outcome = try await node.compact(vacuum: vacuum) { scanned, report in
                    try? await respond(.compaction(Self.progress(report, scanned: scanned)))
                }
                var last = Self.progress(outcome.report, scanned: outcome.report.through)
                last.done = true
                last.heldBy = outcome.heldBy
                last.expiredPeers = outcome.expiredPeers
                last.storeBytesBefore = outcome.storeBytesBefore
                last.storeBytesAfter = outcome.storeBytesAfter
                last.vacuumed = outcome.vacuumed
                last.registersPurged = UInt64(outcome.registersPurged)
                last.documentsForgotten = outcome.documentsForgotten
                response = .compaction(last)
            case .attachmentGet(let hash, let offset):
                guard AttachmentToken.isHash(hash) else {
                    throw ShoalError(.invalidQuery, "'\(hash)' is not an attachment ID (64 hex digits, from the token's \"attachment\")")
                }
                let total = try await node.sync.fetchAttachment(hash: hash)
                guard offset <= UInt64(total) else {
                    throw ShoalError(.invalidQuery, "offset \(offset) is past the end of attachment \(hash), which has \(total) bytes")
                }
                try await sendAttachment(hash: hash, from: Int(offset), respond: respond)
                return
            case .begin, .commit, .rollback:
                return  // Connection.handle decides these
            }
        } catch {
            response = Self.failure(error)
        }
        try await respond(response)
    }

    static func progress(_ report: CompactionReport, scanned: UInt64) -> CompactionProgress {
        var p = CompactionProgress()
        p.scannedThrough = scanned
        p.through = report.through
        p.rowsBefore = report.rowsBefore
        p.rowsRemoved = report.rowsRemoved
        p.transactionsRemoved = report.transactionsRemoved
        return p
    }

    /// Stores one part of an attachment put: the answer to the last part is the
    /// token, to the others how far the upload got.
    func putAttachment(_ part: AttachmentPutPart) async throws(ShoalError) -> AdminResponse {
        let metadata = part.more ? [:] : try Self.arguments(part.metadataJSON)
        var writer: AttachmentWriter
        if part.uploadID == 0 {
            guard part.offset == 0 else {
                throw ShoalError(.invalidQuery, "the first part of an attachment put starts at offset 0, not \(part.offset)")
            }
            writer = try await node.storage.attachmentWriter()
        } else if let held = uploads.withLock({ $0.removeValue(forKey: part.uploadID) }) {
            writer = held
        } else if let staged = try await node.storage.attachmentWriter(resuming: Int64(bitPattern: part.uploadID)), staged.expectedHash == nil {
            writer = staged
        } else {
            throw ShoalError(.invalidQuery, "attachment upload \(part.uploadID) is unknown here: finished, or abandoned and collected; put the file again")
        }
        let limit = SyncEngine.maximumAttachmentSize
        guard writer.received + part.data.count <= limit else {
            throw ShoalError(.tooLarge, "an attachment may have at most \(limit) bytes (peers fetch no larger one); this one has more")
        }
        // A part out of line fails here and leaves the upload as it was.
        try await writer.append(part.data)
        if part.more {
            uploads.withLock { $0[UInt64(writer.blob)] = writer }
            return .uploaded(uploadID: UInt64(writer.blob), received: UInt64(writer.received))
        }
        let token = try await writer.finish(metadata: metadata)
        return .attachment(tokenJSON: token.value.canonicalJSON)
    }

    /// Streams a held attachment's bytes from `offset` as `chunk`s of at most
    /// `SyncEngine.attachmentChunkSize`, the last one reaching its end.
    func sendAttachment(
        hash: String, from offset: Int, respond: @escaping @Sendable (AdminResponse) async throws -> Void
    ) async throws(ShoalError) {
        var offset = offset
        while true {
            guard let part = try await node.storage.attachmentChunk(hash: hash, offset: offset, maximum: Int(SyncEngine.attachmentChunkSize))
            else {
                throw ShoalError(.invalidDocument, "attachment \(hash) was collected while it was being sent")
            }
            let chunk = AttachmentPart(hash: hash, offset: UInt64(offset), totalLength: UInt64(part.total), data: part.bytes)
            do {
                try await respond(.chunk(chunk))
            } catch {
                return  // the client went away
            }
            offset += part.bytes.count
            if offset >= part.total || part.bytes.isEmpty { return }
        }
    }

    /// Refuses DQL text longer than `maximumQueryLength` before it is parsed.
    func checkQueryLength(_ request: AdminRequest) throws(ShoalError) {
        let text: String
        switch request {
        case .exec(let statements, _, _, _): text = statements
        case .observe(let query, _), .subscribe(let query, _), .page(let query, _, _, _): text = query
        default: return
        }
        let limit = node.sync.configuration.maximumQueryLength
        guard text.utf8.count <= limit else {
            throw ShoalError(
                .invalidQuery,
                "the statement text is \(text.utf8.count) bytes; this node takes at most \(limit) (--max-query-length). Pass large values as arguments (--args @FILE)")
        }
    }

    static func arguments(_ json: String) throws(ShoalError) -> [String: Value] {
        do {
            return try ArgumentsJSON.parse(json)
        } catch {
            throw ShoalError(.invalidQuery, error.message())
        }
    }

    func subscribe(_ query: String, argumentsJSON: String) async throws(ShoalError) -> SubscriptionInfo {
        let arguments = try Self.arguments(argumentsJSON)
        // Check, save, then go live: a subscription that runs is one that survives a restart.
        var check = SubscriptionSet()
        let parsed = try check.add(query: query, arguments: arguments)
        let limit = node.sync.configuration.maximumSubscriptionsPerPeer
        let own = node.sync.subscriptions.entries
        guard own.count < limit || own.contains(where: { $0.id == parsed.id }) else {
            throw ShoalError(
                .tooLarge,
                "this node has \(own.count) subscriptions, as many as a peer takes in one Subscribe (--max-subscriptions-per-peer); remove one first")
        }
        try await node.storage.saveSubscription(SavedSubscription(id: parsed.id, query: parsed.query, arguments: arguments))
        let entry = try node.sync.subscribe(query, arguments: arguments)
        return SubscriptionInfo(id: entry.id, query: entry.query, origin: "local")
    }

    func unsubscribe(_ idOrQuery: String) async throws(ShoalError) -> SubscriptionInfo {
        let entry: SubscriptionSet.Entry
        do throws(ShoalError) {
            entry = try node.sync.unsubscribe(idOrQuery)
        } catch {
            // A saved subscription that no longer parses is not live, but can still be removed.
            if try await node.storage.removeSavedSubscription(id: idOrQuery) {
                return SubscriptionInfo(id: idOrQuery, query: "", origin: "local")
            }
            throw ShoalError(
                .invalidQuery,
                "no subscription has the ID or query '\(idOrQuery)' (shoal status lists them)")
        }
        _ = try await node.storage.removeSavedSubscription(id: entry.id)
        return SubscriptionInfo(id: entry.id, query: entry.query, origin: "local")
    }

    func transactionStatus() -> NodeStatus.Transactions {
        let pipeline = node.sync.pipeline.status
        let limits = node.sync.pipeline.configuration.coverage
        let now = Date().timeIntervalSince1970 * 1000
        func pending(_ p: InboundPipeline.Status.Pending) -> NodeStatus.Pending {
            NodeStatus.Pending(
                id: p.id.description, origin: p.id.origin, haveDocuments: UInt64(p.haveDocuments),
                needDocuments: UInt64(p.needDocuments), ageSeconds: max(0, (now - Double(p.firstSeen)) / 1000),
                askedPeers: p.askedPeers.map(\.description), reason: p.reason, missingCollections: p.missingCollections)
        }
        var t = NodeStatus.Transactions()
        t.committedLocal = node.storage.committedLocalTransactions
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
        t.sessions = held.transactions
        t.refused = pipeline.refused
        t.refusals = pipeline.recentRefusals.map { r in
            NodeStatus.Refused(
                id: r.id.description, origin: r.id.origin, reason: r.reason, ageSeconds: max(0, (now - Double(r.at)) / 1000),
                fromPeers: r.from.map(\.description))
        }
        return t
    }

    /// Runs the statements in one transaction with the request's hint: read-only when
    /// the request asks for it, and also when no statement writes (a read need not
    /// wait for the writer). One that writes waits for the writer and commits only
    /// before `deadline`, or writes nothing.
    func execute(
        _ statements: String, argumentsJSON: String, hint: String?, readOnly: Bool, deadline: Deadline? = nil
    ) async throws(ShoalError) -> ExecResult {
        let arguments = try Self.arguments(argumentsJSON)
        // One access to the writer from BEGIN to COMMIT (a `transaction` would take three).
        let result = try await node.storage.execute(
            statements, arguments: arguments, hint: hint, isReadOnly: readOnly, deadline: deadline)
        return ExecResult(result, transactionID: result.transactionID)
    }

    /// Whether LAN discovery hears `site` (so a session it dialed to us was found that way too).
    func heard(_ site: SiteID?) -> Bool {
        guard let site, let discovery = node.discovery else { return false }
        return discovery.table.withLock { $0.entries[site] != nil }
    }

    /// A collection's digest (DATA_MODEL.md §17): SHA-256 of its live documents'
    /// canonical JSON, sorted, each followed by a newline.
    func digest(of collection: String) async throws(ShoalError) -> String? {
        guard !collection.contains("`") else { return nil }
        let bodies = try await node.storage.execute("SELECT * FROM `\(collection)`").items.map(\.canonicalJSON)
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        return AttachmentToken.hash(of: Array(bodies.map { $0 + "\n" }.joined().utf8))
    }

    func status(digests: Bool = false) async throws(ShoalError) -> NodeStatus {
        var status = NodeStatus(
            siteID: node.siteID, name: node.name,
            listen: node.listenAddress?.description ?? node.configuration.listen.description,
            meshName: node.configuration.meshName, changeLogSequence: try await node.storage.lastSequence())
        status.warnings = node.securityWarnings
        status.linkSecurity = node.linkSecurity
        status.tlsIdentity = node.tlsIdentity
        status.subscriptions = node.sync.subscriptions.entries.map { SubscriptionInfo(id: $0.id, query: $0.query, origin: "local") }
        for peer in node.sync.peers() {
            if peer.state != "admin" {
                status.peers.append(
                    NodeStatus.Peer(
                        siteID: peer.siteID, name: peer.name, address: peer.address, state: peer.state,
                        direction: peer.direction.rawValue, rttMillis: peer.rttMillis, bytesIn: peer.bytesIn,
                        bytesOut: peer.bytesOut, discovered: peer.discovered || heard(peer.siteID)))
                status.peers[status.peers.count - 1].deltasIn = peer.deltasIn
                status.peers[status.peers.count - 1].deltasOut = peer.deltasOut
                status.peers[status.peers.count - 1].deltasDuplicate = peer.deltasDuplicate
                status.peers[status.peers.count - 1].lagDeltas = peer.lagDeltas
                status.peers[status.peers.count - 1].listenAddress = peer.listenAddress ?? (peer.direction == .outbound ? peer.address : nil)
                status.peers[status.peers.count - 1].lastError = peer.lastError
                status.peers[status.peers.count - 1].tlsIdentity = peer.tlsIdentity
                status.peers[status.peers.count - 1].routesGiven = peer.routesGiven
                status.peers[status.peers.count - 1].routesAsked = peer.routesAsked
                status.peers[status.peers.count - 1].offersReceived = peer.offersReceived
                status.peers[status.peers.count - 1].grafts = peer.grafts
                status.peers[status.peers.count - 1].lastSeenMillisAgo = peer.lastHeard.map { since in
                    let elapsed = ContinuousClock.now - since
                    return elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
                }
            }
            for entry in peer.subscriptions {
                status.subscriptions.append(
                    SubscriptionInfo(id: entry.id, query: entry.query, origin: peer.siteID?.description ?? peer.address))
            }
        }
        // What nodes that are away asked for, neither they nor any neighbour that passed it
        // on connected now: still relayed, until not heard of for the compaction horizon.
        let connected = Set(status.peers.filter { $0.state == "connected" }.compactMap(\.siteID))
        for (site, interest) in node.sync.relayedInterest.sorted(by: { $0.key.rawValue < $1.key.rawValue })
        where !connected.contains(site) && interest.heardFrom.isDisjoint(with: connected) {
            for entry in interest.subscriptions.entries {
                status.subscriptions.append(SubscriptionInfo(id: entry.id, query: entry.query, origin: "\(site) (away)"))
            }
        }
        status.transactions = transactionStatus()
        let storage = try await node.storage.storageStatus()
        let now = Date()
        status.storage = NodeStatus.Storage(
            storeBytes: node.storage.storeBytes(),
            changeLogRows: storage.changeLogRows, compactedThrough: storage.compactedThrough,
            compactedAtMillis: storage.compactedAt.map { UInt64(max(0, $0.timeIntervalSince1970 * 1000)) },
            peerPositions: try await node.storage.peerAcknowledgements().map { a in
                NodeStatus.PeerPosition(
                    siteID: a.peer, through: a.through, heardSecondsAgo: UInt64(max(0, now.timeIntervalSince(a.heardAt))))
            }, documentsForgotten: storage.documentsForgotten,
            forgottenThroughMillis: storage.forgottenThroughMillis == 0 ? nil : storage.forgottenThroughMillis,
            freshness: node.sync.freshness.entries)
        status.storage?.engine = storage.engine
        status.storage?.location = storage.location
        status.storage?.processes = storage.processes
        for collection in try await node.storage.collectionCounts() {
            status.collections.append(
                NodeStatus.Collection(
                    name: collection.name, documents: UInt64(collection.documents),
                    digest: digests ? try await digest(of: collection.name) : nil))
        }
        return status
    }
}

extension ExecResult {
    /// A statement's result as `exec` answers it.
    init(_ result: QueryResult, transactionID: TransactionID?) {
        self.init(
            itemsJSON: result.items.map(\.canonicalJSON), mutatedDocumentIDs: result.mutatedDocumentIDs.map(\.canonicalJSON),
            transactionID: transactionID?.description)
    }
}

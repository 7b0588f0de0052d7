public import ShoalCRDT

/// One request of an admin client (the CLI) to a node, in Shoal's own terms.
///
/// The wire form is `AdminRequest` of PROTOCOL.md §10; `AdminCodec` translates.
public enum AdminRequest: Sendable, Hashable {
    /// Runs statements in one transaction (read-only when asked, or when none writes).
    case exec(statements: String, argumentsJSON: String, hint: String?, readOnly: Bool)
    /// With `digests`, each collection's digest too (it reads every document).
    case status(digests: Bool)
    case subscribe(query: String, argumentsJSON: String)
    case unsubscribe(idOrQuery: String)
    /// A stream of `observation`s until the client closes.
    case observe(query: String, argumentsJSON: String)
    /// Up to `limit` documents the SELECT matches whose key sorts after `afterKey`
    /// ("" for the first page), in key order: what `shoal export` reads.
    case page(query: String, argumentsJSON: String, afterKey: String, limit: Int)
    /// One part of an attachment (or the whole of a small one).
    case attachmentPut(AttachmentPutPart)
    /// A stream of `chunk`s, in order, from byte `offset`.
    case attachmentGet(hash: String, offset: UInt64 = 0)
    /// Compacts the change log now (and runs VACUUM when asked): a stream of
    /// `compaction` progress, the last one `done`.
    case compact(vacuum: Bool)
    /// Opens a transaction this connection holds until `commit`, `rollback`, or the
    /// connection ends (which rolls it back); `exec` requests run in it meanwhile.
    case begin(hint: String?, readOnly: Bool)
    /// Commits the connection's open transaction.
    case commit
    /// Rolls back the connection's open transaction.
    case rollback
}

/// One answer of a node to an admin request.
public enum AdminResponse: Sendable, Hashable {
    case exec(ExecResult)
    case page(PageResult)
    case status(NodeStatus)
    case subscription(SubscriptionInfo)
    case observation(ObservationUpdate)
    /// An attachment's token, as canonical JSON.
    case attachment(tokenJSON: String)
    case chunk(AttachmentPart)
    case compaction(CompactionProgress)
    /// The connection's transaction after `begin`, `commit` or `rollback`.
    case transaction(SessionTransaction)
    /// A part of an attachment put is stored and more are expected.
    case uploaded(uploadID: UInt64, received: UInt64)
    /// The request failed; the connection stays open.
    case failure(SyncError.Code, String)
}

/// What `exec` returns: the last statement's result.
public struct ExecResult: Sendable, Hashable {
    /// The result documents of the last statement, each as canonical JSON.
    public var itemsJSON: [String]
    /// The canonical JSON `_id`s the last statement wrote, deleted or evicted.
    public var mutatedDocumentIDs: [String]
    /// `SITE:SEQUENCE`, or nil when nothing was written.
    public var transactionID: String?

    public init(itemsJSON: [String], mutatedDocumentIDs: [String], transactionID: String?) {
        self.itemsJSON = itemsJSON
        self.mutatedDocumentIDs = mutatedDocumentIDs
        self.transactionID = transactionID
    }

    /// The result documents as values.
    public func items() throws -> [Value] { try itemsJSON.map { try JSON.parse($0) } }
}

/// What `page` returns: a page of documents in key order.
public struct PageResult: Sendable, Hashable {
    /// The documents, each as canonical JSON.
    public var itemsJSON: [String]
    /// The key of the last document, where the next page starts; "" when there is none.
    public var lastKey: String

    public init(itemsJSON: [String], lastKey: String) {
        self.itemsJSON = itemsJSON
        self.lastKey = lastKey
    }
}

/// A transaction an admin connection holds (`AdminRequest.begin`), as the answers to
/// begin, commit and rollback and as `status` lists it.
public struct SessionTransaction: Sendable, Hashable {
    /// Where a session's transaction is.
    public enum State: String, Sendable, Hashable {
        case open
        case committed
        case rolledBack = "rolled_back"
    }

    /// The transaction's unique ID (32 hex digits), as the long-transaction log names it.
    public var id: String
    public var hint: String?
    public var isReadOnly: Bool
    public var state: State
    /// After a commit that wrote: `SITE:SEQUENCE`.
    public var transactionID: String?
    /// Seconds since it began.
    public var ageSeconds: Double
    /// The admin client's address, as the node sees it.
    public var client: String

    public init(
        id: String, hint: String?, isReadOnly: Bool, state: State, transactionID: String? = nil, ageSeconds: Double = 0,
        client: String = ""
    ) {
        self.id = id
        self.hint = hint
        self.isReadOnly = isReadOnly
        self.state = state
        self.transactionID = transactionID
        self.ageSeconds = ageSeconds
        self.client = client
    }
}

/// A subscription as status and `subscribe` report it.
public struct SubscriptionInfo: Sendable, Hashable {
    public var id: String
    public var query: String
    /// `local`, or the site ID (16 hex digits) of the peer that asked for it.
    public var origin: String

    public init(id: String, query: String, origin: String) {
        self.id = id
        self.query = query
        self.origin = origin
    }
}

/// One state of an observed query's result.
public struct ObservationUpdate: Sendable, Hashable {
    public var itemsJSON: [String]
    /// The transactions (`SITE:SEQUENCE`) whose commit produced this state; empty for the first.
    public var transactionIDs: [String]

    public init(itemsJSON: [String], transactionIDs: [String]) {
        self.itemsJSON = itemsJSON
        self.transactionIDs = transactionIDs
    }
}

/// A part of an attachment on its way to a node (PROTOCOL.md §10, `attachment_put`).
///
/// A put of many parts sends them in order on one connection: the first with
/// `uploadID` 0, the rest with the ID the node answered; all but the last with
/// `more`. A small attachment is one part with neither.
public struct AttachmentPutPart: Sendable, Hashable {
    public var data: [UInt8]
    /// The token's metadata, a JSON object ("" for none); the last part's counts.
    public var metadataJSON: String
    public var uploadID: UInt64
    /// Where `data` starts in the attachment.
    public var offset: UInt64
    public var more: Bool

    public init(data: [UInt8], metadataJSON: String = "", uploadID: UInt64 = 0, offset: UInt64 = 0, more: Bool = false) {
        self.data = data
        self.metadataJSON = metadataJSON
        self.uploadID = uploadID
        self.offset = offset
        self.more = more
    }
}

/// A run of an attachment's bytes.
public struct AttachmentPart: Sendable, Hashable {
    public var hash: String
    public var offset: UInt64
    public var totalLength: UInt64
    public var data: [UInt8]

    public init(hash: String, offset: UInt64, totalLength: UInt64, data: [UInt8]) {
        self.hash = hash
        self.offset = offset
        self.totalLength = totalLength
        self.data = data
    }

    /// Whether this part reaches the end of the attachment.
    public var isLast: Bool { offset &+ UInt64(data.count) >= totalLength }
}

/// How far a compaction got (`shoal compact`); the last one of a request is `done`.
public struct CompactionProgress: Sendable, Hashable {
    /// The log sequence the scan reached, and the compaction point it runs to.
    public var scannedThrough: UInt64 = 0
    public var through: UInt64 = 0
    public var rowsBefore: UInt64 = 0
    public var rowsRemoved: UInt64 = 0
    public var transactionsRemoved: UInt64 = 0
    public var done = false
    /// The peer whose acknowledged position held the point back.
    public var heldBy: String?
    /// Peers unheard for longer than the horizon, no longer counted.
    public var expiredPeers: [String] = []
    public var storeBytesBefore: UInt64 = 0
    public var storeBytesAfter: UInt64 = 0
    public var vacuumed = false
    /// Registers removed because a tombstone hides them, and removals past the tombstone horizon.
    public var registersPurged: UInt64 = 0
    /// Deleted documents forgotten: deleted longer than the tombstone horizon ago.
    public var documentsForgotten: UInt64 = 0

    public init() {}
}

/// A node as `shoal status` shows it.
public struct NodeStatus: Sendable, Hashable {
    public var siteID: SiteID
    public var name: String
    public var listen: String
    public var meshName: String
    public var changeLogSequence: UInt64
    public var peers: [Peer]
    public var subscriptions: [SubscriptionInfo]
    public var collections: [Collection]
    public var transactions: Transactions
    /// What an operator must know, one sentence each (a node listening beyond
    /// loopback without a mesh key says so here).
    public var warnings: [String] = []
    /// How the node's links are carried: `tls` or `plaintext` (empty from a node that does not say).
    public var linkSecurity: String = ""
    /// The node's own name on TLS links, its certificate's subject common name.
    public var tlsIdentity: String?
    /// The store's and the change log's size, and compaction.
    public var storage: Storage?

    public init(
        siteID: SiteID, name: String, listen: String, meshName: String, changeLogSequence: UInt64, peers: [Peer] = [],
        subscriptions: [SubscriptionInfo] = [], collections: [Collection] = [], transactions: Transactions = .init()
    ) {
        self.siteID = siteID
        self.name = name
        self.listen = listen
        self.meshName = meshName
        self.changeLogSequence = changeLogSequence
        self.peers = peers
        self.subscriptions = subscriptions
        self.collections = collections
        self.transactions = transactions
    }

    /// Deltas received from peers since the node started, and of them those it held
    /// already. A site listed twice (a live session and a dial target) carries the
    /// site's counters twice: each site counts once.
    public var deltasReceived: (total: UInt64, duplicate: UInt64) {
        var bySite: [SiteID: (UInt64, UInt64)] = [:]
        for peer in peers {
            guard let site = peer.siteID else { continue }
            let seen = bySite[site] ?? (0, 0)
            bySite[site] = (max(seen.0, peer.deltasIn), max(seen.1, peer.deltasDuplicate))
        }
        return bySite.values.reduce((0, 0)) { ($0.0 + $1.0, $0.1 + $1.1) }
    }

    /// Deltas received over deltas new here (1 when each came once); nil before any came.
    public var amplification: Double? {
        let (total, duplicate) = deltasReceived
        let new = total - min(duplicate, total)
        return new > 0 ? Double(total) / Double(new) : nil
    }

    /// A connection or dial target.
    public struct Peer: Sendable, Hashable {
        public var siteID: SiteID?
        public var name: String
        public var address: String
        /// `connecting`, `handshaking`, `connected` or `disconnected`.
        public var state: String
        /// `inbound` or `outbound`.
        public var direction: String
        public var rttMillis: Double?
        public var bytesIn: UInt64
        public var bytesOut: UInt64
        /// Found by LAN discovery.
        public var discovered: Bool
        /// Deltas received from and sent to this peer's site since this node started.
        public var deltasIn: UInt64 = 0
        public var deltasOut: UInt64 = 0
        /// Of `deltasIn`, those this node held already when they came (another path, a
        /// resend): received and dropped.
        public var deltasDuplicate: UInt64 = 0
        /// Rows of this node's change log the peer has not acknowledged (nil: not a sync session).
        public var lagDeltas: UInt64?
        /// Milliseconds since its last frame (nil: none came).
        public var lastSeenMillisAgo: Int64?
        /// Where it accepts connections, as far as the node can tell.
        public var listenAddress: String?
        /// Why its last session or dial ended in error (nil: none did).
        public var lastError: String?
        /// The subject common name of its certificate, on a TLS link.
        public var tlsIdentity: String?
        /// Routes (PROTOCOL.md §8.11): what the peer asked this node for and what this
        /// node asks of it (nil: none, every origin in full), the offers it made that
        /// this node did not hold, and the transactions then asked of it.
        public var routesGiven: String?
        public var routesAsked: String?
        public var offersReceived: UInt64 = 0
        public var grafts: UInt64 = 0

        public init(
            siteID: SiteID?, name: String, address: String, state: String, direction: String, rttMillis: Double?,
            bytesIn: UInt64, bytesOut: UInt64, discovered: Bool = false
        ) {
            self.discovered = discovered
            self.siteID = siteID
            self.name = name
            self.address = address
            self.state = state
            self.direction = direction
            self.rttMillis = rttMillis
            self.bytesIn = bytesIn
            self.bytesOut = bytesOut
        }
    }

    /// The store's and the change log's size, and how far compaction has gone.
    public struct Storage: Sendable, Hashable {
        public var storeBytes: UInt64
        public var changeLogRows: UInt64
        /// The highest sequence a compaction ran through (0: never).
        public var compactedThrough: UInt64
        /// Milliseconds since the Unix epoch of the last compaction (nil: never).
        public var compactedAtMillis: UInt64?
        /// The peers whose positions hold compaction back, lowest first.
        public var peerPositions: [PeerPosition]
        /// Deleted documents forgotten after the tombstone horizon, in all.
        public var documentsForgotten: UInt64
        /// The newest deletion forgotten, Unix ms (nil: none).
        public var forgottenThroughMillis: UInt64?
        /// The node's freshness: for each node, the time on its clock through which this
        /// node holds its log (`Freshness`).
        public var freshness: [SiteID: UInt64]
        /// Where the node keeps its data: `sqlite`, or `postgresql` (a hub); empty from a
        /// node that does not say.
        public var engine = ""
        /// The database file's path, or the database's URL without a password.
        public var location = ""
        /// The processes that are this node on its store now, this one included: more
        /// than one for hubs on one database (0 from a node that does not say).
        public var processes = 0

        public init(
            storeBytes: UInt64, changeLogRows: UInt64, compactedThrough: UInt64, compactedAtMillis: UInt64?,
            peerPositions: [PeerPosition] = [], documentsForgotten: UInt64 = 0, forgottenThroughMillis: UInt64? = nil,
            freshness: [SiteID: UInt64] = [:]
        ) {
            self.documentsForgotten = documentsForgotten
            self.forgottenThroughMillis = forgottenThroughMillis
            self.freshness = freshness
            self.storeBytes = storeBytes
            self.changeLogRows = changeLogRows
            self.compactedThrough = compactedThrough
            self.compactedAtMillis = compactedAtMillis
            self.peerPositions = peerPositions
        }
    }

    /// A peer's acknowledged position in this node's change log.
    public struct PeerPosition: Sendable, Hashable {
        public var siteID: SiteID
        public var through: UInt64
        public var heardSecondsAgo: UInt64

        public init(siteID: SiteID, through: UInt64, heardSecondsAgo: UInt64) {
            self.siteID = siteID
            self.through = through
            self.heardSecondsAgo = heardSecondsAgo
        }
    }

    public struct Collection: Sendable, Hashable {
        public var name: String
        public var documents: UInt64
        /// SHA-256 of the collection's contents (DATA_MODEL.md §17), when asked for.
        public var digest: String?

        public init(name: String, documents: UInt64, digest: String? = nil) {
            self.name = name
            self.documents = documents
            self.digest = digest
        }
    }

    /// Counters since the node started, and the remote transactions it holds back
    /// or applied only in part (PROTOCOL.md §8.8).
    public struct Transactions: Sendable, Hashable {
        public var committedLocal: UInt64 = 0
        public var appliedRemote: UInt64 = 0
        public var waitingForCoverage: UInt64 = 0
        public var appliedPartial: UInt64 = 0
        public var completedLater: UInt64 = 0
        public var waiting: [Pending] = []
        public var partial: [Pending] = []
        public var bufferedBytes: UInt64 = 0
        public var bufferedBytesLimit: UInt64 = 0
        public var bufferedTransactionsLimit: UInt64 = 0
        public var overflows: UInt64 = 0
        /// The transactions admin connections hold open now, oldest first.
        public var sessions: [SessionTransaction] = []
        /// Remote transactions refused whole since the node started, and the latest few.
        public var refused: UInt64 = 0
        public var refusals: [Refused] = []

        public init() {}
    }

    /// A remote transaction refused whole: this node cannot hold a document it writes.
    public struct Refused: Sendable, Hashable {
        /// `SITE:SEQUENCE`.
        public var id: String
        public var origin: SiteID
        /// Which document, and which limit.
        public var reason: String
        public var ageSeconds: Double
        /// The peers that sent it, site IDs of 16 hex digits.
        public var fromPeers: [String]

        public init(id: String, origin: SiteID, reason: String, ageSeconds: Double, fromPeers: [String]) {
            self.id = id
            self.origin = origin
            self.reason = reason
            self.ageSeconds = ageSeconds
            self.fromPeers = fromPeers
        }
    }

    /// A remote transaction waiting for coverage, or applied in part.
    public struct Pending: Sendable, Hashable {
        /// `SITE:SEQUENCE`.
        public var id: String
        public var origin: SiteID
        public var haveDocuments: UInt64
        public var needDocuments: UInt64
        public var ageSeconds: Double
        /// Site IDs, 16 hex digits.
        public var askedPeers: [String]
        /// `coverage` or `order`.
        public var reason: String
        public var missingCollections: [String]

        public init(
            id: String, origin: SiteID, haveDocuments: UInt64, needDocuments: UInt64, ageSeconds: Double,
            askedPeers: [String], reason: String, missingCollections: [String]
        ) {
            self.id = id
            self.origin = origin
            self.haveDocuments = haveDocuments
            self.needDocuments = needDocuments
            self.ageSeconds = ageSeconds
            self.askedPeers = askedPeers
            self.reason = reason
            self.missingCollections = missingCollections
        }
    }
}

public import ShoalCRDT
public import ShoalStorage
package import ShoalWire

/// A message of a sync session after the handshake, in Shoal's own terms
/// (PROTOCOL.md §8 and §9).
///
/// `SessionStateMachine` reads and writes these; `SessionCodec.swift` is the one
/// place they meet the generated wire messages. A DeltaBatch is not one of them: a
/// session reads a received one straight from its payload (`DeltaBatchReader`) and
/// writes its own straight into theirs (`OutboundBatch`).
public enum SessionMessage: Sendable, Hashable {
    case subscribe(Subscribe)
    case ack(Ack)
    case ping(Ping)
    /// The answer to a Ping, its fields echoed.
    case pong(Ping)
    /// Version 4: new routes for the pages the publisher reads from now on.
    case routeUpdate(RouteTable.Routes)
    case transactionRequest(TransactionRequest)
    case transactionPieces(TransactionPieces)
    case attachmentRequest(AttachmentRequest)
    case attachmentChunk(AttachmentChunk)
    /// The peer's Error: the session ends.
    case error(SyncError)

    /// What the sender wants from the receiver; it replaces every earlier Subscribe.
    public struct Subscribe: Sendable, Hashable {
        public var subscriptions: [Subscription]
        /// Resume after this sequence of the receiver's log (0: from the start).
        public var resumeAfter: UInt64
        /// Numbers the Subscribes of one session, from 1, increasing; a DeltaBatch echoes it.
        public var generation: UInt64
        /// The sender may lack some of its own transactions: the receiver streams them too.
        public var includeOwnTransactions: Bool
        /// How far the sender holds the receiver's own transactions (`origin_through`
        /// and one delta of that transaction); `.none`: it says nothing.
        public var originHistory: OriginHistory
        /// Version 4: the routes the sender asks for; nil: every origin in full.
        public var routes: RouteTable.Routes?
        /// Version 4: the interest of each node the sender carries changes for, its own
        /// first (`InterestTable`); nil: none listed, the sender's subscriptions are its own.
        public var interests: [Interest]?
        /// Version 4: nothing is to be sent again: the set is the one the receiver serves,
        /// and only `interests` or `routes` changed (its stream goes on).
        public var continues: Bool

        public init(
            subscriptions: [Subscription], resumeAfter: UInt64 = 0, generation: UInt64, includeOwnTransactions: Bool = false,
            originHistory: OriginHistory = .none, routes: RouteTable.Routes? = nil, interests: [Interest]? = nil,
            continues: Bool = false
        ) {
            self.subscriptions = subscriptions
            self.resumeAfter = resumeAfter
            self.generation = generation
            self.includeOwnTransactions = includeOwnTransactions
            self.originHistory = originHistory
            self.routes = routes
            self.interests = interests
            self.continues = continues
        }

        /// The same, with `interests` stated as this node keeps them.
        public init(
            subscriptions: [Subscription], resumeAfter: UInt64 = 0, generation: UInt64, includeOwnTransactions: Bool = false,
            originHistory: OriginHistory = .none, routes: RouteTable.Routes? = nil, interests stated: [InterestTable.Stated]?,
            continues: Bool = false
        ) {
            self.init(
                subscriptions: subscriptions, resumeAfter: resumeAfter, generation: generation,
                includeOwnTransactions: includeOwnTransactions, originHistory: originHistory, routes: routes,
                interests: stated.map { $0.map(Interest.init) }, continues: continues)
        }
    }

    /// Version 4: what one node of the mesh subscribes to for itself, stated at
    /// `generation` (its clock then): a higher generation of one origin replaces a lower.
    public struct Interest: Sendable, Hashable {
        public var origin: SiteID
        public var generation: UInt64
        public var subscriptions: [Subscription]

        public init(origin: SiteID, generation: UInt64, subscriptions: [Subscription]) {
            self.origin = origin
            self.generation = generation
            self.subscriptions = subscriptions
        }

        /// `stated`, its subscriptions without their `id` (a receiver computes its own,
        /// PROTOCOL.md §8.2): a relay lists many of them.
        public init(_ stated: InterestTable.Stated) {
            self.init(
                origin: stated.origin, generation: stated.generation,
                subscriptions: stated.subscriptions.entries.map {
                    Subscription(id: "", query: $0.query, arguments: .success($0.arguments))
                })
        }
    }

    /// One subscription of a Subscribe.
    public struct Subscription: Sendable, Hashable {
        /// Chosen by the subscriber (a hash of the query); the publisher does not rely on it.
        public var id: String
        public var query: String
        /// The query's named arguments, read from their JSON where the message is
        /// decoded (`ArgumentsJSON`, the one reader of arguments). A text that is not
        /// arguments is kept, with why, for the publisher to refuse in its turn.
        public var arguments: Result<[String: Value], MalformedArguments>

        public init(id: String, query: String, arguments: Result<[String: Value], MalformedArguments> = .success([:])) {
            self.id = id
            self.query = query
            self.arguments = arguments
        }

        /// A subscription of `set`, as this node sends it.
        public init(_ entry: SubscriptionSet.Entry) {
            self.init(id: entry.id, query: entry.query, arguments: .success(entry.arguments))
        }
    }

    /// An `arguments_json` that is not arguments: the text as received, and why.
    public struct MalformedArguments: Error, Sendable, Hashable, CustomStringConvertible {
        public var text: String
        public var problem: ArgumentsJSON.Error

        public init(text: String, problem: ArgumentsJSON.Error) {
            self.text = text
            self.problem = problem
        }

        public var description: String { problem.description }
    }

    /// The receiver of batches holds them durably.
    public enum Ack: Sendable, Hashable {
        /// It holds every batch through the one whose `through_sequence` is `through`.
        /// `heldThrough` (version 4): below or at it, it holds every transaction its
        /// subscriptions want, offers not resolved keeping it below them; 0 before version 4.
        /// `refused`: transactions that came through the receiver of this Ack and that
        /// its sender refused whole since its last Ack, for the log and status only.
        case batch(through: UInt64, heldThrough: UInt64 = 0, refused: [Refusal] = [])
        /// Version 4: only how far it holds (an offer was resolved since the last Ack);
        /// it acknowledges no batch. `refused`: the peer's own transactions its sender
        /// refused before, told again at the start of a session (PROTOCOL.md §8.8).
        case heldOnly(heldThrough: UInt64, refused: [Refusal] = [])
    }

    /// A transaction refused whole, and why (`Ack.refused`, PROTOCOL.md §8.8).
    public struct Refusal: Sendable, Hashable {
        /// At most this many go in one Ack; the refusing node logs the rest.
        public static let perAck = 64
        /// A longer reason is cut to this many bytes before it is sent.
        public static let maximumReasonBytes = 256

        public var id: TransactionID
        /// `.permissionDenied` (the sender may not write where it writes) or
        /// `.limitExceeded` (the refusing node cannot hold it).
        public var code: SyncError.Code
        /// For an operator.
        public var reason: String

        public init(id: TransactionID, code: SyncError.Code, reason: String) {
            self.id = id
            self.code = code
            self.reason = reason
        }

        /// This refusal with its reason cut to `maximumReasonBytes`, at a character's
        /// start, so that no half character is sent.
        var fitted: Refusal {
            guard reason.utf8.count > Self.maximumReasonBytes else { return self }
            var cut = reason.utf8.prefix(Self.maximumReasonBytes - 3)
            while let last = cut.last, last & 0xC0 == 0x80 { cut = cut.dropLast() }
            if let last = cut.last, last >= 0xC0 { cut = cut.dropLast() }
            var fitted = self
            fitted.reason = String(decoding: cut, as: UTF8.self) + "..."
            return fitted
        }
    }

    /// Keepalive, and what the sender vouches while the receiver is caught up with it.
    public struct Ping: Sendable, Hashable {
        /// Counts 1, 2, 3, … per session.
        public var nonce: UInt64
        /// The sender's monotonic clock, µs since the session began.
        public var sentAtMicros: UInt64
        /// The sender's freshness (PROTOCOL.md §8.10) in the order it sent it, so that
        /// a Pong echoes it unchanged; empty when it vouches nothing.
        public var freshness: [Freshness.Entry]
        /// The fields of a received Ping that this version does not know, as they came:
        /// a Pong echoes them too, as it echoes every field.
        package var unknownFields: [UInt8] = []

        public init(nonce: UInt64, sentAtMicros: UInt64, freshness: [Freshness.Entry] = []) {
            self.nonce = nonce
            self.sentAtMicros = sentAtMicros
            self.freshness = freshness
        }
    }

    /// Asks for the pieces of a transaction the sender misses under its own subscriptions.
    public struct TransactionRequest: Sendable, Hashable {
        public var requestID: UInt64
        public var transaction: TransactionID
        /// The collections where documents are missing; empty: every collection.
        public var collections: [String]

        public init(requestID: UInt64, transaction: TransactionID, collections: [String] = []) {
            self.requestID = requestID
            self.transaction = transaction
            self.collections = collections
        }
    }

    /// One frame of the answer to a TransactionRequest: a piece of the transaction as
    /// the answering node would stream it to the asker, or "not found". The piece stays
    /// in its encoded form until it arrives: it is read against the asker's
    /// subscriptions then (`pieces(receiver:collections:encoding:)`, `SessionCodec.swift`).
    public struct TransactionPieces: Sendable, Hashable {
        public var requestID: UInt64
        /// The piece and its filters, encoded (`PieceCodec`); nil: the sender holds nothing of it.
        package var encoded: Shoal_V1_TransactionPieces?

        package init(requestID: UInt64, encoded: Shoal_V1_TransactionPieces?) {
            self.requestID = requestID
            self.encoded = encoded
        }
    }

    /// A request for part of an attachment's bytes (PROTOCOL.md §9).
    public struct AttachmentRequest: Sendable, Hashable {
        public var requestID: UInt64
        /// SHA-256 of the attachment's bytes, 64 lowercase hex digits.
        public var hash: String
        public var offset: UInt64
        /// At most this many bytes are to come back.
        public var maxLength: UInt32
        /// The nodes the request passed through, the one that began the fetch first.
        public var via: [SiteID]

        public init(requestID: UInt64, hash: String, offset: UInt64, maxLength: UInt32, via: [SiteID] = []) {
            self.requestID = requestID
            self.hash = hash
            self.offset = offset
            self.maxLength = maxLength
            self.via = via
        }
    }

    /// Part of an attachment's bytes, or "not found" (`found` false, nothing else set).
    public struct AttachmentChunk: Sendable, Hashable {
        public var requestID: UInt64
        public var hash: String
        public var found: Bool
        public var offset: UInt64
        public var totalLength: UInt64
        public var data: [UInt8]

        public init(requestID: UInt64, hash: String, found: Bool, offset: UInt64 = 0, totalLength: UInt64 = 0, data: [UInt8] = []) {
            self.requestID = requestID
            self.hash = hash
            self.found = found
            self.offset = offset
            self.totalLength = totalLength
            self.data = data
        }

        /// The answer to `request` when the bytes are not held.
        public static func notFound(_ request: AttachmentRequest) -> AttachmentChunk {
            AttachmentChunk(requestID: request.requestID, hash: request.hash, found: false)
        }

        /// The answer to `request` with `bytes` from its offset, of an attachment of `total` bytes.
        public static func found(_ request: AttachmentRequest, total: Int, bytes: [UInt8]) -> AttachmentChunk {
            AttachmentChunk(
                requestID: request.requestID, hash: request.hash, found: true, offset: request.offset, totalLength: UInt64(total),
                data: bytes)
        }
    }
}

extension SessionMessage.Subscribe {
    /// One line for a debug log: what a Subscribe asks and states, so that a session
    /// that keeps subscribing can be read from its log (which set, from where, which
    /// interests at which generations, which routes).
    var summary: String {
        var parts = [
            "#\(generation)", "\(subscriptions.count) subscriptions (\(subscriptions.map(\.id).sorted().joined(separator: ",")))",
            "after \(resumeAfter)",
        ]
        if includeOwnTransactions { parts.append("own included") }
        if continues { parts.append("continues") }
        if let interests {
            parts.append(
                "interests "
                    + interests.map { "\($0.origin)@\($0.generation):\($0.subscriptions.map(\.id).sorted().joined(separator: ","))" }
                    .joined(separator: " "))
        }
        if let routes { parts.append("routes \(routes)") }
        return parts.joined(separator: "; ")
    }
}

import Foundation
import ShoalCRDT
import ShoalStorage
public import ShoalWire
import SwiftProtobuf

// Sync session messages to and from their wire form (PROTOCOL.md §8 and §9): the one
// place `SessionStateMachine`'s messages meet the generated types.

extension SessionMessage {
    /// The session message `wire` is; nil for a DeltaBatch (a session reads its payload,
    /// `SessionStateMachine.Event.receivedDeltaBatch`) and for the frames of a
    /// handshake or of an admin session.
    public init?(wire: WireMessage) {
        switch wire {
        case .subscribe(let s): self = .subscribe(Subscribe(wire: s))
        case .ack(let a):
            let refused = a.refused.map {
                Refusal(id: TransactionID(origin: SiteID($0.originSite), sequence: $0.originSequence), code: SyncError.Code(wire: $0.code), reason: $0.reason)
            }
            self = .ack(
                a.heldOnly
                    ? .heldOnly(heldThrough: a.heldThrough, refused: refused)
                    : .batch(through: a.throughSequence, heldThrough: a.heldThrough, refused: refused))
        case .ping(let p): self = .ping(Ping(wire: p))
        case .pong(let p): self = .pong(Ping(wire: p))
        case .routeUpdate(let u): self = .routeUpdate(RouteTable.Routes(wire: u.routes))
        case .transactionRequest(let r):
            self = .transactionRequest(
                TransactionRequest(
                    requestID: r.requestID, transaction: TransactionID(origin: SiteID(r.originSite), sequence: r.originSequence),
                    collections: r.collections))
        case .transactionPieces(let p): self = .transactionPieces(TransactionPieces(requestID: p.requestID, encoded: p.found ? p : nil))
        case .attachmentRequest(let r):
            self = .attachmentRequest(
                AttachmentRequest(requestID: r.requestID, hash: r.hash, offset: r.offset, maxLength: r.maxLength, via: r.via.map(SiteID.init)))
        case .attachmentChunk(let c):
            self = .attachmentChunk(
                AttachmentChunk(
                    requestID: c.requestID, hash: c.hash, found: c.found, offset: c.offset, totalLength: c.totalLength, data: Array(c.data)))
        case .error(let e): self = .error(SyncError(received: e))
        case .hello, .proof, .deltaBatch, .adminRequest, .adminResponse: return nil
        }
    }

    /// The wire form. An Error is sent fatal: a session ends with it.
    public var wire: WireMessage {
        switch self {
        case .subscribe(let s): return .subscribe(s.wire)
        case .ack(let ack):
            var wire = Shoal_V1_Ack()
            switch ack {
            case .batch(let through, let held, let refused):
                wire.throughSequence = through
                wire.heldThrough = held
                wire.refused = refused.map(\.wire)
            case .heldOnly(let held, let refused):
                wire.heldOnly = true
                wire.heldThrough = held
                wire.refused = refused.map(\.wire)
            }
            return .ack(wire)
        case .ping(let p): return .ping(p.wire)
        case .pong(let p): return .pong(p.wire)
        case .routeUpdate(let routes):
            var update = Shoal_V1_RouteUpdate()
            update.routes = routes.wire
            return .routeUpdate(update)
        case .transactionRequest(let r):
            var wire = Shoal_V1_TransactionRequest()
            wire.requestID = r.requestID
            wire.originSite = r.transaction.origin.rawValue
            wire.originSequence = r.transaction.sequence
            wire.collections = r.collections
            return .transactionRequest(wire)
        case .transactionPieces(let p):
            guard var wire = p.encoded else {
                var notFound = Shoal_V1_TransactionPieces()
                notFound.requestID = p.requestID
                return .transactionPieces(notFound)
            }
            wire.requestID = p.requestID
            wire.found = true
            return .transactionPieces(wire)
        case .attachmentRequest(let r):
            var wire = Shoal_V1_AttachmentRequest()
            wire.requestID = r.requestID
            wire.hash = r.hash
            wire.offset = r.offset
            wire.maxLength = r.maxLength
            wire.via = r.via.map(\.rawValue)
            return .attachmentRequest(wire)
        case .attachmentChunk(let c):
            var wire = Shoal_V1_AttachmentChunk()
            wire.requestID = c.requestID
            wire.hash = c.hash
            wire.found = c.found
            if c.found {
                wire.offset = c.offset
                wire.totalLength = c.totalLength
                wire.data = Data(c.data)
            }
            return .attachmentChunk(wire)
        case .error(let error): return error.frame
        }
    }
}

extension SessionMessage.Subscribe {
    init(wire: Shoal_V1_Subscribe) {
        self.init(
            subscriptions: wire.subscriptions.map(SessionMessage.Subscription.init(wire:)), resumeAfter: wire.resumeAfter,
            generation: wire.generation, includeOwnTransactions: wire.includeOwnTransactions,
            originHistory: OriginHistory(
                through: wire.originThrough, index: wire.originThroughIndex, timestamp: wire.originThroughTimestamp),
            routes: wire.hasRoutes ? RouteTable.Routes(wire: wire.routes) : nil,
            interests: wire.interests.isEmpty
                ? nil
                : wire.interests.map { interest in
                    SessionMessage.Interest(
                        origin: SiteID(interest.origin), generation: interest.generation,
                        subscriptions: interest.subscriptions.map(SessionMessage.Subscription.init(wire:)))
                },
            continues: wire.continues)
    }

    var wire: Shoal_V1_Subscribe {
        var wire = Shoal_V1_Subscribe()
        wire.resumeAfter = resumeAfter
        wire.generation = generation
        wire.includeOwnTransactions = includeOwnTransactions
        wire.originThrough = originHistory.through
        wire.originThroughTimestamp = originHistory.timestamp
        wire.originThroughIndex = originHistory.index
        if let routes { wire.routes = routes.wire }
        wire.subscriptions = subscriptions.map(\.wire)
        wire.continues = continues
        wire.interests = (interests ?? []).map { interest in
            var wire = Shoal_V1_Interest()
            wire.origin = interest.origin.rawValue
            wire.generation = interest.generation
            wire.subscriptions = interest.subscriptions.map(\.wire)
            return wire
        }
        return wire
    }
}

extension SessionMessage.Subscription {
    init(wire: Shoal_V1_Subscription) {
        let arguments: Result<[String: Value], SessionMessage.MalformedArguments>
        do {
            arguments = .success(try ArgumentsJSON.parse(wire.argumentsJson))
        } catch {
            arguments = .failure(SessionMessage.MalformedArguments(text: wire.argumentsJson, problem: error))
        }
        self.init(id: wire.id, query: wire.query, arguments: arguments)
    }

    var wire: Shoal_V1_Subscription {
        var wire = Shoal_V1_Subscription()
        wire.id = id
        wire.query = query
        switch arguments {
        case .success(let arguments): wire.argumentsJson = ArgumentsJSON.encode(arguments)
        case .failure(let malformed): wire.argumentsJson = malformed.text
        }
        return wire
    }
}

extension SessionMessage.Ping {
    init(wire: Shoal_V1_Ping) {
        self.init(nonce: wire.nonce, sentAtMicros: wire.sentAtMicros, freshness: Freshness.list(wire.freshness))
        unknownFields = Array(wire.unknownFields.data)
    }

    var wire: Shoal_V1_Ping {
        var wire = Shoal_V1_Ping()
        wire.nonce = nonce
        wire.sentAtMicros = sentAtMicros
        wire.freshness = Freshness.wire(freshness)
        guard !unknownFields.isEmpty else { return wire }
        // After the known fields, as SwiftProtobuf writes a message it read: the bytes
        // were read as unknown fields of this very message, so they read so again.
        do {
            return try Shoal_V1_Ping(serializedBytes: try wire.serializedBytes() + unknownFields)
        } catch {
            preconditionFailure("a Ping's unknown fields do not read back: \(error)")
        }
    }
}

extension SessionMessage.TransactionPieces {
    /// The answer to request `requestID` carrying `piece`, encoded as a DeltaBatch's
    /// pieces are for a receiver subscribed to `receiver`.
    init(requestID: UInt64, piece: TransactionPiece, receiver: SubscriptionFilter, encoding: PieceCodec.DeltaEncoding) {
        let (pieces, filters) = PieceCodec.encode([piece], receiver: receiver, encoding: encoding)
        var wire = Shoal_V1_TransactionPieces()
        wire.found = true
        wire.piece = pieces[0]
        wire.filters = filters
        self.init(requestID: requestID, encoded: wire)
    }

    /// The size of the message's wire form, without the frame header.
    var encodedSize: Int {
        guard case .transactionPieces(let wire) = SessionMessage.transactionPieces(self).wire,
            let bytes = try? wire.serializedBytes() as [UInt8]
        else { return .max }
        return bytes.count
    }

    /// The answer's piece, checked and read as a DeltaBatch's are (PROTOCOL.md §8.5)
    /// against what this node asked for; nil when the peer found nothing.
    func pieces(
        receiver: SubscriptionFilter, collections: Set<String>, encoding: PieceCodec.DeltaEncoding
    ) throws(SyncError) -> [TransactionPiece]? {
        guard let encoded, encoded.hasPiece else { return nil }
        return try PieceCodec.decode(
            [encoded.piece], filters: encoded.filters, receiver: receiver, collections: collections, encoding: encoding,
            what: "TransactionPieces")
    }
}

extension RouteTable.Routes {
    init(wire: Shoal_V1_Routes) {
        self.init(lazyByDefault: wire.lazyByDefault, exceptions: Set(wire.exceptions.map(SiteID.init)))
    }

    var wire: Shoal_V1_Routes {
        var wire = Shoal_V1_Routes()
        wire.lazyByDefault = lazyByDefault
        wire.exceptions = exceptions.map(\.rawValue).sorted()
        return wire
    }
}

extension SessionStateMachine.Event {
    /// The event of `wire` received: a session message, a DeltaBatch's payload, or a
    /// frame that has no place in an established session.
    public init(received wire: WireMessage) {
        if let message = SessionMessage(wire: wire) {
            self = .received(message)
        } else if case .deltaBatch(let batch) = wire {
            // Tests and tools hand over a message; a session reads the frame's payload itself.
            do {
                self = .receivedDeltaBatch(try batch.serializedBytes())
            } catch {
                // Serialization fails only for messages missing required fields, which proto3 has none of.
                preconditionFailure("protobuf serialization failed: \(error)")
            }
        } else {
            self = .receivedOutOfPlace(wire.type)
        }
    }
}

extension SessionMessage.Refusal {
    var wire: Shoal_V1_Refusal {
        var wire = Shoal_V1_Refusal()
        wire.originSite = id.origin.rawValue
        wire.originSequence = id.sequence
        wire.code = code.wire
        wire.reason = reason
        return wire
    }
}

import Foundation
import NIOCore
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import SwiftProtobuf
import Testing

/// The sync session's messages in Shoal's terms against their wire form
/// (`SessionCodec.swift`, the one place they meet the generated types).
@Suite struct SessionCodecTests {
    static let codec = MessageCodec()

    /// The kit's frames of the messages a sync session reads, each exact.
    static let sessionFrames = VectorManifest.entries(.frame).filter { entry in
        entry.match == .exact
            && [
                "Error", "Ping", "Pong", "Subscribe", "Ack", "AttachmentRequest", "AttachmentChunk", "TransactionRequest",
                "TransactionPieces", "RouteUpdate",
            ].contains(entry.messageType ?? "")
    }

    static func frameBytes(_ message: WireMessage) -> [UInt8] {
        var buffer = ByteBuffer()
        codec.encode(message).encode(into: &buffer)
        return Array(buffer.readableBytesView)
    }

    @Test func theKitHasFramesOfEverySessionMessage() {
        #expect(Self.sessionFrames.count >= 14, "\(Self.sessionFrames.map(\.file))")
    }

    /// Each frame of the kit a session reads as a message becomes one, and that message
    /// encodes back to the very bytes.
    @Test(arguments: sessionFrames)
    func aKitFrameRoundTripsThroughShoalsMessage(_ entry: VectorManifest.Entry) throws {
        let bytes = try VectorManifest.bytes(hex: String(contentsOf: VectorManifest.url(entry.file), encoding: .utf8))
        var buffer = ByteBuffer(bytes: bytes)
        let frame = try #require(try FrameDecoder().next(from: &buffer))
        let wire = try Self.codec.decode(frame)
        let message = try #require(SessionMessage(wire: wire), "\(entry.file) is no session message")
        #expect(message.wire == wire)
        #expect(Self.frameBytes(message.wire) == bytes, "\(entry.file)")
    }

    @Test func aSubscribeCarriesEveryFieldBothWays() throws {
        var set = SubscriptionSet()
        try set.add(query: "SELECT * FROM cars")
        try set.add(query: "SELECT * FROM boats WHERE size > :n", arguments: ["n": 10])
        let subscribe = SessionMessage.Subscribe(
            subscriptions: set.entries.map(SessionMessage.Subscription.init), resumeAfter: 12, generation: 3,
            includeOwnTransactions: true, originHistory: OriginHistory(through: 7, index: 2, timestamp: 99),
            routes: RouteTable.Routes(lazyByDefault: true, exceptions: [SiteID(0xB), SiteID(0xA)]))
        guard case .subscribe(let wire) = SessionMessage.subscribe(subscribe).wire else {
            Issue.record("not a Subscribe")
            return
        }
        #expect(wire.resumeAfter == 12 && wire.generation == 3 && wire.includeOwnTransactions)
        #expect(wire.originThrough == 7 && wire.originThroughIndex == 2 && wire.originThroughTimestamp == 99)
        #expect(wire.hasRoutes && wire.routes.lazyByDefault && wire.routes.exceptions == [0xA, 0xB])
        #expect(wire.subscriptions.map(\.argumentsJson) == set.entries.map { ArgumentsJSON.encode($0.arguments) })
        #expect(wire.subscriptions.map(\.id) == set.entries.map(\.id))
        #expect(SessionMessage(wire: .subscribe(wire)) == .subscribe(subscribe))
        // No routes, no field: every origin in full.
        var plain = wire
        plain.clearRoutes()
        guard case .subscribe(let back)? = SessionMessage(wire: .subscribe(plain)) else {
            Issue.record("not a Subscribe")
            return
        }
        #expect(back.routes == nil)
    }

    /// Arguments are read once, where the Subscribe is decoded; a text that is not
    /// arguments travels on as it came, and the publisher refuses it in the words it always did.
    @Test func argumentsAreReadAtTheCodecAndMalformedOnesKeptForThePublisher() throws {
        var wire = Shoal_V1_Subscribe()
        wire.generation = 1
        var good = Shoal_V1_Subscription()
        good.query = "SELECT * FROM boats WHERE size > :n"
        good.argumentsJson = "{\"n\": 10}"
        var bad = Shoal_V1_Subscription()
        bad.query = "SELECT * FROM cars WHERE id = :id"
        bad.argumentsJson = "[1]"
        wire.subscriptions = [good, bad]
        guard case .subscribe(let subscribe)? = SessionMessage(wire: .subscribe(wire)) else {
            Issue.record("not a Subscribe")
            return
        }
        #expect(try subscribe.subscriptions[0].arguments.get() == ["n": 10])
        guard case .failure(let malformed) = subscribe.subscriptions[1].arguments else {
            Issue.record("[1] read as arguments")
            return
        }
        #expect(malformed.text == "[1]")
        #expect(malformed.description == "arguments: an array, not a JSON object like {\"id\": \"a\"}")
        // Sent on, the text is the one received.
        guard case .subscribe(let again) = SessionMessage.subscribe(subscribe).wire else { return }
        #expect(again.subscriptions.map(\.argumentsJson) == ["{\"n\":10}", "[1]"])
        var machine = SessionStateMachine(configuration: .init(peer: SiteID(0xB)))
        let refused = machine.handle(.received(.subscribe(subscribe)), now: 0)
        guard case .close(let error?)? = refused.last else {
            Issue.record("not refused: \(refused)")
            return
        }
        #expect(error.code == .invalidQuery)
        #expect(
            error.message
                == "subscription 'SELECT * FROM cars WHERE id = :id' rejected: arguments: an array, not a JSON object like {\"id\": \"a\"}")
    }

    @Test(arguments: [
        (SessionMessage.Ack.batch(through: 9), UInt64(9), UInt64(0), false),
        (.batch(through: 9, heldThrough: 4), 9, 4, false),
        (.heldOnly(heldThrough: 12), 0, 12, true),
    ])
    func anAckIsABatchsOrOnlyHowFarTheSenderHolds(ack: SessionMessage.Ack, through: UInt64, held: UInt64, heldOnly: Bool) {
        guard case .ack(let wire) = SessionMessage.ack(ack).wire else {
            Issue.record("not an Ack")
            return
        }
        #expect(wire.throughSequence == through && wire.heldThrough == held && wire.heldOnly == heldOnly)
        #expect(SessionMessage(wire: .ack(wire)) == .ack(ack))
    }

    @Test func aHeldOnlyAckAcknowledgesNoBatchWhateverItsThroughSequence() {
        var wire = Shoal_V1_Ack()
        wire.throughSequence = 40
        wire.heldThrough = 30
        wire.heldOnly = true
        #expect(SessionMessage(wire: .ack(wire)) == .ack(.heldOnly(heldThrough: 30)))
    }

    /// A Pong echoes the Ping's freshness as it came, in its order, site 0 and a site
    /// named twice included, and fields this version does not know; what it vouches is
    /// read apart (`Freshness.entries`).
    @Test func aPongEchoesThePingsFreshnessAsItCame() throws {
        var wire = Shoal_V1_Ping()
        wire.nonce = 7
        wire.sentAtMicros = 4_990_001
        wire.freshness = [(UInt64(0xC), UInt64(5)), (0, 9), (0xA, 3), (0xC, 8)].map { site, millis in
            var entry = Shoal_V1_Freshness()
            entry.siteID = site
            entry.throughMillis = millis
            return entry
        }
        guard case .ping(let ping)? = SessionMessage(wire: .ping(wire)) else {
            Issue.record("not a Ping")
            return
        }
        #expect(ping.nonce == 7 && ping.sentAtMicros == 4_990_001)
        #expect(SessionMessage.pong(ping).wire == .pong(wire))
        #expect(Freshness.entries(ping.freshness) == [SiteID(0xC): 8, SiteID(0xA): 3])
        // Fields this version does not know are echoed too, byte for byte.
        let bytes = try wire.serializedBytes() + [0x48, 0x05, 0x52, 0x02, 0x68, 0x69]
        guard case .ping(let newer)? = SessionMessage(wire: .ping(try Shoal_V1_Ping(serializedBytes: bytes))),
            case .pong(let echoed) = SessionMessage.pong(newer).wire
        else {
            Issue.record("not a Ping")
            return
        }
        #expect(try echoed.serializedBytes() == bytes)
        // What this node vouches goes newest first.
        #expect(Freshness.list([SiteID(0xA): 3, SiteID(0xC): 8]) == [.init(site: SiteID(0xC), throughMillis: 8), .init(site: SiteID(0xA), throughMillis: 3)])
    }

    @Test func aRouteUpdateWithoutRoutesAsksForEveryOrigin() {
        #expect(SessionMessage(wire: .routeUpdate(Shoal_V1_RouteUpdate())) == .routeUpdate(.everything))
        let routes = RouteTable.Routes(lazyByDefault: true, exceptions: [SiteID(0xB)])
        #expect(SessionMessage(wire: SessionMessage.routeUpdate(routes).wire) == .routeUpdate(routes))
    }

    @Test func aTransactionRequestNamesTheTransactionAndItsCollections() {
        let request = SessionMessage.TransactionRequest(
            requestID: 5, transaction: TransactionID(origin: SiteID(0xA), sequence: 3), collections: ["cars", "boats"])
        guard case .transactionRequest(let wire) = SessionMessage.transactionRequest(request).wire else {
            Issue.record("not a TransactionRequest")
            return
        }
        #expect(wire.requestID == 5 && wire.originSite == 0xA && wire.originSequence == 3 && wire.collections == ["cars", "boats"])
        #expect(SessionMessage(wire: .transactionRequest(wire)) == .transactionRequest(request))
    }

    /// An Error is the peer's: it closes the session without a reply.
    @Test func anErrorIsThePeers() {
        guard case .error(let error)? = SessionMessage(wire: .fatal(.shuttingDown, "bye")) else {
            Issue.record("not an Error")
            return
        }
        #expect(error.fromPeer && error.code == .shuttingDown && error.message == "bye")
        #expect(SessionMessage.error(error).wire == .fatal(.shuttingDown, "bye"))
    }

    /// What is no session message becomes an event of its own: a DeltaBatch its payload,
    /// the frames of a handshake or an admin session out of place.
    @Test func framesThatAreNoSessionMessageAreEventsOfTheirOwn() throws {
        var batch = Shoal_V1_DeltaBatch()
        batch.throughSequence = 9
        batch.subscribeGeneration = 1
        #expect(SessionMessage(wire: .deltaBatch(batch)) == nil)
        guard case .receivedDeltaBatch(let payload) = SessionStateMachine.Event(received: .deltaBatch(batch)) else {
            Issue.record("a DeltaBatch is read from its payload")
            return
        }
        #expect(payload == (try batch.serializedBytes()))
        for wire: WireMessage in [
            .hello(Shoal_V1_Hello()), .proof(Shoal_V1_Proof()), .adminRequest(Shoal_V1_AdminRequest()),
            .adminResponse(Shoal_V1_AdminResponse()),
        ] {
            guard case .receivedOutOfPlace(let type) = SessionStateMachine.Event(received: wire) else {
                Issue.record("\(wire.type) read as a session message")
                continue
            }
            #expect(type == wire.type)
        }
    }
}

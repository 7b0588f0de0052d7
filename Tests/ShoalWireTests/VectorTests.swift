import Foundation
import NIOCore
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing
import CompressNIO

/// The frames of the conformance kit (`Protocol/vectors/`, PROTOCOL.md §15.5): every
/// entry of `manifest.json` that is a frame decodes to its expected message (the
/// `.json` beside it), and an `exact` one is that message as this encoder writes it,
/// byte for byte (a compressed one is compared inflated, since other zlib
/// implementations deflate differently).
///
/// The messages below are where the vectors come from: `SHOAL_WRITE_VECTORS=1` writes
/// each one's `.hex` and `.json` after a deliberate protocol change. The manifest is
/// written by hand; `ConformanceKitTests` checks that it and these agree.
@Suite struct VectorTests {
    /// A vector as this code builds it: where it goes, what its file says, the message.
    struct Definition: Sendable, CustomStringConvertible {
        var path: String
        var comment: String
        var message: WireMessage
        var description: String { path }
        /// The expected message beside the `.hex`.
        var expectedPath: String { String(path.dropLast(4)) + ".json" }
    }

    static func subscription(_ query: String, arguments: String = "") -> Shoal_V1_Subscription {
        var s = Shoal_V1_Subscription()
        s.query = query
        s.argumentsJson = arguments
        // FNV-1a of query, U+0000 and the canonical arguments object (8.2).
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in (query + "\u{0}" + (arguments.isEmpty ? "{}" : arguments)).utf8 {
            h ^= UInt64(byte)
            h = h &* 0x0000_0100_0000_01b3
        }
        s.id = String(format: "%016llx", h)
        return s
    }

    /// A piece of a transaction that wrote 2 cars and 1 boat (4 deltas), as sent to a
    /// node subscribed to red cars: one car sent whole, the boat collection vouched for.
    static func piece() -> Shoal_V1_TransactionPiece {
        var t = Shoal_V1_TransactionPiece()
        t.originSite = 0x1122_3344_5566_7788
        t.originSequence = 42
        t.deltaCount = 4
        t.documentCount = 3
        t.collections = [("cars", 2, 3), ("boats", 1, 1)].map { (c: String, d: UInt32, n: UInt32) in
            var m = Shoal_V1_CollectionCount()
            m.collection = c
            m.documents = d
            m.deltas = n
            return m
        }
        t.baseTimestamp = 0x0000_018B_CFE5_6800_0000
        var car = Shoal_V1_DocumentDeltas()
        car.collection = "cars"
        car.documentID = "\"a\""
        car.deltaCount = 2
        car.deltas = [("_id", "\"a\"", 0, 0), ("color", "\"red\"", 1, 1)].map { (field: String, value: String, offset: Int64, index: UInt32) in
            var f = Shoal_V1_FieldDelta()
            f.field = field
            f.valueJson = Data(value.utf8)
            f.timestampOffset = Int64(offset)
            f.index = UInt32(index)
            return f
        }
        t.documents = [car]
        var notRed = Shoal_V1_Verdict()
        notRed.collection = "cars"
        notRed.coverage = .notCovered
        notRed.filter = 0
        var boats = Shoal_V1_Verdict()
        boats.collection = "boats"
        boats.coverage = .notCovered
        boats.filter = 1
        var unknown = Shoal_V1_Verdict()
        unknown.collection = "boats"
        unknown.coverage = .unknown
        var superseded = Shoal_V1_Verdict()
        superseded.collection = "cars"
        superseded.coverage = .superseded
        var later = Shoal_V1_TransactionRef()
        later.originSite = 0x1122_3344_5566_7788
        later.originSequence = 43
        superseded.supersededBy = [later]
        t.verdicts = [notRed, superseded, boats, unknown]
        t.last = true
        var context = Shoal_V1_ContextDocument()
        context.collection = "cars"
        context.documentID = "\"a\""
        var size = Shoal_V1_ContextField()
        size.field = "size"
        size.valueJson = Data("3".utf8)
        size.timestamp = 0x0000_018B_CFE5_0000_0000
        size.originSite = 0x99
        size.originSequence = 7
        context.fields = [size]
        t.context = [context]
        return t
    }

    static func filter() -> Shoal_V1_SubscriptionFilter {
        var f = Shoal_V1_SubscriptionFilter()
        f.subscriptions = [subscription("SELECT * FROM boats WHERE size > :n", arguments: "{\"n\":10}")]
        return f
    }


    /// A transaction setting "color" to "blue" on 40 cars, one delta each, as the last
    /// piece a publisher sends: vouching for the cars it does not send with the
    /// verdict NOT_COVERED by the receiver's own subscriptions, as the node always does.
    static func blueCars(encoding: PieceCodec.DeltaEncoding) -> Shoal_V1_DeltaBatch {
        let id = TransactionID(origin: SiteID(0x1122_3344_5566_7788), sequence: 9)
        let base = UInt64(1_700_000_000_000) << 16
        let deltas = (0..<40).map { i in
            Delta(
                collection: "cars", documentID: "\"car-\(i)\"", field: "color", valueJSON: "\"blue\"",
                timestamp: HybridTimestamp(rawValue: base + UInt64(i)), transaction: id, index: UInt32(i), count: 40)
        }
        let receiver = SubscriptionFilter([.init(query: "SELECT * FROM cars WHERE color = 'red'", argumentsJSON: "")])
        let piece = TransactionPiece(
            id: id, deltaCount: 40, documentCount: 40, collections: [CollectionCount(collection: "cars", documents: 40, deltas: 40)],
            deltas: deltas, documentDeltaCounts: Dictionary(uniqueKeysWithValues: deltas.map { (DocumentRef(collection: "cars", id: $0.documentID), 1) }),
            verdicts: [Verdict(collection: "cars", coverage: .notCovered(receiver))], isLast: true)
        var batch = Shoal_V1_DeltaBatch()
        (batch.pieces, batch.filters) = PieceCodec.encode([piece], receiver: receiver, encoding: encoding)
        batch.throughSequence = 40
        batch.subscribeGeneration = 1
        return batch
    }

    /// The Hello a node of this version opens with (`HandshakeStateMachine.start`).
    static func nodeHello(versions: ClosedRange<UInt32> = HandshakeStateMachine.supportedVersions) -> WireMessage {
        var handshake = HandshakeStateMachine(
            configuration: .init(
                siteID: SiteID(0x0123_4567_89ab_cdef), nodeName: "alpha", meshName: "default", meshKey: nil,
                listenAddress: "127.0.0.1:7470", versions: versions,
                freshness: [SiteID(0xfedc_ba98_7654_3210): 1_700_000_000_000],
                holdsOthersWrites: true, limits: PeerLimits(maximumFrameSize: 16 << 20, documentSizeHardLimit: 4 << 20)),
            nonce: (0..<32).map { UInt8($0) })
        guard case .send(let hello)? = handshake.start().first else { return .hello(Shoal_V1_Hello()) }
        return hello
    }

    /// A version 2 answer's piece written again as a version 3 session writes it.
    static func steppedPieces(_ answer: Shoal_V1_TransactionPieces) -> Shoal_V1_TransactionPieces {
        let receiver = SubscriptionFilter([.init(query: "SELECT * FROM cars WHERE color = 'red'", argumentsJSON: "")])
        guard
            let pieces = try? PieceCodec.decode(
                [answer.piece], filters: answer.filters, receiver: receiver, collections: ["cars", "boats"], encoding: .absolute)
        else { return answer }
        var stepped = answer
        let (wire, filters) = PieceCodec.encode(pieces, receiver: receiver, encoding: .stepped)
        stepped.piece = wire[0]
        stepped.filters = filters
        return stepped
    }

    static let frames: [Definition] = {
        var hello = Shoal_V1_Hello()
        hello.minVersion = 1
        hello.maxVersion = 2
        hello.siteID = 0x0123_4567_89ab_cdef
        hello.nodeName = "alpha"
        hello.meshName = "default"
        hello.nonce = Data((0..<32).map { UInt8($0) })
        hello.role = .peer
        hello.listenAddress = "127.0.0.1:7470"
        var proof = Shoal_V1_Proof()
        // HMAC-SHA256 as worked out in section 15.3 (HandshakeStateMachineTests recomputes it).
        proof.mac = Data([
            0x52, 0xee, 0x5f, 0xb2, 0xb5, 0x78, 0xd9, 0x01, 0x2d, 0xd0, 0x48, 0xef, 0x65, 0xb7, 0x68, 0x9d,
            0x0c, 0xf4, 0x56, 0x73, 0x4f, 0x46, 0x66, 0x81, 0x0f, 0x74, 0x1e, 0x1f, 0xbd, 0x62, 0xe5, 0x5b,
        ])
        var error = Shoal_V1_Error()
        error.code = .meshKeyMismatch
        error.message = "mesh key mismatch: the peer's proof does not match this node's mesh key"
        error.fatal = true
        var ping = Shoal_V1_Ping()
        ping.nonce = 1
        ping.sentAtMicros = 5_016_871
        var subscribe = Shoal_V1_Subscribe()
        subscribe.subscriptions = [
            subscription("SELECT * FROM cars WHERE color = 'red'"),
            subscription("SELECT * FROM boats WHERE size > :n", arguments: "{\"n\":10}"),
        ]
        subscribe.resumeAfter = 12
        subscribe.generation = 2
        var subscribeOwn = Shoal_V1_Subscribe()
        subscribeOwn.subscriptions = [subscription("SELECT * FROM cars WHERE color = 'red'")]
        subscribeOwn.generation = 1
        subscribeOwn.includeOwnTransactions = true
        var batch = Shoal_V1_DeltaBatch()
        batch.pieces = [piece()]
        batch.filters = [filter()]
        batch.throughSequence = 57
        batch.subscribeGeneration = 2
        // The same batch in a version 3 session, with car "a"'s color written at index 2 and
        // base_timestamp + 5: `_id` steps 0 and 0 (absent), `color` index_step 1, timestamp_step 4.
        var stepped = batch
        stepped.pieces[0].documents[0].deltas[0].index = 0
        stepped.pieces[0].documents[0].deltas[0].timestampOffset = 0
        stepped.pieces[0].documents[0].deltas[1].index = 0
        stepped.pieces[0].documents[0].deltas[1].timestampOffset = 0
        stepped.pieces[0].documents[0].deltas[1].indexStep = 1
        stepped.pieces[0].documents[0].deltas[1].timestampStep = 4
        var ack = Shoal_V1_Ack()
        ack.throughSequence = 77
        var attachmentRequest = Shoal_V1_AttachmentRequest()
        attachmentRequest.requestID = 3
        attachmentRequest.hash = String(repeating: "ab", count: 32)
        attachmentRequest.offset = 1_048_576
        attachmentRequest.maxLength = 1_048_576
        var chunk = Shoal_V1_AttachmentChunk()
        chunk.requestID = 3
        chunk.hash = String(repeating: "ab", count: 32)
        chunk.found = true
        chunk.offset = 1_048_576
        chunk.totalLength = 1_048_581
        chunk.data = Data("hello".utf8)
        var transactionRequest = Shoal_V1_TransactionRequest()
        transactionRequest.requestID = 5
        transactionRequest.originSite = 0x1122_3344_5566_7788
        transactionRequest.originSequence = 42
        transactionRequest.collections = ["boats"]
        var pieces = Shoal_V1_TransactionPieces()
        pieces.requestID = 5
        pieces.found = true
        var answered = piece()
        answered.context = []
        pieces.piece = answered
        pieces.filters = [filter()]
        var notFound = Shoal_V1_TransactionPieces()
        notFound.requestID = 6
        var adminExec = Shoal_V1_AdminRequest()
        adminExec.requestID = 0
        var exec = Shoal_V1_ExecRequest()
        exec.statements = "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': :c})"
        exec.argumentsJson = "{\"c\":\"red\"}"
        adminExec.exec = exec
        var execResponse = Shoal_V1_AdminResponse()
        var execResult = Shoal_V1_ExecResponse()
        execResult.mutatedDocumentIds = ["\"a\""]
        execResult.transactionID = "0123456789abcdef:1"
        execResponse.exec = execResult
        var statusRequest = Shoal_V1_AdminRequest()
        statusRequest.requestID = 1
        statusRequest.status = Shoal_V1_StatusRequest()
        return [
            Definition(
                path: "v1/hello.hex",
                comment: """
                    Hello (type 0x01), uncompressed. min_version 1, max_version 2, site_id 0x0123456789abcdef,
                    node_name "alpha", mesh_name "default", nonce 00 01 .. 1f, role PEER, listen_address "127.0.0.1:7470".
                    """,
                message: .hello(hello)),
            Definition(
                path: "v1/proof.hex",
                comment: """
                    Proof (type 0x02): the MAC of section 15.3 (key "correct horse battery staple", receiver
                    nonce 01 x 32, sender nonce 09 x 32, sender site 2).
                    """,
                message: .proof(proof)),
            Definition(
                path: "v1/proof-empty.hex", comment: "Proof (type 0x02) with an empty mac: a side without a mesh key.",
                message: .proof(Shoal_V1_Proof())),
            Definition(
                path: "v1/error.hex",
                comment: """
                    Error (type 0x03), uncompressed. code MESH_KEY_MISMATCH (4), fatal true, message
                    "mesh key mismatch: the peer's proof does not match this node's mesh key".
                    """,
                message: .error(error)),
            Definition(path: "v1/ping.hex", comment: "Ping (type 0x04): nonce 1, sent_at_micros 5016871.", message: .ping(ping)),
            Definition(path: "v1/pong.hex", comment: "Pong (type 0x05): the Ping above, echoed.", message: .pong(ping)),
            Definition(
                path: "v2/subscribe.hex",
                comment: """
                    Subscribe (type 0x06): "SELECT * FROM cars WHERE color = 'red'" and
                    "SELECT * FROM boats WHERE size > :n" with arguments {"n":10}, each with its FNV-1a id;
                    resume_after 12, generation 2.
                    """,
                message: .subscribe(subscribe)),
            Definition(
                path: "v2/subscribe-include-own.hex",
                comment: """
                    Subscribe (type 0x06) of a node that evicted documents: "SELECT * FROM cars WHERE
                    color = 'red'" with its FNV-1a id, resume_after 0 (absent), generation 1,
                    include_own_transactions true.
                    """,
                message: .subscribe(subscribeOwn)),
            Definition(
                path: "v2/delta-batch.hex",
                comment: """
                    DeltaBatch (type 0x07), version 2, uncompressed (under 1024 bytes). One piece, the last, of
                    transaction 1122334455667788:42, which wrote 4 deltas to 3 documents (cars: 2 documents,
                    3 deltas; boats: 1, 1). It carries car "a" whole (2 deltas: _id at base_timestamp + 0,
                    color "red" at + 1, indices 0 and 1), the verdicts cars NOT_COVERED filter 0,
                    cars SUPERSEDED by 1122334455667788:43, boats NOT_COVERED filter 1, boats UNKNOWN, and
                    context: car "a" field size = 3 written by 0000000000000099:7. filters[0] is
                    "SELECT * FROM boats WHERE size > :n" {"n":10}. through_sequence 57, subscribe_generation 2.
                    """,
                message: .deltaBatch(batch)),
            Definition(
                path: "v3/delta-batch.hex",
                comment: """
                    DeltaBatch (type 0x07), version 3, uncompressed: delta-batch.hex with stepped deltas, and car "a"'s
                    color written at index 2, base_timestamp + 5. _id: index_step 0, timestamp_step 0 (both absent:
                    index -1 + 1 + 0 = 0, timestamp base - 1 + 1 + 0 = base). color: index_step 1, timestamp_step 4
                    (index 0 + 1 + 1 = 2, timestamp base + 1 + 4 = base + 5). No index or timestamp_offset is sent.
                    """,
                message: .deltaBatch(stepped)),
            Definition(
                path: "v2/delta-batch-compressed.hex",
                comment: """
                    DeltaBatch (type 0x07), version 2, flags 0x01: the payload is a zlib stream. One piece, the
                    last, of transaction 1122334455667788:9 (40 documents, 40 deltas, all in "cars"), setting
                    "color" to "blue" on documents "car-0" .. "car-39"; base_timestamp 1700000000000 << 16,
                    offsets 0 .. 39, indices 0 .. 39; the verdict cars NOT_COVERED filter 0 (PROTOCOL.md 8.8);
                    through_sequence 40, subscribe_generation 1.
                    """,
                message: .deltaBatch(blueCars(encoding: .absolute))),
            Definition(path: "v2/ack.hex", comment: "Ack (type 0x08): through_sequence 77.", message: .ack(ack)),
            Definition(
                path: "v2/attachment-request.hex",
                comment: "AttachmentRequest (type 0x09): request_id 3, hash ab x 32, offset 1048576, max_length 1048576.",
                message: .attachmentRequest(attachmentRequest)),
            Definition(
                path: "v2/attachment-chunk.hex",
                comment: """
                    AttachmentChunk (type 0x0A): request_id 3, hash ab x 32, found, offset 1048576,
                    total_length 1048581, data "hello" (the last 5 bytes).
                    """,
                message: .attachmentChunk(chunk)),
            Definition(
                path: "v2/transaction-request.hex",
                comment: "TransactionRequest (type 0x0B): request_id 5, transaction 1122334455667788:42, collections [boats].",
                message: .transactionRequest(transactionRequest)),
            Definition(
                path: "v2/transaction-pieces.hex",
                comment: """
                    TransactionPieces (type 0x0C): request_id 5, found, the piece of delta-batch.hex without its
                    context (answers carry none), and the same filters table.
                    """,
                message: .transactionPieces(pieces)),
            Definition(
                path: "v2/transaction-pieces-not-found.hex",
                comment: "TransactionPieces (type 0x0C): request_id 6, found false: the asked side has not applied it.",
                message: .transactionPieces(notFound)),
            Definition(
                path: "v1/admin-request-exec.hex",
                comment: """
                    AdminRequest (type 0x10): request_id 0, exec "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': :c})"
                    with arguments_json {"c":"red"}.
                    """,
                message: .adminRequest(adminExec)),
            Definition(
                path: "v1/admin-response-exec.hex",
                comment: """
                    AdminResponse (type 0x11): request_id 0, exec: no items, mutated_document_ids ["\"a\""],
                    transaction_id "0123456789abcdef:1".
                    """,
                message: .adminResponse(execResponse)),
            Definition(
                path: "v1/admin-request-exec-budget.hex",
                comment: """
                    AdminRequest (type 0x10): request_id 7, exec "UPDATE counters APPLY n INCREMENT BY 1 WHERE _id = 'c'"
                    with budget_millis 2000: the node starts and commits no write of it later than 2 s after reading it
                    (PROTOCOL.md section 10.2).
                    """,
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 7
                    var e = Shoal_V1_ExecRequest()
                    e.statements = "UPDATE counters APPLY n INCREMENT BY 1 WHERE _id = 'c'"
                    r.exec = e
                    r.budgetMillis = 2000
                    return r
                }())),
            Definition(
                path: "v1/admin-request-status.hex", comment: "AdminRequest (type 0x10): request_id 1, status {}.",
                message: .adminRequest(statusRequest)),
            Definition(
                path: "v1/admin-request-status-digests.hex",
                comment: "AdminRequest (type 0x10): request_id 2, status {digests: true} (PROTOCOL.md section 10).",
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 2
                    var s = Shoal_V1_StatusRequest()
                    s.digests = true
                    r.status = s
                    return r
                }())),
            Definition(
                path: "v1/admin-request-begin.hex",
                comment: "AdminRequest (type 0x10): request_id 3, begin {hint \"nightly fix\", read_only false} (section 10.1).",
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 3
                    var b = Shoal_V1_BeginRequest()
                    b.hint = "nightly fix"
                    r.begin = b
                    return r
                }())),
            Definition(
                path: "v1/admin-request-commit.hex", comment: "AdminRequest (type 0x10): request_id 5, commit {} (section 10.1).",
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 5
                    r.commit = Shoal_V1_CommitRequest()
                    return r
                }())),
            Definition(
                path: "v1/admin-response-transaction.hex",
                comment: """
                    AdminResponse (type 0x11): request_id 5, transaction: id "00112233445566778899aabbccddeeff",
                    hint "nightly fix", state "committed", transaction_id "0123456789abcdef:2", age_seconds 2.5: it
                    was open for 2.5 s (section 10.1).
                    """,
                message: .adminResponse({
                    var r = Shoal_V1_AdminResponse()
                    r.requestID = 5
                    var t = Shoal_V1_SessionTransaction()
                    t.id = "00112233445566778899aabbccddeeff"
                    t.hint = "nightly fix"
                    t.state = "committed"
                    t.transactionID = "0123456789abcdef:2"
                    t.ageSeconds = 2.5
                    r.transaction = t
                    return r
                }())),
            Definition(
                path: "v1/admin-request-attachment-put-part.hex",
                comment: """
                    AdminRequest (type 0x10): request_id 4, attachment_put: the second part of a put in parts,
                    upload_id 7, offset 1048576, more true, data 01 02 03 04, metadata_json "" (PROTOCOL.md section 10).
                    """,
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 4
                    var p = Shoal_V1_AttachmentPutRequest()
                    p.data = Data([1, 2, 3, 4])
                    p.uploadID = 7
                    p.offset = 1_048_576
                    p.more = true
                    r.attachmentPut = p
                    return r
                }())),
            Definition(
                path: "v1/admin-response-attachment-upload.hex",
                comment: "AdminResponse (type 0x11): request_id 4, upload {upload_id 7, received 1048580}.",
                message: .adminResponse({
                    var r = Shoal_V1_AdminResponse()
                    r.requestID = 4
                    var u = Shoal_V1_AttachmentUpload()
                    u.uploadID = 7
                    u.received = 1_048_580
                    r.upload = u
                    return r
                }())),
            Definition(
                path: "v1/admin-request-attachment-get-offset.hex",
                comment: "AdminRequest (type 0x10): request_id 5, attachment_get {hash ab x 32, offset 3145728}.",
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 5
                    var g = Shoal_V1_AttachmentGetRequest()
                    g.hash = String(repeating: "ab", count: 32)
                    g.offset = 3_145_728
                    r.attachmentGet = g
                    return r
                }())),
            Definition(
                path: "v1/admin-request-page.hex",
                comment: """
                    AdminRequest (type 0x10): request_id 6, page {query "SELECT * FROM cars WHERE color = :c",
                    arguments_json {"c":"red"}, after_key "\"a\"", limit 2} (PROTOCOL.md section 10).
                    """,
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 6
                    var p = Shoal_V1_PageRequest()
                    p.query = "SELECT * FROM cars WHERE color = :c"
                    p.argumentsJson = "{\"c\":\"red\"}"
                    p.afterKey = "\"a\""
                    p.limit = 2
                    r.page = p
                    return r
                }())),
            Definition(
                path: "v1/admin-response-page.hex",
                comment: """
                    AdminResponse (type 0x11): request_id 6, page: items_json [{"_id":"b","color":"red"},
                    {"_id":"c","color":"red"}], last_key "\"c\"" (the next page's after_key).
                    """,
                message: .adminResponse({
                    var r = Shoal_V1_AdminResponse()
                    r.requestID = 6
                    var p = Shoal_V1_Page()
                    p.itemsJson = ["{\"_id\":\"b\",\"color\":\"red\"}", "{\"_id\":\"c\",\"color\":\"red\"}"]
                    p.lastKey = "\"c\""
                    r.page = p
                    return r
                }())),
            Definition(
                path: "v3/hello.hex",
                comment: """
                    Hello (type 0x01) of a version 3 node, as HandshakeStateMachine writes it: min_version 1,
                    max_version 3, site_id 0x0123456789abcdef, node_name "alpha", mesh_name "default", nonce
                    00 01 .. 1f, role PEER, listen_address "127.0.0.1:7470", freshness [{site_id 0xfedcba9876543210,
                    through_millis 1700000000000}], holds_only_own_writes false (absent), max_frame_size 16777216,
                    document_size_hard_limit 4194304 (PROTOCOL.md 6.1).
                    """,
                message: nodeHello(versions: 1...3)),
            Definition(
                path: "v4/hello.hex",
                comment: """
                    Hello (type 0x01) of a node of this version: v3/hello.hex with max_version 4 (PROTOCOL.md 6.1, 13).
                    """,
                message: nodeHello()),
            Definition(
                path: "v4/subscribe-routes.hex",
                comment: """
                    Subscribe (type 0x06), version 4: one subscription "SELECT * FROM cars", resume_after 0,
                    generation 1, routes {lazy_by_default true, exceptions [0x0123456789abcdef]}: every origin
                    offered but the publisher's own, which it sends in full (PROTOCOL.md 8.11).
                    """,
                message: .subscribe({
                    var s = Shoal_V1_Subscribe()
                    s.subscriptions = [subscription("SELECT * FROM cars")]
                    s.generation = 1
                    var routes = Shoal_V1_Routes()
                    routes.lazyByDefault = true
                    routes.exceptions = [0x0123_4567_89ab_cdef]
                    s.routes = routes
                    return s
                }())),
            Definition(
                path: "v4/subscribe-interests.hex",
                comment: """
                    Subscribe (type 0x06), version 4, from a relay subscribed to boats that carries cars for
                    node c3: subscriptions ["SELECT * FROM boats", "SELECT * FROM cars"], resume_after 40,
                    generation 2, interests [{origin 0x0123456789abcdef (the sender), generation
                    0x018bcfe568000000 (its clock at 1700000000000 ms), ["SELECT * FROM boats"]}, {origin 0xc3,
                    generation 0x018bcfe56c000002, ["SELECT * FROM cars"]}], continues true: only what it says of
                    c3 changed, the publisher's stream goes on (PROTOCOL.md 8.2).
                    """,
                message: .subscribe({
                    var s = Shoal_V1_Subscribe()
                    s.subscriptions = [subscription("SELECT * FROM boats"), subscription("SELECT * FROM cars")]
                    s.resumeAfter = 40
                    s.generation = 2
                    s.interests = [
                        (0x0123_4567_89ab_cdef, 0x018b_cfe5_6800_0000, "SELECT * FROM boats"),
                        (0xc3, 0x018b_cfe5_6c00_0002, "SELECT * FROM cars"),
                    ].map { (origin: UInt64, generation: UInt64, query: String) in
                        var i = Shoal_V1_Interest()
                        i.origin = origin
                        i.generation = generation
                        i.subscriptions = [subscription(query)]
                        return i
                    }
                    s.continues = true
                    return s
                }())),
            Definition(
                path: "v4/route-update.hex",
                comment: """
                    RouteUpdate (type 0x0D), version 4: routes {lazy_by_default true, exceptions
                    [0x0123456789abcdef, 0x00000000000000c3]}: origin c3 turns eager on this link (a graft,
                    PROTOCOL.md 8.11).
                    """,
                message: .routeUpdate({
                    var u = Shoal_V1_RouteUpdate()
                    var routes = Shoal_V1_Routes()
                    routes.lazyByDefault = true
                    routes.exceptions = [0xc3, 0x0123_4567_89ab_cdef]
                    u.routes = routes
                    return u
                }())),
            Definition(
                path: "v4/delta-batch-offered.hex",
                comment: """
                    DeltaBatch (type 0x07), version 4: no pieces, through_sequence 90, subscribe_generation 1,
                    offered [{origin_site 0xc3, origin_sequence 17, log_sequence 81}, {origin_site 0xc3,
                    origin_sequence 18, log_sequence 86}]: two transactions of a lazy origin (PROTOCOL.md 8.11).
                    """,
                message: .deltaBatch({
                    var b = Shoal_V1_DeltaBatch()
                    b.throughSequence = 90
                    b.subscribeGeneration = 1
                    b.offered = [(17, 81), (18, 86)].map { (sequence: UInt64, log: UInt64) in
                        var o = Shoal_V1_Offer()
                        o.originSite = 0xc3
                        o.originSequence = sequence
                        o.logSequence = log
                        return o
                    }
                    return b
                }())),
            Definition(
                path: "v4/ack-held.hex",
                comment: """
                    Ack (type 0x08), version 4: through_sequence 90, held_through 80: the batch through 90 is
                    durable, and an offer beginning at 81 is not resolved yet (PROTOCOL.md 8.4, 8.11).
                    """,
                message: .ack({
                    var a = Shoal_V1_Ack()
                    a.throughSequence = 90
                    a.heldThrough = 80
                    return a
                }())),
            Definition(
                path: "v4/ack-held-only.hex",
                comment: """
                    Ack (type 0x08), version 4: held_through 90, held_only true: the offers up to 90 were
                    resolved by another link; no batch is acknowledged (PROTOCOL.md 8.11).
                    """,
                message: .ack({
                    var a = Shoal_V1_Ack()
                    a.heldThrough = 90
                    a.heldOnly = true
                    return a
                }())),
            Definition(
                path: "v3/delta-batch-compressed.hex",
                comment: """
                    DeltaBatch (type 0x07), version 3, flags 0x01: v2/delta-batch-compressed.hex in a version 3
                    session. Each delta follows the one before in index and in timestamp, so every index_step and
                    timestamp_step is 0 and absent (PROTOCOL.md 8.3); the verdict cars NOT_COVERED filter 0.
                    """,
                message: .deltaBatch(blueCars(encoding: .stepped))),
            Definition(
                path: "v3/transaction-pieces.hex",
                comment: """
                    TransactionPieces (type 0x0C), version 3: v2/transaction-pieces.hex as a version 3 session sends
                    it, its piece written by PieceCodec with steps: car "a"'s _id at index 0 and base_timestamp,
                    its color at index 1 and base_timestamp + 1, so no step is sent.
                    """,
                message: .transactionPieces(steppedPieces(pieces))),
        ]
    }()


    /// The discovery datagrams, checked by `announcementVectors`.
    static let datagrams: [String] = ["v1/announcement.hex", "v1/announcement-open.hex"]

    /// Writes every definition's files once, before any test reads them, when asked.
    static let written: Void = {
        guard VectorManifest.writing else { return }
        let codec = MessageCodec()
        for definition in frames {
            var encoded = ByteBuffer()
            codec.encode(definition.message).encode(into: &encoded)
            try? VectorManifest.hexDump(Array(encoded.readableBytesView), comment: definition.comment)
                .write(to: VectorManifest.url(definition.path), atomically: true, encoding: .utf8)
            try? ProtoJSON.pretty(definition.message)
                .write(to: VectorManifest.url(definition.expectedPath), atomically: true, encoding: .utf8)
        }
    }()

    /// Each frame of the kit decodes to its expected message; an `exact` one re-encodes
    /// to its bytes, a `decode` one is compressed and inflates to the expected message's
    /// plain encoding (the part another encoder must reproduce, PROTOCOL.md section 4).
    @Test(arguments: VectorManifest.entries(.frame))
    func frame(_ entry: VectorManifest.Entry) throws {
        _ = Self.written
        let codec = MessageCodec()
        let bytes = try VectorManifest.bytes(hex: String(contentsOf: VectorManifest.url(entry.file), encoding: .utf8))
        var buffer = ByteBuffer(bytes: bytes)
        let frame = try #require(try FrameDecoder().next(from: &buffer))
        #expect(buffer.readableBytes == 0, "bytes after the frame")
        let type = try #require(MessageType(rawValue: frame.type))
        #expect(entry.messageType == type.description)
        let decoded = try codec.decode(frame)
        let json = try String(contentsOf: VectorManifest.url(try #require(entry.expected)), encoding: .utf8)
        let expected = try ProtoJSON.message(type, json: json)
        #expect(decoded == expected, "the frame does not decode to \(entry.expected ?? "")")
        var encoded = ByteBuffer()
        codec.encode(expected).encode(into: &encoded)
        switch entry.match {
        case .exact:
            #expect(!frame.flags.contains(.compressed), "a compressed frame matches only once decoded")
            #expect(Array(encoded.readableBytesView) == bytes, "the expected message encodes to other bytes")
        case .decode:
            #expect(frame.flags.contains(.compressed))
            var payload = frame.payload
            let inflated = try payload.decompress(with: .zlib(), maxSize: 1 << 20)
            #expect(Array(inflated.readableBytesView) == (try Self.serialized(expected)))
            // This encoder still deflates to the very bytes, though another need not.
            #expect(Array(encoded.readableBytesView) == bytes)
        case .lines:
            Issue.record("a frame matches exact or decode")
        }
        // The message the vector was written from is the one expected.
        let definition = try #require(Self.frames.first { $0.path == entry.file }, "no definition writes \(entry.file)")
        #expect(definition.message == expected)
        #expect(definition.expectedPath == entry.expected)
    }

    /// The plain protobuf payload of a message, as a receiver sees it after inflating.
    static func serialized(_ message: WireMessage) throws -> [UInt8] {
        let plain = MessageCodec(limits: WireLimits(compressionThreshold: .max)).encode(message)
        return Array(plain.payload.readableBytesView)
    }
}

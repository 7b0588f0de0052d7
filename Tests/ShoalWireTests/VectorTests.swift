import Foundation
import NIOCore
import ShoalWire
import Testing
import CompressNIO

/// The frames in Protocol/vectors/ are the spec's examples, one at least for every
/// message type: each decodes to the message below and this encoder re-encodes it to
/// the same bytes (a compressed payload is also compared inflated, since other zlib
/// implementations may deflate differently). Run with SHOAL_WRITE_VECTORS=1 to
/// rewrite them after a deliberate protocol change.
@Suite struct VectorTests {
    struct Vector: Sendable, CustomStringConvertible {
        var file: String
        var comment: String
        var message: WireMessage
        var description: String { file }
    }

    static var vectorsDirectory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Protocol/vectors")
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

    static let vectors: [Vector] = {
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
            Vector(
                file: "hello.hex",
                comment: """
                    Hello (type 0x01), uncompressed. min_version 1, max_version 2, site_id 0x0123456789abcdef,
                    node_name "alpha", mesh_name "default", nonce 00 01 .. 1f, role PEER, listen_address "127.0.0.1:7470".
                    """,
                message: .hello(hello)),
            Vector(
                file: "proof.hex",
                comment: """
                    Proof (type 0x02): the MAC of section 15.3 (key "correct horse battery staple", receiver
                    nonce 01 x 32, sender nonce 09 x 32, sender site 2).
                    """,
                message: .proof(proof)),
            Vector(
                file: "proof-empty.hex", comment: "Proof (type 0x02) with an empty mac: a side without a mesh key.",
                message: .proof(Shoal_V1_Proof())),
            Vector(
                file: "error.hex",
                comment: """
                    Error (type 0x03), uncompressed. code MESH_KEY_MISMATCH (4), fatal true, message
                    "mesh key mismatch: the peer's proof does not match this node's mesh key".
                    """,
                message: .error(error)),
            Vector(file: "ping.hex", comment: "Ping (type 0x04): nonce 1, sent_at_micros 5016871.", message: .ping(ping)),
            Vector(file: "pong.hex", comment: "Pong (type 0x05): the Ping above, echoed.", message: .pong(ping)),
            Vector(
                file: "subscribe.hex",
                comment: """
                    Subscribe (type 0x06): "SELECT * FROM cars WHERE color = 'red'" and
                    "SELECT * FROM boats WHERE size > :n" with arguments {"n":10}, each with its FNV-1a id;
                    resume_after 12, generation 2.
                    """,
                message: .subscribe(subscribe)),
            Vector(
                file: "subscribe-include-own.hex",
                comment: """
                    Subscribe (type 0x06) of a node that evicted documents: "SELECT * FROM cars WHERE
                    color = 'red'" with its FNV-1a id, resume_after 0 (absent), generation 1,
                    include_own_transactions true.
                    """,
                message: .subscribe(subscribeOwn)),
            Vector(
                file: "delta-batch.hex",
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
            Vector(
                file: "delta-batch-v3.hex",
                comment: """
                    DeltaBatch (type 0x07), version 3, uncompressed: delta-batch.hex with stepped deltas, and car "a"'s
                    color written at index 2, base_timestamp + 5. _id: index_step 0, timestamp_step 0 (both absent:
                    index -1 + 1 + 0 = 0, timestamp base - 1 + 1 + 0 = base). color: index_step 1, timestamp_step 4
                    (index 0 + 1 + 1 = 2, timestamp base + 1 + 4 = base + 5). No index or timestamp_offset is sent.
                    """,
                message: .deltaBatch(stepped)),
            Vector(
                file: "delta-batch-compressed.hex",
                comment: """
                    DeltaBatch (type 0x07), version 2, flags 0x01: the payload is a zlib stream. One piece, the
                    last, of transaction 1122334455667788:9 (40 documents, 40 deltas, all in "cars"), setting
                    "color" to "blue" on documents "car-0" .. "car-39"; base_timestamp 1700000000000 << 16,
                    offsets 0 .. 39; through_sequence 40, subscribe_generation 1.
                    """,
                message: .deltaBatch(MessageCodecTests.batch(deltas: 40))),
            Vector(file: "ack.hex", comment: "Ack (type 0x08): through_sequence 77.", message: .ack(ack)),
            Vector(
                file: "attachment-request.hex",
                comment: "AttachmentRequest (type 0x09): request_id 3, hash ab x 32, offset 1048576, max_length 1048576.",
                message: .attachmentRequest(attachmentRequest)),
            Vector(
                file: "attachment-chunk.hex",
                comment: """
                    AttachmentChunk (type 0x0A): request_id 3, hash ab x 32, found, offset 1048576,
                    total_length 1048581, data "hello" (the last 5 bytes).
                    """,
                message: .attachmentChunk(chunk)),
            Vector(
                file: "transaction-request.hex",
                comment: "TransactionRequest (type 0x0B): request_id 5, transaction 1122334455667788:42, collections [boats].",
                message: .transactionRequest(transactionRequest)),
            Vector(
                file: "transaction-pieces.hex",
                comment: """
                    TransactionPieces (type 0x0C): request_id 5, found, the piece of delta-batch.hex without its
                    context (answers carry none), and the same filters table.
                    """,
                message: .transactionPieces(pieces)),
            Vector(
                file: "transaction-pieces-not-found.hex",
                comment: "TransactionPieces (type 0x0C): request_id 6, found false: the asked side has not applied it.",
                message: .transactionPieces(notFound)),
            Vector(
                file: "admin-request-exec.hex",
                comment: """
                    AdminRequest (type 0x10): request_id 0, exec "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': :c})"
                    with arguments_json {"c":"red"}.
                    """,
                message: .adminRequest(adminExec)),
            Vector(
                file: "admin-response-exec.hex",
                comment: """
                    AdminResponse (type 0x11): request_id 0, exec: no items, mutated_document_ids ["\"a\""],
                    transaction_id "0123456789abcdef:1".
                    """,
                message: .adminResponse(execResponse)),
            Vector(
                file: "admin-request-exec-budget.hex",
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
            Vector(
                file: "admin-request-status.hex", comment: "AdminRequest (type 0x10): request_id 1, status {}.",
                message: .adminRequest(statusRequest)),
            Vector(
                file: "admin-request-status-digests.hex",
                comment: "AdminRequest (type 0x10): request_id 2, status {digests: true} (PROTOCOL.md section 10).",
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 2
                    var s = Shoal_V1_StatusRequest()
                    s.digests = true
                    r.status = s
                    return r
                }())),
            Vector(
                file: "admin-request-begin.hex",
                comment: "AdminRequest (type 0x10): request_id 3, begin {hint \"nightly fix\", read_only false} (section 10.1).",
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 3
                    var b = Shoal_V1_BeginRequest()
                    b.hint = "nightly fix"
                    r.begin = b
                    return r
                }())),
            Vector(
                file: "admin-request-commit.hex", comment: "AdminRequest (type 0x10): request_id 5, commit {} (section 10.1).",
                message: .adminRequest({
                    var r = Shoal_V1_AdminRequest()
                    r.requestID = 5
                    r.commit = Shoal_V1_CommitRequest()
                    return r
                }())),
            Vector(
                file: "admin-response-transaction.hex",
                comment: """
                    AdminResponse (type 0x11): request_id 5, transaction: id "00112233445566778899aabbccddeeff",
                    hint "nightly fix", state "committed", transaction_id "0123456789abcdef:2" (section 10.1).
                    """,
                message: .adminResponse({
                    var r = Shoal_V1_AdminResponse()
                    r.requestID = 5
                    var t = Shoal_V1_SessionTransaction()
                    t.id = "00112233445566778899aabbccddeeff"
                    t.hint = "nightly fix"
                    t.state = "committed"
                    t.transactionID = "0123456789abcdef:2"
                    r.transaction = t
                    return r
                }())),
            Vector(
                file: "admin-request-attachment-put-part.hex",
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
            Vector(
                file: "admin-response-attachment-upload.hex",
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
            Vector(
                file: "admin-request-attachment-get-offset.hex",
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
            Vector(
                file: "admin-request-page.hex",
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
            Vector(
                file: "admin-response-page.hex",
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
        ]
    }()

    static func hexDump(_ bytes: [UInt8], comment: String) -> String {
        var out = comment.split(separator: "\n").map { "# \($0)" }.joined(separator: "\n") + "\n"
        for start in stride(from: 0, to: bytes.count, by: 16) {
            out += bytes[start..<min(start + 16, bytes.count)].map { String(format: "%02x", $0) }.joined(separator: " ") + "\n"
        }
        return out
    }

    static func parseHex(_ text: String) throws -> [UInt8] {
        var bytes: [UInt8] = []
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            for token in line.split(separator: " ") {
                bytes.append(try #require(UInt8(token, radix: 16), "bad hex byte '\(token)'"))
            }
        }
        return bytes
    }

    @Test(arguments: vectors)
    func decodesAndReencodesByteForByte(vector: Vector) throws {
        let codec = MessageCodec()
        let url = Self.vectorsDirectory.appendingPathComponent(vector.file)
        var encoded = ByteBuffer()
        codec.encode(vector.message).encode(into: &encoded)
        if ProcessInfo.processInfo.environment["SHOAL_WRITE_VECTORS"] == "1" {
            try Self.hexDump(Array(encoded.readableBytesView), comment: vector.comment)
                .write(to: url, atomically: true, encoding: .utf8)
        }
        let bytes = try Self.parseHex(String(contentsOf: url, encoding: .utf8))
        var buffer = ByteBuffer(bytes: bytes)
        let frame = try #require(try FrameDecoder().next(from: &buffer))
        #expect(buffer.readableBytes == 0)
        #expect(try codec.decode(frame) == vector.message)
        #expect(Array(encoded.readableBytesView) == bytes)
        if frame.flags.contains(.compressed) {
            var payload = frame.payload
            let inflated = try payload.decompress(with: .zlib(), maxSize: 1 << 20)
            #expect(Array(inflated.readableBytesView) == Array(try Self.serialized(vector.message)))
        }
    }

    /// The plain protobuf payload of a message, as a receiver sees it after inflating.
    static func serialized(_ message: WireMessage) throws -> [UInt8] {
        let plain = MessageCodec(limits: WireLimits(compressionThreshold: .max)).encode(message)
        return Array(plain.payload.readableBytesView)
    }

    /// Every message type of section 3 has at least one vector.
    @Test func everyMessageTypeHasAVector() throws {
        let covered = Set(Self.vectors.map(\.message.type))
        #expect(covered == Set(MessageType.allCases))
    }
}

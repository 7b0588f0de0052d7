import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import SwiftProtobuf
import Testing

/// A received DeltaBatch read straight from its payload gives the pieces SwiftProtobuf's
/// messages of the same bytes give, and refuses what SwiftProtobuf refuses.
@Suite struct DeltaBatchReaderTests {
    static let receiver = OutboundBatchTests.receiver
    static let collections: Set<String> = ["cars", "boats"]

    /// What a payload reads to: the batch's numbers and pieces, or why not.
    struct Reading: Equatable {
        var through: UInt64
        var generation: UInt64
        var version1: Bool
        var pieces: [TransactionPiece]
    }

    static func read(_ payload: [UInt8], _ encoding: PieceCodec.DeltaEncoding) -> Result<Reading, SyncError> {
        do {
            let batch = try DeltaBatchReader(payload: payload)
            let pieces = try batch.pieces(receiver: receiver, collections: collections, encoding: encoding)
            return .success(
                Reading(
                    through: batch.header.throughSequence, generation: batch.header.subscribeGeneration,
                    version1: batch.header.hasVersion1Transactions, pieces: pieces))
        } catch {
            return .failure(error)
        }
    }

    /// The same bytes through SwiftProtobuf's message, then the pieces checked by the
    /// checks as they were written over messages (`ReferencePieceDecoder`); nil when
    /// SwiftProtobuf refuses the bytes.
    static func readAsMessage(_ payload: [UInt8], _ encoding: PieceCodec.DeltaEncoding) -> Result<Reading, SyncError>? {
        guard let message = try? Shoal_V1_DeltaBatch(serializedBytes: payload) else { return nil }
        do {
            let pieces = try ReferencePieceDecoder.decode(
                message.pieces, filters: message.filters, receiver: receiver, collections: collections, encoding: encoding)
            return .success(
                Reading(
                    through: message.throughSequence, generation: message.subscribeGeneration,
                    version1: !message.transactions.isEmpty, pieces: pieces))
        } catch {
            return .failure(error)
        }
    }

    static func randomBatch(_ random: inout SplitMix, round: Int, encoding: PieceCodec.DeltaEncoding) -> OutboundBatch {
        let pieces = (0..<Int.random(in: 0...4, using: &random)).map {
            OutboundBatchTests.piece(&random, sequence: UInt64($0 + 1))
        }
        return OutboundBatch(
            pieces: pieces, receiver: receiver, encoding: encoding,
            throughSequence: round.isMultiple(of: 5) ? 0 : UInt64.random(in: 1...(1 << 50), using: &random),
            subscribeGeneration: UInt64(round % 3))
    }

    @Test(arguments: [PieceCodec.DeltaEncoding.absolute, .stepped])
    func aPayloadReadsBackToThePiecesWritten(_ encoding: PieceCodec.DeltaEncoding) throws {
        var random = SplitMix(state: encoding == .stepped ? 11 : 12)
        for round in 0..<300 {
            let batch = Self.randomBatch(&random, round: round, encoding: encoding)
            let reading = try Self.read(batch.payload(), encoding).get()
            #expect(reading.through == batch.throughSequence && reading.generation == batch.subscribeGeneration)
            #expect(reading.pieces.count == batch.pieces.count)
            for (sent, received) in zip(batch.pieces, reading.pieces) {
                #expect(received.id == sent.id && received.deltaCount == sent.deltaCount)
                #expect(Set(received.deltas) == Set(sent.deltas), "round \(round)")
                #expect(received.verdicts == sent.verdicts && received.context == sent.context && received.isLast == sent.isLast)
                #expect(received.documentDeltaCounts == sent.documentDeltaCounts && received.collections == sent.collections)
            }
        }
    }

    /// What protobuf allows a writer and SwiftProtobuf reads: fields in another order
    /// (each repeated field's values keeping theirs), unknown fields of every wire type
    /// at every level (groups too), a scalar sent twice (the last counts), a known
    /// field number with another wire type (unknown, then), varints padded with
    /// continuation bytes. The reader reads the same batch from all of it.
    @Test(arguments: [PieceCodec.DeltaEncoding.absolute, .stepped])
    func whatProtobufAllowsReadsAsSwiftProtobufReadsIt(_ encoding: PieceCodec.DeltaEncoding) throws {
        var random = SplitMix(state: encoding == .stepped ? 21 : 22)
        for round in 0..<300 {
            let batch = Self.randomBatch(&random, round: round, encoding: encoding)
            let payload = batch.payload()
            let original = try Self.read(payload, encoding).get()
            let rewritten = Rewriter.rewrite(payload, kind: .batch, random: &random)
            let message = Self.readAsMessage(rewritten, encoding)
            try #require(message != nil, "round \(round): SwiftProtobuf refuses the rewritten payload")
            #expect(try message!.get() == original, "round \(round): SwiftProtobuf reads another batch")
            #expect(try Self.read(rewritten, encoding).get() == original, "round \(round)")
        }
    }

    /// Bytes broken at random (cut short, a byte changed, a byte put in): the reader
    /// refuses whatever SwiftProtobuf refuses or the checks over its messages refuse,
    /// and what they accept it reads to the same batch.
    @Test(arguments: [PieceCodec.DeltaEncoding.absolute, .stepped])
    func brokenBytesAreRefusedAsSwiftProtobufRefusesThem(_ encoding: PieceCodec.DeltaEncoding) throws {
        var random = SplitMix(state: encoding == .stepped ? 31 : 32)
        var refused = 0
        for round in 0..<1500 {
            var payload = Self.randomBatch(&random, round: round, encoding: encoding).payload()
            guard !payload.isEmpty else { continue }
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let at = Int.random(in: 0..<payload.count, using: &random)
                switch Int.random(in: 0...2, using: &random) {
                case 0: payload.removeSubrange(at...)
                case 1: payload[at] = UInt8.random(in: 0...255, using: &random)
                default: payload.insert(UInt8.random(in: 0...255, using: &random), at: at)
                }
                if payload.isEmpty { break }
            }
            let direct = Self.read(payload, encoding)
            switch Self.readAsMessage(payload, encoding) {
            case nil:
                #expect(throws: SyncError.self, "round \(round): the reader accepts bytes SwiftProtobuf refuses") {
                    try direct.get()
                }
                refused += 1
            case .success(let reading):
                #expect(try direct.get() == reading, "round \(round)")
            case .failure(let error):
                #expect(throws: SyncError.self, "round \(round): the reader accepts a batch that breaks a rule (\(error))") {
                    try direct.get()
                }
            }
        }
        // The rounds reach both sides: bytes SwiftProtobuf refuses and bytes it reads.
        #expect(refused > 100 && refused < 1400)
    }

    @Test(arguments: [
        ([0x00, 0x01], "number 0"),  // field 0
        ([0x16, 0x01], "wire type 6"),
        ([0x14], "end group"),  // an end group with no start
        ([0x22, 0x05, 0x01], "cut off"),  // a piece of 5 bytes with 1 there
        ([0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01], "too long"),  // an 11-byte varint
        ([0x80, 0x80, 0x80, 0x80, 0x10, 0x00], "too large or too long"),  // a 5-byte tag past 2^32
        ([0x5B, 0x08, 0x01, 0x54], "another field"),  // group 11 ended as group 10
        ([0x1B, 0x08, 0x01], "group"),  // a group never ended
    ] as [([UInt8], String)])
    func malformedBytesAreRefusedWithAReason(_ payload: [UInt8], _ reason: String) throws {
        #expect(throws: (any Error).self) { try Shoal_V1_DeltaBatch(serializedBytes: payload) }
        let error = try #require(throws: SyncError.self) { try Self.read(payload, .stepped).get() }
        #expect(error.message.contains(reason) && error.message.contains("DeltaBatch"), "\(error.message)")
    }

    /// Values the checks refuse, each refused by the reader too, with the code the
    /// reference gives: not JSON, an observed removal without its site in hex, and `~`
    /// followed by a combining mark (no removal: its first character is not `~`).
    @Test(arguments: ["{\"a\":", "~zz", "~\u{301}0000000000000001", "~", "01", "\"a\\q\""])
    func aValueTheChecksRefuseIsRefused(_ value: String) throws {
        let id = TransactionID(origin: SiteID(1), sequence: 1)
        let piece = TransactionPiece(
            id: id, deltaCount: 1, documentCount: 1, collections: [CollectionCount(collection: "cars", documents: 1, deltas: 1)],
            deltas: [
                Delta(
                    collection: "cars", documentID: "\"a\"", field: "n", valueJSON: value,
                    timestamp: HybridTimestamp(rawValue: 5), transaction: id, index: 0, count: 1)
            ],
            documentDeltaCounts: [DocumentRef(collection: "cars", id: "\"a\""): 1], isLast: true)
        let payload = OutboundBatch(pieces: [piece], receiver: Self.receiver, encoding: .stepped, throughSequence: 1, subscribeGeneration: 1)
            .payload()
        let reference = try #require(Self.readAsMessage(payload, .stepped))
        let expected = try #require(throws: SyncError.self) { try reference.get() }
        let error = try #require(throws: SyncError.self) { try Self.read(payload, .stepped).get() }
        #expect(error.code == expected.code, "\(error.message) / \(expected.message)")
    }

    enum HighSequence: CaseIterable { case piece, context, supersededBy }

    /// A transaction, a context field or a verdict's superseding transaction whose
    /// sequence is above 2^63 - 1 is refused: no node counts that far, and stores keep
    /// sequences as signed 64-bit integers (a store that took one trapped, or held a row
    /// it could not read back; a superseding one trapped as the node read its state).
    @Test(arguments: HighSequence.allCases)
    func aSequenceAboveTheSignedRangeIsRefused(_ place: HighSequence) throws {
        let inContext = place == .context
        let high = TransactionID.maximumSequence + 1
        let id = TransactionID(origin: SiteID(1), sequence: place == .piece ? high : 1)
        let document = DocumentRef(collection: "cars", id: "\"a\"")
        var piece = TransactionPiece(
            id: id, deltaCount: 1, documentCount: 1, collections: [CollectionCount(collection: "cars", documents: 1, deltas: 1)],
            deltas: [
                Delta(
                    collection: "cars", documentID: "\"a\"", field: "n", valueJSON: "1", timestamp: HybridTimestamp(rawValue: 5),
                    transaction: id, index: 0, count: 1)
            ],
            documentDeltaCounts: [document: 1], isLast: true)
        if inContext {
            piece.context = [
                ContextField(
                    document: document, field: "m", valueJSON: "2", timestamp: HybridTimestamp(rawValue: 4),
                    transaction: TransactionID(origin: SiteID(2), sequence: high))
            ]
        }
        if place == .supersededBy {
            piece.verdicts = [Verdict(collection: "cars", coverage: .superseded([TransactionID(origin: SiteID(3), sequence: high)]))]
        }
        let payload = OutboundBatch(pieces: [piece], receiver: Self.receiver, encoding: .stepped, throughSequence: 1, subscribeGeneration: 1)
            .payload()
        let error = try #require(throws: SyncError.self) { try Self.read(payload, .stepped).get() }
        #expect(error.code == .protocolViolation && error.message.contains("above 2^63 - 1"), "\(error.message)")
        let reference = try #require(Self.readAsMessage(payload, .stepped))
        #expect(throws: SyncError.self) { try reference.get() }
    }

    /// A piece that claims four billion deltas and carries none sizes nothing by its claim.
    @Test func aPieceIsSizedByWhatItCarries() throws {
        var piece = ProtobufWriter()
        piece.fixed64(1, 1)
        piece.varint(2, 1)
        piece.varint(3, UInt64(UInt32.max))
        piece.varint(4, UInt64(UInt32.max))
        var manifest = ProtobufWriter()
        manifest.string(1, "cars")
        manifest.varint(2, UInt64(UInt32.max))
        manifest.varint(3, UInt64(UInt32.max))
        piece.data(5, manifest.bytes)
        piece.varint(8, 1)
        // A megabyte of an unknown field: the piece is large, its deltas none.
        piece.data(15, [UInt8](repeating: 0, count: 1 << 20))
        var batch = ProtobufWriter()
        batch.varint(2, 1)
        batch.data(4, piece.bytes)
        let reading = try Self.read(batch.bytes, .stepped).get()
        #expect(reading.pieces.count == 1 && reading.pieces[0].deltas.isEmpty)
        #expect(reading.pieces[0].deltas.capacity < 16 && reading.pieces[0].documentDeltaCounts.capacity < 16)
        #expect(try Self.readAsMessage(batch.bytes, .stepped)?.get() == reading)
    }

    /// A field name that is not UTF-8 is refused as SwiftProtobuf refuses a string.
    @Test func aFieldNameThatIsNotUTF8IsRefused() throws {
        let piece = TransactionPiece(
            id: TransactionID(origin: SiteID(1), sequence: 1), deltaCount: 1, documentCount: 1,
            collections: [CollectionCount(collection: "cars", documents: 1, deltas: 1)],
            deltas: [
                Delta(
                    collection: "cars", documentID: "\"a\"", field: "nÅme", valueJSON: "1",
                    timestamp: HybridTimestamp(rawValue: 5), transaction: TransactionID(origin: SiteID(1), sequence: 1),
                    index: 0, count: 1)
            ],
            documentDeltaCounts: [DocumentRef(collection: "cars", id: "\"a\""): 1], isLast: true)
        var payload = OutboundBatch(pieces: [piece], receiver: Self.receiver, encoding: .stepped, throughSequence: 1, subscribeGeneration: 1)
            .payload()
        #expect(try Self.read(payload, .stepped).get().pieces.first?.deltas.first?.field == "nÅme")
        // "Å" is C3 85; C3 before an ASCII letter is not UTF-8.
        let at = try #require(payload.indices.first { payload[$0] == 0xC3 && payload[$0 + 1] == 0x85 })
        payload[at + 1] = 0x41
        #expect(throws: (any Error).self) { try Shoal_V1_DeltaBatch(serializedBytes: payload) }
        let error = try #require(throws: SyncError.self) { try Self.read(payload, .stepped).get() }
        #expect(error.message.contains("not UTF-8"))
    }

    /// The session reads a DeltaBatch frame's payload as it reads the message.
    @Test func theSessionSubmitsThePayloadsPieces() throws {
        var random = SplitMix(state: 41)
        let pieces = [OutboundBatchTests.piece(&random, sequence: 1)].filter { !$0.deltas.isEmpty }
        var own = SubscriptionSet()
        try own.add(query: "SELECT * FROM cars")
        try own.add(query: "SELECT * FROM boats")
        func submitted(_ event: (OutboundBatch) -> SessionStateMachine.Event) throws -> SessionStateMachine.InboundBatch? {
            var machine = SessionStateMachine(configuration: .init(peer: SiteID(0xB), version: 3))
            _ = machine.handle(.cursorRead(own, resumeAfter: 0), now: 0)
            let batch = OutboundBatch(pieces: pieces, receiver: own.filter, encoding: .stepped, throughSequence: 9, subscribeGeneration: 1)
            for action in machine.handle(event(batch), now: 1) {
                if case .submit(let inbound) = action { return inbound }
            }
            return nil
        }
        let fromPayload = try #require(try submitted { .receivedDeltaBatch($0.payload()) })
        let fromMessage = try #require(try submitted { SessionStateMachine.Event(received: .deltaBatch($0.message)) })
        #expect(fromPayload.pieces == fromMessage.pieces && fromPayload.through == 9 && fromPayload.cursorKey == fromMessage.cursorKey)
        #expect(fromPayload.pieces.map(\.id) == pieces.map(\.id))
    }
}

/// Rewrites a DeltaBatch's bytes in ways protobuf allows, knowing which fields hold
/// the nested messages of the hot path (a test's own small tokenizer, not the reader's).
enum Rewriter {
    enum Kind { case batch, piece, manifest, document, delta, other }

    struct Field {
        var number: UInt64
        var wireType: UInt64
        /// The value's bytes: a varint's or fixed field's as they stand, a length-delimited field's body.
        var value: [UInt8]
    }

    static func child(_ kind: Kind, _ number: UInt64) -> Kind {
        switch (kind, number) {
        case (.batch, 4): return .piece
        case (.piece, 5): return .manifest
        case (.piece, 6): return .document
        case (.document, 4): return .delta
        default: return .other
        }
    }

    static func varint(_ bytes: [UInt8], _ at: inout Int) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = bytes[at]
            at += 1
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
    }

    static func fields(_ bytes: [UInt8]) -> [Field] {
        var at = 0
        var fields: [Field] = []
        while at < bytes.count {
            let tag = varint(bytes, &at)
            let start = at
            switch tag & 7 {
            case 0: _ = varint(bytes, &at)
            case 1: at += 8
            case 2:
                let count = Int(varint(bytes, &at))
                fields.append(Field(number: tag >> 3, wireType: 2, value: Array(bytes[at..<(at + count)])))
                at += count
                continue
            default: at += 4
            }
            fields.append(Field(number: tag >> 3, wireType: tag & 7, value: Array(bytes[start..<at])))
        }
        return fields
    }

    /// A varint, sometimes padded with continuation bytes up to protobuf's 10 (a tag's 5).
    static func writeVarint(_ value: UInt64, _ out: inout [UInt8], random: inout SplitMix, longest: Int = 10) {
        var writer = ProtobufWriter()
        writer.varint(value)
        var bytes = writer.bytes
        if bytes.count < longest, Int.random(in: 0..<4, using: &random) == 0 {
            let extra = Int.random(in: 1...(longest - bytes.count), using: &random)
            bytes[bytes.count - 1] |= 0x80
            bytes += Array(repeating: 0x80, count: extra - 1) + [0x00]
        }
        out += bytes
    }

    static func writeTag(_ number: UInt64, _ wireType: UInt64, _ out: inout [UInt8], random: inout SplitMix) {
        writeVarint(number << 3 | wireType, &out, random: &random, longest: 5)
    }

    static func unknownField(_ out: inout [UInt8], random: inout SplitMix) {
        let number = UInt64.random(in: 11...60, using: &random)
        switch Int.random(in: 0...4, using: &random) {
        case 0:
            writeTag(number, 0, &out, random: &random)
            writeVarint(random.next(), &out, random: &random)
        case 1:
            writeTag(number, 1, &out, random: &random)
            out += (0..<8).map { _ in UInt8.random(in: 0...255, using: &random) }
        case 2:
            writeTag(number, 2, &out, random: &random)
            let body = (0..<Int.random(in: 0...6, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            writeVarint(UInt64(body.count), &out, random: &random)
            out += body
        case 3:
            writeTag(number, 5, &out, random: &random)
            out += (0..<4).map { _ in UInt8.random(in: 0...255, using: &random) }
        default:
            // A group holding a varint and a nested group. Inside a group a tag may take
            // up to 10 bytes, as any varint (SwiftProtobuf reads it so).
            writeTag(number, 3, &out, random: &random)
            writeVarint(1 << 3 | 0, &out, random: &random)
            writeVarint(7, &out, random: &random)
            writeVarint(2 << 3 | 3, &out, random: &random)
            writeVarint(2 << 3 | 4, &out, random: &random)
            writeVarint(number << 3 | 4, &out, random: &random)
        }
    }

    static func rewrite(_ bytes: [UInt8], kind: Kind, random: inout SplitMix) -> [UInt8] {
        let fields = fields(bytes)
        // A random interleaving that keeps each field number's values in their order.
        var queues: [UInt64: [Field]] = [:]
        var numbers: [UInt64] = []
        for field in fields {
            if queues[field.number] == nil { numbers.append(field.number) }
            queues[field.number, default: []].append(field)
        }
        var order: [Field] = []
        while !numbers.isEmpty {
            let i = Int.random(in: 0..<numbers.count, using: &random)
            order.append(queues[numbers[i]]!.removeFirst())
            if queues[numbers[i]]!.isEmpty { numbers.remove(at: i) }
        }
        var out: [UInt8] = []
        for field in order {
            if Int.random(in: 0..<3, using: &random) == 0 { unknownField(&out, random: &random) }
            switch field.wireType {
            case 0:
                // Sent twice: an earlier value, then the real one.
                if Bool.random(using: &random) {
                    writeTag(field.number, 0, &out, random: &random)
                    writeVarint(random.next() >> 1, &out, random: &random)
                }
                // A known number with another wire type, which SwiftProtobuf skips as unknown.
                if Int.random(in: 0..<4, using: &random) == 0 {
                    writeTag(field.number, 5, &out, random: &random)
                    out += [1, 2, 3, 4]
                }
                writeTag(field.number, 0, &out, random: &random)
                var at = 0
                writeVarint(varint(field.value, &at), &out, random: &random)
            case 2:
                let inner = child(kind, field.number)
                let body = inner == .other ? field.value : rewrite(field.value, kind: inner, random: &random)
                writeTag(field.number, 2, &out, random: &random)
                writeVarint(UInt64(body.count), &out, random: &random)
                out += body
            default:
                writeTag(field.number, field.wireType, &out, random: &random)
                out += field.value
            }
        }
        if Int.random(in: 0..<3, using: &random) == 0 { unknownField(&out, random: &random) }
        return out
    }
}

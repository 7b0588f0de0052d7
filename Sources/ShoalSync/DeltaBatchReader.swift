public import ShoalCRDT
import ShoalWire
import Foundation
public import ShoalStorage
import SwiftProtobuf

/// Reads a received DeltaBatch payload straight into checked transaction pieces
/// (PROTOCOL.md §8.5), the mirror of `DeltaBatchWriter`:
///
/// ```
/// DeltaBatch     transactions(1, version 1 only) through_sequence(2) subscribe_generation(3) piece(4)* filter(5)*
///                offered(6, version 4)*
/// piece          origin_site(1) origin_sequence(2) delta_count(3) document_count(4)
///                collection(5)* document(6)* verdict(7)* last(8) base_timestamp(9) context(10)*
/// document(6)    collection(1) document_id(2) delta_count(3) delta(4)*
/// delta(4)       field(1) value_json(2) timestamp_offset(3) index(4) index_step(5) timestamp_step(6)
/// ```
///
/// SwiftProtobuf would build every piece, document and delta as a message, each value
/// a `Data`, before the checks turned them into `Delta`s: each value is now read once,
/// from the payload into its `String`. A message is read in two passes where its
/// checks need fields that protobuf lets come in any order (a piece's manifest before
/// its documents, a document's collection and count before its deltas); the two
/// passes only walk bytes. Verdicts, context and filters, rare and small, go through
/// SwiftProtobuf. It refuses what SwiftProtobuf refuses (`ProtobufReader`), and
/// `PieceCodec.decode` reads the messages of a `TransactionPieces` answer through it
/// too, so the checks exist once.
public struct DeltaBatchReader: Sendable {
    /// What the batch says around its pieces, read in a first pass.
    public struct Header: Sendable {
        public var throughSequence: UInt64 = 0
        public var subscribeGeneration: UInt64 = 0
        /// Version 1's flat transactions, which a version 2 or 3 session refuses.
        public var hasVersion1Transactions = false
        /// Where each piece lies in the payload.
        var pieces: [Range<Int>] = []
        /// The batch's filter table: what a `NOT_COVERED` verdict's filter k ≥ 1 names.
        var filters: [SubscriptionFilter] = []
        /// Transactions offered instead of sent (version 4).
        public var offered: [RouteTable.Offer] = []
    }

    public let payload: [UInt8]
    public let header: Header

    /// Reads the batch's header; the pieces are read by `pieces`, once the caller knows
    /// which subscriptions they answer.
    public init(payload: [UInt8]) throws(SyncError) {
        self.payload = payload
        let read = payload.withUnsafeBytes { bytes in
            Result { () throws(WireError) -> Header in
                var r = ProtobufReader(bytes, what: "DeltaBatch")
                var header = Header()
                while let field = try r.next() {
                    switch (field.number, field.wireType) {
                    case (1, ProtobufReader.length):
                        // Checked as a message, as SwiftProtobuf would, before it is refused.
                        _ = try Self.message(Shoal_V1_TransactionDeltas.self, in: &r)
                        header.hasVersion1Transactions = true
                    case (2, ProtobufReader.varint): header.throughSequence = try r.varint()
                    case (3, ProtobufReader.varint): header.subscribeGeneration = try r.varint()
                    case (4, ProtobufReader.length): header.pieces.append(try r.delimited())
                    case (5, ProtobufReader.length):
                        header.filters.append(PieceCodec.filter(try Self.message(Shoal_V1_SubscriptionFilter.self, in: &r)))
                    case (6, ProtobufReader.length):
                        let offer = try Self.message(Shoal_V1_Offer.self, in: &r)
                        header.offered.append(
                            RouteTable.Offer(
                                TransactionID(origin: SiteID(offer.originSite), sequence: offer.originSequence), at: offer.logSequence))
                    default: try r.skip(field)
                    }
                }
                return header
            }
        }
        switch read {
        case .success(let header): self.header = header
        case .failure(let error): throw SyncError(error)
        }
    }

    /// The batch's pieces, checked.
    ///
    /// - Parameters:
    ///   - receiver: this node's subscriptions that the pieces answer: what filter 0 names.
    ///   - collections: the collections this node asked for; a document or context
    ///     field of another collection is a protocol violation.
    public func pieces(
        receiver: SubscriptionFilter, collections: Set<String>, encoding: PieceCodec.DeltaEncoding
    ) throws(SyncError) -> [TransactionPiece] {
        try payload.withUnsafeBytes { bytes in
            Result { () throws(SyncError) -> [TransactionPiece] in
                var pieces: [TransactionPiece] = []
                pieces.reserveCapacity(header.pieces.count)
                for range in header.pieces {
                    pieces.append(
                        try Self.piece(
                            ProtobufReader(bytes, range: range, what: "DeltaBatch", depthBudget: Self.pieceDepthBudget),
                            table: header.filters, receiver: receiver, collections: collections, encoding: encoding,
                            what: "DeltaBatch"))
                }
                return pieces
            }
        }.get()
    }

    /// A piece's place in SwiftProtobuf's recursion budget: inside the DeltaBatch or
    /// TransactionPieces that carries it.
    static let pieceDepthBudget = ProtobufReader.depthLimit - 2

    /// One piece's message, read and checked.
    static func piece(
        _ reader: ProtobufReader, table: [SubscriptionFilter], receiver: SubscriptionFilter, collections: Set<String>,
        encoding: PieceCodec.DeltaEncoding, what: String
    ) throws(SyncError) -> TransactionPiece {
        do {
            return try PieceReading(
                table: table, receiver: receiver, collections: collections, encoding: encoding, what: what
            ).read(reader)
        } catch let error as SyncError {
            throw error
        } catch let error as WireError {
            throw SyncError(error)
        } catch {
            throw SyncError(.protocolViolation, "\(what): \(error)")
        }
    }

    /// A rare nested message, decoded by SwiftProtobuf.
    static func message<M: SwiftProtobuf.Message>(
        _ type: M.Type, in reader: inout ProtobufReader
    ) throws(WireError) -> M {
        let bytes = try reader.delimitedBytes()
        let what = reader.what
        var options = BinaryDecodingOptions()
        // The budget a full decode would have left at this depth.
        options.messageDepthLimit = reader.depthBudget
        do {
            return try M(serializedBytes: [UInt8](bytes), options: options)
        } catch {
            throw WireError(.malformedPayload, "\(what) frame: payload is not a valid \(what) message (\(error))")
        }
    }
}

/// The reading of one piece: its fields, its manifest checked, then its documents,
/// verdicts and context. Bytes that are not protobuf throw `WireError`, a piece that
/// breaks a rule of PROTOCOL.md §8.5 throws `SyncError`.
private struct PieceReading {
    let table: [SubscriptionFilter]
    let receiver: SubscriptionFilter
    let collections: Set<String>
    let encoding: PieceCodec.DeltaEncoding
    let what: String

    func violation(_ message: String) -> SyncError { SyncError(.protocolViolation, "\(what): \(message)") }

    func read(_ reader: ProtobufReader) throws -> TransactionPiece {
        // First pass: the piece's own fields and its manifest.
        var r = reader
        var originSite: UInt64 = 0
        var originSequence: UInt64 = 0
        var deltaCount: UInt32 = 0
        var documentCount: UInt32 = 0
        var manifest: [CollectionCount] = []
        var isLast = false
        var base: UInt64 = 0
        var documents = 0
        while let field = try r.next() {
            switch (field.number, field.wireType) {
            case (6, ProtobufReader.length):
                _ = try r.delimited()
                documents += 1
            case (1, ProtobufReader.fixed64): originSite = try r.fixed64()
            case (2, ProtobufReader.varint): originSequence = try r.varint()
            case (3, ProtobufReader.varint): deltaCount = UInt32(truncatingIfNeeded: try r.varint())
            case (4, ProtobufReader.varint): documentCount = UInt32(truncatingIfNeeded: try r.varint())
            case (5, ProtobufReader.length): manifest.append(try collectionCount(r.message()))
            case (8, ProtobufReader.varint): isLast = try r.varint() != 0
            case (9, ProtobufReader.fixed64): base = try r.fixed64()
            default: try r.skip(field)
            }
        }
        guard originSite != 0 else { throw violation("a transaction has origin site 0") }
        guard originSequence <= TransactionID.maximumSequence else {
            throw violation("a transaction has sequence \(originSequence), above 2^63 - 1")
        }
        let id = TransactionID(origin: SiteID(originSite), sequence: originSequence)
        guard deltaCount > 0, documentCount > 0, documentCount <= deltaCount else {
            throw violation("transaction \(id) claims \(deltaCount) deltas in \(documentCount) documents")
        }
        var manifestDocuments: UInt64 = 0
        var manifestDeltas: UInt64 = 0
        // What the manifest allows per collection: documents, and deltas in them.
        var room: [String: (documents: UInt64, deltas: UInt64)] = [:]
        for c in manifest {
            manifestDocuments += UInt64(c.documents)
            manifestDeltas += UInt64(c.deltas)
            guard room[c.collection] == nil else {
                throw violation("transaction \(id)'s manifest lists collection '\(c.collection)' twice")
            }
            room[c.collection] = (UInt64(c.documents), UInt64(c.deltas))
        }
        guard manifestDocuments == UInt64(documentCount) else {
            throw violation(
                "transaction \(id)'s manifest lists \(manifestDocuments) documents by collection but \(documentCount) in all")
        }
        guard manifestDeltas == UInt64(deltaCount) else {
            throw violation(
                "transaction \(id)'s manifest lists \(manifestDeltas) deltas by collection but \(deltaCount) in all")
        }

        // Second pass: the documents, then the verdicts and the context.
        // Sized by what the piece carries, never by the counts the peer claims (and the
        // documents' table at first no larger than an ordinary piece needs).
        var deltas: [Delta] = []
        var counts: [DocumentRef: UInt32] = [:]
        counts.reserveCapacity(min(documents, 4096))
        var indices = DeltaIndices(count: deltaCount)
        // Stepped: where the previous delta stood (PROTOCOL.md §8.3).
        var previousIndex = UInt32.max  // -1, modulo 2^32
        var previousTimestamp = base &- 1
        var verdicts: [Verdict] = []
        var context: [ContextField] = []
        r = reader
        while let field = try r.next() {
            switch (field.number, field.wireType) {
            case (6, ProtobufReader.length):
                let document = try r.message()
                // The document's own fields first: its checks need them before its deltas.
                var d = document
                var collection = ""
                var documentID = ""
                var documentDeltaCount: UInt32 = 0
                var carried = 0
                while let f = try d.next() {
                    switch (f.number, f.wireType) {
                    case (1, ProtobufReader.length): collection = try text(&d)
                    case (2, ProtobufReader.length): documentID = try text(&d)
                    case (3, ProtobufReader.varint): documentDeltaCount = UInt32(truncatingIfNeeded: try d.varint())
                    case (4, ProtobufReader.length):
                        _ = try d.delimited()
                        carried += 1
                    default: try d.skip(f)
                    }
                }
                guard collections.contains(collection) else {
                    throw violation(
                        "transaction \(id) carries collection '\(collection)', which this node did not subscribe to")
                }
                guard documentDeltaCount > 0, documentDeltaCount <= deltaCount else {
                    throw violation("transaction \(id) gives document \(documentID) \(documentDeltaCount) deltas")
                }
                let ref = DocumentRef(collection: collection, id: documentID)
                // The manifest must make room for this document and its deltas.
                guard counts[ref] == nil else {
                    throw violation("transaction \(id) lists document \(documentID) in '\(collection)' twice in one piece")
                }
                guard let left = room[collection], left.documents >= 1, left.deltas >= UInt64(documentDeltaCount) else {
                    throw violation(
                        "transaction \(id)'s deltas contradict its manifest: document \(documentID) in '\(collection)' with \(documentDeltaCount) deltas does not fit what the manifest gives '\(collection)'"
                    )
                }
                room[collection] = (left.documents - 1, left.deltas - UInt64(documentDeltaCount))
                guard carried <= Int(documentDeltaCount) else {
                    throw violation(
                        "transaction \(id) carries \(carried) deltas of document \(documentID), which it says has \(documentDeltaCount)"
                    )
                }
                counts[ref] = documentDeltaCount
                if deltas.capacity - deltas.count < carried {
                    deltas.reserveCapacity(max(deltas.count + carried, deltas.capacity * 2))
                }
                d = document
                while let f = try d.next() {
                    guard f.number == 4, f.wireType == ProtobufReader.length else {
                        try d.skip(f)
                        continue
                    }
                    var delta = try d.message()
                    var name = ""
                    var value: Range<Int> = 0..<0
                    var offset: Int64 = 0
                    var absoluteIndex: UInt32 = 0
                    var indexStep: Int32 = 0
                    var timestampStep: Int64 = 0
                    while let g = try delta.next() {
                        switch (g.number, g.wireType) {
                        case (1, ProtobufReader.length): name = try text(&delta)
                        case (2, ProtobufReader.length): value = try delta.delimited()
                        case (3, ProtobufReader.varint): offset = ProtobufReader.zigZag64(try delta.varint())
                        case (4, ProtobufReader.varint): absoluteIndex = UInt32(truncatingIfNeeded: try delta.varint())
                        case (5, ProtobufReader.varint): indexStep = ProtobufReader.zigZag32(try delta.varint())
                        case (6, ProtobufReader.varint): timestampStep = ProtobufReader.zigZag64(try delta.varint())
                        default: try delta.skip(g)
                        }
                    }
                    let index: UInt32
                    let timestamp: UInt64
                    switch encoding {
                    case .absolute:
                        index = absoluteIndex
                        timestamp = base &+ UInt64(bitPattern: offset)
                    case .stepped:
                        guard absoluteIndex == 0, offset == 0 else {
                            throw violation(
                                "transaction \(id) sends a version 2 index or timestamp_offset in a version 3 session")
                        }
                        index = previousIndex &+ 1 &+ UInt32(bitPattern: indexStep)
                        timestamp = previousTimestamp &+ 1 &+ UInt64(bitPattern: timestampStep)
                        previousIndex = index
                        previousTimestamp = timestamp
                    }
                    guard index < deltaCount else {
                        throw violation("transaction \(id) has delta index \(index) but only \(deltaCount) deltas")
                    }
                    guard indices.insert(index) else {
                        throw violation("transaction \(id) carries delta index \(index) twice")
                    }
                    let (json, parsed) = try PieceCodec.value(delta.slice(value), what: what, id: id, field: name)
                    deltas.append(
                        Delta(
                            collection: collection, documentID: documentID, field: name, valueJSON: json,
                            timestamp: HybridTimestamp(rawValue: timestamp),
                            transaction: id, index: index, count: deltaCount, parsed: parsed))
                }
            case (7, ProtobufReader.length):
                let v = try DeltaBatchReader.message(Shoal_V1_Verdict.self, in: &r)
                verdicts.append(try verdict(v, id: id, room: room))
            case (10, ProtobufReader.length):
                let c = try DeltaBatchReader.message(Shoal_V1_ContextDocument.self, in: &r)
                guard collections.contains(c.collection) else {
                    throw violation(
                        "transaction \(id) carries context of collection '\(c.collection)', which this node did not subscribe to")
                }
                for f in c.fields {
                    guard f.originSite != 0 else { throw violation("a context field has origin site 0") }
                    guard f.originSequence <= TransactionID.maximumSequence else {
                        throw violation("a context field has sequence \(f.originSequence), above 2^63 - 1")
                    }
                    let json = try f.valueJson.withUnsafeBytes { bytes throws(SyncError) in
                        try PieceCodec.value(bytes, what: what, id: id, field: f.field).0
                    }
                    context.append(
                        ContextField(
                            document: DocumentRef(collection: c.collection, id: c.documentID), field: f.field,
                            valueJSON: json, timestamp: HybridTimestamp(rawValue: f.timestamp),
                            transaction: TransactionID(origin: SiteID(f.originSite), sequence: f.originSequence)))
                }
            default:
                try r.skip(field)
            }
        }
        return TransactionPiece(
            id: id, deltaCount: deltaCount, documentCount: documentCount, collections: manifest, deltas: deltas,
            documentDeltaCounts: counts, verdicts: verdicts, isLast: isLast, context: context)
    }

    /// One line of a piece's manifest.
    func collectionCount(_ reader: ProtobufReader) throws(WireError) -> CollectionCount {
        var r = reader
        var count = CollectionCount(collection: "", documents: 0, deltas: 0)
        while let field = try r.next() {
            switch (field.number, field.wireType) {
            case (1, ProtobufReader.length): count.collection = try text(&r)
            case (2, ProtobufReader.varint): count.documents = UInt32(truncatingIfNeeded: try r.varint())
            case (3, ProtobufReader.varint): count.deltas = UInt32(truncatingIfNeeded: try r.varint())
            default: try r.skip(field)
            }
        }
        return count
    }

    func verdict(
        _ v: Shoal_V1_Verdict, id: TransactionID, room: [String: (documents: UInt64, deltas: UInt64)]
    ) throws(SyncError) -> Verdict {
        guard room[v.collection] != nil else {
            throw violation(
                "transaction \(id) has a verdict on collection '\(v.collection)', which its manifest does not list")
        }
        switch v.coverage {
        case .notCovered:
            let filter: SubscriptionFilter
            if v.filter == 0 {
                filter = receiver
            } else if Int(v.filter) <= table.count {
                filter = table[Int(v.filter) - 1]
            } else {
                throw violation("transaction \(id) names filter \(v.filter) of \(table.count)")
            }
            return Verdict(collection: v.collection, coverage: .notCovered(filter))
        case .superseded:
            // Stores keep sequences in signed 64 bits, and no transaction is of site 0.
            if let wrong = v.supersededBy.first(where: { $0.originSite == 0 || $0.originSequence > TransactionID.maximumSequence }) {
                throw violation("transaction \(id) is superseded by \(wrong.originSite):\(wrong.originSequence): of site 0, or above 2^63 - 1")
            }
            return Verdict(
                collection: v.collection,
                coverage: .superseded(
                    v.supersededBy.map { TransactionID(origin: SiteID($0.originSite), sequence: $0.originSequence) }))
        case .unknown:
            return Verdict(collection: v.collection, coverage: .unknown)
        case .overLimit:
            return Verdict(collection: v.collection, coverage: .overLimit)
        case .unspecified, .UNRECOGNIZED:
            throw violation("transaction \(id) has a verdict without coverage")
        }
    }
}

/// A length-delimited field as a string, checked as UTF-8 as SwiftProtobuf checks a
/// `string` field.
private func text(_ reader: inout ProtobufReader) throws(WireError) -> String {
    let bytes = try reader.delimitedBytes()
    guard let text = UTF8Text.string(validating: bytes) else { throw reader.malformed("a string is not UTF-8") }
    return text
}

/// The delta indices a piece has carried, to refuse one carried twice: a bit each
/// for a transaction of up to 2^16 deltas, a set beyond (the count is the peer's word,
/// so it does not size a bitmap alone).
struct DeltaIndices {
    var bits: [UInt64]
    var large: Set<UInt32>?

    init(count: UInt32) {
        if count <= 1 << 16 {
            bits = Array(repeating: 0, count: (Int(count) + 63) / 64)
            large = nil
        } else {
            bits = []
            large = []
        }
    }

    /// Whether `index` (below the count) was new.
    mutating func insert(_ index: UInt32) -> Bool {
        if large != nil { return large!.insert(index).inserted }
        let word = Int(index >> 6)
        let bit = UInt64(1) << UInt64(index & 63)
        guard bits[word] & bit == 0 else { return false }
        bits[word] |= bit
        return true
    }
}

public import ShoalCRDT
public import ShoalWire
import Foundation
import SwiftProtobuf

/// Turns transaction pieces into their wire form and back, checking what a peer
/// sent (PROTOCOL.md §8.5).
public enum PieceCodec {
    /// How a delta's position and timestamp travel (PROTOCOL.md §8.3).
    ///
    /// ```
    ///  absolute (version 2)   index 0 1 2 3 …        timestamp_offset = ts − base: 0 1 2 3 …
    ///  stepped  (version 3)   index_step 0 0 0 0 …   timestamp_step = ts − previous ts − 1: 0 0 0 …
    /// ```
    ///
    /// A transaction's deltas mostly follow each other in both, so the steps are
    /// zero and take no bytes, where the absolute forms are a different number each
    /// that deflate cannot squeeze: a version 3 DeltaBatch of ordinary transactions
    /// is about a third smaller on the wire.
    public enum DeltaEncoding: Sendable, Hashable {
        case absolute
        case stepped

        /// The encoding a session at protocol `version` uses.
        public init(version: UInt32) {
            self = version >= 3 ? .stepped : .absolute
        }
    }

    /// The wire form of `pieces` for a receiver whose subscriptions are `receiver`:
    /// a `NOT_COVERED` verdict naming exactly them uses filter 0, any other filter
    /// goes into the returned table.
    public static func encode(
        _ pieces: [TransactionPiece], receiver: SubscriptionFilter, encoding: DeltaEncoding = .absolute
    ) -> (pieces: [Shoal_V1_TransactionPiece], filters: [Shoal_V1_SubscriptionFilter]) {
        var filters: [SubscriptionFilter] = []
        let wire = pieces.map { piece in
            var w = Shoal_V1_TransactionPiece()
            w.originSite = piece.id.origin.rawValue
            w.originSequence = piece.id.sequence
            w.deltaCount = piece.deltaCount
            w.documentCount = piece.documentCount
            w.collections = piece.collections.map { c in
                var m = Shoal_V1_CollectionCount()
                m.collection = c.collection
                m.documents = c.documents
                m.deltas = c.deltas
                return m
            }
            let layout = PieceLayout(piece)
            w.baseTimestamp = layout.base
            var stepper = PieceLayout.Stepper(encoding, base: layout.base)
            w.documents = layout.documents.map { document in
                var d = Shoal_V1_DocumentDeltas()
                d.collection = document.ref.collection
                d.documentID = document.ref.id
                d.deltaCount = document.deltaCount
                d.deltas = document.range.map { place in
                    let delta = piece.deltas[layout.position(place)]
                    let numbers = stepper.next(delta)
                    var f = Shoal_V1_FieldDelta()
                    f.field = delta.field
                    f.valueJson = utf8Data(delta.valueJSON)
                    f.timestampOffset = numbers.timestampOffset
                    f.index = numbers.index
                    f.indexStep = numbers.indexStep
                    f.timestampStep = numbers.timestampStep
                    return f
                }
                return d
            }
            w.last = piece.isLast
            w.verdicts = verdictMessages(piece, receiver: receiver, filters: &filters)
            w.context = contextMessages(piece)
            return w
        }
        return (wire, filterMessages(filters))
    }

    /// The verdicts of `piece` as messages; a `NOT_COVERED` filter other than
    /// `receiver` goes into `filters`, and the verdict names its place there from 1.
    static func verdictMessages(
        _ piece: TransactionPiece, receiver: SubscriptionFilter, filters: inout [SubscriptionFilter]
    ) -> [Shoal_V1_Verdict] {
        piece.verdicts.map { verdict in
            var v = Shoal_V1_Verdict()
            v.collection = verdict.collection
            switch verdict.coverage {
            case .notCovered(let filter):
                v.coverage = .notCovered
                if filter != receiver {
                    if let k = filters.firstIndex(of: filter) {
                        v.filter = UInt32(k + 1)
                    } else {
                        filters.append(filter)
                        v.filter = UInt32(filters.count)
                    }
                }
            case .superseded(let ids):
                v.coverage = .superseded
                v.supersededBy = ids.map { id in
                    var r = Shoal_V1_TransactionRef()
                    r.originSite = id.origin.rawValue
                    r.originSequence = id.sequence
                    return r
                }
            case .unknown:
                v.coverage = .unknown
            case .overLimit:
                v.coverage = .overLimit
            }
            return v
        }
    }

    /// The context fields of `piece` as messages, grouped by document in order of first appearance.
    static func contextMessages(_ piece: TransactionPiece) -> [Shoal_V1_ContextDocument] {
        var context: [Shoal_V1_ContextDocument] = []
        var contextIndex: [DocumentRef: Int] = [:]
        for field in piece.context {
            if contextIndex[field.document] == nil {
                var c = Shoal_V1_ContextDocument()
                c.collection = field.document.collection
                c.documentID = field.document.id
                context.append(c)
                contextIndex[field.document] = context.count - 1
            }
            var f = Shoal_V1_ContextField()
            f.field = field.field
            f.valueJson = utf8Data(field.valueJSON)
            f.timestamp = field.timestamp.rawValue
            f.originSite = field.transaction.origin.rawValue
            f.originSequence = field.transaction.sequence
            context[contextIndex[field.document]!].fields.append(f)
        }
        return context
    }

    /// A batch's table of filters as messages.
    static func filterMessages(_ filters: [SubscriptionFilter]) -> [Shoal_V1_SubscriptionFilter] {
        filters.map { filter in
            var f = Shoal_V1_SubscriptionFilter()
            f.subscriptions = filter.entries.map { entry in
                var s = Shoal_V1_Subscription()
                s.id = StableHash.fnv1a(entry.query + "\u{0}" + (entry.argumentsJSON.isEmpty ? "{}" : entry.argumentsJSON))
                s.query = entry.query
                s.argumentsJson = entry.argumentsJSON
                return s
            }
            return f
        }
    }

    /// Checks and decodes pieces received from a peer as messages (a `TransactionPieces`
    /// answer; a DeltaBatch's payload is read by `DeltaBatchReader` without them).
    /// Each is serialized again and read by `DeltaBatchReader`, so the checks exist once.
    ///
    /// - Parameters:
    ///   - receiver: this node's subscriptions that the pieces answer: what filter 0 names.
    ///   - collections: the collections this node asked for; a document or context
    ///     field of another collection is a protocol violation.
    public static func decode(
        _ pieces: [Shoal_V1_TransactionPiece], filters: [Shoal_V1_SubscriptionFilter], receiver: SubscriptionFilter,
        collections: Set<String>, encoding: DeltaEncoding = .absolute, what: String = "DeltaBatch"
    ) throws(SyncError) -> [TransactionPiece] {
        let table = filters.map(filter)
        return try pieces.map { w throws(SyncError) in
            let bytes: [UInt8]
            do {
                bytes = try w.serializedBytes()
            } catch {
                throw SyncError(.protocolViolation, "\(what): a piece does not serialize (\(error))")
            }
            return try bytes.withUnsafeBytes { buffer in
                Result { () throws(SyncError) -> TransactionPiece in
                    try DeltaBatchReader.piece(
                        ProtobufReader(buffer, what: what, depthBudget: DeltaBatchReader.pieceDepthBudget), table: table,
                        receiver: receiver, collections: collections, encoding: encoding, what: what)
                }
            }.get()
        }
    }

    /// A filter of a batch's table as Shoal's own value.
    static func filter(_ f: Shoal_V1_SubscriptionFilter) -> SubscriptionFilter {
        SubscriptionFilter(f.subscriptions.map { .init(query: $0.query, argumentsJSON: $0.argumentsJson) })
    }

    /// A string's UTF-8 bytes, copied whole where the string keeps them contiguous
    /// (`Data(_:)` of the UTF-8 view appends them one by one).
    static func utf8Data(_ text: String) -> Data {
        text.utf8.withContiguousStorageIfAvailable { Data(buffer: $0) } ?? Data(text.utf8)
    }

    /// A received value, checked: its text, and what it parses to (nil for a removal,
    /// and for a scalar whose text is canonical already).
    /// The text is UTF-8, and canonical JSON, empty (a removed register) or `~` and a
    /// site in hex (an observed map-entry removal).
    static func value(
        _ bytes: UnsafeRawBufferPointer, what: String, id: TransactionID, field: String
    ) throws(SyncError) -> (String, Value?) {
        guard let json = UTF8Text.string(validating: bytes) else {
            throw SyncError(.protocolViolation, "\(what): transaction \(id) has a value that is not UTF-8")
        }
        guard let first = bytes.first else { return (json, nil) }
        // The first character, not only the first byte: `~` and a combining mark is no removal.
        if first == UInt8(ascii: "~"), json.hasPrefix("~") {
            guard SiteID(hex: json.dropFirst()) != nil else {
                throw SyncError(
                    .executionFailed, "\(what): transaction \(id): field \(field) is an observed removal without a site in hex")
            }
            return (json, nil)
        }
        // A scalar that is canonical as it stands is kept unparsed: the applier parses
        // a value only for a document whose body needs more than its registers' text.
        if JSON.isCanonicalScalar(bytes) { return (json, nil) }
        do {
            // Kept as canonical JSON, as local writes keep it: a body is written from
            // its registers' text as it stands.
            let value = try JSON.parse(json)
            let canonical = value.canonicalJSON
            return (canonical == json ? json : canonical, value)
        } catch {
            throw SyncError(.executionFailed, "\(what): transaction \(id): field \(field) is not valid JSON (\(error))")
        }
    }
}

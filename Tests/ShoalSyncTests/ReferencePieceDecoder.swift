import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalWire

/// The checks of PROTOCOL.md §8.5 as they were written over SwiftProtobuf's messages
/// before `DeltaBatchReader` (`PieceCodec.decode` at `5fb7090`), kept as the oracle the
/// reader is compared with: an independent reading of the same rules, so that a
/// comparison of the two is not the reader against itself.
enum ReferencePieceDecoder {
    static func decode(
        _ pieces: [Shoal_V1_TransactionPiece], filters: [Shoal_V1_SubscriptionFilter], receiver: SubscriptionFilter,
        collections: Set<String>, encoding: PieceCodec.DeltaEncoding = .absolute, what: String = "DeltaBatch"
    ) throws(SyncError) -> [TransactionPiece] {
        let table = filters.map { f in
            SubscriptionFilter(f.subscriptions.map { .init(query: $0.query, argumentsJSON: $0.argumentsJson) })
        }
        return try pieces.map { w throws(SyncError) in
            guard w.originSite != 0 else {
                throw SyncError(.protocolViolation, "\(what): a transaction has origin site 0")
            }
            guard w.originSequence <= TransactionID.maximumSequence else {
                throw SyncError(.protocolViolation, "\(what): a transaction has sequence \(w.originSequence), above 2^63 - 1")
            }
            let id = TransactionID(origin: SiteID(w.originSite), sequence: w.originSequence)
            guard w.deltaCount > 0, w.documentCount > 0, w.documentCount <= w.deltaCount else {
                throw SyncError(
                    .protocolViolation,
                    "\(what): transaction \(id) claims \(w.deltaCount) deltas in \(w.documentCount) documents")
            }
            var manifestDocuments: UInt64 = 0
            var manifestDeltas: UInt64 = 0
            // What the manifest allows per collection: documents, and deltas in them.
            var room: [String: (documents: UInt64, deltas: UInt64)] = [:]
            for c in w.collections {
                manifestDocuments += UInt64(c.documents)
                manifestDeltas += UInt64(c.deltas)
                guard room[c.collection] == nil else {
                    throw SyncError(
                        .protocolViolation, "\(what): transaction \(id)'s manifest lists collection '\(c.collection)' twice")
                }
                room[c.collection] = (UInt64(c.documents), UInt64(c.deltas))
            }
            guard manifestDocuments == UInt64(w.documentCount) else {
                throw SyncError(
                    .protocolViolation,
                    "\(what): transaction \(id)'s manifest lists \(manifestDocuments) documents by collection but \(w.documentCount) in all")
            }
            guard manifestDeltas == UInt64(w.deltaCount) else {
                throw SyncError(
                    .protocolViolation,
                    "\(what): transaction \(id)'s manifest lists \(manifestDeltas) deltas by collection but \(w.deltaCount) in all")
            }
            var deltas: [Delta] = []
            var counts: [DocumentRef: UInt32] = [:]
            var indices: Set<UInt32> = []
            // Stepped: where the previous delta stood (PROTOCOL.md §8.3).
            var previousIndex = UInt32.max  // -1, modulo 2^32
            var previousTimestamp = w.baseTimestamp &- 1
            for d in w.documents {
                guard collections.contains(d.collection) else {
                    throw SyncError(
                        .protocolViolation,
                        "\(what): transaction \(id) carries collection '\(d.collection)', which this node did not subscribe to")
                }
                guard d.deltaCount > 0, d.deltaCount <= w.deltaCount else {
                    throw SyncError(
                        .protocolViolation, "\(what): transaction \(id) gives document \(d.documentID) \(d.deltaCount) deltas")
                }
                let ref = DocumentRef(collection: d.collection, id: d.documentID)
                // The manifest must make room for this document and its deltas.
                guard counts[ref] == nil else {
                    throw SyncError(
                        .protocolViolation,
                        "\(what): transaction \(id) lists document \(d.documentID) in '\(d.collection)' twice in one piece")
                }
                guard let left = room[d.collection], left.documents >= 1, left.deltas >= UInt64(d.deltaCount) else {
                    throw SyncError(
                        .protocolViolation,
                        "\(what): transaction \(id)'s deltas contradict its manifest: document \(d.documentID) in '\(d.collection)' with \(d.deltaCount) deltas does not fit what the manifest gives '\(d.collection)'")
                }
                room[d.collection] = (left.documents - 1, left.deltas - UInt64(d.deltaCount))
                guard d.deltas.count <= Int(d.deltaCount) else {
                    throw SyncError(
                        .protocolViolation,
                        "\(what): transaction \(id) carries \(d.deltas.count) deltas of document \(d.documentID), which it says has \(d.deltaCount)")
                }
                counts[ref] = d.deltaCount
                for f in d.deltas {
                    let index: UInt32
                    let timestamp: UInt64
                    switch encoding {
                    case .absolute:
                        index = f.index
                        timestamp = w.baseTimestamp &+ UInt64(bitPattern: f.timestampOffset)
                    case .stepped:
                        guard f.index == 0, f.timestampOffset == 0 else {
                            throw SyncError(
                                .protocolViolation,
                                "\(what): transaction \(id) sends a version 2 index or timestamp_offset in a version 3 session")
                        }
                        index = previousIndex &+ 1 &+ UInt32(bitPattern: f.indexStep)
                        timestamp = previousTimestamp &+ 1 &+ UInt64(bitPattern: f.timestampStep)
                        previousIndex = index
                        previousTimestamp = timestamp
                    }
                    guard index < w.deltaCount else {
                        throw SyncError(
                            .protocolViolation,
                            "\(what): transaction \(id) has delta index \(index) but only \(w.deltaCount) deltas")
                    }
                    guard indices.insert(index).inserted else {
                        throw SyncError(
                            .protocolViolation, "\(what): transaction \(id) carries delta index \(index) twice")
                    }
                    let (json, parsed) = try value(f.valueJson, what: what, id: id, field: f.field)
                    deltas.append(
                        Delta(
                            collection: d.collection, documentID: d.documentID, field: f.field, valueJSON: json,
                            timestamp: HybridTimestamp(rawValue: timestamp),
                            transaction: id, index: index, count: w.deltaCount, parsed: parsed))
                }
            }
            let verdicts = try w.verdicts.map { v throws(SyncError) -> Verdict in
                guard room[v.collection] != nil else {
                    throw SyncError(
                        .protocolViolation,
                        "\(what): transaction \(id) has a verdict on collection '\(v.collection)', which its manifest does not list")
                }
                switch v.coverage {
                case .notCovered:
                    let filter: SubscriptionFilter
                    if v.filter == 0 {
                        filter = receiver
                    } else if Int(v.filter) <= table.count {
                        filter = table[Int(v.filter) - 1]
                    } else {
                        throw SyncError(
                            .protocolViolation, "\(what): transaction \(id) names filter \(v.filter) of \(table.count)")
                    }
                    return Verdict(collection: v.collection, coverage: .notCovered(filter))
                case .superseded:
                    // Stores keep sequences in signed 64 bits, and no transaction is of site 0.
                    if let wrong = v.supersededBy.first(where: { $0.originSite == 0 || $0.originSequence > TransactionID.maximumSequence }) {
                        throw SyncError(.protocolViolation, "\(what): transaction \(id) is superseded by \(wrong.originSite):\(wrong.originSequence): of site 0, or above 2^63 - 1")
                    }
                    return Verdict(
                        collection: v.collection,
                        coverage: .superseded(
                            v.supersededBy.map { TransactionID(origin: SiteID($0.originSite), sequence: $0.originSequence) }))
                case .overLimit:
                    return Verdict(collection: v.collection, coverage: .overLimit)
                case .unknown:
                    return Verdict(collection: v.collection, coverage: .unknown)
                case .unspecified, .UNRECOGNIZED:
                    throw SyncError(.protocolViolation, "\(what): transaction \(id) has a verdict without coverage")
                }
            }
            var context: [ContextField] = []
            for c in w.context {
                guard collections.contains(c.collection) else {
                    throw SyncError(
                        .protocolViolation,
                        "\(what): transaction \(id) carries context of collection '\(c.collection)', which this node did not subscribe to")
                }
                for f in c.fields {
                    guard f.originSite != 0 else {
                        throw SyncError(.protocolViolation, "\(what): a context field has origin site 0")
                    }
                    guard f.originSequence <= TransactionID.maximumSequence else {
                        throw SyncError(.protocolViolation, "\(what): a context field has sequence \(f.originSequence), above 2^63 - 1")
                    }
                    context.append(
                        ContextField(
                            document: DocumentRef(collection: c.collection, id: c.documentID), field: f.field,
                            valueJSON: try value(f.valueJson, what: what, id: id, field: f.field).0,
                            timestamp: HybridTimestamp(rawValue: f.timestamp),
                            transaction: TransactionID(origin: SiteID(f.originSite), sequence: f.originSequence)))
                }
            }
            return TransactionPiece(
                id: id, deltaCount: w.deltaCount, documentCount: w.documentCount,
                collections: w.collections.map { CollectionCount(collection: $0.collection, documents: $0.documents, deltas: $0.deltas) },
                deltas: deltas, documentDeltaCounts: counts, verdicts: verdicts, isLast: w.last, context: context)
        }
    }

    /// A received value, checked: its text, and what it parses to (nil for a removal,
    /// and for a scalar whose text is canonical already).
    /// The text is UTF-8, and canonical JSON, empty (a removed register) or `~` and a
    /// site in hex (an observed map-entry removal).
    static func value(_ bytes: Data, what: String, id: TransactionID, field: String) throws(SyncError) -> (String, Value?) {
        guard let json = bytes.withUnsafeBytes({ UTF8Text.string(validating: $0) }) else {
            throw SyncError(.protocolViolation, "\(what): transaction \(id) has a value that is not UTF-8")
        }
        if json.isEmpty { return (json, nil) }
        if json.hasPrefix("~") {
            guard SiteID(hex: json.dropFirst()) != nil else {
                throw SyncError(
                    .executionFailed, "\(what): transaction \(id): field \(field) is an observed removal without a site in hex")
            }
            return (json, nil)
        }
        // A scalar that is canonical as it stands is kept unparsed: the applier parses
        // a value only for a document whose body needs more than its registers' text.
        if JSON.isCanonicalScalar(json) { return (json, nil) }
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

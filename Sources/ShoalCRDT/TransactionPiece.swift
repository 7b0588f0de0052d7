#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
public import Musl
#elseif canImport(Darwin)
public import Darwin
#endif

/// One document of one collection: what a transaction's manifest lists.
public struct DocumentRef: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var collection: String
    /// The canonical JSON of the document's `_id`.
    public var id: String

    public init(collection: String, id: String) {
        self.collection = collection
        self.id = id
    }

    // Equal, hashed and ordered by the bytes of the collection and the key, as SQLite
    // keys documents: Swift's `String` comparison takes canonically equivalent texts
    // ("é" composed and decomposed) for one, and they are two documents.

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.is(collection: rhs.collection, id: rhs.id) }

    /// Whether this names the document `id` of `collection`, byte for byte (as `==` does).
    public func `is`(collection: String, id: String) -> Bool {
        Self.same(self.id, id) && Self.same(self.collection, collection)
    }

    /// One `memcmp` over the UTF-8 both strings hold already: this runs for every
    /// delta a piece is laid out or applied from.
    private static func same(_ a: String, _ b: String) -> Bool {
        var a = a, b = b
        return a.withUTF8 { x in
            b.withUTF8 { y in x.count == y.count && (x.isEmpty || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0) }
        }
    }

    public func hash(into hasher: inout Hasher) {
        Self.combine(collection, into: &hasher)
        Self.combine(id, into: &hasher)
    }

    private static func combine(_ text: String, into hasher: inout Hasher) {
        var text = text
        text.withUTF8 { bytes in
            hasher.combine(bytes.count)
            hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        }
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        guard lhs.collection.utf8.elementsEqual(rhs.collection.utf8) else {
            return lhs.collection.utf8.lexicographicallyPrecedes(rhs.collection.utf8)
        }
        return lhs.id.utf8.lexicographicallyPrecedes(rhs.id.utf8)
    }

    public var description: String { "\(collection) \(id)" }
}

/// How many documents a transaction wrote in one collection, and how many deltas:
/// one line of its manifest.
public struct CollectionCount: Sendable, Hashable {
    public var collection: String
    public var documents: UInt32
    public var deltas: UInt32

    public init(collection: String, documents: UInt32, deltas: UInt32) {
        self.collection = collection
        self.documents = documents
        self.deltas = deltas
    }

    /// The manifest of a list of deltas, by collection in order of first appearance.
    public static func manifest(of deltas: some Sequence<(collection: String, document: String)>) -> [CollectionCount] {
        var documents: [(collection: String, deltas: Int)] = []
        var slots: [DocumentRef: Int] = [:]
        for (collection, document) in deltas {
            let ref = DocumentRef(collection: collection, id: document)
            if let slot = slots[ref] {
                documents[slot].deltas += 1
            } else {
                slots[ref] = documents.count
                documents.append((collection, 1))
            }
        }
        return manifest(documents: documents)
    }

    /// The manifest from each document written once, with its collection and how
    /// many deltas the transaction wrote to it, in order of first write.
    public static func manifest(documents: [(collection: String, deltas: Int)]) -> [CollectionCount] {
        var manifest: [CollectionCount] = []
        var slots: [String: Int] = [:]
        var previous: (collection: String, slot: Int)?
        for (collection, deltas) in documents {
            let slot: Int
            if let previous, previous.collection == collection {
                slot = previous.slot
            } else if let known = slots[collection] {
                slot = known
            } else {
                slot = manifest.count
                slots[collection] = slot
                manifest.append(CollectionCount(collection: collection, documents: 0, deltas: 0))
            }
            previous = (collection, slot)
            manifest[slot].documents += 1
            manifest[slot].deltas += UInt32(deltas)
        }
        return manifest
    }
}

/// A set of subscriptions as plain data, as a `NOT_COVERED` verdict names it: the
/// queries that the documents a sender withheld do not match.
public struct SubscriptionFilter: Sendable, Hashable, CustomStringConvertible {
    public struct Entry: Sendable, Hashable {
        public var query: String
        /// The named arguments as a canonical JSON object, or "" for none.
        public var argumentsJSON: String

        public init(query: String, argumentsJSON: String) {
            self.query = query
            self.argumentsJSON = argumentsJSON
        }
    }

    /// Sorted by query then arguments, so equal sets are equal values.
    public private(set) var entries: [Entry]

    public init(_ entries: [Entry]) {
        self.entries = entries.sorted { ($0.query, $0.argumentsJSON) < ($1.query, $1.argumentsJSON) }
    }

    /// A stable name for the set: FNV-1a over its entries, 16 hex digits.
    public var key: String {
        StableHash.fnv1a(entries.map { $0.query + "\u{0}" + $0.argumentsJSON }.joined(separator: "\u{1}"))
    }

    public var description: String { entries.map(\.query).joined(separator: "; ") }
}

/// What a sender says of the documents of one collection of a transaction that it
/// does not send.
public enum Coverage: Sendable, Hashable {
    /// The documents it holds and withholds do not match these subscriptions.
    case notCovered(SubscriptionFilter)
    /// It no longer holds some deltas: these later transactions overwrote them.
    case superseded([TransactionID])
    /// It never held some of them.
    case unknown
    /// It holds some that the receiver said it cannot take (a value larger than its
    /// frame limit, a document over its size limit): the receiver cannot hold the
    /// transaction whole.
    case overLimit
}

/// A sender's verdict on the withheld documents of one collection.
public struct Verdict: Sendable, Hashable {
    public var collection: String
    public var coverage: Coverage

    public init(collection: String, coverage: Coverage) {
        self.collection = collection
        self.coverage = coverage
    }
}

/// The current value of a field, sent along with a transaction that may have made
/// its document match the receiver's subscriptions: the rest of the document.
public struct ContextField: Sendable, Hashable {
    public var document: DocumentRef
    public var field: String
    public var valueJSON: String
    public var timestamp: HybridTimestamp
    /// The transaction that wrote this value.
    public var transaction: TransactionID

    public init(document: DocumentRef, field: String, valueJSON: String, timestamp: HybridTimestamp, transaction: TransactionID) {
        self.document = document
        self.field = field
        self.valueJSON = valueJSON
        self.timestamp = timestamp
        self.transaction = transaction
    }

    /// As a delta of its own transaction (index and count unknown: 0).
    public var delta: Delta {
        Delta(
            collection: document.collection, documentID: document.id, field: field, valueJSON: valueJSON,
            timestamp: timestamp, transaction: transaction, index: 0, count: 0)
    }
}

/// The part of one transaction that one message carries: its manifest, some of its
/// deltas, and in its last piece the sender's verdicts on what it does not send.
///
/// A transaction travels as one or more pieces, possibly from several peers; the
/// receiver puts them together and applies the transaction once what its
/// subscriptions cover is all there (see `CoverageAssembler` in ShoalSync).
public struct TransactionPiece: Sendable, Hashable {
    public var id: TransactionID
    /// How many deltas and documents the whole transaction wrote.
    public var deltaCount: UInt32
    public var documentCount: UInt32
    /// The manifest by collection.
    public var collections: [CollectionCount]
    /// The deltas this piece carries, each naming its document.
    public var deltas: [Delta]
    /// For each document with deltas in this piece: how many the transaction wrote to it in all.
    public var documentDeltaCounts: [DocumentRef: UInt32]
    /// Only meaningful in the last piece: verdicts on withheld documents, by collection.
    public var verdicts: [Verdict]
    /// The sender has sent everything of this transaction it will send in this stream.
    public var isLast: Bool
    public var context: [ContextField]

    public init(
        id: TransactionID, deltaCount: UInt32, documentCount: UInt32, collections: [CollectionCount],
        deltas: [Delta] = [], documentDeltaCounts: [DocumentRef: UInt32] = [:], verdicts: [Verdict] = [],
        isLast: Bool = false, context: [ContextField] = []
    ) {
        self.id = id
        self.deltaCount = deltaCount
        self.documentCount = documentCount
        self.collections = collections
        self.deltas = deltas
        self.documentDeltaCounts = documentDeltaCounts
        self.verdicts = verdicts
        self.isLast = isLast
        self.context = context
    }

    /// The size of the values it carries, roughly what it costs to hold it.
    public var byteCount: Int {
        deltas.reduce(0) { $0 + $1.valueJSON.utf8.count + $1.field.utf8.count + $1.documentID.utf8.count + 32 }
            + context.reduce(0) { $0 + $1.valueJSON.utf8.count + $1.field.utf8.count + 32 }
    }
}

/// Stable 64-bit hashes, the same on every run and platform.
public enum StableHash {
    /// FNV-1a, 64 bits, as 16 lowercase hex digits.
    public static func fnv1a(_ text: String) -> String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            h ^= UInt64(byte)
            h = h &* 0x0000_0100_0000_01b3
        }
        return SiteID(h).description
    }
}

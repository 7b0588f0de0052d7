/// What a node knows of a remote transaction that it has not applied whole: its
/// manifest, what each peer said of it, and which of its deltas are held.
///
/// The record is plain data. `CoverageAssembler` (ShoalSync) decides from it
/// when the transaction can be applied; the store keeps it durable (table `txn`
/// for the header and the reports, `txn_piece` for the deltas of a waiting one).
public struct TransactionRecord: Sendable, Hashable {
    public enum State: Int, Sendable, Hashable {
        /// Not applied: its pieces wait in the durable buffer.
        case waiting = 0
        /// Applied whole (or, for a local transaction, committed).
        case applied = 1
        /// Applied without some pieces its subscriptions cover; the rest is applied when it comes.
        case partial = 2
        /// Not applied, and never to be: this node cannot hold what it writes (a
        /// document over its limits, `DocumentLimits`). Later pieces are dropped.
        case refused = 3
    }

    /// What one peer said of the transaction.
    public struct Report: Sendable, Hashable {
        /// The peer sent the transaction's last piece (or a complete answer).
        public var isLast: Bool
        /// Its verdicts on withheld documents, from its last piece.
        public var verdicts: [Verdict]

        public init(isLast: Bool = false, verdicts: [Verdict] = []) {
            self.isLast = isLast
            self.verdicts = verdicts
        }
    }

    /// The deltas held of one document.
    public struct Progress: Sendable, Hashable {
        /// How many deltas the transaction wrote to the document.
        public var expected: UInt32
        /// The indices (in the transaction) of those held.
        public var received: HeldIndices

        public init(expected: UInt32, received: HeldIndices = []) {
            self.expected = expected
            self.received = received
        }

        public var isComplete: Bool { received.count >= Int(expected) }
    }

    public var id: TransactionID
    public var deltaCount: UInt32
    public var documentCount: UInt32
    public var collections: [CollectionCount]
    public var state: State
    /// When this node first heard of it, in milliseconds since 1970.
    public var firstSeen: UInt64
    public var reports: [SiteID: Report]
    public var documents: [DocumentRef: Progress]
    /// Bytes of its deltas in the durable buffer.
    public var bufferedBytes: Int

    public init(
        id: TransactionID, deltaCount: UInt32, documentCount: UInt32, collections: [CollectionCount],
        state: State = .waiting, firstSeen: UInt64, reports: [SiteID: Report] = [:],
        documents: [DocumentRef: Progress] = [:], bufferedBytes: Int = 0
    ) {
        self.id = id
        self.deltaCount = deltaCount
        self.documentCount = documentCount
        self.collections = collections
        self.state = state
        self.firstSeen = firstSeen
        self.reports = reports
        self.documents = documents
        self.bufferedBytes = bufferedBytes
    }
}

// MARK: Persisted forms

extension CollectionCount {
    /// `[[collection, documents, deltas], ...]`, as table `txn` keeps a manifest.
    public static func encode(_ counts: [CollectionCount]) -> String {
        Value.array(counts.map { .array([.string($0.collection), .int(Int64($0.documents)), .int(Int64($0.deltas))]) })
            .canonicalJSON
    }

    public static func decode(_ text: String) -> [CollectionCount]? {
        guard case .array(let items)? = try? JSON.parse(text) else { return nil }
        var out: [CollectionCount] = []
        for item in items {
            guard case .array(let parts) = item, parts.count == 3, case .string(let c) = parts[0],
                case .int(let d) = parts[1], case .int(let n) = parts[2], let documents = UInt32(exactly: d),
                let deltas = UInt32(exactly: n)
            else { return nil }
            out.append(CollectionCount(collection: c, documents: documents, deltas: deltas))
        }
        return out
    }
}

extension Verdict {
    /// `{"c": collection, "n": [[query, arguments], ...]}` for NOT_COVERED,
    /// `{"c": ..., "s": ["SITE:SEQ", ...]}` for SUPERSEDED, `{"c": ..., "u": true}` for UNKNOWN,
    /// `{"c": ..., "o": true}` for OVER_LIMIT.
    public var value: Value {
        var object: [String: Value] = ["c": .string(collection)]
        switch coverage {
        case .notCovered(let filter):
            object["n"] = .array(filter.entries.map { .array([.string($0.query), .string($0.argumentsJSON)]) })
        case .superseded(let ids):
            object["s"] = .array(ids.map { .string($0.description) })
        case .unknown:
            object["u"] = .bool(true)
        case .overLimit:
            object["o"] = .bool(true)
        }
        return .object(object)
    }

    public init?(_ value: Value) {
        guard case .string(let collection)? = value["c"] else { return nil }
        if case .array(let entries)? = value["n"] {
            var out: [SubscriptionFilter.Entry] = []
            for entry in entries {
                guard case .array(let parts) = entry, parts.count == 2, case .string(let q) = parts[0],
                    case .string(let a) = parts[1]
                else { return nil }
                out.append(.init(query: q, argumentsJSON: a))
            }
            self.init(collection: collection, coverage: .notCovered(SubscriptionFilter(out)))
        } else if case .array(let ids)? = value["s"] {
            let parsed = ids.compactMap { $0.stringValue.flatMap(TransactionID.init) }
            guard parsed.count == ids.count else { return nil }
            self.init(collection: collection, coverage: .superseded(parsed))
        } else if value["u"] != nil {
            self.init(collection: collection, coverage: .unknown)
        } else if value["o"] != nil {
            self.init(collection: collection, coverage: .overLimit)
        } else {
            return nil
        }
    }

    public static func encode(_ verdicts: [Verdict]) -> String {
        verdicts.isEmpty ? "" : Value.array(verdicts.map(\.value)).canonicalJSON
    }

    public static func decode(_ text: String) -> [Verdict] {
        guard !text.isEmpty, case .array(let items)? = try? JSON.parse(text) else { return [] }
        return items.compactMap(Verdict.init)
    }
}

extension TransactionRecord.Report {
    /// The reports of every peer: `{"SITE": {"last": bool, "v": [verdicts]}}`.
    public static func encode(_ reports: [SiteID: Self]) -> String {
        guard !reports.isEmpty else { return "" }
        return Value.object(
            Dictionary(
                uniqueKeysWithValues: reports.map { site, report in
                    (site.description, Value.object(["last": .bool(report.isLast), "v": .array(report.verdicts.map(\.value))]))
                })
        ).canonicalJSON
    }

    public static func decode(_ text: String) -> [SiteID: Self] {
        guard !text.isEmpty, case .object(let object)? = try? JSON.parse(text) else { return [:] }
        var out: [SiteID: Self] = [:]
        for (key, value) in object {
            guard let site = SiteID(hex: key) else { continue }
            let verdicts: [Verdict]
            if case .array(let items)? = value["v"] { verdicts = items.compactMap(Verdict.init) } else { verdicts = [] }
            out[site] = Self(isLast: value["last"] == .bool(true), verdicts: verdicts)
        }
        return out
    }
}

/// One field write, the unit that replicates.
///
/// Every delta names the transaction that wrote it and its place in that
/// transaction (`index` of `count`), so a receiver can tell when it holds the
/// whole of a transaction and apply it at once.
public struct Delta: Sendable, Hashable {
    public var collection: String
    public var documentID: String
    /// A top-level field name. `_id` marks the document's existence.
    public var field: String
    /// The field's new value as canonical JSON text.
    public var valueJSON: String
    public var timestamp: HybridTimestamp
    public var transaction: TransactionID
    /// This delta's position in its transaction, from 0.
    public var index: UInt32
    /// How many deltas the transaction wrote in all.
    public var count: UInt32
    /// The value `valueJSON` holds, when whoever made this delta parsed it already (a
    /// receiver checking it): the applier then does not parse it again. Not part of
    /// equality.
    public var parsed: Value?

    public init(
        collection: String, documentID: String, field: String, valueJSON: String,
        timestamp: HybridTimestamp, transaction: TransactionID, index: UInt32, count: UInt32, parsed: Value? = nil
    ) {
        self.collection = collection
        self.documentID = documentID
        self.field = field
        self.valueJSON = valueJSON
        self.timestamp = timestamp
        self.transaction = transaction
        self.index = index
        self.count = count
        self.parsed = parsed
    }

    public static func == (a: Delta, b: Delta) -> Bool {
        a.collection == b.collection && a.documentID == b.documentID && a.field == b.field && a.valueJSON == b.valueJSON
            && a.timestamp == b.timestamp && a.transaction == b.transaction && a.index == b.index && a.count == b.count
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(collection)
        hasher.combine(documentID)
        hasher.combine(field)
        hasher.combine(valueJSON)
        hasher.combine(timestamp)
        hasher.combine(transaction)
        hasher.combine(index)
    }

    /// The writer of this delta, which breaks timestamp ties.
    public var site: SiteID { transaction.origin }

    /// The version this delta would give its field.
    public var version: RegisterVersion { RegisterVersion(timestamp: timestamp, site: site) }
}

/// The version of a last-writer-wins register: higher timestamp wins, then higher site ID.
///
/// Equal versions come only from the same write delivered twice, so merge is
/// idempotent; comparing on (timestamp, site) makes it commutative and associative.
public struct RegisterVersion: Sendable, Hashable, Comparable {
    public var timestamp: HybridTimestamp
    public var site: SiteID

    public init(timestamp: HybridTimestamp, site: SiteID) {
        self.timestamp = timestamp
        self.site = site
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.timestamp, lhs.site) < (rhs.timestamp, rhs.site)
    }
}

/// Last-writer-wins merge of one register.
///
/// A removal of a map entry carries the version of the value it removed (it is
/// an observed remove), so it ties with that value and wins the tie; a value
/// written concurrently, which the remover did not see, has another version and
/// is judged against the removal by version alone. That makes MAP add-wins.
public enum Register {
    /// Whether an incoming write replaces the current one, when either may be a removal.
    public static func incomingWins(
        _ incoming: RegisterVersion, removes incomingRemoves: Bool, over current: RegisterVersion?, removed currentRemoved: Bool
    ) -> Bool {
        guard let current else { return true }
        if incoming == current { return incomingRemoves && !currentRemoved }
        return incoming > current
    }

    /// Whether an incoming write replaces the current one. `current == nil`
    /// means the field was never written here.
    public static func incomingWins(_ incoming: RegisterVersion, over current: RegisterVersion?) -> Bool {
        guard let current else { return true }
        return incoming > current
    }
}

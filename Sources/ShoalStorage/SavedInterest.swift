public import ShoalCRDT

/// The interest of one node of the mesh as a relay keeps it: what it subscribes to,
/// when it said so, and which neighbours passed it on (`InterestTable` in ShoalSync
/// holds the rules).
public struct SavedInterest: Sendable, Hashable {
    public var filter: SubscriptionFilter
    /// The origin's clock when it stated `filter`; 0: a neighbour that states none.
    public var generation: UInt64
    /// The neighbours whose latest Subscribe listed it.
    public var heardFrom: [SiteID]

    public init(filter: SubscriptionFilter, generation: UInt64, heardFrom: [SiteID]) {
        self.filter = filter
        self.generation = generation
        self.heardFrom = heardFrom
    }
}

extension SavedInterest {
    /// The subscriptions as a store keeps them: `[[query, arguments JSON], …]`.
    package var subscriptionsText: String {
        Value.array(filter.entries.map { .array([.string($0.query), .string($0.argumentsJSON)]) }).canonicalJSON
    }

    /// The neighbours heard from as a store keeps them: a JSON array of 16-digit hex site IDs.
    package var heardFromText: String {
        Value.array(heardFrom.sorted().map { .string($0.description) }).canonicalJSON
    }

    /// Reads back what `subscriptionsText` and `heardFromText` kept; nil when the
    /// subscriptions are not such an array (no version of Shoal writes that).
    package init?(subscriptionsText: String, generation: UInt64, heardFromText: String) {
        guard case .array(let items)? = try? JSON.parse(subscriptionsText) else { return nil }
        let entries = items.compactMap { item -> SubscriptionFilter.Entry? in
            guard case .array(let parts) = item, parts.count == 2, case .string(let query) = parts[0],
                case .string(let arguments) = parts[1]
            else { return nil }
            return SubscriptionFilter.Entry(query: query, argumentsJSON: arguments)
        }
        var heardFrom: [SiteID] = []
        if case .array(let sites)? = try? JSON.parse(heardFromText) {
            heardFrom = sites.compactMap { if case .string(let hex) = $0 { SiteID(hex: hex) } else { nil } }
        }
        self.init(filter: SubscriptionFilter(entries), generation: generation, heardFrom: heardFrom)
    }
}

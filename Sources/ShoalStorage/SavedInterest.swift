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

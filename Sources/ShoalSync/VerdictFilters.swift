public import ShoalCRDT
public import ShoalStorage

/// The filters that `notCovered` verdicts carry, each parsed once: whether a node's
/// subscriptions want documents a sender left out (PROTOCOL.md §8.8).
///
/// A verdict `notCovered(S)` on collection c says the sender held the documents and S
/// did not match them. For subscriptions R it vouches only when R is provably narrower
/// than S on c: what S left out, R does not want either. Both the coverage assembler
/// (is a waiting transaction whole?) and the inbound commit (did an applied one leave
/// out what this node takes now?) judge verdicts by this one rule.
public struct VerdictFilters: Sendable {
    private var parsed: [SubscriptionFilter: SubscriptionSet?] = [:]
    /// The most filters kept parsed; past it they are parsed again as they come.
    static let mostKept = 256
    /// How many are kept now.
    var count: Int { parsed.count }

    public init() {}

    /// Whether `subscriptions` want nothing of `collection` that `filter` left out. A
    /// filter that does not parse here proves nothing.
    public mutating func isNarrower(_ subscriptions: SubscriptionSet, than filter: SubscriptionFilter, on collection: String) -> Bool {
        if parsed[filter] == nil {
            // Filters come from peers: a node keeps a bounded number of them parsed.
            if parsed.count >= Self.mostKept { parsed.removeAll(keepingCapacity: true) }
            parsed[filter] = .some(try? SubscriptionSet(filter))
        }
        guard let set = parsed[filter]! else { return false }
        return subscriptions.isProvablyNarrower(than: set, on: collection)
    }

    /// Whether `verdict`, in what an applied transaction left out, leaves out documents
    /// `subscriptions` take: it vouches a collection they name as not covered by a
    /// filter they are not provably narrower than (or one that cannot be read). A
    /// collection they do not name leaves out nothing.
    ///
    /// An `UNKNOWN` does not count: compaction records one for a collection this node
    /// held whole, when more transactions superseded it than a rest names
    /// (`LogCompaction.rest(_:adding:)`), and the two cannot be told apart in a rest.
    public mutating func leavesOut(_ verdict: Verdict, for subscriptions: SubscriptionSet) -> Bool {
        guard case .notCovered(let filter) = verdict.coverage, subscriptions.collections.contains(verdict.collection) else {
            return false
        }
        return !isNarrower(subscriptions, than: filter, on: verdict.collection)
    }

    /// Whether `rest`, what an applied transaction left out, leaves out documents
    /// `subscriptions` take (`leavesOut(_:for:)`, for any of its verdicts).
    public mutating func leavesOut(_ rest: [Verdict], for subscriptions: SubscriptionSet) -> Bool {
        rest.contains { leavesOut($0, for: subscriptions) }
    }
}

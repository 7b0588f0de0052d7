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

    public init() {}

    /// Whether `subscriptions` want nothing of `collection` that `filter` left out. A
    /// filter that does not parse here proves nothing.
    public mutating func isNarrower(_ subscriptions: SubscriptionSet, than filter: SubscriptionFilter, on collection: String) -> Bool {
        if parsed[filter] == nil { parsed[filter] = .some(try? SubscriptionSet(filter)) }
        guard let set = parsed[filter]! else { return false }
        return subscriptions.isProvablyNarrower(than: set, on: collection)
    }

    /// Whether `verdict`, in what an applied transaction left out, leaves out documents
    /// `subscriptions` take: on a collection they name, it vouches the documents as not
    /// covered by a filter they are not provably narrower than (or one that cannot be
    /// read), or no peer vouched for them at all (`unknown`: applied while the node did
    /// not take the collection). A collection they do not name leaves out nothing, and
    /// `overLimit` is about this node's limits, not what it takes.
    public mutating func leavesOut(_ verdict: Verdict, for subscriptions: SubscriptionSet) -> Bool {
        guard subscriptions.collections.contains(verdict.collection) else { return false }
        switch verdict.coverage {
        case .notCovered(let filter): return !isNarrower(subscriptions, than: filter, on: verdict.collection)
        case .unknown: return true
        case .superseded, .overLimit: return false
        }
    }

    /// Whether `rest`, what an applied transaction left out, leaves out documents
    /// `subscriptions` take (`leavesOut(_:for:)`, for any of its verdicts).
    public mutating func leavesOut(_ rest: [Verdict], for subscriptions: SubscriptionSet) -> Bool {
        rest.contains { leavesOut($0, for: subscriptions) }
    }
}

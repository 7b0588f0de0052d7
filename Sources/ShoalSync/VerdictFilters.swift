import ShoalCRDT
import ShoalStorage

/// The filters that `notCovered` verdicts carry, each parsed once: whether a node's
/// subscriptions want documents a sender left out (PROTOCOL.md §8.8).
///
/// A verdict `notCovered(S)` on collection c says the sender held the documents and S
/// did not match them. For subscriptions R it vouches only when R is provably narrower
/// than S on c: what S left out, R does not want either. Both the coverage assembler
/// (is a waiting transaction whole?) and the inbound commit (did an applied one leave
/// out what this node takes now?) judge verdicts by this one rule.
struct VerdictFilters: Sendable {
    /// The filters parsed or used since the last turn, and those of the turn before: a
    /// filter used in a turn stays for the next, so the ones in use stay parsed however
    /// many others a peer sends (`mostKept`).
    private var recent: [SubscriptionFilter: SubscriptionSet?] = [:]
    private var older: [SubscriptionFilter: SubscriptionSet?] = [:]
    /// The most filters kept parsed, both turns together.
    static let mostKept = 1_024
    /// How many are kept now.
    var count: Int { recent.count + older.count }
    /// Whether `filter` is kept parsed.
    func keeps(_ filter: SubscriptionFilter) -> Bool { recent[filter] != nil || older[filter] != nil }

    init() {}

    /// Whether `subscriptions` want nothing of `collection` that `filter` left out. A
    /// filter that does not parse here proves nothing.
    mutating func isNarrower(_ subscriptions: SubscriptionSet, than filter: SubscriptionFilter, on collection: String) -> Bool {
        guard let set = parsed(filter) else { return false }
        return subscriptions.isProvablyNarrower(than: set, on: collection)
    }

    /// `filter` parsed (nil: it does not parse), from what is kept where it can be.
    private mutating func parsed(_ filter: SubscriptionFilter) -> SubscriptionSet? {
        if let kept = recent[filter] { return kept }
        // Filters come from peers, as many as they like: a bounded number is kept, in
        // two turns, so that the ones in use are kept (an approximation of least
        // recently used, at the cost of a lookup).
        let set: SubscriptionSet?
        if let kept = older.removeValue(forKey: filter) { set = kept } else { set = try? SubscriptionSet(filter) }
        if recent.count >= Self.mostKept / 2 {
            older = recent
            recent = [:]
        }
        recent[filter] = .some(set)
        return set
    }

    /// Whether `verdict`, in what an applied transaction left out, leaves out documents
    /// `subscriptions` take, of a collection they name: `UNKNOWN` (no peer vouched for
    /// it when the transaction applied: its sender had evicted it, or held it in part),
    /// or not covered by a filter they are not provably narrower than (or one that
    /// cannot be read). A collection they do not name leaves out nothing; nor does
    /// `OVER_LIMIT`, which no peer can mend, or `SUPERSEDED`, whose later writes come
    /// on their own.
    ///
    /// What compaction recorded is kept apart (`LogCompaction.recorded(_:adding:)`):
    /// its `UNKNOWN` is of a collection this node held whole.
    mutating func leavesOut(_ verdict: Verdict, for subscriptions: SubscriptionSet) -> Bool {
        guard subscriptions.names(collection: verdict.collection) else { return false }
        switch verdict.coverage {
        case .unknown: return true
        case .notCovered(let filter): return !isNarrower(subscriptions, than: filter, on: verdict.collection)
        case .superseded, .overLimit: return false
        }
    }

    /// Whether `rest`, what an applied transaction left out, leaves out documents
    /// `subscriptions` take (`leavesOut(_:for:)`, for any of its verdicts).
    mutating func leavesOut(_ rest: [Verdict], for subscriptions: SubscriptionSet) -> Bool {
        rest.contains { leavesOut($0, for: subscriptions) }
    }
}

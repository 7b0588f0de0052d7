public import ShoalCRDT
import Foundation
import ShoalWire

/// How recently this node caught up with each node of the mesh, and the newest
/// deletion it has forgotten: what decides whether a peer may hold documents
/// deleted long ago.
///
/// A node forgets a deleted document once its DELETE is older than the tombstone
/// horizon and every counted peer has passed it (DATA_MODEL.md §18). A peer that
/// was away all that time may still hold the document and could send it back, and
/// this node could no longer tell that it was deleted. So every node keeps its
/// *freshness*: for each node N it has caught up with, the time on N's clock
/// through which it holds N's log (for its subscriptions), learned from N itself or
/// through peers that had caught up with N.
///
/// ```
///   Ping from a peer Q that has nothing more for this node (it is caught up with Q),
///   carrying Q's freshness with Q's own entry at Q's clock now:
///       every entry ──► this node's entry for that site rises to it
///   Hello from a peer holding others' writes, this node N having forgotten deletions up to D:
///       the peer's entry for N below D ──► refuse: STALE_REPLICA
/// ```
///
/// Entries only ever come from the node they name (passed on unchanged), so nodes
/// cut off together stay stale together: none of them can vouch for a node outside.
/// PROTOCOL.md §8.10 says what it still leaves open.
public final class Freshness: Sendable {
    private struct State {
        var entries: [SiteID: UInt64] = [:]
        var forgottenThrough: UInt64 = 0
        var dirty = false
    }

    /// Entries kept at most; the oldest go first past it.
    static let maximumEntries = 4_096
    public let site: SiteID
    private let state = Locked(State())

    public init(site: SiteID) {
        self.site = site
    }

    /// The newest deletion (Unix ms) this node has forgotten; 0: none.
    public var forgottenThrough: UInt64 { state.withLock { $0.forgottenThrough } }

    /// This node's entries (not its own), as saved and as Hello sends them.
    public var entries: [SiteID: UInt64] { state.withLock { $0.entries } }

    /// The entries a Ping carries: this node's, and its own at `now`.
    public func vouching(now: UInt64) -> [SiteID: UInt64] {
        var all = entries
        all[site] = now
        return all
    }

    /// Takes what a store holds (at start).
    public func load(entries: [SiteID: UInt64], forgottenThrough: UInt64) {
        state.withLock {
            $0.entries.merge(entries, uniquingKeysWith: max)
            $0.entries[site] = nil
            Self.cap(&$0)
            $0.forgottenThrough = max($0.forgottenThrough, forgottenThrough)
        }
    }

    /// Keeps the newest `maximumEntries` entries.
    private static func cap(_ s: inout State) {
        guard s.entries.count > maximumEntries else { return }
        let oldest = s.entries.sorted { $0.value < $1.value }.prefix(s.entries.count - maximumEntries)
        for (node, _) in oldest { s.entries[node] = nil }
    }

    /// Notes that this node has forgotten deletions through `millis`.
    public func forgot(through millis: UInt64) {
        state.withLock { $0.forgottenThrough = max($0.forgottenThrough, millis) }
    }

    /// A peer this node is caught up with vouched `peer` (its freshness, its own
    /// entry included): each entry rises to it.
    public func caughtUp(with peer: [SiteID: UInt64]) {
        state.withLock { s in
            for (node, through) in peer where node != site && through > s.entries[node, default: 0] {
                s.entries[node] = through
                s.dirty = true
            }
            Self.cap(&s)
        }
    }

    /// Marks the entries as changed again (their save failed).
    public func saveFailed() {
        state.withLock { $0.dirty = true }
    }

    /// The entries to save when they changed since the last call, nil otherwise.
    public func takeChanges() -> [SiteID: UInt64]? {
        state.withLock { s in
            guard s.dirty else { return nil }
            s.dirty = false
            return s.entries
        }
    }

    /// Why a peer must not sync with `node`, or nil when it may: it must not when it
    /// holds what other nodes wrote and `node` has forgotten a deletion newer than the
    /// peer's entry for `node` (how far it is known to hold `node`'s log).
    public static func refusal(
        peer: SiteID, peerFreshness: [SiteID: UInt64], peerHoldsOthersWrites: Bool, node: SiteID, forgottenThrough forgotten: UInt64
    ) -> String? {
        guard forgotten > 0, peerHoldsOthersWrites else { return nil }
        let through = peerFreshness[node] ?? 0
        guard through < forgotten else { return nil }
        let caughtUp =
            through == 0
            ? "has never caught up with site \(node) (nor with a node that had)"
            : "caught up with site \(node) only through \(describe(through))"
        return "stale replica: site \(peer) \(caughtUp), and site \(node) has forgotten documents deleted up to \(describe(forgotten)) (its tombstone horizon), so site \(peer) may hold some of them and would bring them back. Start site \(peer) again from an empty data directory (keep what it needs first with shoal export) and it resyncs"
    }

    public static func describe(_ millis: UInt64) -> String {
        Date(timeIntervalSince1970: Double(millis) / 1000).formatted(.iso8601)
    }

    /// Unix ms now.
    public static func now() -> UInt64 { UInt64(max(0, Date().timeIntervalSince1970 * 1000)) }
}

extension Freshness {
    /// One entry as a message carries it: a node, and the time on its clock through
    /// which the sender holds its log.
    public struct Entry: Sendable, Hashable {
        public var site: SiteID
        /// Unix ms on that node's clock.
        public var throughMillis: UInt64

        public init(site: SiteID, throughMillis: UInt64) {
            self.site = site
            self.throughMillis = throughMillis
        }
    }

    /// Entries as a message carries them, newest first.
    public static func list(_ entries: [SiteID: UInt64]) -> [Entry] {
        entries.sorted { ($0.value, $0.key.rawValue) > ($1.value, $1.key.rawValue) }.map { Entry(site: $0, throughMillis: $1) }
    }

    /// Entries a message carries; a site named twice keeps its newest time, site 0 is dropped.
    public static func entries(_ list: [Entry]) -> [SiteID: UInt64] {
        var entries: [SiteID: UInt64] = [:]
        for entry in list where entry.site.rawValue != 0 {
            entries[entry.site, default: 0] = max(entries[entry.site, default: 0], entry.throughMillis)
        }
        return entries
    }

    /// Entries as the wire carries them, newest first.
    static func wire(_ entries: [SiteID: UInt64]) -> [Shoal_V1_Freshness] { wire(list(entries)) }

    static func wire(_ list: [Entry]) -> [Shoal_V1_Freshness] {
        list.map { entry in
            var wire = Shoal_V1_Freshness()
            wire.siteID = entry.site.rawValue
            wire.throughMillis = entry.throughMillis
            return wire
        }
    }

    /// Entries from the wire, as `entries(_:)` reads them.
    static func entries(_ wire: [Shoal_V1_Freshness]) -> [SiteID: UInt64] { entries(list(wire)) }

    static func list(_ wire: [Shoal_V1_Freshness]) -> [Entry] {
        wire.map { Entry(site: SiteID($0.siteID), throughMillis: $0.throughMillis) }
    }
}

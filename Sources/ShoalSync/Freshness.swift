public import ShoalCRDT
import Foundation

/// How recently this node learned the mesh's deletions, and the newest deletion it
/// has forgotten: what decides whether a peer may hold documents deleted long ago.
///
/// A node forgets a deleted document once its tombstone is older than the tombstone
/// horizon and every counted peer has passed the DELETE (DATA_MODEL.md §18). A peer
/// that was away all that time may still hold the document and could send it back,
/// and this node could no longer tell that it was deleted. So every node keeps its
/// *freshness*: the time through which it has learned the mesh's deletions.
///
/// ```
///   store created ──► fresh = now            (an empty store holds nothing deleted)
///   Ping from a peer that has everything of its log this node asked for, carrying
///   the peer's freshness F:
///       F within the horizon of now ──► fresh = now     (caught up with a fresh peer)
///       otherwise                   ──► unchanged       (two stale nodes stay stale)
///   Hello from a peer with freshness F, this node having forgotten deletions through D:
///       F < D ──► refuse: STALE_REPLICA (the peer starts again from an empty store)
/// ```
///
/// Freshness is a time, not a proof: it assumes a deletion reaches a node that is
/// caught up with a fresh peer well within the horizon (PROTOCOL.md §8.11 says what
/// that leaves open).
public final class Freshness: Sendable {
    private struct State {
        var freshThrough: UInt64
        var forgottenThrough: UInt64
        var saved: UInt64
    }

    /// How old a peer's freshness may be, in ms, for catching up with it to count.
    public let horizonMillis: UInt64
    /// Freshness is saved when it has risen by this much since the last save (ms).
    static let saveStep: UInt64 = 30_000
    private let state: Locked<State>

    public init(freshThrough: UInt64 = 0, forgottenThrough: UInt64 = 0, horizon: Duration) {
        state = Locked(State(freshThrough: freshThrough, forgottenThrough: forgottenThrough, saved: freshThrough))
        horizonMillis = UInt64(max(0, horizon.components.seconds)) * 1000
            + UInt64(max(0, horizon.components.attoseconds) / 1_000_000_000_000_000)
    }

    /// The time (Unix ms) through which this node has learned the mesh's deletions.
    public var freshThrough: UInt64 { state.withLock { $0.freshThrough } }

    /// The newest deletion (Unix ms) this node has forgotten; 0: none.
    public var forgottenThrough: UInt64 { state.withLock { $0.forgottenThrough } }

    /// Takes the values a store holds (at start).
    public func load(freshThrough: UInt64, forgottenThrough: UInt64) {
        state.withLock {
            $0.freshThrough = max($0.freshThrough, freshThrough)
            $0.saved = max($0.saved, freshThrough)
            $0.forgottenThrough = max($0.forgottenThrough, forgottenThrough)
        }
    }

    /// Notes that this node has forgotten deletions through `millis`.
    public func forgot(through millis: UInt64) {
        state.withLock { $0.forgottenThrough = max($0.forgottenThrough, millis) }
    }

    /// A peer this node is caught up with says its freshness is `peer`: this node's
    /// rises to `now` when the peer's is within the horizon. Returns the value to
    /// save when it rose far enough since the last save, nil otherwise.
    public func caughtUp(withPeerFreshThrough peer: UInt64, now: UInt64) -> UInt64? {
        guard peer != 0, peer &+ horizonMillis >= now else { return nil }
        return state.withLock { s -> UInt64? in
            s.freshThrough = max(s.freshThrough, now)
            guard s.freshThrough >= s.saved &+ Self.saveStep else { return nil }
            s.saved = s.freshThrough
            return s.freshThrough
        }
    }

    /// Why a peer whose Hello says `peerFreshThrough` must not sync with this node, or
    /// nil when it may: it must not when this node has forgotten a deletion newer
    /// than what the peer is known to have learned.
    public static func refusal(peer: SiteID, peerFreshThrough fresh: UInt64, node: SiteID, forgottenThrough forgotten: UInt64) -> String? {
        guard forgotten > 0, fresh < forgotten else { return nil }
        let learned = fresh == 0 ? "does not say how recently it learned the mesh's deletions" : "learned the mesh's deletions only through \(describe(fresh))"
        return "stale replica: site \(peer) \(learned), and site \(node) has forgotten documents deleted up to \(describe(forgotten)) (its tombstone horizon), so site \(peer) may hold some of them and would bring them back. Start site \(peer) again from an empty data directory (keep what it needs first with shoal export) and it resyncs"
    }

    public static func describe(_ millis: UInt64) -> String {
        let date = Date(timeIntervalSince1970: Double(millis) / 1000)
        return date.formatted(.iso8601)
    }

    /// Unix ms now.
    public static func now() -> UInt64 { UInt64(max(0, Date().timeIntervalSince1970 * 1000)) }
}

public import ShoalCRDT
public import ShoalStorage
package import Foundation

/// What connected peers acknowledged of this node's change log, noted by their
/// sessions as it happens and taken by compaction, which saves it (`peer_ack`) and
/// runs no further than the lowest position.
public final class PeerPositions: Sendable {
    private struct Noted {
        /// nil: the peer asks for nothing, so it holds no position.
        var through: UInt64?
        var heardAt: Date
    }

    private let noted = Locked<[SiteID: Noted]>([:])
    /// The sequence the last compaction ran through.
    private let compacted = Locked<UInt64>(0)

    public init() {}

    /// A session's view of its peer now.
    public func note(_ peer: SiteID, through: UInt64?) {
        let now = Date()
        noted.withLock { $0[peer] = Noted(through: through, heardAt: now) }
    }

    /// Everything noted since the last call: positions to save, and peers that ask
    /// for nothing and so no longer hold the log.
    public func take() -> (acknowledgements: [PeerAcknowledgement], forget: [SiteID]) {
        let all = noted.withLock { noted in
            defer { noted = [:] }
            return noted
        }
        var acknowledgements: [PeerAcknowledgement] = []
        var forget: [SiteID] = []
        for (peer, n) in all {
            if let through = n.through {
                acknowledgements.append(PeerAcknowledgement(peer: peer, through: through, heardAt: n.heardAt))
            } else {
                forget.append(peer)
            }
        }
        return (acknowledgements, forget)
    }

    /// Compacts `store`'s change log as far as peers allow: saves what they
    /// acknowledged, forgets peers unheard for longer than `horizon`, and runs to the
    /// lowest position left (`CompactionPoint`). Returns the report, the peer that
    /// held the point back, and the peers that no longer count.
    package func compact(
        _ store: any SyncStore, horizon: Duration, now: Date = Date(),
        progress: @Sendable (UInt64, CompactionReport) async -> Void = { _, _ in }
    ) async throws(ShoalError) -> (report: CompactionReport, heldBy: SiteID?, expired: [SiteID]) {
        let taken = take()
        try await store.savePeerAcknowledgements(taken.acknowledgements, forget: taken.forget)
        let (point, heldBy, expired) = CompactionPoint.compute(
            lastSequence: try await store.lastSequence(), acknowledgements: try await store.peerAcknowledgements(),
            horizon: Double(horizon.components.seconds) + Double(horizon.components.attoseconds) / 1e18, now: now)
        try await store.savePeerAcknowledgements([], forget: expired)
        let report = try await store.compactChangeLog(after: 0, through: point, progress: progress)
        compactedThrough = report.through
        return (report, heldBy, expired)
    }

    /// The point the last compaction ran through, which a peer resuming below it
    /// is told about (it resyncs).
    public var compactedThrough: UInt64 {
        get { compacted.withLock { $0 } }
        set { compacted.withLock { $0 = max($0, newValue) } }
    }
}

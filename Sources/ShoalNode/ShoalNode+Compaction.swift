public import ShoalStore
import ShoalCRDT
import ShoalSync
import Logging
import Foundation

/// What one compaction of a node did, for `shoal compact` and the log.
public struct CompactionOutcome: Sendable, Hashable {
    public var report: CompactionReport
    /// The peer whose acknowledged position held the point back, if one did.
    public var heldBy: String?
    /// Peers unheard for longer than the horizon, no longer holding the log back.
    public var expiredPeers: [String]
    /// Registers removed because a tombstone hides them.
    public var registersPurged: Int
    /// Store file bytes before and after (after VACUUM, when it ran).
    public var storeBytesBefore: UInt64
    public var storeBytesAfter: UInt64
    public var vacuumed: Bool
}

extension ShoalNode {
    /// Compacts the change log as far as this node's peers allow: saves what they
    /// acknowledged, computes the point (the lowest position of a peer heard within
    /// the horizon), removes the transactions below it that hold no current value,
    /// and runs VACUUM when asked. `progress` hears the sequence reached and the
    /// report so far, after each chunk.
    public func compact(
        vacuum: Bool = false, progress: @Sendable (UInt64, CompactionReport) async -> Void = { _, _ in }
    ) async throws(StoreError) -> CompactionOutcome {
        let horizon = configuration.compactionHorizon
        let before = NodeMetrics.storeSize(directory: configuration.dataDirectory)
        let (report, heldBy, expired) = try await sync.positions.compact(store, horizon: horizon, progress: progress)
        if !expired.isEmpty {
            logger.notice(
                "peers not heard from for longer than the compaction horizon (\(horizon)) no longer hold back compaction; they resync when they return",
                metadata: ["shoal.peers": "\(expired.map(\.description).joined(separator: ","))"])
        }
        let purged = try await store.purgeHiddenRegisters()
        if vacuum { try await store.vacuum() }
        let outcome = CompactionOutcome(
            report: report, heldBy: heldBy?.description, expiredPeers: expired.map(\.description), registersPurged: purged,
            storeBytesBefore: before, storeBytesAfter: NodeMetrics.storeSize(directory: configuration.dataDirectory),
            vacuumed: vacuum)
        if report.rowsRemoved > 0 || purged > 0 || vacuum {
            logger.info(
                "compacted the change log through \(report.through): \(report.rowsRemoved) of \(report.rowsBefore) rows removed (\(report.transactionsRemoved) transactions); \(purged) registers hidden by tombstones removed",
                metadata: ["shoal.compaction.held_by": "\(heldBy.map(\.description) ?? "-")"])
        }
        return outcome
    }

    /// Compacts every `compactionInterval` while the node runs, when the log grew
    /// since the last time. A failure is logged and tried again next time.
    func compactPeriodically() async {
        guard let interval = configuration.compactionInterval else { return }
        var lastSeen: UInt64?
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
            do throws(StoreError) {
                let last = try await store.lastSequence()
                // Peers' positions are taken whether or not the log grew, so they stay current.
                if last == lastSeen {
                    let taken = sync.positions.take()
                    try await store.savePeerAcknowledgements(taken.acknowledgements, forget: taken.forget)
                    continue
                }
                lastSeen = last
                _ = try await compact()
            } catch {
                logger.warning("change-log compaction failed: \(error); trying again in \(interval)")
            }
        }
    }
}

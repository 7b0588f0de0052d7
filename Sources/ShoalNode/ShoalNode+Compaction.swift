public import ShoalStorage
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
    /// Registers no value needs any more: hidden by a tombstone, or removals older
    /// than the tombstone horizon.
    public var registersPurged: Int
    /// Deleted documents forgotten: deleted longer than the tombstone horizon ago.
    public var documentsForgotten: UInt64
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
    package func compact(
        vacuum: Bool = false, progress: @Sendable (UInt64, CompactionReport) async -> Void = { _, _ in }
    ) async throws(ShoalError) -> CompactionOutcome {
        let horizon = configuration.compactionHorizon
        let before = storage.storeBytes()
        let now = Date()
        // Documents deleted before this are forgotten once every counted peer has passed
        // their DELETE; nothing is until the store has kept its freshness for a whole
        // horizon, so every peer it met meanwhile carries an entry for it (PROTOCOL.md §8.10).
        let freshSince = try await storage.freshSince()
        let tombstonesBefore = configuration.tombstoneHorizon.flatMap { horizon -> UInt64? in
            let before = UInt64(max(0, (now.timeIntervalSince1970 - Double(horizon.components.seconds)) * 1000))
            return before >= freshSince ? before : nil
        }
        let (report, heldBy, expired) = try await sync.positions.compact(storage, horizon: horizon, now: now, progress: progress)
        if !expired.isEmpty {
            logger.notice(
                "peers not heard from for longer than the compaction horizon (\(horizon)) no longer hold back compaction; they resync when they return",
                metadata: ["shoal.peers": "\(expired.map(\.description).joined(separator: ","))"])
        }
        let unrelayed = try await sync.forgetInterest(of: expired, horizon: horizon)
        if !unrelayed.isEmpty {
            logger.notice(
                "no longer relaying for nodes not heard of for longer than the compaction horizon (\(horizon)): what only they asked for is no longer asked upstream",
                metadata: ["shoal.peers": "\(unrelayed.map(\.description).joined(separator: ","))"])
        }
        var purged = try await storage.purgeHiddenRegisters()
        var forgotten: UInt64 = 0
        if let tombstonesBefore {
            purged += try await storage.forgetRemovals(removedBefore: tombstonesBefore)
            let forget = try await storage.forgetDeletedDocuments(deletedBefore: tombstonesBefore, through: report.through)
            forgotten = forget.documents
            sync.freshness.forgot(through: forget.forgottenThroughMillis)
            if forget.documents > 0 {
                logger.notice(
                    "forgot \(forget.documents) documents deleted longer than the tombstone horizon ago; peers that learned the mesh's deletions before \(Freshness.describe(forget.forgottenThroughMillis)) are refused as stale",
                    metadata: ["shoal.tombstone.horizon": "\(configuration.tombstoneHorizon.map { "\($0)" } ?? "-")"])
            }
        }
        if vacuum { try await storage.vacuum() }
        let outcome = CompactionOutcome(
            report: report, heldBy: heldBy?.description, expiredPeers: expired.map(\.description), registersPurged: purged,
            documentsForgotten: forgotten,
            storeBytesBefore: before, storeBytesAfter: storage.storeBytes(),
            vacuumed: vacuum)
        if report.rowsRemoved > 0 || purged > 0 || vacuum {
            logger.info(
                "compacted the change log through \(report.through): \(report.rowsRemoved) of \(report.rowsBefore) rows removed (\(report.transactionsRemoved) transactions); \(purged) registers hidden by tombstones or removed before the tombstone horizon purged",
                metadata: ["shoal.compaction.held_by": "\(heldBy.map(\.description) ?? "-")"])
        }
        return outcome
    }

    /// Saves the node's freshness every 30 s when it changed, off the sessions' path.
    func saveFreshnessPeriodically() async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: .seconds(30))
            } catch {
                return
            }
            await saveFreshness()
        }
    }

    /// Saves the node's freshness if it changed; a failure is logged (the next save,
    /// or the peers' next Pings, make up for it).
    func saveFreshness() async {
        guard let changes = sync.freshness.takeChanges() else { return }
        do {
            try await storage.saveFreshness(changes)
        } catch {
            sync.freshness.saveFailed()
            logger.warning("could not save the node's freshness: \(error); trying again later")
        }
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
            do throws(ShoalError) {
                let last = try await storage.lastSequence()
                // Peers' positions are taken whether or not the log grew, so they stay current.
                if last == lastSeen {
                    let taken = sync.positions.take()
                    try await storage.savePeerAcknowledgements(taken.acknowledgements, forget: taken.forget)
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

package import ShoalCRDT
package import Foundation

/// What the change log holds and how far compaction has gone, for `status`.
package struct StorageStatus: Sendable, Hashable {
    /// Rows in the change log now.
    package var changeLogRows: UInt64
    /// The log's last sequence.
    package var lastSequence: UInt64
    /// The highest sequence a compaction ran through (0: never).
    package var compactedThrough: UInt64
    /// When that compaction ran (nil: never).
    package var compactedAt: Date?
    /// Deleted documents forgotten after the tombstone horizon, in all.
    package var documentsForgotten: UInt64
    /// The newest deletion forgotten, Unix ms (0: none).
    package var forgottenThroughMillis: UInt64
    /// This node's freshness: for each node, the time on its clock through which this
    /// store holds its log (ShoalSync's `Freshness`).
    package var freshness: [SiteID: UInt64]
    /// When the store started keeping its freshness (Unix ms).
    package var freshSinceMillis: UInt64
    /// The engine: `sqlite`, or `postgresql` (a hub).
    package var engine = "sqlite"
    /// Where the store is: the database file's path, or the database's URL (no password).
    package var location = ""
    /// The processes that are this node on the store now, this one included (hubs).
    package var processes = 1

    package init(
        changeLogRows: UInt64, lastSequence: UInt64, compactedThrough: UInt64, compactedAt: Date?,
        documentsForgotten: UInt64 = 0, forgottenThroughMillis: UInt64 = 0, freshness: [SiteID: UInt64] = [:],
        freshSinceMillis: UInt64 = 0
    ) {
        self.changeLogRows = changeLogRows
        self.lastSequence = lastSequence
        self.compactedThrough = compactedThrough
        self.compactedAt = compactedAt
        self.documentsForgotten = documentsForgotten
        self.forgottenThroughMillis = forgottenThroughMillis
        self.freshness = freshness
        self.freshSinceMillis = freshSinceMillis
    }
}

/// What forgetting deleted documents did.
package struct ForgetReport: Sendable, Hashable {
    /// Documents forgotten by this run.
    package var documents: UInt64
    /// The newest deletion this store has forgotten, Unix ms, this run's included (0: none).
    package var forgottenThroughMillis: UInt64

    package init(documents: UInt64, forgottenThroughMillis: UInt64) {
        self.documents = documents
        self.forgottenThroughMillis = forgottenThroughMillis
    }
}

/// What `collectAttachments` did in one sweep.
package struct AttachmentCollection: Sendable, Hashable {
    /// Attachments deleted: no live document named them for the whole horizon.
    package var deleted: [String] = []
    /// Bytes those attachments held.
    package var deletedBytes: Int = 0
    /// Staging entries (unfinished puts and fetches) deleted, untouched for the horizon.
    package var abandonedStagings: Int = 0

    package init(deleted: [String] = [], deletedBytes: Int = 0, abandonedStagings: Int = 0) {
        self.deleted = deleted
        self.deletedBytes = deletedBytes
        self.abandonedStagings = abandonedStagings
    }
}

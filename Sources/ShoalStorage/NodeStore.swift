package import ShoalCRDT
package import Foundation

/// Everything a node asks of its store: what an app queries (`DocumentDatabase`), what
/// sync reads and writes (`SyncStore`), and the node's own upkeep, saved state and
/// status below. The SQLite store (ShoalStore) is one; a node is given its store by the
/// code that starts it (the `Shoal` module and `shoal run` open the SQLite store).
package protocol NodeStore: SyncStore, DocumentDatabase {
    /// Local transactions committed since the store opened.
    var committedLocalTransactions: UInt64 { get }
    /// The transactions open now, oldest first.
    var runningTransactions: [TransactionInfo] { get }

    /// Up to `limit` documents that `query` (one SELECT) matches whose key sorts after
    /// `key` ("" for the first page), in key order, read on one snapshot.
    func page(_ query: String, arguments: [String: Value], after key: String, limit: Int) async throws(ShoalError)
        -> DocumentPage

    /// A writer for a new attachment put in parts.
    func attachmentWriter() async throws(ShoalError) -> AttachmentWriter
    /// The writer of an unfinished upload, to go on with it; nil when there is none.
    func attachmentWriter(resuming blob: Int64) async throws(ShoalError) -> AttachmentWriter?
    /// Deletes attachments no live document named for `horizon`, and stagings untouched as long.
    func collectAttachments(horizon: Duration, now: Date) async throws(ShoalError) -> AttachmentCollection

    /// The subscriptions added at run time and not removed since.
    func savedSubscriptions() async throws(ShoalError) -> [SavedSubscription]
    func saveSubscription(_ subscription: SavedSubscription) async throws(ShoalError)
    /// Whether there was one to remove.
    func removeSavedSubscription(id: String) async throws(ShoalError) -> Bool

    /// The freshness saved, and through when deletions were forgotten (Unix ms).
    func savedFreshness() throws(ShoalError) -> (entries: [SiteID: UInt64], forgottenThrough: UInt64)
    func saveFreshness(_ entries: [SiteID: UInt64]) async throws(ShoalError)
    /// When the store started keeping its freshness (Unix ms).
    func freshSince() async throws(ShoalError) -> UInt64

    /// What the change log holds and how far compaction has gone.
    func storageStatus() async throws(ShoalError) -> StorageStatus
    /// Live documents per collection, by name.
    func collectionCounts() async throws(ShoalError) -> [(name: String, documents: Int)]
    func changeLogRowCount() async throws(ShoalError) -> UInt64
    /// The bytes the store takes on disk (SQLite: the database and its WAL and shared-memory files).
    func storeBytes() -> UInt64

    /// Removes registers hidden by tombstones; returns how many.
    func purgeHiddenRegisters() async throws(ShoalError) -> Int
    /// Forgets field removals older than `removedBefore` (Unix ms); returns how many.
    func forgetRemovals(removedBefore: UInt64) async throws(ShoalError) -> Int
    /// Forgets documents deleted before `deletedBefore` (Unix ms) whose log rows are
    /// compacted through `point`.
    func forgetDeletedDocuments(deletedBefore: UInt64, through point: UInt64) async throws(ShoalError) -> ForgetReport
    /// Gives the space freed back to the file system.
    func vacuum() async throws(ShoalError)

    /// Logs transactions open too long, until the store closes.
    func monitorTransactions() async
    /// Keeps the store in shape in the background until it closes (SQLite: checkpoints
    /// that keep the write-ahead log short).
    func maintain() async
    /// Refuses new work, waits for what runs, and closes.
    func shutdown() async
}

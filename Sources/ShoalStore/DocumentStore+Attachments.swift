public import ShoalCRDT
public import ShoalStorage
package import Foundation
import GRDB

/// Attachments as rows: an attachment's bytes in chunks of a blob (`attachment_chunk`),
/// a put or fetch under way in `attachment_staging`, the whole ones in `attachment`.
/// The writers that fill staging entries are ShoalStorage's (`AttachmentStaging`).
extension DocumentStore: AttachmentStaging {
    /// Stores bytes and returns the token to put in an ATTACHMENT field.
    public func putAttachment(_ bytes: [UInt8], metadata: [String: Value]) async throws(ShoalError) -> AttachmentToken {
        try await storeNewAttachment(bytes, metadata: metadata)
    }

    /// Stores fetched bytes after checking they are what `hash` names.
    package func storeAttachment(_ bytes: [UInt8], hash: String) async throws(ShoalError) {
        var writer = try await attachmentWriter(fetching: hash)
        if writer.received > 0 {
            try await writer.discard()
            writer = try await attachmentWriter(fetching: hash)
        }
        try await writer.append(bytes)
        _ = try await writer.finish()
    }

    /// The length of a locally held attachment, or nil.
    public func attachmentLength(hash: String) async throws(ShoalError) -> Int? {
        try await read { db in try Int.fetchOne(db, sql: "SELECT length FROM attachment WHERE hash = ?", arguments: [hash]) }
    }

    /// Up to `maximum` bytes of a local attachment from `offset`, with its total
    /// length; nil when it is not held here (or only in part, by a fetch under way).
    public func attachmentChunk(hash: String, offset: Int, maximum: Int) async throws(ShoalError) -> (total: Int, bytes: [UInt8])? {
        try await read { db in
            guard let attachment = try AttachmentRecord.fetchOne(db, sql: "\(AttachmentRecord.select) WHERE hash = ?", arguments: [hash])
            else { return nil }
            let total = attachment.length
            let start = min(max(offset, 0), total)
            let count = min(max(maximum, 0), total - start)
            return (total, try Self.blobBytes(db, blob: attachment.blob, from: start, count: count))
        }
    }

    /// `count` bytes of a blob from `start`, read from the chunks that hold them.
    static func blobBytes(_ db: Database, blob: Int64, from start: Int, count: Int) throws -> [UInt8] {
        guard count > 0 else { return [] }
        let end = start + count
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        let chunks = try AttachmentChunkRecord.fetchCursor(
            db,
            sql: """
                \(AttachmentChunkRecord.select) WHERE blob = ? AND start < ?
                AND start >= COALESCE((SELECT MAX(start) FROM attachment_chunk WHERE blob = ? AND start <= ?), 0)
                ORDER BY start
                """,
            arguments: [blob, end, blob, start])
        while let chunk = try chunks.next() {
            let data = chunk.data
            let from = max(start - chunk.start, 0)
            let to = min(end - chunk.start, data.count)
            if from < to { bytes += data[data.startIndex + from..<data.startIndex + to] }
        }
        return bytes
    }

    // MARK: Staging

    package func openStaging(hash: String?) async throws(ShoalError) -> (blob: Int64, received: Int) {
        let now = Self.milliseconds(Date())
        return try await write { db in
            if let hash,
                let staging = try StagingRecord.fetchOne(db, sql: "\(StagingRecord.select) WHERE hash = ?", arguments: [hash])
            {
                try db.execute(sql: "UPDATE attachment_staging SET updated_at = ? WHERE blob = ?", arguments: [now, staging.blob])
                return (staging.blob, staging.received)
            }
            try db.execute(
                sql: "INSERT INTO attachment_staging (hash, received, updated_at) VALUES (?, 0, ?)", arguments: [hash, now])
            return (db.lastInsertedRowID, 0)
        }
    }

    package func staging(blob: Int64) async throws(ShoalError) -> (received: Int, hash: String?)? {
        try await read { db in
            try StagingRecord.fetchOne(db, sql: "\(StagingRecord.select) WHERE blob = ?", arguments: [blob])
                .map { ($0.received, $0.hash) }
        }
    }

    /// Appends bytes to a staging entry, which must hold exactly `offset` bytes.
    package func appendStaged(blob: Int64, offset: Int, bytes: [UInt8]) async throws(ShoalError) {
        let now = Self.milliseconds(Date())
        try await write { db in
            guard let received = try Int.fetchOne(db, sql: "SELECT received FROM attachment_staging WHERE blob = ?", arguments: [blob])
            else {
                throw ShoalError(.invalidDocument, "attachment upload \(blob) is unknown here: finished, abandoned or collected")
            }
            guard received == offset else {
                throw ShoalError(.invalidDocument, "attachment upload \(blob) holds \(received) bytes; a part at offset \(offset) does not follow on")
            }
            if !bytes.isEmpty {
                try db.execute(
                    sql: "INSERT INTO attachment_chunk (blob, start, data) VALUES (?, ?, ?)", arguments: [blob, offset, Data(bytes)])
            }
            try db.execute(
                sql: "UPDATE attachment_staging SET received = ?, updated_at = ? WHERE blob = ?",
                arguments: [offset + bytes.count, now, blob])
        }
    }

    /// Bytes of a staging entry: to hash again what an earlier run stored, and for a
    /// relay to pass on what its fetch has stored so far.
    package func stagedAttachmentBytes(blob: Int64, from start: Int, count: Int) async throws(ShoalError) -> [UInt8] {
        try await read { db in try Self.blobBytes(db, blob: blob, from: start, count: count) }
    }

    /// Turns a staging entry whose bytes hash to `hash` into an attachment (or drops
    /// it, when the same bytes are held already).
    package func completeStaging(blob: Int64, hash: String, length: Int) async throws(ShoalError) {
        let now = Self.milliseconds(Date())
        try await write { db in
            try db.execute(sql: "DELETE FROM attachment_staging WHERE blob = ?", arguments: [blob])
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM attachment WHERE hash = ?", arguments: [hash]) == true {
                try db.execute(sql: "DELETE FROM attachment_chunk WHERE blob = ?", arguments: [blob])
                return
            }
            try db.execute(
                sql: "INSERT INTO attachment (hash, length, blob, stored_at) VALUES (?, ?, ?, ?)",
                arguments: [hash, length, blob, now])
        }
    }

    /// Deletes a staging entry and its bytes.
    package func discardStaging(blob: Int64) async throws(ShoalError) {
        try await write { db in
            try db.execute(sql: "DELETE FROM attachment_staging WHERE blob = ?", arguments: [blob])
            try db.execute(sql: "DELETE FROM attachment_chunk WHERE blob = ?", arguments: [blob])
        }
    }

    // MARK: Collection

    /// Deletes the bytes of attachments that no live document has named for
    /// `horizon`, and staging entries (unfinished puts and fetches) untouched for as long.
    ///
    /// A sweep marks each attachment no live register names with the time it first
    /// saw it so (`unreferenced_since`), clears the mark of those named again, and
    /// deletes those marked `horizon` or longer ago. So a put has `horizon` to have its
    /// token written, and bytes survive a token's brief absence. It all happens in one
    /// write, so a token committed before the sweep is always seen by it.
    package func collectAttachments(horizon: Duration, now: Date = Date()) async throws(ShoalError) -> AttachmentCollection {
        let nowMillis = Self.milliseconds(now)
        let cutoff = nowMillis - Int64(horizon / .milliseconds(1))
        return try await write { db in
            // Canonical JSON sorts members, so a token's text starts with its "attachment".
            let named = Set(
                try String.fetchAll(
                    db,
                    sql: """
                        SELECT DISTINCT json_extract(f.value, '$.attachment') FROM field f
                        JOIN document d ON d.collection = f.collection AND d.doc_id = f.doc_id
                        WHERE d.deleted = 0 AND f.value LIKE '{"attachment":%' AND json_valid(f.value)
                        """
                ).compactMap { $0 })
            var result = AttachmentCollection()
            for attachment in try AttachmentRecord.fetchAll(db, sql: AttachmentRecord.select) {
                let hash = attachment.hash
                let since = attachment.unreferencedSince
                if named.contains(hash) {
                    if since != nil {
                        try db.execute(sql: "UPDATE attachment SET unreferenced_since = NULL WHERE hash = ?", arguments: [hash])
                    }
                } else if let since, since <= cutoff {
                    try db.execute(sql: "DELETE FROM attachment WHERE hash = ?", arguments: [hash])
                    try db.execute(sql: "DELETE FROM attachment_chunk WHERE blob = ?", arguments: [attachment.blob])
                    result.deleted.append(hash)
                    result.deletedBytes += attachment.length
                } else if since == nil {
                    try db.execute(sql: "UPDATE attachment SET unreferenced_since = ? WHERE hash = ?", arguments: [nowMillis, hash])
                }
            }
            let abandoned = try Int64.fetchAll(db, sql: "SELECT blob FROM attachment_staging WHERE updated_at <= ?", arguments: [cutoff])
            for blob in abandoned {
                try db.execute(sql: "DELETE FROM attachment_staging WHERE blob = ?", arguments: [blob])
                try db.execute(sql: "DELETE FROM attachment_chunk WHERE blob = ?", arguments: [blob])
            }
            result.abandonedStagings = abandoned.count
            return result
        }
    }

    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded(.down)) }
}

/// A row of `attachment`: an attachment held whole, its bytes in the chunks of `blob`.
struct AttachmentRecord: Sendable, FetchableRecord {
    var hash: String
    var length: Int
    var blob: Int64
    /// Unix ms.
    var storedAt: Int64
    /// When the sweep first saw no live document name it (Unix ms); nil while named.
    var unreferencedSince: Int64?

    enum Columns {
        static let hash = Column("hash")
        static let length = Column("length")
        static let blob = Column("blob")
        static let storedAt = Column("stored_at")
        static let unreferencedSince = Column("unreferenced_since")
    }

    static let select = "SELECT hash, length, blob, stored_at, unreferenced_since FROM attachment"

    init(row: Row) throws {
        let row = StoredRow(row, of: "attachment")
        hash = try row.value(Columns.hash)
        length = try row.count(Columns.length)
        blob = try row.value(Columns.blob)
        storedAt = try row.value(Columns.storedAt)
        unreferencedSince = try row.value(Columns.unreferencedSince)
    }
}

/// A row of `attachment_chunk`: a run of a blob's bytes from `start`.
struct AttachmentChunkRecord: Sendable, FetchableRecord {
    var blob: Int64
    var start: Int
    var data: Data

    enum Columns {
        static let blob = Column("blob")
        static let start = Column("start")
        static let data = Column("data")
    }

    static let select = "SELECT blob, start, data FROM attachment_chunk"

    init(row: Row) throws {
        let row = StoredRow(row, of: "attachment_chunk")
        blob = try row.value(Columns.blob)
        start = try row.count(Columns.start)
        data = try row.value(Columns.data)
    }
}

/// A row of `attachment_staging`: a put or a fetch under way.
struct StagingRecord: Sendable, FetchableRecord {
    var blob: Int64
    /// The hash a fetch expects; nil for a put.
    var hash: String?
    var received: Int
    /// Unix ms.
    var updatedAt: Int64

    enum Columns {
        static let blob = Column("blob")
        static let hash = Column("hash")
        static let received = Column("received")
        static let updatedAt = Column("updated_at")
    }

    static let select = "SELECT blob, hash, received, updated_at FROM attachment_staging"

    init(row: Row) throws {
        let row = StoredRow(row, of: "attachment_staging")
        blob = try row.value(Columns.blob)
        hash = try row.value(Columns.hash)
        received = try row.count(Columns.received)
        updatedAt = try row.value(Columns.updatedAt)
    }
}

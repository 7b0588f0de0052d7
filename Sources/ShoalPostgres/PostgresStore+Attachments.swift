package import Foundation
import Logging
import NIOCore
import PostgresNIO
package import ShoalCRDT
package import ShoalStorage

/// Attachments on a hub, in the shared database as the SQLite store keeps them in its
/// file (migration `v5-attachments`): the bytes in chunks of a blob
/// (`attachment_chunk`), a put or fetch under way in `attachment_staging`, the whole ones
/// in `attachment`. Every hub serves every attachment any hub stored; the writers that
/// fill staging entries are ShoalStorage's (`AttachmentStaging`).
///
/// ```
///   put / fetch ──► attachment_staging (blob, hash?, received) ──► attachment_chunk (blob, start, data)
///                          │ every byte in, SHA-256 checked
///                          ▼
///                   attachment (hash, length, blob)   read by any hub (`attachmentChunk`)
/// ```
///
/// Two hubs fetching the same hash share its staging entry: each append checks, under
/// the entry's row lock, that it follows on from what is stored, so the slower one's
/// part is refused and nothing is stored twice or out of place.
extension PostgresStore: AttachmentStaging {
    package func putAttachment(_ bytes: [UInt8], metadata: [String: Value]) async throws(ShoalError) -> AttachmentToken {
        try await storeNewAttachment(bytes, metadata: metadata)
    }

    package func attachmentLength(hash: String) async throws(ShoalError) -> Int? {
        try await failing("reading the length of attachment \(hash)") {
            let rows = try await database.query("SELECT length FROM attachment WHERE hash = \(hash)", logger: logger)
            for length in try rows.decode(Int64.self) { return try Stored.count(length, "attachment", "length") }
            return nil
        }
    }

    package func attachmentChunk(hash: String, offset: Int, maximum: Int) async throws(ShoalError) -> (total: Int, bytes: [UInt8])? {
        try await snapshot("reading attachment \(hash)") { connection in
            var found: (length: Int64, blob: Int64)?
            let rows = try await connection.query("SELECT length, blob FROM attachment WHERE hash = \(hash)", logger: logger)
            for row in try rows.decode((Int64, Int64).self) { found = row }
            guard let found else { return nil }
            let total: Int = try Stored.count(found.length, "attachment", "length")
            let start = min(max(offset, 0), total)
            let count = min(max(maximum, 0), total - start)
            return (total, try await Self.blobBytes(connection, blob: found.blob, from: start, count: count, logger: logger))
        }
    }

    package func stagedAttachmentBytes(blob: Int64, from start: Int, count: Int) async throws(ShoalError) -> [UInt8] {
        try await snapshot("reading staged attachment bytes") { connection in
            try await Self.blobBytes(connection, blob: blob, from: start, count: count, logger: logger)
        }
    }

    /// `count` bytes of a blob from `start`, read from the chunks that hold them.
    static func blobBytes(
        _ connection: HubConnection, blob: Int64, from start: Int, count: Int, logger: Logger
    ) async throws -> [UInt8] {
        guard count > 0 else { return [] }
        let end = start + count
        let rows = try await connection.query(
            """
            SELECT start, data FROM attachment_chunk WHERE blob = \(blob) AND start < \(Int64(end))
            AND start >= COALESCE((SELECT MAX(start) FROM attachment_chunk WHERE blob = \(blob) AND start <= \(Int64(start))), 0)
            ORDER BY start
            """, logger: logger)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        for (chunkStart, data) in try rows.decode((Int64, ByteBuffer).self) {
            let from = max(start - Int(chunkStart), 0)
            let to = min(end - Int(chunkStart), data.readableBytes)
            if from < to, let part = data.getBytes(at: data.readerIndex + from, length: to - from) { bytes += part }
        }
        return bytes
    }

    // MARK: Staging

    package func openStaging(hash: String?) async throws(ShoalError) -> (blob: Int64, received: Int) {
        let now = Self.milliseconds(Date())
        return try await failing("opening an attachment's staging entry") {
            let rows =
                if let hash {
                    try await database.query(
                        """
                        INSERT INTO attachment_staging (hash, received, updated_at) VALUES (\(hash), 0, \(now))
                        ON CONFLICT (hash) DO UPDATE SET updated_at = excluded.updated_at RETURNING blob, received
                        """, logger: logger)
                } else {
                    try await database.query(
                        "INSERT INTO attachment_staging (received, updated_at) VALUES (0, \(now)) RETURNING blob, received",
                        logger: logger)
                }
            for (blob, received) in try rows.decode((Int64, Int64).self) {
                return (blob, try Stored.count(received, "attachment_staging", "received"))
            }
            throw ShoalError(.database, "opening an attachment's staging entry returned no row")
        }
    }

    package func staging(blob: Int64) async throws(ShoalError) -> (received: Int, hash: String?)? {
        try await failing("reading attachment upload \(blob)") {
            let rows = try await database.query(
                "SELECT received, hash FROM attachment_staging WHERE blob = \(blob)", logger: logger)
            for (received, hash) in try rows.decode((Int64, String?).self) {
                return (try Stored.count(received, "attachment_staging", "received"), hash)
            }
            return nil
        }
    }

    package func appendStaged(blob: Int64, offset: Int, bytes: [UInt8]) async throws(ShoalError) {
        let now = Self.milliseconds(Date())
        try await transaction("storing part of attachment upload \(blob)") { connection in
            var received: Int64?
            let rows = try await connection.query(
                "SELECT received FROM attachment_staging WHERE blob = \(blob) FOR UPDATE", logger: logger)
            for value in try rows.decode(Int64.self) { received = value }
            guard let received else {
                throw ShoalError(.invalidDocument, "attachment upload \(blob) is unknown here: finished, abandoned or collected")
            }
            guard received == Int64(offset) else {
                throw ShoalError(
                    .invalidDocument, "attachment upload \(blob) holds \(received) bytes; a part at offset \(offset) does not follow on")
            }
            if !bytes.isEmpty {
                try await connection.query(
                    "INSERT INTO attachment_chunk (blob, start, data) VALUES (\(blob), \(Int64(offset)), \(ByteBuffer(bytes: bytes)))",
                    logger: logger)
            }
            try await connection.query(
                "UPDATE attachment_staging SET received = \(Int64(offset + bytes.count)), updated_at = \(now) WHERE blob = \(blob)",
                logger: logger)
        }
    }

    package func completeStaging(blob: Int64, hash: String, length: Int) async throws(ShoalError) {
        let now = Self.milliseconds(Date())
        try await transaction("storing attachment \(hash)") { connection in
            try await connection.query("DELETE FROM attachment_staging WHERE blob = \(blob)", logger: logger)
            var inserted = false
            let rows = try await connection.query(
                """
                INSERT INTO attachment (hash, length, blob, stored_at) VALUES (\(hash), \(Int64(length)), \(blob), \(now))
                ON CONFLICT (hash) DO NOTHING RETURNING 1
                """, logger: logger)
            for _ in try rows.decode(Int32.self) { inserted = true }
            if !inserted {
                // The same bytes are held already: another put's, or, when another hub
                // finished this same fetch first, these very chunks, which stay.
                try await connection.query(
                    "DELETE FROM attachment_chunk WHERE blob = \(blob) AND NOT EXISTS (SELECT 1 FROM attachment WHERE blob = \(blob))",
                    logger: logger)
            }
        }
    }

    package func discardStaging(blob: Int64) async throws(ShoalError) {
        try await transaction("dropping attachment upload \(blob)") { connection in
            try await connection.query("DELETE FROM attachment_staging WHERE blob = \(blob)", logger: logger)
            try await connection.query(
                "DELETE FROM attachment_chunk WHERE blob = \(blob) AND NOT EXISTS (SELECT 1 FROM attachment WHERE blob = \(blob))",
                logger: logger)
        }
    }

    // MARK: Through the other hubs

    /// The other hubs reach other devices: an attachment none of this hub's peers holds
    /// may be held by one of theirs.
    package var hasOtherProcesses: Bool { true }

    /// Asks the other hubs (`PostgresHubDatabase.askForAttachment`) and watches the
    /// shared staging entry `blob`: a hub that heard the request counts itself in
    /// `taken` and fetches into that entry from its peers, and once the bytes are
    /// checked they are an attachment every hub holds. With no other hub connected to
    /// the database, it returns nil at once.
    package func fetchThroughOtherProcesses(hash: String, blob: Int64, step: Duration) async throws(ShoalError) -> Int? {
        guard try await hubDatabase { () async throws(PostgresStoreError) in try await database.otherHubs() } > 0 else { return nil }
        var last = try await stagingProgress(blob: blob)
        try await hubDatabase { () async throws(PostgresStoreError) in try await database.askForAttachment(hash) }
        let clock = ContinuousClock()
        var changed = clock.now
        var wait = Self.firstSignWait
        var pause = Duration.milliseconds(10)
        while true {
            if let length = try await attachmentLength(hash: hash) { return length }
            // Gone without an attachment: the bytes did not match the hash and were dropped.
            guard let now = try await stagingProgress(blob: blob) else { return try await attachmentLength(hash: hash) }
            if now != last {
                (last, changed, wait) = (now, clock.now, step)
            } else if clock.now - changed > wait {
                return nil
            }
            do {
                try await Task.sleep(for: pause)
            } catch {
                throw ShoalError(.cancelled, "cancelled while the other hubs fetched attachment \(hash)")
            }
            pause = min(pause * 2, .milliseconds(200))
        }
    }

    /// Runs a call of the hubs' database, its error as a `ShoalError`.
    private func hubDatabase<T>(_ call: () async throws(PostgresStoreError) -> T) async throws(ShoalError) -> T {
        do {
            return try await call()
        } catch {
            throw ShoalError(.database, error.message)
        }
    }

    /// How long a hub that asked the others waits for one of them to take the request.
    static let firstSignWait = Duration.seconds(3)

    /// How far staging entry `blob` got and how many hubs took it up; nil when it is gone.
    private func stagingProgress(blob: Int64) async throws(ShoalError) -> [Int64]? {
        try await failing("reading attachment staging entry \(blob)") {
            let rows = try await database.query(
                "SELECT received, taken FROM attachment_staging WHERE blob = \(blob)", logger: logger)
            for (received, taken) in try rows.decode((Int64, Int64).self) { return [received, taken] }
            return nil
        }
    }

    /// Hands `asked` each attachment another hub asks for (as `followOtherHubs` hears
    /// them), after counting this hub in the request's `taken`, until the task is
    /// cancelled or the store closes.
    package func followAttachmentRequests(_ asked: @escaping @Sendable (String) -> Void) async {
        for await hash in attachmentRequests.updates() where AttachmentToken.isHash(hash) {
            try? await run(
                "taking up another hub's request for attachment \(hash)",
                "UPDATE attachment_staging SET taken = taken + 1 WHERE hash = \(hash)")
            asked(hash)
        }
    }

    // MARK: Collection

    /// As the SQLite store's (`DocumentStore.collectAttachments`): marks each attachment
    /// no live register names with when the sweep first saw it so, clears the mark of
    /// those named again, and deletes those marked `horizon` or longer ago.
    ///
    /// It runs as the hubs' writer (`log_end`'s row lock, `withWriter`), so no hub
    /// commits a token while it reads which are named: a token committed before the
    /// sweep is always seen by it.
    package func collectAttachments(horizon: Duration, now: Date) async throws(ShoalError) -> AttachmentCollection {
        let nowMillis = Self.milliseconds(now)
        let cutoff = nowMillis - Int64(horizon / .milliseconds(1))
        let (result, _) = try await withWriter("collecting attachments") { writer in
            let connection = writer.connection
            // Canonical JSON sorts members, so a token's text starts with its "attachment".
            var named: Set<String> = []
            let values = try await connection.query(
                """
                SELECT DISTINCT f.value FROM field f JOIN document d ON d.collection = f.collection AND d.doc_id = f.doc_id
                WHERE NOT d.deleted AND f.value LIKE '{"attachment":%'
                """, logger: logger)
            for value in try values.decode(String.self) {
                if let parsed = try? JSON.parse(value), let token = AttachmentToken(parsed) { named.insert(token.hash) }
            }
            var result = AttachmentCollection()
            var attachments: [(hash: String, length: Int64, blob: Int64, since: Int64?)] = []
            let rows = try await connection.query("SELECT hash, length, blob, unreferenced_since FROM attachment", logger: logger)
            for row in try rows.decode((String, Int64, Int64, Int64?).self) { attachments.append(row) }
            var namedAgain: [String] = [], unnamed: [String] = [], gone: [String] = [], goneBlobs: [Int64] = []
            for attachment in attachments {
                if named.contains(attachment.hash) {
                    if attachment.since != nil { namedAgain.append(attachment.hash) }
                } else if let since = attachment.since, since <= cutoff {
                    gone.append(attachment.hash)
                    goneBlobs.append(attachment.blob)
                    result.deleted.append(attachment.hash)
                    result.deletedBytes += Int(attachment.length)
                } else if attachment.since == nil {
                    unnamed.append(attachment.hash)
                }
            }
            try await connection.query(
                "UPDATE attachment SET unreferenced_since = NULL WHERE hash = ANY(\(namedAgain)::text[])", logger: logger)
            try await connection.query(
                "UPDATE attachment SET unreferenced_since = \(nowMillis) WHERE hash = ANY(\(unnamed)::text[])", logger: logger)
            try await connection.query("DELETE FROM attachment WHERE hash = ANY(\(gone)::text[])", logger: logger)
            var abandoned: [Int64] = []
            let stale = try await connection.query(
                "DELETE FROM attachment_staging WHERE updated_at <= \(cutoff) RETURNING blob", logger: logger)
            for blob in try stale.decode(Int64.self) { abandoned.append(blob) }
            try await connection.query(
                """
                DELETE FROM attachment_chunk c WHERE c.blob = ANY(\(goneBlobs + abandoned)::bigint[])
                AND NOT EXISTS (SELECT 1 FROM attachment a WHERE a.blob = c.blob)
                """, logger: logger)
            result.abandonedStagings = abandoned.count
            return result
        }
        return result
    }

    /// Unix ms.
    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded(.down)) }
}

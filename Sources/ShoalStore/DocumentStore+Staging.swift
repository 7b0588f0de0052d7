import Foundation
import GRDB
import ShoalCRDT
package import ShoalStorage

extension DocumentStore: AttachmentStaging {
    /// A writer for new bytes (a put); its `blob` is the upload ID.
    package func attachmentWriter() async throws(ShoalError) -> AttachmentWriter {
        let staging = try await openStaging(hash: nil)
        return AttachmentWriter(store: self, blob: staging.blob, expectedHash: nil, received: 0, digest: AttachmentDigest())
    }

    /// A writer for the bytes `hash` names, continuing what an earlier, interrupted
    /// fetch of them stored (`received` says how far that got).
    package func attachmentWriter(fetching hash: String) async throws(ShoalError) -> AttachmentWriter {
        let staging = try await openStaging(hash: hash)
        return try await resumedWriter(blob: staging.blob, expectedHash: hash, received: staging.received)
    }

    /// A writer continuing upload `blob` after the one that began it is gone (the
    /// node restarted); nil when no such upload is staged.
    package func attachmentWriter(resuming blob: Int64) async throws(ShoalError) -> AttachmentWriter? {
        guard let staging = try await staging(blob: blob) else { return nil }
        return try await resumedWriter(blob: blob, expectedHash: staging.hash, received: staging.received)
    }

    /// Hashes the `received` bytes already staged, a chunk at a time.
    private func resumedWriter(blob: Int64, expectedHash: String?, received: Int) async throws(ShoalError) -> AttachmentWriter {
        var digest = AttachmentDigest()
        var offset = 0
        while offset < received {
            let bytes = try await stagedAttachmentBytes(blob: blob, from: offset, count: min(Self.rehashStep, received - offset))
            guard !bytes.isEmpty else { break }
            digest.update(bytes)
            offset += bytes.count
        }
        return AttachmentWriter(store: self, blob: blob, expectedHash: expectedHash, received: received, digest: digest)
    }

    /// How many staged bytes a resumed writer reads at a time to hash them again.
    static let rehashStep = 1 << 20
}

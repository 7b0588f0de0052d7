import Crypto
public import Foundation
public import ShoalCRDT

/// The SHA-256 of bytes that arrive in parts, as an attachment ID (64 lowercase hex digits).
///
/// Unchecked: swift-crypto's `SHA256` is a value type (copy on write) not marked
/// `Sendable`; copies share no state, so there is nothing to lock.
public struct AttachmentDigest: @unchecked Sendable {
    private var hasher = SHA256()

    public init() {}

    public mutating func update(_ bytes: some DataProtocol) { hasher.update(data: bytes) }

    public func finalize() -> String {
        hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }
}

/// Streams an attachment into the store in parts, hashing as it goes, so that no
/// attachment is ever held whole in memory.
///
/// Each `append` commits its bytes as one chunk of the staging entry `blob`;
/// `finish` checks the SHA-256 and only then makes the bytes an attachment. An entry
/// outlives the writer: a fetch of the same hash, or a put continuing upload `blob`,
/// picks it up where it stopped (`DocumentStore.attachmentWriter(fetching:)`,
/// `attachmentWriter(resuming:)`), hashing again what is already stored.
public struct AttachmentWriter: Sendable {
    package let store: any AttachmentStaging
    /// The staging entry: an admin put's upload ID.
    public let blob: Int64
    /// The hash the bytes must have (a fetch); nil for a put.
    public let expectedHash: String?
    /// Bytes stored so far.
    public private(set) var received: Int
    private var digest: AttachmentDigest

    /// A writer of staging entry `blob`, which holds `received` bytes whose hash so far is `digest`.
    package init(store: any AttachmentStaging, blob: Int64, expectedHash: String?, received: Int, digest: AttachmentDigest) {
        self.store = store
        self.blob = blob
        self.expectedHash = expectedHash
        self.received = received
        self.digest = digest
    }

    /// Stores `bytes` after those already received.
    public mutating func append(_ bytes: [UInt8]) async throws(ShoalError) {
        try await store.appendStaged(blob: blob, offset: received, bytes: bytes)
        digest.update(bytes)
        received += bytes.count
    }

    /// Checks the bytes against the expected hash (if any) and makes them an
    /// attachment; a mismatch discards them and throws.
    public func finish(metadata: [String: Value] = [:]) async throws(ShoalError) -> AttachmentToken {
        let hash = digest.finalize()
        if let expectedHash, expectedHash != hash {
            try await store.discardStaging(blob: blob)
            throw ShoalError(.invalidDocument, "attachment bytes do not match their hash \(expectedHash); they were dropped")
        }
        try await store.completeStaging(blob: blob, hash: hash, length: received)
        return AttachmentToken(hash: hash, length: received, metadata: metadata)
    }

    /// Deletes what was stored.
    public func discard() async throws(ShoalError) {
        try await store.discardStaging(blob: blob)
    }
}

/// Where an `AttachmentWriter` keeps bytes on their way in: staging entries, by blob.
package protocol AttachmentStaging: Sendable {
    /// Appends bytes to a staging entry, which must hold exactly `offset` bytes.
    func appendStaged(blob: Int64, offset: Int, bytes: [UInt8]) async throws(ShoalError)
    /// Turns a staging entry whose bytes hash to `hash` into an attachment.
    func completeStaging(blob: Int64, hash: String, length: Int) async throws(ShoalError)
    /// Deletes a staging entry and its bytes.
    func discardStaging(blob: Int64) async throws(ShoalError)
}

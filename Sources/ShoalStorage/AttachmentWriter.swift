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
///
/// An engine keeps the entries; the writers over them (a put, a fetch that resumes
/// what an earlier one stored, an upload continued after a restart) are the same on
/// every engine (the extension below).
package protocol AttachmentStaging: Sendable {
    /// Opens a staging entry: for a fetch of `hash`, the one an earlier fetch left (so
    /// it resumes) or a new one; for a put (`hash` nil), always a new one.
    func openStaging(hash: String?) async throws(ShoalError) -> (blob: Int64, received: Int)
    /// How many bytes staging entry `blob` holds, and the hash it expects; nil when it is gone.
    func staging(blob: Int64) async throws(ShoalError) -> (received: Int, hash: String?)?
    /// `count` bytes of staging entry `blob` from `start`.
    func stagedAttachmentBytes(blob: Int64, from start: Int, count: Int) async throws(ShoalError) -> [UInt8]
    /// Appends bytes to a staging entry, which must hold exactly `offset` bytes.
    func appendStaged(blob: Int64, offset: Int, bytes: [UInt8]) async throws(ShoalError)
    /// Turns a staging entry whose bytes hash to `hash` into an attachment.
    func completeStaging(blob: Int64, hash: String, length: Int) async throws(ShoalError)
    /// Deletes a staging entry and its bytes.
    func discardStaging(blob: Int64) async throws(ShoalError)
}

extension AttachmentStaging {
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

    /// Stores bytes held whole as a new attachment and returns its token.
    package func storeNewAttachment(_ bytes: [UInt8], metadata: [String: Value]) async throws(ShoalError) -> AttachmentToken {
        var writer = try await attachmentWriter()
        try await writer.append(bytes)
        return try await writer.finish(metadata: metadata)
    }

    /// Hashes the `received` bytes already staged, a chunk at a time.
    private func resumedWriter(blob: Int64, expectedHash: String?, received: Int) async throws(ShoalError) -> AttachmentWriter {
        var digest = AttachmentDigest()
        var offset = 0
        while offset < received {
            let bytes = try await stagedAttachmentBytes(blob: blob, from: offset, count: min(attachmentRehashStep, received - offset))
            guard !bytes.isEmpty else { break }
            digest.update(bytes)
            offset += bytes.count
        }
        return AttachmentWriter(store: self, blob: blob, expectedHash: expectedHash, received: received, digest: digest)
    }
}

/// How many staged bytes a resumed writer reads at a time to hash them again (1 MiB).
let attachmentRehashStep = 1 << 20

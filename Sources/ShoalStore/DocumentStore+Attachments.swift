public import ShoalCRDT
import Crypto
import Foundation
import GRDB

/// The value an ATTACHMENT field holds: a last-writer-wins token naming bytes by
/// their SHA-256. The bytes live outside documents and travel only when asked for.
///
/// ```
/// {"attachment": "<64 hex digits>", "length": 1234, "metadata": {"name": "photo.jpg"}}
/// ```
public struct AttachmentToken: Sendable, Hashable {
    public var hash: String
    public var length: Int
    public var metadata: [String: Value]

    public init(hash: String, length: Int, metadata: [String: Value] = [:]) {
        self.hash = hash
        self.length = length
        self.metadata = metadata
    }

    /// Reads a token value, or a bare hash string.
    public init?(_ value: Value) {
        if case .string(let hash) = value, Self.isHash(hash) {
            self.init(hash: hash, length: -1)
            return
        }
        guard case .string(let hash)? = value["attachment"], Self.isHash(hash), case .int(let length)? = value["length"]
        else { return nil }
        self.init(hash: hash, length: Int(length), metadata: value["metadata"]?.objectValue ?? [:])
    }

    public var value: Value {
        ["attachment": .string(hash), "length": .int(Int64(length)), "metadata": .object(metadata)]
    }

    static func isHash(_ s: String) -> Bool {
        s.count == 64 && s.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// The SHA-256 of `bytes` as 64 lowercase hex digits.
    public static func hash(of bytes: some Sequence<UInt8>) -> String {
        var hasher = SHA256()
        hasher.update(data: Array(bytes))
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }
}

extension DocumentStore {
    /// Stores bytes and returns the token to put in an ATTACHMENT field.
    public func putAttachment(_ bytes: [UInt8], metadata: [String: Value] = [:]) async throws(StoreError) -> AttachmentToken {
        let token = AttachmentToken(hash: AttachmentToken.hash(of: bytes), length: bytes.count, metadata: metadata)
        try await storeAttachment(bytes, hash: token.hash)
        return token
    }

    /// Stores fetched bytes after checking they are what `hash` names.
    public func storeAttachment(_ bytes: [UInt8], hash: String) async throws(StoreError) {
        guard AttachmentToken.hash(of: bytes) == hash else {
            throw StoreError(.invalidDocument, "attachment bytes do not match their hash \(hash)")
        }
        try await write { db in
            try db.execute(
                sql: "INSERT INTO attachment (hash, length, data) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING",
                arguments: [hash, bytes.count, Data(bytes)])
        }
    }

    /// The length of a locally held attachment, or nil.
    public func attachmentLength(hash: String) async throws(StoreError) -> Int? {
        try await read { db in try Int.fetchOne(db, sql: "SELECT length FROM attachment WHERE hash = ?", arguments: [hash]) }
    }

    /// Up to `maximum` bytes of a local attachment from `offset`, with its total
    /// length; nil when it is not held here.
    public func attachmentChunk(hash: String, offset: Int, maximum: Int) async throws(StoreError) -> (total: Int, bytes: [UInt8])? {
        try await read { db in
            guard let total = try Int.fetchOne(db, sql: "SELECT length FROM attachment WHERE hash = ?", arguments: [hash])
            else { return nil }
            let start = min(max(offset, 0), total)
            let count = min(maximum, total - start)
            guard count > 0 else { return (total, []) }
            let data = try Data.fetchOne(
                db, sql: "SELECT substr(data, ?, ?) FROM attachment WHERE hash = ?", arguments: [start + 1, count, hash])
            return (total, Array(data ?? Data()))
        }
    }
}

import Foundation
import ShoalCRDT
import ShoalStorage

/// What a hub knew of the shared log (`KnownLog`), kept in its data directory so that a
/// hub started again finds a database that went back while it was stopped (a backup
/// restored, a failover that lost commits) before it writes, rather than from the first
/// device that connects.
///
/// A JSON file per database (by its site: `hub-log-SITE.json`), replaced whole (written
/// aside, synced, renamed over) by the hub's keeper, about a quarter of a second after
/// what the hub knows changed; its directory synced too at open, at those of the hub's
/// 5 s ticks that find the rename not yet synced, and when the store closes. A hub
/// killed -9 leaves the last one renamed (the kernel holds it); a power cut may leave
/// the one before, whole, which is still true: the database held that row at that
/// sequence, and its log reached that far.
///
/// ```
/// {"end":2811,"site":"5f3a…","version":1,"witness":{"digest":"9b1c…","origin":"5f3a…","sequence":2811,"transaction":944}}
/// ```
struct RememberedLog: Codable, Equatable {
    /// The file's format: one this version does not know is ignored.
    var version = 1
    /// The site of the node whose database it describes, in hex: a file of another
    /// database (another site) is ignored.
    var site: String
    var end: UInt64
    var witness: Witness?

    struct Witness: Codable, Equatable {
        var sequence: UInt64
        var origin: String
        var transaction: UInt64
        /// The SHA-256 of the row's entries, in hex.
        var digest: String
    }

    init(site: SiteID, known: KnownLog) {
        self.site = String(site.rawValue, radix: 16)
        end = known.end
        witness = known.witness.map {
            Witness(
                sequence: $0.sequence, origin: String($0.transaction.origin.rawValue, radix: 16), transaction: $0.transaction.sequence,
                digest: $0.digest.map { String(format: "%02x", $0) }.joined())
        }
    }

    /// What it says the hub knew, when it describes the database of `site`; nil when it
    /// is of another site or does not read as what a hub writes.
    func known(of site: SiteID) -> KnownLog? {
        // Far below where a repair's gap could overflow: a file no hub wrote.
        let most: UInt64 = 1 << 62
        guard version == 1, UInt64(self.site, radix: 16) == site.rawValue, end <= most, witness.map({ $0.sequence <= most }) ?? true
        else { return nil }
        var known = KnownLog()
        known.end = end
        if let witness {
            guard let origin = UInt64(witness.origin, radix: 16), witness.digest.count == 64 else { return nil }
            var digest: [UInt8] = []
            var at = witness.digest.startIndex
            while at < witness.digest.endIndex {
                let next = witness.digest.index(at, offsetBy: 2)
                guard let byte = UInt8(witness.digest[at..<next], radix: 16) else { return nil }
                digest.append(byte)
                at = next
            }
            known.witness = LogWitness(
                sequence: witness.sequence, transaction: TransactionID(origin: SiteID(origin), sequence: witness.transaction), digest: digest)
        }
        return known
    }

    /// The file at `path`; nil when there is none.
    static func read(_ path: String) throws(ShoalError) -> RememberedLog? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ShoalError(.file, "\(path) cannot be read")
        }
        do {
            return try JSONDecoder().decode(RememberedLog.self, from: data)
        } catch {
            throw ShoalError(.file, "\(path) is not what a hub writes there: \(error)")
        }
    }

    /// Replaces the file at `path` whole: written beside it, synced, and renamed over it,
    /// so that a reader finds the old file or the new one, never part of one, after a
    /// power cut too; `syncingDirectory`, the directory is synced after the rename, so
    /// that a power cut leaves the new one.
    func write(to path: String, syncingDirectory: Bool = true) throws(ShoalError) {
        let aside = path + ".new." + String(getpid())
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            try (encoder.encode(self) + Data("\n".utf8)).write(to: URL(fileURLWithPath: aside))
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: aside))
            defer { try? handle.close() }
            try handle.synchronize()
        } catch {
            unlink(aside)
            throw ShoalError(.file, "\(aside) cannot be written: \(error)")
        }
        guard rename(aside, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(aside)
            throw ShoalError(.file, "\(aside) cannot be renamed to \(path): \(reason)")
        }
        guard syncingDirectory else { return }
        let directory = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
    }
}

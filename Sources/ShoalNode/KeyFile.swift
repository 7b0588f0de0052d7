import Foundation
public import ShoalStorage

#if canImport(Glibc)
// `stat` is reachable through CoreFoundation and NIO's C module as well once the TLS
// libraries are linked: the C library's is named.
import CoreFoundation
import Glibc
private typealias FileInfo = Glibc.stat
#elseif canImport(Darwin)
import Darwin
private typealias FileInfo = Darwin.stat
#endif

/// Mesh and admin key files: reading them (only when no other user can) and making new ones.
///
/// A key is the file's bytes with surrounding ASCII white space trimmed, at least
/// `minimumSize` of them (PROTOCOL.md §6.3). Whoever can read the file can join the
/// mesh or run `exec` on the node, so a file that its group or other users may read
/// or write is refused, as ssh refuses such a private key.
public enum KeyFile {
    /// The smallest key accepted, in bytes.
    public static let minimumSize = 16
    /// Random bytes in a key `generate` makes; the file holds them in base64.
    public static let generatedSize = 32

    /// Reads a key file; the error names the file and says what to do.
    public static func read(path: String, purpose: String = "mesh key") throws(ShoalError) -> [UInt8] {
        var info = FileInfo()
        guard stat(path, &info) == 0 else {
            throw ShoalError(.keyFile, "cannot read the \(purpose) file \(path): \(String(cString: strerror(errno)))")
        }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw ShoalError(
                .keyFile,
                "the \(purpose) file \(path) is open to other users (mode \(String(mode, radix: 8))); anyone who reads it can join the mesh or run statements on the node. Make it private: chmod 600 \(path)"
            )
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ShoalError(.keyFile, "cannot read the \(purpose) file \(path)")
        }
        var bytes = Array(data)
        while let last = bytes.last, [0x20, 0x0A, 0x0D, 0x09].contains(last) { bytes.removeLast() }
        while let first = bytes.first, [0x20, 0x0A, 0x0D, 0x09].contains(first) { bytes.removeFirst() }
        guard bytes.count >= minimumSize else {
            throw ShoalError(
                .keyFile,
                "the \(purpose) in \(path) is \(bytes.count) bytes; use at least \(minimumSize) (shoal keygen FILE makes one)"
            )
        }
        return bytes
    }

    /// Writes a fresh random key to a new file readable by its owner only (mode 0600).
    ///
    /// Refuses to replace an existing file: a key in use would be lost.
    public static func generate(path: String) throws(ShoalError) {
        var random = SystemRandomNumberGenerator()
        let key = (0..<generatedSize).map { _ in UInt8.random(in: 0...255, using: &random) }
        try create(path: path, contents: Array((Data(key).base64EncodedString() + "\n").utf8), mode: 0o600)
    }

    /// Writes `contents` to a new file with exactly `mode`, flushed to disk; refuses to
    /// replace an existing file (a key or certificate in use would be lost).
    package static func create(path: String, contents: [UInt8], mode: UInt16) throws(ShoalError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(mode))
        guard fd >= 0 else {
            let reason = errno
            if reason == EEXIST {
                throw ShoalError(.keyFile, "\(path) exists already; not replacing it (a key in use would be lost). Remove it first, or choose another file")
            }
            throw ShoalError(.keyFile, "cannot create \(path): \(String(cString: strerror(reason)))")
        }
        defer { close(fd) }
        // The umask may have taken bits away, never added any; set exactly `mode` all the same.
        _ = fchmod(fd, mode_t(mode))
        let written = contents.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == contents.count, fsync(fd) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(path)
            throw ShoalError(.keyFile, "cannot write \(path): \(reason)")
        }
    }

    /// A file's permission bits when its group or other users may read or write it;
    /// nil when they may not (or it cannot be read).
    package static func modeOpenToOthers(path: String) -> UInt16? {
        var info = FileInfo()
        guard stat(path, &info) == 0 else { return nil }
        let mode = info.st_mode & 0o777
        return mode & 0o077 == 0 ? nil : UInt16(mode)
    }
}

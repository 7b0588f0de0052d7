import ShoalCRDT
public import ShoalStorage
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
public import Darwin
#endif

/// An advisory lock on a data directory, held for as long as a node uses it.
///
/// Two nodes on one directory would open one SQLite database with two writers that
/// each believe they own its site ID, transaction counter and cursors. `flock` on
/// `DIR/shoal.lock` stops the second at once, whichever process (or the same one)
/// it is in: the lock belongs to the open file, and the kernel drops it when the
/// holder exits, however it exits, so a crashed node never leaves it behind. The
/// file holds the holder's process ID, only to name it in the refusal.
public final class DataDirectoryLock: Sendable {
    public static let fileName = "shoal.lock"

    public let path: String
    /// The open descriptor that holds the lock; -1 once released.
    private let descriptor: Locked<Int32>

    /// Takes the lock, creating the directory and the file if needed.
    ///
    /// Throws at once, without waiting, if another node holds it.
    public init(directory: String) throws(ShoalError) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw ShoalError(.invalidConfiguration, "cannot create data directory \(directory): \(error.localizedDescription)")
        }
        let path = (directory as NSString).appendingPathComponent(Self.fileName)
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw ShoalError(.invalidConfiguration, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            var buffer = [UInt8](repeating: 0, count: 32)
            let n = pread(fd, &buffer, buffer.count, 0)
            close(fd)
            guard reason == EWOULDBLOCK else {
                throw ShoalError(.invalidConfiguration, "cannot lock \(path): \(String(cString: strerror(reason)))")
            }
            let holder = n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : ""
            let who = Int32(holder).map { $0 == getpid() ? "this process" : "process \($0)" } ?? "another process"
            throw ShoalError(
                .dataDirectoryInUse,
                "the data directory \(directory) is in use by another Shoal node (\(who) holds \(path)); stop that node first, or give this one another --data directory"
            )
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        self.path = path
        self.descriptor = Locked(fd)
    }

    /// Releases the lock (closing the file); later calls do nothing.
    public func release() {
        let fd = descriptor.withLock { fd in
            defer { fd = -1 }
            return fd
        }
        if fd >= 0 { close(fd) }
    }

    deinit { release() }
}

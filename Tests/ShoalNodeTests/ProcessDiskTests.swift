import Foundation
import ShoalTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension ProcessSuites {
/// A full disk and a read-only data directory, on a small tmpfs the test mounts (as
/// root; skipped where mounting is not permitted).
@Suite(.serialized, .enabled(if: TmpfsMount.permitted, "mounting a tmpfs is not permitted here (needs root and mount rights)"))
struct ProcessDiskTests {
    static func mount(_ arguments: [String]) -> Bool { TmpfsMount.mount(arguments) }
    static func unmount(_ path: String) { TmpfsMount.unmount(path) }

    @Test func aFullDiskFailsWritesClearlyStopsAcknowledgingAndRecovers() throws {
        let disk = try ScratchTmpfs("small", size: "6m")
        defer { disk.remove() }
        let (dirs, mountPoint) = (disk.directory, disk.mountPoint)
        let source = try NodeProcess(name: "source", dataDirectory: dirs.path + "/source")
        let node = try NodeProcess(
            name: "small", dataDirectory: mountPoint + "/data",
            extra: ["--peer", source.address, "--subscribe", "SELECT * FROM incoming"])
        // Fill the disk with local writes until one fails.
        var acknowledged: [Int] = []
        var failure = ""
        for batch in 0..<60 {
            let file = dirs.path + "/batch.json"
            try TmpfsMount.bigDocuments("L\(batch)", 5).write(toFile: file, atomically: false, encoding: .utf8)
            let output = try ShoalBinary.run(["exec", "--node", node.address, "--json", "--args", "@" + file, "INSERT INTO local DOCUMENTS (:d)"])
            if output.status == 0 {
                acknowledged.append(batch)
            } else {
                failure = output.stderr
                break
            }
        }
        #expect(failure.contains("the disk that holds the data directory is full"), "\(failure)")
        #expect(failure.contains("nothing of it was written"))
        #expect(!acknowledged.isEmpty)
        // Reads still work; the node is up.
        #expect(try ProcessMeshTests.documents(node, "SELECT COUNT(*) AS n FROM local").first?["n"] as? Int == acknowledged.count * 5)
        // A peer's transactions cannot be committed: the node acknowledges none of them.
        for batch in 0..<3 {
            let file = dirs.path + "/incoming.json"
            try TmpfsMount.bigDocuments("I\(batch)", 5).write(toFile: file, atomically: false, encoding: .utf8)
            #expect(try ShoalBinary.run(["exec", "--node", source.address, "--args", "@" + file, "INSERT INTO incoming DOCUMENTS (:d)"]).status == 0)
        }
        #expect(eventually(15) { node.log().contains("could not apply a batch") }, "\(node.log().suffix(1500))")
        #expect(node.isRunning)

        // Space returns: writes succeed again and sync completes, every transaction whole.
        #expect(Self.mount(["-o", "remount,size=256m", mountPoint]))
        #expect(try eventually(20) { try node.exec("INSERT INTO local DOCUMENTS ({'_id': 'after', 't': 'after'})").status == 0 })
        #expect(try eventually(60) { try ProcessMeshTests.documents(node, "SELECT _id FROM incoming").count == 15 }, "small: \(node.log().suffix(3000))\nsource: \(source.log().suffix(3000))")
        let local = try ProcessMeshTests.documents(node, "SELECT t FROM local")
        for batch in acknowledged {
            #expect(local.filter { $0["t"] as? String == "L\(batch)" }.count == 5, "acknowledged batch \(batch)")
        }
        #expect(Dictionary(grouping: local, by: { $0["t"] as? String ?? "" }).values.allSatisfy { $0.count == 5 || $0.count == 1 })
        #expect(node.interrupt() == 0)
        #expect(try TmpfsMount.integrity(mountPoint + "/data") == "ok")
    }

    /// A node cannot start on a full disk (SQLite has no room for its shared-memory
    /// index): it refuses, naming the database, saying the disk is full and what to do,
    /// and starts with its data intact once there is room again.
    @Test func aFullDiskAtStartIsRefusedClearlyAndRecovers() throws {
        let disk = try ScratchTmpfs("full", size: "8m")
        defer { disk.remove() }
        let mountPoint = disk.mountPoint
        let data = mountPoint + "/data"
        var node: NodeProcess? = try NodeProcess(name: "full", dataDirectory: data)
        #expect(try node!.exec("INSERT INTO cars DOCUMENTS ({'_id': 'before'})").status == 0)
        #expect(node!.interrupt() == 0)
        node = nil
        let filler = mountPoint + "/filler"
        #expect(TmpfsMount.run("/bin/dd", ["if=/dev/zero", "of=" + filler, "bs=64k"]) != 0, "dd stops when the disk is full")
        let refused = try ShoalBinary.run(["run", "--data", data, "--listen", "127.0.0.1:0", "--no-discovery"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("cannot open the database at \(data)/shoal.sqlite: the disk that holds \(data) is full"), "\(refused.stderr)")
        #expect(refused.stderr.contains("Free some space on that disk, or move the data directory to a larger one, and start again"))
        try FileManager.default.removeItem(atPath: filler)
        let again = try NodeProcess(name: "full", dataDirectory: data)
        #expect(try again.exec("INSERT INTO cars DOCUMENTS ({'_id': 'after'})").status == 0)
        #expect(try ProcessMeshTests.documents(again).compactMap { $0["_id"] as? String }.sorted() == ["after", "before"])
        #expect(again.interrupt() == 0)
        #expect(try TmpfsMount.integrity(data) == "ok")
    }

    /// A data directory on a filesystem mounted read-only: the node refuses to start,
    /// saying why, and starts with its data intact once the filesystem is writable.
    /// (A filesystem cannot be made read-only under a running node: Linux refuses to
    /// remount one read-only while files on it are open for writing.)
    @Test func aReadOnlyDataDirectoryIsRefusedClearlyAndRecovers() throws {
        let disk = try ScratchTmpfs("ro", size: "64m")
        defer { disk.remove() }
        let mountPoint = disk.mountPoint
        var node: NodeProcess? = try NodeProcess(name: "ro", dataDirectory: mountPoint + "/data")
        #expect(try node!.exec("INSERT INTO cars DOCUMENTS ({'_id': 'before'})").status == 0)
        #expect(node!.interrupt() == 0)
        node = nil
        #expect(Self.mount(["-o", "remount,ro", mountPoint]))
        let refused = try ShoalBinary.run(["run", "--data", mountPoint + "/data", "--listen", "127.0.0.1:0", "--no-discovery"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("cannot open \(mountPoint)/data/shoal.lock: Read-only file system"), "\(refused.stderr)")
        #expect(Self.mount(["-o", "remount,rw", mountPoint]))
        let again = try NodeProcess(name: "ro", dataDirectory: mountPoint + "/data")
        #expect(try again.exec("INSERT INTO cars DOCUMENTS ({'_id': 'after'})").status == 0)
        #expect(try ProcessMeshTests.documents(again).compactMap { $0["_id"] as? String }.sorted() == ["after", "before"])
        #expect(again.interrupt() == 0)
        #expect(try TmpfsMount.integrity(mountPoint + "/data") == "ok")
    }
}
}

/// A small tmpfs mounted in a fresh temporary directory, which holds whatever else a
/// disk test needs; `remove()` unmounts it and deletes the directory.
struct ScratchTmpfs {
    let directory: TemporaryDirectory
    let mountPoint: String

    init(_ name: String, size: String) throws {
        directory = TemporaryDirectory(prefix: "shoal-disk")
        mountPoint = directory.path + "/" + name
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        #expect(TmpfsMount.mount(["-t", "tmpfs", "-o", "size=" + size, "tmpfs", mountPoint]))
    }

    func remove() {
        TmpfsMount.unmount(mountPoint)
        directory.remove()
    }
}

/// Mounting small filesystems for the disk tests.
enum TmpfsMount {
    static func run(_ command: String, _ arguments: [String]) -> Int32 {
        guard let process = try? ChildProcess(command, arguments) else { return -1 }
        return process.wait(timeout: 60)
    }

    static func mount(_ arguments: [String]) -> Bool { run("/bin/mount", arguments) == 0 }
    static func unmount(_ path: String) { _ = run("/bin/umount", ["-l", path]) }

    /// Whether this process may mount a tmpfs: tried once on a scratch folder.
    static let permitted: Bool = {
        let probe = TemporaryDirectory(prefix: "shoal-mount-probe")
        defer { probe.remove() }
        guard mount(["-t", "tmpfs", "-o", "size=1m", "tmpfs", probe.path]) else { return false }
        unmount(probe.path)
        return true
    }()

    /// `PRAGMA integrity_check` of a stopped node's database, through Python's sqlite3.
    static func integrity(_ directory: String) throws -> String {
        let run = try ChildProcess.run("/usr/bin/env", [
            "python3", "-c",
            "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone()[0])",
            directory + "/shoal.sqlite",
        ], timeout: 120)
        return String(decoding: run.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func bigDocuments(_ tag: String, _ n: Int) -> String {
        let docs = (0..<n).map { "{\"_id\": \"\(tag)-\($0)\", \"t\": \"\(tag)\", \"v\": \"\(ProcessSuites.ProcessLimitTests.noise(60_000))\"}" }
        return "{\"d\": [\(docs.joined(separator: ","))]}"
    }
}

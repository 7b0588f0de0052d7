import Foundation
import ShoalTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension ProcessSuites {
/// Who may do what, with real `shoal` processes: one node per data directory, key
/// files only their owner can read, and the admin key.
@Suite(.serialized) struct ProcessAccessTests {
    @Test func aSecondRunOnTheSameDataDirectoryRefusesAtOnceAndTheFirstIsUnharmed() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'before'})").status == 0)
        let started = Date()
        let second = try ShoalBinary.run([
            "run", "--data", dirs.path + "/a", "--listen", "127.0.0.1:0", "--no-discovery", "--name", "intruder",
        ])
        let seconds = Date().timeIntervalSince(started)
        #expect(second.status == 1)
        #expect(second.stderr.contains("the data directory \(dirs.path)/a is in use by another Shoal node (process "))
        #expect(second.stderr.contains("stop that node first, or give this one another --data directory"))
        #expect(seconds < 10, "refused at once, not after a timeout (\(seconds) s)")
        #expect(!second.stderr.contains("ready to accept connections"))
        // The first node goes on serving, with its data.
        #expect(a.isRunning)
        #expect(try a.exec("INSERT INTO cars DOCUMENTS ({'_id': 'after'})").status == 0)
        #expect(try ProcessMeshTests.documents(a).count == 2)
        // Stopped, it leaves the directory free for the next run.
        #expect(a.interrupt() == 0)
        let b = try NodeProcess(name: "again", dataDirectory: dirs.path + "/a")
        #expect(try ProcessMeshTests.documents(b).count == 2)
    }

    @Test func keygenWritesAPrivateKeyAndOpenKeyFilesAreRefusedEverywhere() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let mesh = dirs.path + "/mesh.key", admin = dirs.path + "/admin.key", open = dirs.path + "/open.key"
        let made = try ShoalBinary.run(["keygen", mesh])
        #expect(made.status == 0, "\(made.stderr)")
        #expect(made.stderr.contains("wrote a new 32-byte key to \(mesh) (mode 0600)"))
        let permissions = try FileManager.default.attributesOfItem(atPath: mesh)[.posixPermissions] as? Int
        #expect(permissions.map { $0 & 0o777 } == 0o600)
        let before = try String(contentsOfFile: mesh, encoding: .utf8)
        let again = try ShoalBinary.run(["keygen", mesh])
        #expect(again.status == 1)
        #expect(again.stderr.contains("exists already; not replacing it"))
        #expect(try String(contentsOfFile: mesh, encoding: .utf8) == before)
        #expect(try ShoalBinary.run(["keygen", admin]).status == 0)

        try "a key that the whole machine can read".write(toFile: open, atomically: false, encoding: .utf8)
        #expect(chmod(open, 0o644) == 0)
        let run = try ShoalBinary.run(["run", "--data", dirs.path + "/x", "--listen", "127.0.0.1:0", "--mesh-key-file", open])
        #expect(run.status == 1)
        #expect(run.stderr.contains("the mesh key file \(open) is open to other users (mode 644)"))
        let runAdmin = try ShoalBinary.run(["run", "--data", dirs.path + "/x", "--listen", "127.0.0.1:0", "--admin-key-file", open])
        #expect(runAdmin.stderr.contains("the admin key file \(open) is open to other users"))

        let node = try NodeProcess(
            name: "keyed", dataDirectory: dirs.path + "/n", extra: ["--mesh-key-file", mesh, "--admin-key-file", admin])
        for command in [["exec", "SELECT * FROM cars"], ["status"], ["subscribe", "SELECT * FROM cars"], ["observe", "SELECT * FROM cars"]] {
            let refused = try ShoalBinary.run(
                [command[0], "--node", node.address, "--mesh-key-file", open] + command.dropFirst())
            #expect(refused.status == 1, "\(command[0])")
            #expect(refused.stderr.contains("is open to other users"), "\(command[0]): \(refused.stderr)")
        }
        // Admin clients prove the admin key; the mesh key is for peers.
        let withAdmin = try node.exec("INSERT INTO cars DOCUMENTS ({'_id': 'a'})", extra: ["--admin-key-file", admin])
        #expect(withAdmin.status == 0, "\(withAdmin.stderr)")
        let withMesh = try node.exec("SELECT * FROM cars", extra: ["--mesh-key-file", mesh])
        #expect(withMesh.status == 1)
        #expect(withMesh.stderr.contains("mesh key mismatch"))
        let status = try ShoalBinary.run(["status", "--node", node.address, "--admin-key-file", admin, "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        #expect(object?["warnings"] as? [String] == [], "a node on loopback warns of nothing")
        #expect(node.isRunning)
        #expect(!node.log().contains("beyond loopback"))
    }
}
}

import Foundation
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Who may use a node and its files, in one process: the data directory lock, key
/// files, and what counts as loopback.
@Suite struct AccessTests {
    @Test func aSecondLockOnTheSameDirectoryIsRefusedUntilTheFirstIsReleased() throws {
        let dir = TemporaryDirectory(prefix: "shoal-lock")
        defer { dir.remove() }
        let first = try DataDirectoryLock(directory: dir.path + "/data")
        #expect(throws: ShoalError.self) { try DataDirectoryLock(directory: dir.path + "/data") }
        do {
            _ = try DataDirectoryLock(directory: dir.path + "/data")
        } catch {
            #expect(error.code == .dataDirectoryInUse)
            #expect(error.message.contains("in use by another Shoal node (this process holds"))
        }
        first.release()
        let again = try DataDirectoryLock(directory: dir.path + "/data")
        again.release()
    }

    @Test func aSecondNodeOnTheSameDataDirectoryIsRefusedAndTheFirstKeepsWorking() async throws {
        let dir = TemporaryDirectory(prefix: "shoal-lock")
        defer { dir.remove() }
        let configuration = NodeConfiguration(
            dataDirectory: dir.path, listen: HostAndPort(host: "127.0.0.1", port: 0), discovery: false)
        let first = try ShoalNode(configuration: configuration)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await first.run() }
            _ = try await first.ready()
            #expect(try await first.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})").transactionID != nil)
            do {
                _ = try ShoalNode(configuration: configuration)
                Issue.record("a second node opened the same data directory")
            } catch let error as ShoalError {
                #expect(error.code == .dataDirectoryInUse)
            }
            #expect(try await first.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'b'})").transactionID != nil)
            #expect(try await first.store.execute("SELECT * FROM cars").items.count == 2)
            group.cancelAll()
        }
        // Once the first has stopped, the directory is free again.
        let second = try ShoalNode(configuration: configuration)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await second.run() }
            _ = try await second.ready()
            let kept = try await second.store.execute("SELECT * FROM cars").items
            #expect(kept.count == 2)
            group.cancelAll()
        }
    }

    @Test func keygenWritesAPrivateKeyOnceAndItReadsBack() throws {
        let dir = TemporaryDirectory(prefix: "shoal-key")
        defer { dir.remove() }
        let path = dir.path + "/mesh.key"
        try KeyFile.generate(path: path)
        var info = stat()
        #expect(stat(path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        let key = try KeyFile.read(path: path)
        #expect(key.count == 44, "32 bytes in base64")
        let other = dir.path + "/other.key"
        try KeyFile.generate(path: other)
        #expect(try KeyFile.read(path: other) != key, "each key is fresh")
        do {
            try KeyFile.generate(path: path)
            Issue.record("an existing key file was replaced")
        } catch {
            #expect(error.message.contains("exists already; not replacing it"))
        }
        #expect(try KeyFile.read(path: path) == key)
    }

    @Test(arguments: [0o644, 0o640, 0o604, 0o660, 0o602] as [mode_t])
    func aKeyFileOtherUsersCanReachIsRefused(mode: mode_t) throws {
        let dir = TemporaryDirectory(prefix: "shoal-key")
        defer { dir.remove() }
        let path = dir.path + "/open.key"
        try "a perfectly long enough key".write(toFile: path, atomically: false, encoding: .utf8)
        #expect(chmod(path, mode) == 0)
        do {
            _ = try KeyFile.read(path: path)
            Issue.record("a key file with mode \(String(mode, radix: 8)) was accepted")
        } catch {
            #expect(error.code == .keyFile)
            #expect(error.message.contains("is open to other users (mode \(String(mode, radix: 8)))"))
            #expect(error.message.contains("chmod 600 \(path)"))
        }
        #expect(chmod(path, 0o600) == 0)
        #expect(try KeyFile.read(path: path) == Array("a perfectly long enough key".utf8))
        #expect(chmod(path, 0o400) == 0)
        #expect(try KeyFile.read(path: path).count == 27)
    }

    @Test(arguments: [
        ("127.0.0.1", true), ("127.1.2.3", true), ("localhost", true), ("::1", true), ("[::1]", true),
        ("::ffff:127.0.0.1", true), ("0.0.0.0", false), ("::", false), ("10.0.0.1", false), ("127.0.0", false),
        ("1127.0.0.1", false), ("example.org", false), ("::ffff:10.0.0.1", false),
    ])
    func loopbackAddressesAreRecognized(host: String, loopback: Bool) {
        #expect(HostAndPort.isLoopback(host: host) == loopback)
    }

    @Test func aNodeListeningBeyondLoopbackWithoutAMeshKeySaysSo() {
        func warnings(_ host: String, meshKey: [UInt8]? = nil, adminKey: [UInt8]? = nil) -> [String] {
            ShoalNode.securityWarnings(
                NodeConfiguration(
                    dataDirectory: "/nonexistent", listen: HostAndPort(host: host, port: 7470), meshKey: meshKey,
                    discovery: false, adminKey: adminKey))
        }
        let open = warnings("0.0.0.0")
        #expect(open.count == 1)
        #expect(open.first?.contains("0.0.0.0:7470, beyond loopback, without a mesh key") == true)
        #expect(open.first?.contains("taken from loopback only") == true)
        #expect(warnings("0.0.0.0", adminKey: Array("an admin key of some length".utf8)).first?
            .contains("must prove the --admin-key-file key") == true)
        #expect(warnings("0.0.0.0", meshKey: Array("a mesh key of some length".utf8)).isEmpty)
        #expect(warnings("127.0.0.1").isEmpty)
        #expect(warnings("::1").isEmpty)
    }
}

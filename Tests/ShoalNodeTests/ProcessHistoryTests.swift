import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
/// A node restored from a backup of its data directory reuses no transaction number
/// and gets back its writes that only its peer holds (DATA_MODEL.md §4.5), as real
/// processes on loopback.
@Suite(.serialized) struct ProcessHistoryTests {
    static func ids(_ node: NodeProcess) throws -> [String] {
        try ProcessMeshTests.documents(node, "SELECT _id FROM t ORDER BY _id").compactMap { $0["_id"] as? String }
    }

    /// A writes `one` and is backed up (`cp -a` while stopped); it writes `two` and
    /// `three`, which reach B; it is restored from the backup and writes `four` and
    /// `five`. Before, A reused the numbers of `two` and `three`, B dropped `four` and
    /// `five` as known, and A never got `two` and `three` back: the nodes disagreed for
    /// ever. Now the restored directory takes a new site, and both end with all five.
    @Test func aNodeRestoredFromABackupLosesNothingAndReusesNoNumber() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        let aData = dirs.path + "/a", backup = dirs.path + "/a-backup"
        var a = try NodeProcess(name: "alpha", dataDirectory: aData, extra: ["--subscribe", "SELECT * FROM t"])
        let port = a.port
        let b = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address, "--subscribe", "SELECT * FROM t"])
        #expect(try a.exec("INSERT INTO t DOCUMENTS ({'_id': 'one'})").status == 0)
        let site = try #require(try a.status()["siteID"] as? String)
        a.stop()
        try FileManager.default.copyItem(atPath: aData, toPath: backup)
        a = try NodeProcess(name: "alpha", dataDirectory: aData, listenPort: port, extra: ["--subscribe", "SELECT * FROM t"])
        #expect(try a.exec("INSERT INTO t DOCUMENTS ({'_id': 'two'})").status == 0)
        #expect(try a.exec("INSERT INTO t DOCUMENTS ({'_id': 'three'})").status == 0)
        #expect(eventually(20) { (try? Self.ids(b)) == ["one", "three", "two"] })
        a.stop()
        try FileManager.default.removeItem(atPath: aData)
        try FileManager.default.copyItem(atPath: backup, toPath: aData)
        a = try NodeProcess(name: "alpha", dataDirectory: aData, listenPort: port, extra: ["--subscribe", "SELECT * FROM t"])
        #expect(a.log().contains("this data directory's database is not the file it was created as"), "\(a.log())")
        let newSite = try #require(try a.status()["siteID"] as? String)
        #expect(newSite != site)
        #expect(try a.exec("INSERT INTO t DOCUMENTS ({'_id': 'four'})").status == 0)
        #expect(try a.exec("INSERT INTO t DOCUMENTS ({'_id': 'five'})").status == 0)
        let all = ["five", "four", "one", "three", "two"]
        let converged = eventually(30) { (try? Self.ids(a)) == all && (try? Self.ids(b)) == all }
        let (inA, inB) = (try Self.ids(a), try Self.ids(b))
        #expect(converged, "a: \(inA), b: \(inB)")
        func digest(_ node: NodeProcess) -> String? {
            ((try? node.status()["collections"] as? [String: Any])?["t"] as? [String: Any])?["digest"] as? String
        }
        #expect(digest(a) != nil && digest(a) == digest(b))
    }
}
}

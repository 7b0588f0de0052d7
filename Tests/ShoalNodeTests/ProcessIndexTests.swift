import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
/// `CREATE INDEX`, `SHOW INDEXES` and `DROP INDEX` through `shoal exec`: the index
/// outlives a restart of the node, and an error names the statement's position.
@Suite(.serialized) struct ProcessIndexTests {
    @Test func indexesAreDeclaredThroughExecAndSurviveARestart() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-process")
        defer { dirs.remove() }
        var node = try NodeProcess(name: "a", dataDirectory: dirs.path + "/a")
        let insert = try node.exec("INSERT INTO cars DOCUMENTS ({_id: 'a', year: 2021}), ({_id: 'b', year: 2019})")
        #expect(insert.status == 0, "\(insert.stderr)")
        let created = try node.exec("CREATE INDEX by_year ON cars (year)")
        #expect(created.status == 0, "\(created.stderr)")
        #expect(created.stdout.contains("by_year"), "\(created.stdout)")
        node.stop()

        node = try NodeProcess(name: "a", dataDirectory: dirs.path + "/a")
        defer { node.stop() }
        let shown = try node.exec("SHOW INDEXES")
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.stdout.contains("\"by_year\""), "\(shown.stdout)")
        let found = try node.exec("SELECT _id FROM cars WHERE year > 2020 LIMIT 10")
        #expect(found.stdout.contains("\"a\"") && !found.stdout.contains("\"b\""), "\(found.stdout)")
        let unknown = try node.exec("DROP INDEX by_make")
        #expect(unknown.status != 0)
        #expect(unknown.stderr.contains("line 1, column 12: no index named 'by_make'"), "\(unknown.stderr)")
        let dropped = try node.exec("DROP INDEX by_year; SHOW INDEXES")
        #expect(dropped.status == 0, "\(dropped.stderr)")
        #expect(!dropped.stdout.contains("by_year"), "\(dropped.stdout)")
    }
}
}

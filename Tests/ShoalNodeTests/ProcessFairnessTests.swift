import Foundation
import ShoalCRDT
import ShoalNode
import ShoalSync
import ShoalTesting
import Testing

extension ProcessSuites {
/// The fairness test of `FairnessTests`, between real processes: while B takes in
/// A's backlog, a write made on another of B's peers gets through without waiting
/// behind it.
@Suite(.serialized) struct ProcessFairnessTests {
    static func count(_ client: AdminClient, _ query: String) async throws -> Int {
        guard let item = try await client.exec(query).itemsJSON.first, case .int(let n)? = try JSON.parse(item)["n"] else { return 0 }
        return Int(n)
    }

    @Test func aWriteFromOnePeerIsNotHeldBehindAnotherPeersBacklog() async throws {
        let dirs = TemporaryDirectory(prefix: "shoal-fair")
        defer { dirs.remove() }
        let backlog = 40_000
        let a = try NodeProcess(name: "a", dataDirectory: dirs.path + "/a")
        let toA = AdminClient(node: try HostAndPort(parsing: a.address), timeout: .seconds(120))
        try await toA.withSession { session in
            var first = 0
            while first < backlog {
                let docs = (first..<(first + 500)).map { "{\"_id\":\"a-\($0)\",\"n\":\($0)}" }.joined(separator: ",")
                _ = try await session.exec("INSERT INTO notes DOCUMENTS (:docs)", argumentsJSON: "{\"docs\":[\(docs)]}")
                first += 500
            }
        }
        // C runs and is B's peer before A's backlog starts to flow, so its write waits
        // for neither a process start nor a handshake: only for B's sync.
        let c = try NodeProcess(name: "c", dataDirectory: dirs.path + "/c")
        let toC = AdminClient(node: try HostAndPort(parsing: c.address), timeout: .seconds(120))
        let b = try NodeProcess(name: "b", dataDirectory: dirs.path + "/b",
                                extra: ["--peer", c.address, "--peer", a.address, "--subscribe", "SELECT * FROM notes"])
        let toB = AdminClient(node: try HostAndPort(parsing: b.address), timeout: .seconds(120))
        let fromA = "SELECT COUNT(*) AS n FROM notes WHERE _id != 'from-c'"
        #expect(try await InProcessMesh.eventually(timeout: .seconds(60)) { try await Self.count(toB, fromA) >= 500 })
        _ = try await toC.exec("INSERT INTO notes DOCUMENTS ({'_id': 'from-c'})")
        #expect(try await InProcessMesh.eventually(timeout: .seconds(60)) {
            try await toB.exec("SELECT * FROM notes WHERE _id = 'from-c'").itemsJSON.count == 1
        })
        let heldOfA = try await Self.count(toB, fromA)
        #expect(heldOfA < backlog, "C's write waited for all \(backlog) of A's documents")
        #expect(try await InProcessMesh.eventually(timeout: .seconds(120)) { try await Self.count(toB, fromA) == backlog })
    }
}
}

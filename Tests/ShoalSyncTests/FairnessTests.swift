import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// A fast writer cannot starve the sync of other peers: while B is still taking in a
/// large backlog from A, a write from C reaches B without waiting behind it.
@Suite struct FairnessTests {
    static let backlog = 20_000

    /// Writes `count` small documents on `node` in transactions of 500.
    static func fill(_ store: DocumentStore, count: Int) async throws {
        var first = 0
        while first < count {
            let docs: [Value] = (first..<min(first + 500, count)).map { ["_id": .string("a-\($0)"), "n": .int(Int64($0))] }
            _ = try await store.execute("INSERT INTO notes DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
            first += 500
        }
    }

    static func count(_ store: DocumentStore, _ query: String) async throws -> Int {
        guard case .int(let n)? = try await store.execute(query).items.first?["n"] else { return 0 }
        return Int(n)
    }

    @Test func aWriteFromOnePeerIsNotHeldBehindAnotherPeersBacklog() async throws {
        let a = try TestNode(name: "a"), b = try TestNode(name: "b", subscriptions: ["SELECT * FROM notes"])
        let c = try TestNode(name: "c")
        defer { a.remove(); b.remove(); c.remove() }
        try await Self.fill(a.store, count: Self.backlog)
        _ = try await c.store.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-c'})")
        let fromA = "SELECT COUNT(*) AS n FROM notes WHERE _id != 'from-c'"
        try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
            // A's backlog is streaming into B...
            #expect(try await InProcessMesh.eventually(timeout: .seconds(60)) { try await Self.count(b.store, fromA) >= 500 })
            try await InProcessMesh.withLink(c.sync, b.sync) { () async throws in
                // ...and C's one write gets through before it ends.
                #expect(try await InProcessMesh.eventually(timeout: .seconds(60)) {
                    try await b.store.execute("SELECT * FROM notes WHERE _id = 'from-c'").items.count == 1
                })
                let heldOfA = try await Self.count(b.store, fromA)
                #expect(heldOfA < Self.backlog, "C's write waited for all \(Self.backlog) of A's documents")
                #expect(try await InProcessMesh.eventually(timeout: .seconds(120)) {
                    try await Self.count(b.store, fromA) == Self.backlog
                })
            }
        }
    }
}

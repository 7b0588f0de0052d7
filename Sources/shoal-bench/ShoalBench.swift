import Foundation
import ShoalCRDT
import ShoalStore
import ShoalSync
import ShoalTesting

/// Prints throughput figures for the store and for sync between two in-process
/// nodes. Run a release build for meaningful numbers:
///
///     swift run -c release shoal-bench [documents]
@main
struct ShoalBench {
    static func main() async throws {
        let count = CommandLine.arguments.dropFirst().first.flatMap(Int.init) ?? 20_000
        print("shoal-bench: \(count) documents per figure")
        try await measureLocalWrites(count: count, perTransaction: 1)
        try await measureLocalWrites(count: count, perTransaction: 100)
        try await measureRemoteApply(count: count)
        try await measureSync(count: count)
    }

    static func report(_ label: String, count: Int, since start: ContinuousClock.Instant) {
        let seconds = Double((ContinuousClock.now - start).components.attoseconds) / 1e18
            + Double((ContinuousClock.now - start).components.seconds)
        let rate = Double(count) / seconds
        let padded = label.padding(toLength: 48, withPad: " ", startingAt: 0)
        print(padded + String(format: "%9.0f docs/s  (%.2f s)", rate, seconds))
    }

    static func measureLocalWrites(count: Int, perTransaction: Int) async throws {
        let dir = TemporaryDirectory(prefix: "shoal-bench")
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        let start = ContinuousClock.now
        var i = 0
        while i < count {
            let batch = (i..<min(i + perTransaction, count)).map { n -> Value in
                ["_id": .string("d\(n)"), "title": .string("document \(n)"), "n": .int(Int64(n))]
            }
            _ = try await store.execute("INSERT INTO docs DOCUMENTS (:batch)", arguments: ["batch": .array(batch)])
            i += perTransaction
        }
        report("local INSERT, \(perTransaction) per transaction", count: count, since: start)
    }

    static func measureRemoteApply(count: Int) async throws {
        let a = TemporaryDirectory(prefix: "shoal-bench"), b = TemporaryDirectory(prefix: "shoal-bench")
        defer { a.remove(); b.remove() }
        let writer = try DocumentStore(directory: a.path), receiver = try DocumentStore(directory: b.path)
        defer { writer.close(); receiver.close() }
        for start in stride(from: 0, to: count, by: 100) {
            let batch = (start..<min(start + 100, count)).map { n -> Value in ["_id": .string("d\(n)"), "n": .int(Int64(n))] }
            _ = try await writer.execute("INSERT INTO docs DOCUMENTS (:batch)", arguments: ["batch": .array(batch)])
        }
        var all = SubscriptionSet()
        try all.add(query: "SELECT * FROM docs")
        let begin = ContinuousClock.now
        var cursor: UInt64 = 0
        while true {
            let page = try await writer.changes(after: cursor, limit: 512, subscriptions: all)
            guard page.through > cursor else { break }
            _ = try await receiver.applyRemote(page.pieces, from: writer.siteID, subscriptionKey: all.key, through: page.through)
            cursor = page.through
        }
        report("read change log + apply remote, 512-row pages", count: count, since: begin)
    }

    static func measureSync(count: Int) async throws {
        let a = try TestNode(name: "a"), b = try TestNode(name: "b", subscriptions: ["SELECT * FROM docs"])
        defer { a.remove(); b.remove() }
        for start in stride(from: 0, to: count, by: 100) {
            let batch = (start..<min(start + 100, count)).map { n -> Value in ["_id": .string("d\(n)"), "n": .int(Int64(n))] }
            _ = try await a.store.execute("INSERT INTO docs DOCUMENTS (:batch)", arguments: ["batch": .array(batch)])
        }
        let begin = ContinuousClock.now
        try await InProcessMesh.withLink(a.sync, b.sync) {
            _ = try await InProcessMesh.eventually(timeout: .seconds(600)) {
                try await b.store.collectionCounts().first?.documents == count
            }
        }
        report("sync between two nodes (in-memory transport)", count: count, since: begin)
    }
}

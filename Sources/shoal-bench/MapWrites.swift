import ShoalStorage
import Foundation
import ShoalStore
import ShoalCRDT
import ShoalSync
import ShoalTesting

/// Writes to one document holding a large MAP: one entry set per transaction on a
/// map of 5,000, 10,000 and 20,000 entries, on the writer and until a linked replica
/// shows it. A write should cost what it changes plus one load of the document, so
/// the time per write grows at most with the map's size, not with its square.
enum MapWrites {
    static let sizes = [5_000, 10_000, 20_000]

    struct Figure: Sendable {
        var entries: Int
        var write: Latency.Figure
        var replicated: Latency.Figure
    }

    /// `writes` single-entry UPDATEs at each size; prints one line per size.
    static func run(writes: Int) async throws -> [Figure] {
        var figures: [Figure] = []
        for entries in sizes {
            let a = try TestNode(name: "a")
            let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM maps"])
            defer { a.remove(); b.remove() }
            let map = Value.object(Dictionary(uniqueKeysWithValues: (0..<entries).map { ("k\($0)", Value.int(Int64($0))) }))
            _ = try await a.store.execute(
                "INSERT INTO COLLECTION maps (m MAP) DOCUMENTS (:d)", arguments: ["d": ["_id": "big", "m": map]])
            let (seen, continuation) = AsyncStream.makeStream(of: (Int64, ContinuousClock.Instant).self)
            let observer = try b.store.registerObserver("SELECT m.probe AS n FROM maps WHERE _id = 'big'") { observation in
                let now = ContinuousClock.now
                if case .int(let n)? = observation.items.first?["n"] { continuation.yield((n, now)) }
            }
            defer { observer.cancel() }
            let (local, replicated) = try await InProcessMesh.withLink(a.sync, b.sync) { () async throws -> ([Double], [Double]) in
                var arrivals = seen.makeAsyncIterator()
                _ = try await a.store.execute("UPDATE COLLECTION maps (m MAP) SET m.probe = -1 WHERE _id = 'big'")
                while let (n, _) = await arrivals.next(), n != -1 {}
                var local: [Double] = []
                var replicated: [Double] = []
                for i in 0..<writes {
                    let t = ContinuousClock.now
                    _ = try await a.store.execute(
                        "UPDATE COLLECTION maps (m MAP) SET m.probe = :n WHERE _id = 'big'", arguments: ["n": .int(Int64(i))])
                    local.append(seconds(ContinuousClock.now - t) * 1000)
                    while let (n, at) = await arrivals.next() {
                        if n == Int64(i) {
                            replicated.append(seconds(at - t) * 1000)
                            break
                        }
                    }
                }
                return (local, replicated)
            }
            let figure = Figure(
                entries: entries, write: Latency.Figure(label: "write", latencies: local),
                replicated: Latency.Figure(label: "replicated", latencies: replicated))
            print(
                String(
                    format: "map of %d entries: a write p50 %.2f ms (max %.2f), on a replica p50 %.2f ms (max %.2f), %d writes",
                    entries, figure.write.p50, figure.write.max, figure.replicated.p50, figure.replicated.max, writes))
            figures.append(figure)
        }
        return figures
    }
}

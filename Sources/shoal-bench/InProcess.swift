import ShoalStorage
import Foundation
import ShoalStore
import ShoalCRDT
import ShoalSync
import ShoalTesting

/// Single workloads in one process, for profilers (`valgrind --tool=callgrind`,
/// `perf record`): no child processes, nothing else running.
enum InProcess: String, CaseIterable, Sendable {
    /// Local writes through the API, 100 per transaction.
    case local
    /// Two in-process nodes over an in-memory connection: the writer's log read as
    /// pages of pieces, encoded, decoded, put together and applied by the receiver.
    case sync
    /// One-document UPDATEs through the API, one per transaction, one at a time: the
    /// store's own part of the write latency (it prints p50 and p99).
    case update
    /// Two in-process nodes over an in-memory connection: a one-document UPDATE on
    /// the writer until an observer on the receiver sees it, one at a time (it prints
    /// p50 and p99). The sync path's part of the observer latency, without TCP, admin
    /// sessions or other processes.
    case latency
    /// One-entry UPDATEs of a document holding a MAP of 5,000, 10,000 and 20,000
    /// entries, each until a linked replica shows it (`MapWrites`; it prints p50 and
    /// the maximum per size). `--samples` is the writes per size (default 20).
    case map

    /// - Parameter samples: the writes per size of `map`, if given.
    func run(documents: Int, samples: Int?) async throws -> Double {
        switch self {
        case .map:
            let writes = samples ?? 20
            let start = ContinuousClock.now
            _ = try await MapWrites.run(writes: writes)
            return Double(writes * MapWrites.sizes.count) / seconds(ContinuousClock.now - start)
        case .local:
            return try await LocalWrites.run(documents: documents, perTransaction: 100).documentsPerSecond
        case .update:
            let a = try TestNode(name: "a")
            defer { a.remove() }
            _ = try await a.store.execute("INSERT INTO probe DOCUMENTS ({'_id': 'p', 'n': 0})")
            var latencies: [Double] = []
            let start = ContinuousClock.now
            for i in 0..<documents {
                let t = ContinuousClock.now
                _ = try await a.store.execute("UPDATE probe SET n = :n WHERE _id = 'p'", arguments: ["n": .int(Int64(i))])
                latencies.append(seconds(ContinuousClock.now - t) * 1000)
            }
            let elapsed = seconds(ContinuousClock.now - start)
            let figure = Latency.Figure(label: "update", latencies: latencies)
            print(String(format: "update: p50 %.3f ms, p99 %.3f ms, max %.3f ms", figure.p50, figure.p99, figure.max))
            return Double(documents) / elapsed
        case .latency:
            let a = try TestNode(name: "a")
            let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM probe"])
            defer { a.remove(); b.remove() }
            let probe = try await ProbeLatency(writer: a.store, reader: b.store)
            defer { probe.observer.cancel() }
            let start = ContinuousClock.now
            let latencies = try await InProcessMesh.withLink(a.sync, b.sync) { () async throws -> [Double] in
                try await probe.measure(writer: a.store, samples: documents)
            }
            let elapsed = seconds(ContinuousClock.now - start)
            let figure = Latency.Figure(label: "latency", latencies: latencies)
            print(String(format: "latency: p50 %.3f ms, p99 %.3f ms, max %.3f ms", figure.p50, figure.p99, figure.max))
            return Double(documents) / elapsed
        case .sync:
            // A node's own batch size, not the small one tests use to split transactions.
            let defaults: (inout SyncConfiguration) -> Void = { $0.batchSize = SyncConfiguration(nodeName: "").batchSize }
            let a = try TestNode(name: "a", configure: defaults)
            let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM docs"], configure: defaults)
            defer { a.remove(); b.remove() }
            var first = 0
            while first < documents {
                _ = try await a.store.execute(
                    "INSERT INTO docs DOCUMENTS (:docs)", arguments: ["docs": try JSON.parse(Workload.json(first..<(first + 100)))])
                first += 100
            }
            let start = ContinuousClock.now
            try await InProcessMesh.withLink(a.sync, b.sync) { () async throws in
                let arrived = try await InProcessMesh.eventually(timeout: .seconds(3600)) {
                    try await b.store.collectionCounts().first?.documents == documents
                }
                if !arrived { throw BenchError("the documents did not arrive") }
            }
            return Double(documents) / seconds(ContinuousClock.now - start)
        }
    }
}

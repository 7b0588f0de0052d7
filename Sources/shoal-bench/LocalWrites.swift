import Foundation
import ShoalStore
import ShoalStorage
import ShoalCRDT
import ShoalTesting

/// Local writes through Shoal's own API (`DocumentStore.execute`, in process): the
/// same documents as `RawSQLite`, 1 and 100 per transaction.
enum LocalWrites {
    struct Figure: Sendable {
        var perTransaction: Int
        var documents: Int
        var seconds: Double
        var documentsPerSecond: Double { Double(documents) / seconds }
    }

    static func measure(plan: Plan) async throws -> [Figure] {
        [try await run(documents: plan.singleWrites, perTransaction: 1), try await run(documents: plan.documents, perTransaction: 100)]
    }

    static func run(documents: Int, perTransaction: Int) async throws -> Figure {
        let directory = TemporaryDirectory(prefix: "shoal-bench-local")
        defer { directory.remove() }
        let store = try DocumentStore(directory: directory.path)
        defer { store.close() }
        let start = ContinuousClock.now
        var first = 0
        while first < documents {
            let end = min(first + perTransaction, documents)
            _ = try await store.execute(
                "INSERT INTO docs DOCUMENTS (:docs)", arguments: ["docs": try JSON.parse(Workload.json(first..<end))])
            first = end
        }
        return Figure(perTransaction: perTransaction, documents: documents, seconds: seconds(ContinuousClock.now - start))
    }
}

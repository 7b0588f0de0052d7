import Foundation
import ShoalCRDT
import ShoalStore
import ShoalTesting
import Testing

/// Property test of the merge rules through the real store: random operations on
/// 3–5 replicas, every replica's deltas delivered to every other in random order,
/// in random batches, with duplicates; all replicas must end byte-identical.
///
/// Each case works in its own collection of the same replicas, so 10,000 cases
/// cost one set of databases. `SHOAL_CONVERGENCE_CASES` overrides the count and
/// `SHOAL_CONVERGENCE_SEED` replays a run.
@Suite struct ConvergenceTests {
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static func randomValue(_ rng: inout SplitMix) -> Value {
        switch Int.random(in: 0..<6, using: &rng) {
        case 0: return .int(Int64.random(in: -3...3, using: &rng))
        case 1: return .string(["a", "b", "c"].randomElement(using: &rng)!)
        case 2: return .bool(Bool.random(using: &rng))
        case 3: return .null
        case 4: return .array([.int(Int64.random(in: 0...2, using: &rng))])  // type conflicts: array vs object
        default: return .object(["k": .int(Int64.random(in: 0...2, using: &rng))])
        }
    }

    static func randomOperation(_ rng: inout SplitMix, collection c: String) -> (String, [String: Value]) {
        let id = Value.string("d\(Int.random(in: 0..<3, using: &rng))")
        let field = "f\(Int.random(in: 0..<3, using: &rng))"
        let key = "k\(Int.random(in: 0..<2, using: &rng))"
        switch Int.random(in: 0..<11, using: &rng) {
        case 8:
            return ("UPDATE \(c) SET m.\(key) = :v WHERE _id = :id", ["id": id, "v": randomValue(&rng)])
        case 9:
            return ("UPDATE \(c) UNSET m.\(key) WHERE _id = :id", ["id": id])
        case 10:
            return ("UPDATE \(c) UNSET m WHERE _id = :id", ["id": id])
        case 0, 1:
            return ("INSERT INTO \(c) DOCUMENTS (:d) ON ID CONFLICT DO UPDATE", ["d": .object(["_id": id, field: randomValue(&rng)])])
        case 2:
            return ("UPDATE \(c) SET \(field) = :v WHERE _id = :id", ["id": id, "v": randomValue(&rng)])
        case 3:
            return ("UPDATE \(c) UNSET \(field) WHERE _id = :id", ["id": id])
        case 4:
            return ("DELETE FROM \(c) WHERE _id = :id", ["id": id])
        case 5, 6:
            return (
                "INSERT INTO \(c) DOCUMENTS ({'_id': :id}) ON ID CONFLICT DO NOTHING; UPDATE \(c) APPLY n INCREMENT BY :by WHERE _id = :id",
                ["id": id, "by": .int(Int64.random(in: -2...3, using: &rng))]
            )
        default:
            return ("INSERT INTO \(c) INITIAL DOCUMENTS (:d)", ["d": .object(["_id": id, "init": randomValue(&rng)])])
        }
    }

    @Test func randomHistoriesConverge() async throws {
        let environment = ProcessInfo.processInfo.environment
        let cases = Int(environment["SHOAL_CONVERGENCE_CASES"] ?? "") ?? 10_000
        let seed = UInt64(environment["SHOAL_CONVERGENCE_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        var rng = SplitMix(state: seed)
        let dirs = (0..<5).map { _ in TemporaryDirectory(prefix: "shoal-convergence") }
        defer { dirs.forEach { $0.remove() } }
        let replicas = try dirs.map { try DocumentStore(directory: $0.path) }
        defer { replicas.forEach { $0.close() } }
        var failures = 0
        for n in 0..<cases where failures == 0 {
            let collection = "p\(n)"
            let count = Int.random(in: 3...5, using: &rng)
            let group = Array(replicas.prefix(count))
            var starts: [UInt64] = []
            for r in group { starts.append(try await r.lastSequence()) }
            for _ in 0..<Int.random(in: 2...6, using: &rng) {
                let (statement, arguments) = Self.randomOperation(&rng, collection: collection)
                _ = try? await group.randomElement(using: &rng)!.execute(statement, arguments: arguments)
            }
            var subscription = SubscriptionSet()
            try subscription.add(query: "SELECT * FROM \(collection)")
            var local: [[TransactionPiece]] = []
            for (i, r) in group.enumerated() {
                let page = try await r.changes(after: starts[i], limit: 100_000, subscriptions: subscription)
                local.append(page.pieces)
            }
            for (i, r) in group.enumerated() {
                var incoming = local.enumerated().filter { $0.offset != i }.flatMap(\.element)
                incoming += incoming.filter { _ in Bool.random(using: &rng) }  // duplicates
                incoming.shuffle(using: &rng)
                while !incoming.isEmpty {
                    let take = Int.random(in: 1...max(1, incoming.count), using: &rng)
                    _ = try await r.applyRemote(Array(incoming.prefix(take)), from: SiteID(1), subscriptionKey: nil, through: 0)
                    incoming.removeFirst(take)
                }
            }
            var results: [String] = []
            for r in group {
                let items = try await r.execute("SELECT * FROM \(collection) ORDER BY _id").items
                results.append(Value.array(items).canonicalJSON)
            }
            if Set(results).count != 1 {
                failures += 1
                Issue.record("case \(n) (seed \(seed)) diverged:\n\(results.joined(separator: "\n"))")
            }
        }
        #expect(failures == 0, "seed \(seed)")
    }
}

import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// Property test of the merge rules through the real store: random operations on
/// 3–5 replicas, every replica's deltas delivered to every other in random order,
/// in random batches, with duplicates; all replicas must end byte-identical.
///
/// Besides statements, a replica may EVICT a document (it is then refilled from a
/// peer's log, its own writes included, as its sessions would after the cursor
/// reset), restart (its store is closed and opened again), or have its wall clock
/// moved: minutes ahead (peers adopt it), hours ahead (they refuse it), or back.
///
/// Each case works in its own collection of the same replicas, so 10,000 cases
/// cost one set of databases. `SHOAL_CONVERGENCE_CASES` overrides the count and
/// `SHOAL_CONVERGENCE_SEED` replays a run.
@Suite struct ConvergenceTests {
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

    enum Operation {
        case statement(String, [String: Value])
        /// `EVICT` of one document: the replica needs a refill.
        case evict(Value)
        /// The replica's store is closed and opened again.
        case restart
        /// The replica's wall clock moves to this many milliseconds ahead of this machine's.
        case skew(UInt64)
        /// The replica compacts its change log (DATA_MODEL.md §18) through its end:
        /// peers then read, from wherever they are, a log without what was overwritten.
        case compact
        /// The replica drops the registers its tombstones hide.
        case purge
    }

    static func randomOperation(_ rng: inout SplitMix, collection c: String) -> Operation {
        let id = Value.string("d\(Int.random(in: 0..<3, using: &rng))")
        let field = "f\(Int.random(in: 0..<3, using: &rng))"
        let key = "k\(Int.random(in: 0..<2, using: &rng))"
        switch Int.random(in: 0..<32, using: &rng) {
        case 0, 1, 2, 3:
            return .statement(
                "INSERT INTO \(c) DOCUMENTS (:d) ON ID CONFLICT DO UPDATE", ["d": .object(["_id": id, field: randomValue(&rng)])])
        case 4, 5:
            return .statement("UPDATE \(c) SET \(field) = :v WHERE _id = :id", ["id": id, "v": randomValue(&rng)])
        case 6, 7:
            return .statement("UPDATE \(c) UNSET \(field) WHERE _id = :id", ["id": id])
        case 8, 9:
            return .statement("DELETE FROM \(c) WHERE _id = :id", ["id": id])
        case 10, 11, 12, 13:
            return .statement(
                "INSERT INTO \(c) DOCUMENTS ({'_id': :id}) ON ID CONFLICT DO NOTHING; UPDATE \(c) APPLY n INCREMENT BY :by WHERE _id = :id",
                ["id": id, "by": .int(Int64.random(in: -2...3, using: &rng))])
        case 14, 15:
            return .statement("INSERT INTO \(c) INITIAL DOCUMENTS (:d)", ["d": .object(["_id": id, "init": randomValue(&rng)])])
        case 16, 17:
            return .statement("UPDATE \(c) SET m.\(key) = :v WHERE _id = :id", ["id": id, "v": randomValue(&rng)])
        case 18:
            return .statement("UPDATE \(c) SET m.\(key).k = :v WHERE _id = :id", ["id": id, "v": randomValue(&rng)])
        case 19:
            return .statement("UPDATE \(c) SET m = {} WHERE _id = :id", ["id": id])
        case 20, 21:
            return .statement("UPDATE \(c) UNSET m.\(key) WHERE _id = :id", ["id": id])
        case 22:
            return .statement("UPDATE \(c) UNSET m WHERE _id = :id", ["id": id])
        case 23:
            return .statement("UPDATE \(c) APPLY n RESTART WITH :v WHERE _id = :id", ["id": id, "v": .int(Int64.random(in: 0...5, using: &rng))])
        case 24, 25:
            return .evict(id)
        case 26:
            return .restart
        case 27:
            return .compact
        case 28:
            return .purge
        default:
            switch Int.random(in: 0..<3, using: &rng) {
            case 0: return .skew(0)
            case 1: return .skew(UInt64.random(in: 60_000...540_000, using: &rng))  // minutes: adopted
            default: return .skew(UInt64.random(in: 3_600_000...10_800_000, using: &rng))  // hours: refused
            }
        }
    }

    /// A replica's wall clock: this machine's, plus a skew the test moves.
    final class SkewedClock: Sendable {
        let skew = Locked<UInt64>(0)
        var wallClock: @Sendable () -> UInt64 {
            { HybridLogicalClock.systemMilliseconds() + self.skew.withLock { $0 } }
        }
    }

    /// Delivers `pieces` to `store` shuffled, with random duplicates, in random batches.
    static func deliver(_ pieces: [TransactionPiece], to store: DocumentStore, _ rng: inout SplitMix) async throws {
        var incoming = pieces + pieces.filter { _ in Bool.random(using: &rng) }  // duplicates
        incoming.shuffle(using: &rng)
        while !incoming.isEmpty {
            let take = Int.random(in: 1...max(1, incoming.count), using: &rng)
            _ = try await store.applyRemote(Array(incoming.prefix(take)), from: SiteID(1), subscriptionKey: nil, through: 0)
            incoming.removeFirst(take)
        }
    }

    @Test func randomHistoriesConverge() async throws {
        let environment = ProcessInfo.processInfo.environment
        let cases = Int(environment["SHOAL_CONVERGENCE_CASES"] ?? "") ?? 10_000
        let seed = UInt64(environment["SHOAL_CONVERGENCE_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        var rng = SplitMix(state: seed)
        let dirs = (0..<5).map { _ in TemporaryDirectory(prefix: "shoal-convergence") }
        defer { dirs.forEach { $0.remove() } }
        let clocks = dirs.map { _ in SkewedClock() }
        var replicas = try dirs.indices.map { try DocumentStore(directory: dirs[$0].path, wallClock: clocks[$0].wallClock) }
        defer { replicas.forEach { $0.close() } }
        var failures = 0
        var compacted: UInt64 = 0
        var purged = 0
        for n in 0..<cases where failures == 0 {
            let collection = "p\(n)"
            let count = Int.random(in: 3...5, using: &rng)
            var subscription = SubscriptionSet()
            try subscription.add(query: "SELECT * FROM \(collection)")
            // Where each replica's log was last sent from: its writes leave before it
            // evicts (what it wrote and never sent is not sent after, DATA_MODEL.md §11).
            var sent: [UInt64] = []
            for r in replicas.prefix(count) { sent.append(try await r.lastSequence()) }
            let starts = sent
            var evicted: Set<Int> = []
            var history: [String] = []
            for _ in 0..<Int.random(in: 2...6, using: &rng) {
                let i = Int.random(in: 0..<count, using: &rng)
                let operation = Self.randomOperation(&rng, collection: collection)
                history.append("replica \(i): \(operation)")
                switch operation {
                case .statement(let statement, let arguments):
                    _ = try? await replicas[i].execute(statement, arguments: arguments)
                case .evict(let id):
                    let page = try await replicas[i].changes(after: sent[i], limit: 100_000, subscriptions: subscription)
                    for k in 0..<count where k != i { try await Self.deliver(page.pieces, to: replicas[k], &rng) }
                    sent[i] = page.through
                    _ = try await replicas[i].execute("EVICT FROM \(collection) WHERE _id = :id", arguments: ["id": id])
                    evicted.insert(i)
                case .restart:
                    replicas[i].close()
                    replicas[i] = try DocumentStore(directory: dirs[i].path, wallClock: clocks[i].wallClock)
                case .skew(let ahead):
                    clocks[i].skew.withLock { $0 = ahead }
                case .compact:
                    // This case's rows only: earlier cases' collections are done with.
                    compacted += try await replicas[i].compactChangeLog(after: starts[i], through: try await replicas[i].lastSequence())
                        .transactionsRemoved
                case .purge:
                    purged += try await replicas[i].purgeHiddenRegisters()
                }
            }
            let group = Array(replicas.prefix(count))
            // Half the replicas compact what this case wrote before the others read it.
            for (i, r) in group.enumerated() where Bool.random(using: &rng) {
                compacted += try await r.compactChangeLog(after: starts[i], through: try await r.lastSequence()).transactionsRemoved
            }
            var local: [[TransactionPiece]] = []
            for (i, r) in group.enumerated() {
                let page = try await r.changes(after: sent[i], limit: 100_000, subscriptions: subscription)
                local.append(page.pieces)
            }
            for (i, r) in group.enumerated() {
                try await Self.deliver(local.enumerated().filter { $0.offset != i }.flatMap(\.element), to: r, &rng)
            }
            // An evicted replica gets everything back from a peer, its own writes included.
            for i in evicted.sorted() {
                let j = (i + Int.random(in: 1..<count, using: &rng)) % count
                let page = try await group[j].changes(after: starts[j], limit: 100_000, subscriptions: subscription)
                try await Self.deliver(page.pieces, to: group[i], &rng)
            }
            var results: [String] = []
            for r in group {
                let items = try await r.execute("SELECT * FROM \(collection) ORDER BY _id").items
                results.append(Value.array(items).canonicalJSON)
            }
            if Set(results).count != 1 {
                failures += 1
                Issue.record(
                    "case \(n) (seed \(seed)) diverged:\n\(results.joined(separator: "\n"))\nafter:\n\(history.joined(separator: "\n"))")
            }
        }
        #expect(failures == 0, "seed \(seed)")
        if cases >= 1_000 {
            #expect(compacted > 0, "compaction removed something in \(cases) cases")
            #expect(purged > 0, "a purge removed hidden registers in \(cases) cases")
        }
    }
}

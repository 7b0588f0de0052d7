import Foundation
import Shoal
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalCRDT
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension ProcessSuites {
/// Kill-restart cycles: a node is killed (SIGKILL) at a random moment while it commits
/// local transactions and applies a peer's, then its data directory is checked as it
/// was left, then it restarts. `SHOAL_DURABILITY_CYCLES` sets how many (3 by
/// default; `scripts/durability.sh` runs 100).
@Suite(.serialized) struct DurabilityTests {
    /// Documents per transaction, on both sides: a transaction half there is visible.
    static let width = 20
    /// Deltas a transaction of `width` documents `{_id, t, i}` writes: its rows in the writer's log.
    static let deltasPerTransaction = UInt64(width * 3)

    /// Runs `exec` against a node in a loop, one transaction of `width` documents
    /// each, numbering them 1, 2, 3, … and remembering which ones `exec` acknowledged
    /// with a transaction ID.
    final class Writer: Sendable {
        let collection: String
        let address: String
        private let state = Locked<(next: Int, acknowledged: [Int], failed: Int, stop: Bool, running: Bool)>((1, [], 0, false, false))

        init(collection: String, address: String) {
            self.collection = collection
            self.address = address
        }

        var acknowledged: [Int] { state.withLock { $0.acknowledged } }
        var failed: Int { state.withLock { $0.failed } }

        func start() {
            state.withLock { $0.running = true }
            Thread.detachNewThread { [self] in
                while !state.withLock({ $0.stop }) {
                    let t = state.withLock { s in
                        defer { s.next += 1 }
                        return s.next
                    }
                    let docs = (0..<DurabilityTests.width).map { "{\"_id\": \"\(collection)-\(t)-\($0)\", \"t\": \(t), \"i\": \($0)}" }
                    let output = try? ShoalBinary.run([
                        "exec", "--node", address, "--json", "--timeout", "10", "--args", "{\"d\": [\(docs.joined(separator: ","))]}",
                        "INSERT INTO \(collection) DOCUMENTS (:d)",
                    ])
                    let acknowledged =
                        output.map { $0.status == 0 && $0.stdout.contains("\"transactionID\":\"") } ?? false
                    state.withLock { s in
                        if acknowledged { s.acknowledged.append(t) } else { s.failed += 1 }
                    }
                    if !acknowledged { usleep(50_000) }
                }
                state.withLock { $0.running = false }
            }
        }

        func stop() {
            state.withLock { $0.stop = true }
            while state.withLock({ $0.running }) { usleep(10_000) }
        }
    }

    /// How many documents each transaction number has in `collection` of a stopped node's store.
    static func transactions(in store: DocumentStore, _ collection: String) async throws -> [Int: Int] {
        var counts: [Int: Int] = [:]
        for item in try await store.execute("SELECT t FROM \(collection)").items {
            guard case .int(let t)? = item["t"] else { continue }
            counts[Int(t), default: 0] += 1
        }
        return counts
    }

    @Test func everyAcknowledgedTransactionSurvivesKillsWholeAndSyncCompletes() async throws {
        let cycles = Int(ProcessInfo.processInfo.environment["SHOAL_DURABILITY_CYCLES"] ?? "") ?? 3
        let dirs = TemporaryDirectory(prefix: "shoal-durability")
        defer { dirs.remove() }
        let source = try NodeProcess(name: "source", dataDirectory: dirs.path + "/source")
        let sourceSite = SiteID(hex: try #require(try source.status()["siteID"] as? String))!
        var subscription = SubscriptionSet()
        try subscription.add(query: "SELECT * FROM incoming")
        let port = freeLoopbackPort()
        let victimArguments = ["--peer", source.address, "--subscribe", "SELECT * FROM incoming"]
        let incoming = Writer(collection: "incoming", address: source.address)
        let local = Writer(collection: "local", address: "127.0.0.1:\(port)")
        incoming.start()
        local.start()
        var checkedLocal: Set<Int> = [], checkedByCursor: Set<Int> = [], halfThere = 0
        var random = SystemRandomNumberGenerator()
        for cycle in 1...cycles {
            let victim = try NodeProcess(name: "victim", dataDirectory: dirs.path + "/victim", listenPort: port, extra: victimArguments)
            usleep(UInt32.random(in: 300_000...2_500_000, using: &random))
            let acknowledgedBefore = Set(local.acknowledged)
            victim.crash()
            // The data directory as the kill left it, read by a store opened here.
            let store = try DocumentStore(directory: dirs.path + "/victim")
            let localCounts = try await Self.transactions(in: store, "local")
            let incomingCounts = try await Self.transactions(in: store, "incoming")
            let cursor = try await store.cursor(peer: sourceSite, subscriptionKey: subscription.key)
            store.close()
            for (t, count) in localCounts.merging(incomingCounts.mapKeys { -$0 }, uniquingKeysWith: { $0 + $1 }) where count != Self.width {
                halfThere += 1
                Issue.record("cycle \(cycle): transaction \(t < 0 ? "incoming" : "local") \(abs(t)) has \(count) of \(Self.width) documents")
            }
            for t in acknowledgedBefore {
                #expect(localCounts[t] == Self.width, "cycle \(cycle): local transaction \(t) was acknowledged by exec but is missing")
                checkedLocal.insert(t)
            }
            // The source logs only these transactions, each `deltasPerTransaction` rows: the
            // cursor covers transactions 1 ... cursor / rows.
            let covered = Int(cursor / Self.deltasPerTransaction)
            if covered > 0 {
                for t in 1...covered {
                    #expect(incomingCounts[t] == Self.width, "cycle \(cycle): incoming transaction \(t) was acknowledged (cursor \(cursor)) but is missing")
                    checkedByCursor.insert(t)
                }
            }
        }
        incoming.stop()
        local.stop()
        // One more start: sync completes, and every transaction is there whole.
        let victim = try NodeProcess(name: "victim", dataDirectory: dirs.path + "/victim", listenPort: port, extra: victimArguments)
        let sent = incoming.acknowledged
        func counts(_ collection: String) throws -> [Int: Int] {
            var counts: [Int: Int] = [:]
            for item in try ProcessMeshTests.documents(victim, "SELECT t FROM \(collection)") {
                if let t = item["t"] as? Int { counts[t, default: 0] += 1 }
            }
            return counts
        }
        let synced = try eventually(60) { try counts("incoming").filter { $0.value == Self.width }.count >= sent.count }
        #expect(synced, "sync completes after the last restart")
        let finalIncoming = try counts("incoming"), finalLocal = try counts("local")
        for t in sent { #expect(finalIncoming[t] == Self.width, "incoming transaction \(t) after sync") }
        for t in local.acknowledged { #expect(finalLocal[t] == Self.width, "local transaction \(t) after the last restart") }
        #expect(finalIncoming.values.allSatisfy { $0 == Self.width } && finalLocal.values.allSatisfy { $0 == Self.width })
        print(
            "durability: \(cycles) kill-restart cycles survived; checked \(checkedLocal.count) local transactions acknowledged by exec and \(checkedByCursor.count) incoming ones acknowledged to the peer (cursor), each whole after every kill; \(halfThere) half there; sync then completed with all \(sent.count) incoming and \(local.acknowledged.count) local transactions whole (\(local.failed) local execs refused while the node was down or dying)"
        )
        #expect(victim.interrupt() == 0)
    }
}
}

extension Dictionary {
    func mapKeys<K: Hashable>(_ transform: (Key) -> K) -> [K: Value] {
        Dictionary<K, Value>(uniqueKeysWithValues: map { (transform($0.key), $0.value) })
    }
}

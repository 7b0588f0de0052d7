import Foundation
import ShoalCRDT
import ShoalNode
import ShoalSync
import ShoalTesting
import ShoalWire

/// Replication, initial sync, latency, wire size and resources, measured on real
/// `shoal` processes on 127.0.0.1: A, B dialing A, C dialing B, all subscribed to
/// the documents; later D joins A.
enum Replication {
    struct Figure: Sendable {
        var documents: Int
        var deltas: Int
        /// From the first write to A until A committed the last, B applied it, C applied it.
        var writtenSeconds: Double
        var oneHopSeconds: Double
        var twoHopSeconds: Double
    }

    struct Wire: Sendable {
        var bytesPerDocument: Double
        var plainJSONBytesPerDocument: Double
    }

    struct Resources: Sendable {
        var node: String
        var peakResidentBytes: Int
        var cpuSeconds: Double
    }

    struct Result: Sendable {
        var replication: Replication.Figure
        var initialSync: Double
        var latencyIdle: Latency.Figure
        var latencyUnderLoad: Latency.Figure
        var wire: Wire
        var resources: [Resources]
    }

    static let subscription = "SELECT * FROM docs"

    /// With `tls`, every node and every admin client uses TLS 1.3 with certificates
    /// from a mesh CA `shoal cert` makes for the run.
    static func measure(plan: Plan, progress: Progress, tls: Bool = false) async throws -> Result {
        let directory = TemporaryDirectory(prefix: "shoal-bench-mesh")
        defer { directory.remove() }
        let pki = tls ? try BenchPKI(in: directory.path + "/pki") : nil
        func flags(_ name: String) throws -> [String] { try pki?.issue(name).arguments ?? [] }
        let clientFiles = try pki?.issue("bench")
        let a = try NodeProcess(name: "a", dataDirectory: directory.path + "/a", extra: try flags("a"))
        let b = try NodeProcess(
            name: "b", dataDirectory: directory.path + "/b",
            extra: try flags("b") + ["--peer", a.address, "--subscribe", subscription, "--subscribe", "SELECT * FROM probe"])
        let c = try NodeProcess(
            name: "c", dataDirectory: directory.path + "/c", extra: try flags("c") + ["--peer", b.address, "--subscribe", subscription])
        defer {
            for node in [a, b, c] { node.stop() }
        }
        let toA = AdminClient(node: try HostAndPort(parsing: a.address), timeout: .seconds(600), tls: clientFiles)
        let toB = AdminClient(node: try HostAndPort(parsing: b.address), timeout: .seconds(600), tls: clientFiles)
        let toC = AdminClient(node: try HostAndPort(parsing: c.address), timeout: .seconds(600), tls: clientFiles)
        for client in [toB, toC] {
            try await waitUntil { try await client.status().peers.contains { $0.state == "connected" } }
        }

        progress.say("  latency, idle (\(plan.samples) samples)")
        let idle = try await Latency.measure(writer: toA, observer: toB, samples: plan.samples, label: "idle")

        progress.say("  writing \(plan.documents) documents on A")
        let before = try await bytesIn(toB, from: a.address)
        let last = "d\(plan.documents - 1)"
        let start = ContinuousClock.now
        let stopProbing = Shared(false)
        let (written, oneHop, twoHops, underLoad) = try await withThrowingTaskGroup(of: Void.self) { group in
            let arrivals = Shared<(b: Double?, c: Double?)>((nil, nil))
            group.addTask {
                let at = try await arrival(of: last, on: toB, since: start)
                arrivals.withLock { $0.b = at }
            }
            group.addTask {
                let at = try await arrival(of: last, on: toC, since: start)
                arrivals.withLock { $0.c = at }
            }
            let load = Shared<Latency.Figure?>(nil)
            group.addTask {
                let figure = try await Latency.measure(
                    writer: toA, observer: toB, samples: plan.samples, label: "under load", stop: stopProbing)
                load.withLock { $0 = figure }
            }
            try await toA.withSession { session in
                try await session.execPipelined(count: plan.documents / 100, inFlight: plan.inFlight) { k in
                    ("INSERT INTO docs DOCUMENTS (:docs)", "{\"docs\":\(Workload.json((k * 100)..<(k * 100 + 100)))}")
                }
            }
            let written = seconds(ContinuousClock.now - start)
            progress.say(String(format: "  A committed them in %.2f s; waiting for B and C", written))
            // The probe keeps measuring while B and C apply, then stops.
            while arrivals.withLock({ $0.b == nil || $0.c == nil }) { try await Task.sleep(for: .milliseconds(5)) }
            stopProbing.withLock { $0 = true }
            try await group.waitForAll()
            let (oneHop, twoHops) = arrivals.withLock { ($0.b!, $0.c!) }
            return (written, oneHop, twoHops, load.withLock { $0! })
        }
        let after = try await bytesIn(toB, from: a.address)
        let resources = [("a", a), ("b", b), ("c", c)].map { name, node in
            Resources(node: name, peakResidentBytes: node.peakResidentBytes ?? 0, cpuSeconds: node.cpuSeconds ?? 0)
        }

        progress.say("  a node joins A and syncs \(plan.documents) documents")
        let joinStart = ContinuousClock.now
        let d = try NodeProcess(
            name: "d", dataDirectory: directory.path + "/d", extra: try flags("d") + ["--peer", a.address, "--subscribe", subscription])
        defer { d.stop() }
        let toD = AdminClient(node: try HostAndPort(parsing: d.address), timeout: .seconds(600), tls: clientFiles)
        let initialSync = try await arrival(of: last, on: toD, since: joinStart)

        return Result(
            replication: Figure(
                documents: plan.documents, deltas: plan.documents * Workload.deltasPerDocument, writtenSeconds: written, oneHopSeconds: oneHop,
                twoHopSeconds: twoHops),
            initialSync: initialSync, latencyIdle: idle, latencyUnderLoad: underLoad,
            wire: Wire(
                bytesPerDocument: Double(after - before) / Double(plan.documents),
                plainJSONBytesPerDocument: Double(Workload.plainJSONBytes(plan.documents)) / Double(plan.documents)),
            resources: resources)
    }

    /// Seconds from `start` until `node` holds document `id` (an observer on its `_id`).
    static func arrival(of id: String, on node: AdminClient, since start: ContinuousClock.Instant) async throws -> Double {
        let (stream, continuation) = AsyncStream.makeStream(of: Double.self)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await node.observe("SELECT _id FROM docs WHERE _id = :id", argumentsJSON: "{\"id\":\"\(id)\"}") { observation in
                    if !observation.itemsJSON.isEmpty { continuation.yield(seconds(ContinuousClock.now - start)) }
                }
            }
            defer { group.cancelAll() }
            for await at in stream { return at }
            throw BenchError("the observer of \(id) ended before it arrived")
        }
    }

    /// The bytes `node` has received on its session with `peer` so far.
    static func bytesIn(_ node: AdminClient, from peer: String) async throws -> UInt64 {
        try await node.status().peers.filter { $0.state == "connected" && $0.address == peer }.reduce(0) { $0 + $1.bytesIn }
    }

    static func waitUntil(_ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw BenchError("the nodes did not connect within 30 s")
    }
}

/// A mesh CA and certificates issued from it, made with `shoal cert` (the shoal
/// built next to shoal-bench).
struct BenchPKI {
    let directory: String

    init(in directory: String) throws {
        self.directory = directory
        try Self.shoal(["cert", "ca", "--out", directory + "/ca", "--name", "shoal-bench CA"])
    }

    func issue(_ name: String) throws -> TLSFiles {
        let out = directory + "/" + name
        try Self.shoal(["cert", "issue", "--ca", directory + "/ca", "--name", name, "--out", out])
        return TLSFiles(certificate: out + "/\(name).pem", key: out + "/\(name).key", authority: directory + "/ca/ca.pem")
    }

    private static func shoal(_ arguments: [String]) throws {
        let output = try ShoalBinary.run(arguments)
        guard output.status == 0 else { throw BenchError("shoal \(arguments.joined(separator: " ")): \(output.stderr)") }
    }
}

extension TLSFiles {
    /// The flags of `shoal run` that name these files.
    var arguments: [String] { ["--tls-cert", certificate, "--tls-key", key, "--tls-ca", authority] }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A value tasks share, behind a lock.
final class Shared<Value: Sendable>: Sendable {
    private let state: Locked<Value>
    init(_ value: Value) { state = Locked(value) }
    func withLock<T>(_ body: (inout Value) -> T) -> T { state.withLock { body(&$0) } }
}

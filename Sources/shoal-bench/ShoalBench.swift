import ArgumentParser
import Foundation

/// Shoal side by side with SQLite's limit and a real peer, through real processes.
///
///     swift build -c release && .build/release/shoal-bench [--quick] [--json]
///
/// See Benchmarks/README.md for what each figure means and how to read it.
@main
struct ShoalBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shoal-bench",
        abstract: "Measure Shoal against SQLite's own limit and against a Yjs peer, through real processes on 127.0.0.1.")

    @Flag(name: .long, help: "A shorter suite (10,000 documents, fewer samples): under a minute.")
    var quick = false

    @Flag(name: .long, help: "Print the figures as one JSON object instead of a table.")
    var json = false

    @Option(name: .long, help: "Documents written for replication (default 100,000; 10,000 with --quick).")
    var documents: Int?

    @Option(name: .long, help: "Latency samples (default 1,000; 200 with --quick).")
    var samples: Int?

    @Option(
        name: .long,
        help: "Requests the writer of the replication run keeps sent ahead of their answers on its admin connection (1: each waits for the one before).")
    var inFlight = 4

    @Option(name: .long, help: "The Yjs peer script, run with python3 (default Benchmarks/peers/yjs_bench.py).")
    var peerScript = "Benchmarks/peers/yjs_bench.py"

    @Option(name: .long, help: "The Python that runs the peer script (default $SHOAL_BENCH_PYTHON, else python3).")
    var python = ProcessInfo.processInfo.environment["SHOAL_BENCH_PYTHON"] ?? "python3"

    @Flag(name: .long, help: "Skip the Yjs peer.")
    var noPeer = false

    @Option(name: .long, help: "Run only this workload in this process, for a profiler: local, sync, update or latency.")
    var inProcess: String?

    @Flag(
        name: .long,
        help: "Only the scale suite, in process: a store of --documents documents (default 1,000,000; 100,000 with --quick), its query latencies, scans and sizes before and after compaction.")
    var scale = false

    @Flag(
        name: .long,
        help: "Only the mesh suite: complete meshes of 6 and 12 shoal processes, a line of 6 and a random graph with cycles; writes on one node and on three (--documents, default 600; 300 with --quick).")
    var mesh = false

    @Flag(
        name: .long,
        help: "Only the replication run (A - B - C, D joining), over plaintext links and over TLS 1.3 alternating, in --pairs pairs: what TLS costs.")
    var tls = false

    @Option(name: .long, help: "Pairs of runs for --tls (default 2).")
    var pairs = 2

    @Option(
        name: .long,
        help: "Only the hub suite, in process, on the PostgreSQL server at this URL (scripts/postgres.sh start DIR prints one): the server's own insert rate, one device into one hub, two into two, and the latency across hubs.")
    var hubs: String?

    func validate() throws {
        if let documents, documents < 100 || documents % 100 != 0 {
            throw ValidationError("--documents must be a multiple of 100, at least 100")
        }
        if let samples, samples < 10 { throw ValidationError("--samples must be at least 10") }
        if inFlight < 1 || inFlight > 64 { throw ValidationError("--in-flight must be from 1 to 64") }
        if pairs < 1 || pairs > 50 { throw ValidationError("--pairs must be from 1 to 50") }
        if [mesh, tls, scale, hubs != nil].filter({ $0 }).count > 1 {
            throw ValidationError("--mesh, --tls, --scale and --hubs each run a suite of their own: give one")
        }
    }

    func run() async throws {
        if let hubs {
            let count = documents ?? (quick ? 10_000 : 100_000)
            let progress = Progress(enabled: !json)
            let result = try await Hubs.measure(
                server: hubs, documents: count, samples: samples ?? (quick ? 200 : 1_000), progress: { progress.say($0) })
            print(json ? Hubs.json(result) : Hubs.table(result))
            return
        }
        if tls {
            let plan = Plan(
                documents: documents ?? (quick ? 10_000 : 100_000), singleWrites: 0, samples: samples ?? (quick ? 200 : 1_000),
                inFlight: inFlight)
            let progress = Progress(enabled: !json)
            let measured = try await TLSCost.measure(plan: plan, pairs: pairs, progress: progress)
            print(json ? TLSCost.json(measured) : TLSCost.table(measured, plan: plan))
            return
        }
        if mesh {
            let count = documents ?? (quick ? 300 : 600)
            let progress = Progress(enabled: !json)
            let figures = try await Mesh.suite(documents: count, progress: progress)
            print(json ? Mesh.json(figures) : Mesh.table(figures))
            return
        }
        if scale {
            let count = documents ?? (quick ? 100_000 : 1_000_000)
            let progress = Progress(enabled: !json)
            progress.say("shoal-bench --scale: \(count) documents of 5 fields, in transactions of \(Scale.batch)")
            let figure = try await Scale.measure(
                documents: count, samples: samples ?? (quick ? 200 : 1_000), progress: progress)
            print(json ? Scale.json(figure) : Scale.table(figure))
            return
        }
        if let inProcess {
            guard let workload = InProcess(rawValue: inProcess) else {
                throw ValidationError("--in-process takes \(InProcess.allCases.map(\.rawValue).joined(separator: " or "))")
            }
            let count = documents ?? (quick ? 10_000 : 100_000)
            let rate = try await workload.run(documents: count, samples: samples)
            if workload == .map {
                print(String(format: "map: %.1f writes/s", rate))
            } else {
                print(String(format: "%@: %.0f documents/s (%d documents)", inProcess, rate, count))
            }
            return
        }
        let plan = Plan(
            documents: documents ?? (quick ? 10_000 : 100_000), singleWrites: quick ? 1_000 : 5_000,
            samples: samples ?? (quick ? 200 : 1_000), inFlight: inFlight)
        var report = Report(plan: plan)
        let progress = Progress(enabled: !json)
        progress.say("shoal-bench: \(plan.documents) documents of 5 fields, in transactions of 100; \(plan.samples) latency samples")

        progress.say("1/4 raw SQLite through GRDB (Shoal's schema)")
        report.sqlite = try RawSQLite.measure(plan: plan)
        progress.say("2/4 local writes through the Shoal API")
        report.local = try await LocalWrites.measure(plan: plan)
        progress.say("3/4 shoal processes A, B (dialing A) and C (dialing B) on 127.0.0.1")
        let cluster = try await Replication.measure(plan: plan, progress: progress)
        report.replication = cluster.replication
        report.latencyIdle = cluster.latencyIdle
        report.latencyUnderLoad = cluster.latencyUnderLoad
        report.wire = cluster.wire
        report.resources = cluster.resources
        report.initialSync = cluster.initialSync
        if !noPeer {
            progress.say("4/4 the same writes through pycrdt-websocket")
            report.peer = PeerRun.measure(script: peerScript, python: python, updates: plan.documents)
        }
        print(json ? report.json : report.table)
    }
}

/// How much each measurement does.
struct Plan: Sendable {
    var documents: Int
    /// Documents written one per transaction (commits dominate: fewer are enough).
    var singleWrites: Int
    var samples: Int
    /// Exec requests the replication run's writer keeps on the wire ahead of their answers.
    var inFlight: Int = 4
}

/// Progress lines on stderr, so stdout holds only the result.
struct Progress: Sendable {
    var enabled: Bool
    func say(_ line: String) {
        guard enabled else { return }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

/// The documents every measurement writes: 5 fields, the same on every run.
enum Workload {
    /// The deltas one document writes: its 5 fields and its `_id`.
    static let deltasPerDocument = 6

    static func document(_ n: Int) -> [String: Any] {
        ["_id": "d\(n)", "title": "document \(n)", "n": n, "color": ["red", "green", "blue"][n % 3], "size": n % 7, "ok": n % 2 == 0]
    }

    /// Documents `range` as the canonical JSON array an INSERT's `:docs` argument takes.
    static func json(_ range: Range<Int>) -> String {
        "[" + range.map { n in
            "{\"_id\":\"d\(n)\",\"color\":\"\(["red", "green", "blue"][n % 3])\",\"n\":\(n),\"ok\":\(n % 2 == 0),\"size\":\(n % 7),\"title\":\"document \(n)\"}"
        }.joined(separator: ",") + "]"
    }

    /// The bytes of `count` documents as plain JSON, the wire's yardstick.
    static func plainJSONBytes(_ count: Int) -> Int {
        (0..<count).reduce(0) { $0 + json($1..<($1 + 1)).utf8.count - 2 }
    }
}

func seconds(_ d: Duration) -> Double {
    Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
}

import ShoalStorage
import Foundation
import ShoalStore
import ShoalCRDT
import ShoalSync
import ShoalTesting

/// One store of N documents, in process: how long queries take at that size, and how
/// big the store and its change log are before and after compaction.
///
/// The documents are cars of 5 fields (`_id`, `plate` unique, `year` 2000…2024,
/// `make` one of 40, `price`), written 1,000 to a transaction through
/// `DocumentStore.execute`. The unindexed scan is a `COUNT(*)` with a LIKE, which the
/// SQL pre-filter leaves to Swift, so every body is read and parsed: it runs at N/10
/// during the load and at N, to show it linear. The indexes are declared once the
/// documents are in (`CREATE INDEX`), as one would on a store that grew.
enum Scale {
    struct Query: Sendable {
        var statement: String
        var latency: Latency.Figure
    }

    struct Scan: Sendable {
        /// When it ran: during the load, at the full size, or after VACUUM.
        var when: String
        var documents: Int
        var matched: Int
        /// The median of the runs.
        var seconds: Double
    }

    struct Size: Sendable {
        var label: String
        /// The database file and its write-ahead log together.
        var storeBytes: UInt64
        /// The write-ahead log alone.
        var walBytes: UInt64
        var logRows: UInt64
    }

    struct Figure: Sendable {
        var documents: Int
        var loadSeconds: Double
        var indexSeconds: [(name: String, seconds: Double)]
        var queries: [Query] = []
        var scans: [Scan] = []
        var sizes: [Size] = []
        var updateSeconds: Double = 0
        var compactSeconds: Double = 0
        var vacuumSeconds: Double = 0
        var serve: Serve?
    }

    /// A new node syncing the whole store from it (`served`).
    struct Serve: Sendable {
        var seconds: Double
        /// The process's resident memory before the sync and at most during it
        /// (both nodes are in this process).
        var residentBefore: Int
        var residentPeak: Int
    }

    static let batch = 1_000
    static let makes = (0..<40).map { "make\($0)" }
    static let scan = "SELECT COUNT(*) AS n FROM cars WHERE plate LIKE '%7'"

    static func car(_ i: Int, generation: Int) -> Value {
        [
            "_id": .string("c\(i)"), "plate": .string(plate(i)), "year": .int(Int64(2000 + (i &* 7919 &+ generation) % 25)),
            "make": .string(makes[(i &+ generation) % makes.count]), "price": .double(Double(i % 100_000) * 1.25 + Double(generation)),
        ]
    }

    static func plate(_ i: Int) -> String { "P" + String(i).leftPadded(to: 8) }

    static func measure(documents n: Int, samples: Int, progress: Progress) async throws -> Figure {
        let directory = TemporaryDirectory(prefix: "shoal-bench-scale")
        defer { directory.remove() }
        let store = try DocumentStore(directory: directory.path)
        defer { store.close() }
        // As a node's store: its WAL checkpointed beside the writer.
        let checkpoints = Task { await store.runCheckpoints() }
        defer { checkpoints.cancel() }
        var scans: [Scan] = []
        let start = ContinuousClock.now
        try await write(store, documents: n, generation: 0, progress: progress, verb: "loaded") { loaded in
            if scans.isEmpty, loaded >= n / 10 { scans.append(try await scanned(store, documents: loaded, when: "loading", progress: progress)) }
        }
        var figure = Figure(documents: n, loadSeconds: seconds(ContinuousClock.now - start), indexSeconds: [])
        figure.sizes.append(try await size(store, directory: directory.path, label: "after the load"))
        for (name, path) in [("by_plate", "plate"), ("by_year", "year")] {
            progress.say("  CREATE INDEX \(name) ON cars (\(path))")
            let began = ContinuousClock.now
            _ = try await store.execute("CREATE INDEX \(name) ON cars (\(path))")
            figure.indexSeconds.append((name, seconds(ContinuousClock.now - began)))
        }
        progress.say("  \(samples) samples of each query")
        figure.queries = [
            try await latency(store, "indexed point query", "SELECT * FROM cars WHERE plate = :p", samples: samples) {
                ["p": .string(plate(Int.random(in: 0..<n)))]
            },
            try await latency(store, "_id point query", "SELECT * FROM cars WHERE _id = :id", samples: samples) {
                ["id": .string("c\(Int.random(in: 0..<n))")]
            },
            try await latency(store, "indexed range query", "SELECT * FROM cars WHERE year > 2020 LIMIT 50", samples: samples) {
                [:]
            },
        ]
        scans.append(try await scanned(store, documents: n, when: "loaded", progress: progress))
        figure.scans = scans
        figure.sizes.append(try await size(store, directory: directory.path, label: "with the indexes"))
        figure.serve = try await served(store, documents: n, progress: progress)
        let updating = ContinuousClock.now
        try await write(store, documents: n, generation: 1, progress: progress, verb: "updated") { _ in }
        figure.updateSeconds = seconds(ContinuousClock.now - updating)
        figure.sizes.append(try await size(store, directory: directory.path, label: "after updating every document"))
        progress.say("  compacting the change log")
        let compacting = ContinuousClock.now
        _ = try await store.compactChangeLog(through: try await store.lastSequence())
        figure.compactSeconds = seconds(ContinuousClock.now - compacting)
        figure.sizes.append(try await size(store, directory: directory.path, label: "after compaction"))
        progress.say("  VACUUM")
        let vacuuming = ContinuousClock.now
        try await store.vacuum()
        figure.vacuumSeconds = seconds(ContinuousClock.now - vacuuming)
        figure.sizes.append(try await size(store, directory: directory.path, label: "after compaction and VACUUM"))
        // VACUUM rewrites each table in key order: the same scan over pages no longer
        // spread among the other tables' shows what file order costs at this size.
        figure.scans.append(try await scanned(store, documents: n, when: "after VACUUM", progress: progress))
        return figure
    }

    /// A new node joins and syncs every document of the store from it, over an
    /// in-memory connection, with a node's own page size: how long it takes, and the
    /// process's resident memory meanwhile (sampled every 100 ms). Pages of 2,048 log
    /// rows, 4 batches in flight and a bounded inbound queue keep both sides' memory
    /// flat however large the store; a sender or receiver that held the whole result
    /// would grow by about the store's size.
    static func served(_ store: DocumentStore, documents n: Int, progress: Progress) async throws -> Serve {
        progress.say("  a new node syncs all \(n) documents from the store")
        let pageSize = SyncConfiguration(nodeName: "").batchSize
        let server = SyncEngine(store: store, configuration: SyncConfiguration(nodeName: "scale"))
        let joiner = try TestNode(name: "joiner", subscriptions: ["SELECT * FROM cars"], configure: { $0.batchSize = pageSize })
        defer { joiner.remove() }
        let before = residentBytes()
        let peak = Locked(before)
        let started = ContinuousClock.now
        let sampling = Task {
            while !Task.isCancelled {
                let now = residentBytes()
                peak.withLock { $0 = max($0, now) }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        defer { sampling.cancel() }
        try await InProcessMesh.withLink(server, joiner.sync) { () async throws in
            var said = 0
            while true {
                let count = try await joiner.store.collectionCounts().first?.documents ?? 0
                if count >= n { break }
                if count >= said + n / 10 {
                    said = count
                    progress.say("    \(count) of \(n) arrived (\(Int(Double(count) / seconds(ContinuousClock.now - started))) docs/s)")
                }
                if ContinuousClock.now - started > .seconds(3600) { throw BenchError("the joining node did not get every document in an hour") }
                try await Task.sleep(for: .milliseconds(250))
            }
        }
        let elapsed = seconds(ContinuousClock.now - started)
        sampling.cancel()
        _ = await sampling.value
        return Serve(seconds: elapsed, residentBefore: before, residentPeak: max(peak.withLock { $0 }, residentBytes()))
    }

    /// This process's resident memory (VmRSS) in bytes, from /proc; 0 where there is none.
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return 0 }
        return (Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0) * 1024
    }

    /// Writes every document (`generation` 0 inserts them, 1 rewrites every field),
    /// `batch` to a transaction, saying how far it got at each tenth.
    static func write(
        _ store: DocumentStore, documents n: Int, generation: Int, progress: Progress, verb: String,
        after: (Int) async throws -> Void
    ) async throws {
        let began = ContinuousClock.now
        var done = 0
        while done < n {
            let end = min(done + batch, n)
            let docs = Value.array((done..<end).map { car($0, generation: generation) })
            _ = try await store.execute(
                "INSERT INTO cars DOCUMENTS (:docs) ON ID CONFLICT DO UPDATE", arguments: ["docs": docs])
            let tenth = max(1, n / 10)
            if end / tenth != done / tenth || end == n {
                let rate = Double(end) / seconds(ContinuousClock.now - began)
                progress.say("  \(verb) \(end) of \(n) documents (\(Int(rate)) docs/s)")
            }
            done = end
            try await after(done)
        }
    }

    static func scanned(_ store: DocumentStore, documents: Int, when: String, progress: Progress) async throws -> Scan {
        var times: [Double] = []
        var matched = 0
        for _ in 0..<3 {
            let began = ContinuousClock.now
            let result = try await store.execute(scan)
            times.append(seconds(ContinuousClock.now - began))
            if case .int(let n)? = result.items.first?["n"] { matched = Int(n) }
        }
        let median = times.sorted()[1]
        progress.say(String(format: "  unindexed scan of %d documents (%@): %.3f s", documents, when, median))
        return Scan(when: when, documents: documents, matched: matched, seconds: median)
    }

    static func latency(
        _ store: DocumentStore, _ label: String, _ statement: String, samples: Int,
        arguments: () -> [String: Value]
    ) async throws -> Query {
        // The first run creates nothing (the indexes are declared) but warms the caches.
        _ = try await store.execute(statement, arguments: arguments())
        var times: [Double] = []
        times.reserveCapacity(samples)
        for _ in 0..<samples {
            let given = arguments()
            let began = ContinuousClock.now
            let result = try await store.execute(statement, arguments: given)
            times.append(seconds(ContinuousClock.now - began) * 1000)
            guard !result.items.isEmpty else { throw BenchError("\(label) found nothing: \(statement) \(given)") }
        }
        return Query(statement: statement, latency: Latency.Figure(label: label, latencies: times))
    }

    /// The database file and its write-ahead log, and the change log's rows.
    static func size(_ store: DocumentStore, directory: String, label: String) async throws -> Size {
        let bytes = ["shoal.sqlite", "shoal.sqlite-wal"].map { name in
            let path = (directory as NSString).appendingPathComponent(name)
            return (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? UInt64) ?? 0
        }
        return Size(
            label: label, storeBytes: bytes[0] + bytes[1], walBytes: bytes[1],
            logRows: try await store.storageStatus().changeLogRows)
    }

    static func table(_ f: Figure) -> String {
        let out = "\nA store of \(f.documents) documents of 5 fields (in process)\n"
        var rows: [[String]] = []
        rows.append([
            "load, \(batch) per txn", String(format: "%.0f docs/s", Double(f.documents) / f.loadSeconds),
            String(format: "%.1f s", f.loadSeconds), "",
        ])
        for (name, s) in f.indexSeconds { rows.append(["CREATE INDEX \(name)", String(format: "%.2f s", s), "", ""]) }
        for q in f.queries.map(\.latency) {
            rows.append([
                q.label, String(format: "p50 %.3f ms", q.p50), String(format: "p99 %.3f ms", q.p99),
                String(format: "max %.2f ms, %d samples", q.max, q.samples),
            ])
        }
        for s in f.scans {
            rows.append([
                "unindexed scan, \(s.documents) docs, \(s.when)", String(format: "%.3f s", s.seconds),
                String(format: "%.2f us/doc", s.seconds * 1e6 / Double(s.documents)), "\(s.matched) matched",
            ])
        }
        if let serve = f.serve {
            rows.append([
                "a new node syncs them all", String(format: "%.1f s", serve.seconds),
                String(format: "%.0f docs/s", Double(f.documents) / serve.seconds),
                String(format: "process RSS %.0f MB before, at most %.0f MB during", Double(serve.residentBefore) / 1e6, Double(serve.residentPeak) / 1e6),
            ])
        }
        rows.append([
            "update every document", String(format: "%.0f docs/s", Double(f.documents) / f.updateSeconds),
            String(format: "%.1f s", f.updateSeconds), "",
        ])
        rows.append(["compaction", String(format: "%.1f s", f.compactSeconds), "", ""])
        rows.append(["VACUUM", String(format: "%.1f s", f.vacuumSeconds), "", ""])
        for s in f.sizes {
            rows.append([
                "store \(s.label)", String(format: "%.1f MB", Double(s.storeBytes) / 1e6), "\(s.logRows) log rows",
                String(format: "%.0f B/doc; write-ahead log %.1f MB", Double(s.storeBytes) / Double(f.documents), Double(s.walBytes) / 1e6),
            ])
        }
        return out + renderTable(["FIGURE", "", "", ""], rows)
    }

    static func json(_ f: Figure) -> String {
        let object: [String: Any] = [
            "documents": f.documents, "loadSeconds": f.loadSeconds, "updateSeconds": f.updateSeconds,
            "compactSeconds": f.compactSeconds, "vacuumSeconds": f.vacuumSeconds,
            "createIndexSeconds": Dictionary(uniqueKeysWithValues: f.indexSeconds.map { ($0.name, $0.seconds) }),
            "queries": f.queries.map {
                [
                    "label": $0.latency.label, "statement": $0.statement, "samples": $0.latency.samples,
                    "p50Millis": $0.latency.p50, "p99Millis": $0.latency.p99, "maxMillis": $0.latency.max,
                ]
            },
            "scans": f.scans.map { ["when": $0.when, "documents": $0.documents, "matched": $0.matched, "seconds": $0.seconds] },
            "serve": f.serve.map { ["seconds": $0.seconds, "residentBytesBefore": $0.residentBefore, "residentBytesPeak": $0.residentPeak] } as Any,
            "sizes": f.sizes.map { ["label": $0.label, "storeBytes": $0.storeBytes, "walBytes": $0.walBytes, "changeLogRows": $0.logRows] },
        ]
        let data = try! JSONSerialization.data(withJSONObject: ["scale": object], options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

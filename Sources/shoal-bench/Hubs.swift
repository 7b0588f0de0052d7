import Foundation
import Logging
import NIOCore
import PostgresNIO
import ShoalCRDT
import ShoalPostgres
import ShoalStorage
import ShoalStore
import ShoalSync
import ShoalTesting

/// Hubs on PostgreSQL (`shoal-bench --hubs postgresql://…`), in this process: each hub a
/// `SyncEngine` over a `PostgresStore`, each device a SQLite node, linked over the
/// in-memory transport, so what is measured is the store and the database, not TCP.
/// Every figure comes with PostgreSQL's own rate on the same server in the same run.
enum Hubs {
    struct Result: Sendable {
        var documents: Int
        /// The same rows a hub writes per document (its body and a register per field),
        /// 100 documents per transaction, in multi-row statements (`UNNEST`), on the same server.
        var baselineDocumentsPerSecond: Double
        /// The same, written by two connections at once (half the documents each): how
        /// much the server itself gains from a second writer on this machine, the ceiling
        /// of what a second hub can add.
        var twoWritersDocumentsPerSecond: Double
        /// One device replicating into one hub.
        var oneHubDocumentsPerSecond: Double
        /// Two devices replicating into two hubs of one database at once (half the documents each).
        var twoHubsDocumentsPerSecond: Double
        /// CPU seconds this process used during each: hubs, devices and the client side of PostgreSQL.
        var oneHubCPUSeconds: Double
        var twoHubsCPUSeconds: Double
        /// CPU seconds the whole machine was busy during each (`/proc/stat`), and how long
        /// each took: with a local server, what is not this process's is mostly PostgreSQL's,
        /// and a machine busy on every core is the ceiling of what more hubs can add.
        var oneHubMachine: MachineCPU
        var twoHubsMachine: MachineCPU
        /// A write on a device behind hub 1 until an observer on a device behind hub 2 fires, idle.
        var latency: Latency.Figure
        /// Queries on the one hub once it holds every document (`Queries`).
        var queries: Queries
    }

    /// A SELECT whose WHERE PostgreSQL checks (`PostgresFilter`) against the same
    /// answer asked so that nothing of it translates (`NOT (a != v)`), where every body
    /// goes to the hub to be matched there, and then through declared indexes
    /// (`CREATE INDEX`): milliseconds, the best of three.
    struct Queries: Sendable {
        /// `n = 4242`: one document.
        var oneFiltered: Double
        var oneUnfiltered: Double
        var oneIndexed: Double
        /// `color = 'red' AND size = 3`: one in 21.
        var someFiltered: Double
        var someUnfiltered: Double
        var someIndexed: Double
        /// `n >= 4242 AND n < 4252`: ten documents.
        var rangeFiltered: Double
        var rangeUnfiltered: Double
        var rangeIndexed: Double
        /// The three through the automatic indexes the filtered queries asked for
        /// (`n`, `color`, `size`), before any is declared.
        var oneAutomatic: Double
        var someAutomatic: Double
        var rangeAutomatic: Double
        /// Building those three automatic indexes, once.
        var automaticBuild: Double
        /// `CREATE INDEX by_n ON docs (n)`, once.
        var indexBuild: Double
    }

    /// The machine's CPU over a phase: busy core-seconds, wall seconds, and cores.
    struct MachineCPU: Sendable {
        var busySeconds: Double
        var wallSeconds: Double
        var cores: Int

        /// The share of all cores that was busy, 0 to 1.
        var busy: Double { wallSeconds > 0 ? busySeconds / (wallSeconds * Double(cores)) : 0 }

        /// Busy and total time of every core since boot, in seconds (`/proc/stat`'s first
        /// line); nil where there is none.
        static func sample() -> (busy: Double, total: Double)? {
            guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
                let line = text.split(separator: "\n").first, line.hasPrefix("cpu ")
            else { return nil }
            let ticks = line.split(separator: " ").dropFirst().compactMap { Double($0) }
            guard ticks.count >= 5 else { return nil }
            // user nice system idle iowait irq softirq steal (guest time is inside user).
            let idle = ticks[3] + ticks[4]
            let total = ticks.prefix(8).reduce(0, +)
            let hertz = Double(sysconf(Int32(_SC_CLK_TCK)))
            return ((total - idle) / hertz, total / hertz)
        }
    }

    /// Errors only, on standard error: standard output holds the figures (`--json`).
    static let logger: Logger = {
        var logger = Logger(label: "shoal.bench.hubs") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = .error
        return logger
    }()

    static func measure(
        server: String, documents: Int, samples: Int, progress: (String) -> Void
    ) async throws -> Result {
        setenv("SHOAL_POSTGRES_URL", server, 1)
        progress("hubs: PostgreSQL's own rate, \(documents) documents")
        let baseline = try await TemporaryPostgresDatabase.withDatabase(logger: logger) { databases in
            try await insertRate(databases[0], documents: documents)
        }
        progress("hubs: PostgreSQL's own rate, two writers at once")
        let twoWriters = try await TemporaryPostgresDatabase.withDatabase(logger: logger) { databases in
            try await insertRate(databases[0], documents: documents, writers: 2)
        }
        progress("hubs: one device into one hub, then queries on it")
        let one = try await replicate(hubs: 1, documents: documents)
        progress("hubs: two devices into two hubs")
        let two = try await replicate(hubs: 2, documents: documents)
        guard let queries = one.queries else { throw BenchError("the queries on the hub were not run") }
        progress("hubs: latency across hubs, \(samples) samples")
        let latency = try await crossHubLatency(samples: samples)
        return Result(
            documents: documents, baselineDocumentsPerSecond: baseline, twoWritersDocumentsPerSecond: twoWriters,
            oneHubDocumentsPerSecond: one.rate,
            twoHubsDocumentsPerSecond: two.rate, oneHubCPUSeconds: one.cpu, twoHubsCPUSeconds: two.cpu,
            oneHubMachine: one.machine, twoHubsMachine: two.machine, latency: latency, queries: queries)
    }

    /// PostgreSQL inserting what a hub writes of `documents` documents (a `document` row
    /// and a `field` row per field, in the hub's own tables), 100 to a transaction, a
    /// multi-row statement per table; `writers` connections at once, each its share.
    static func insertRate(_ database: PostgresHubDatabase, documents: Int, writers: Int = 1) async throws -> Double {
        _ = try await PostgresStore.open(database, logger: logger)
        let start = ContinuousClock.now
        let share = documents / writers
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask { try await insert(database.pool, writer * share..<(writer + 1) * share) }
            }
            try await group.waitForAll()
        }
        return Double(share * writers) / seconds(ContinuousClock.now - start)
    }

    /// Inserts `documents`' rows, 100 documents to a transaction.
    static func insert(_ client: PostgresClient, _ documents: Range<Int>) async throws {
        var first = documents.lowerBound
        while first < documents.upperBound {
            let range = first..<min(first + 100, documents.upperBound)
            var keys: [String] = [], bodies: [String] = []
            var fieldKeys: [String] = [], names: [String] = [], values: [String] = [], stamps: [Int64] = []
            for n in range {
                let document = Workload.json(n..<(n + 1)).dropFirst().dropLast()
                let key = "\"d\(n)\""
                keys.append(key)
                bodies.append(String(document))
                for (name, value) in [
                    ("_id", key), ("color", "\"\(["red", "green", "blue"][n % 3])\""), ("n", "\(n)"), ("ok", "\(n % 2 == 0)"),
                    ("size", "\(n % 7)"), ("title", "\"document \(n)\""),
                ] {
                    fieldKeys.append(key)
                    names.append(name)
                    values.append(value)
                    stamps.append(Int64(n))
                }
            }
            try await client.withTransaction(logger: logger) { connection in
                try await connection.query(
                    """
                    INSERT INTO document (collection, doc_id, body, deleted)
                    SELECT 'docs', k, b, false FROM UNNEST(\(keys)::text[], \(bodies)::text[]) AS t(k, b)
                    """, logger: logger)
                try await connection.query(
                    """
                    INSERT INTO field (collection, doc_id, name, value, ts, site, txn_site, txn_seq, txn_index)
                    SELECT 'docs', k, n, v, s, 1, 1, 1, 0 FROM UNNEST(\(fieldKeys)::text[], \(names.map { ByteBuffer(string: $0) })::bytea[], \(values)::text[], \(stamps)::bigint[]) AS t(k, n, v, s)
                    """, logger: logger)
            }
            first = range.upperBound
        }
    }

    /// `hubs` hubs on one new database and a device behind each, subscribed to docs;
    /// the devices' `documents` documents (split between them), written beforehand, 100
    /// to a transaction; the rate from linking until the last hub holds every one. With
    /// one hub, then the queries on it.
    static func replicate(
        hubs count: Int, documents: Int
    ) async throws -> (rate: Double, cpu: Double, machine: MachineCPU, queries: Queries?) {
        let defaults: (inout SyncConfiguration) -> Void = { $0.batchSize = SyncConfiguration(nodeName: "").batchSize }
        let devices = try (0..<count).map { i in try TestNode(name: "device\(i + 1)", configure: defaults, syncLogger: logger) }
        defer { for device in devices { device.remove() } }
        let share = documents / count
        for (i, device) in devices.enumerated() {
            var first = i * share
            while first < (i + 1) * share {
                let end = min(first + 100, (i + 1) * share)
                _ = try await device.store.execute(
                    "INSERT INTO docs DOCUMENTS (:docs)", arguments: ["docs": try JSON.parse(Workload.json(first..<end))])
                first = end
            }
        }
        let total = share * count
        return try await TemporaryPostgresDatabase.withDatabase(hubs: count, logger: logger) { databases in
            var stores: [PostgresStore] = []
            for database in databases { stores.append(try await PostgresStore.open(database, logger: logger)) }
            defer { for store in stores { store.close() } }
            let engines = stores.enumerated().map { i, store in
                SyncEngine(store: store, configuration: SyncConfiguration(nodeName: "hub\(i + 1)"), logger: logger)
            }
            for engine in engines { try engine.subscribe("SELECT * FROM docs") }
            let cpuBefore = processCPUSeconds()
            let machineBefore = MachineCPU.sample()
            let start = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (device, hub) in zip(devices, engines) {
                    group.addTask {
                        try await InProcessMesh.withLink(device.sync, hub) { () async throws in
                            // Polls the transactions' records, a few hundred rows: counting documents
                            // every 20 ms would cost the server more than the hubs' writes.
                            let arrived = try await InProcessMesh.eventually(timeout: .seconds(3600)) {
                                try await appliedTransactions(databases[0]) >= total / 100
                            }
                            if !arrived { throw BenchError("the documents did not reach the hubs") }
                        }
                    }
                }
                try await group.waitForAll()
            }
            let elapsed = seconds(ContinuousClock.now - start)
            let cpu = processCPUSeconds() - cpuBefore
            let machineAfter = MachineCPU.sample()
            let machine = MachineCPU(
                busySeconds: (machineAfter?.busy ?? 0) - (machineBefore?.busy ?? 0), wallSeconds: elapsed,
                cores: ProcessInfo.processInfo.activeProcessorCount)
            let held = try await documentCount(databases[0])
            if held != total { throw BenchError("the hubs hold \(held) documents of \(total)") }
            return (Double(total) / elapsed, cpu, machine, count == 1 ? try await queries(stores[0], documents: total) : nil)
        }
    }

    /// The `Queries` on a hub holding `documents` documents of `Workload`, each answer checked.
    static func queries(_ store: PostgresStore, documents: Int) async throws -> Queries {
        func best(_ query: String, expecting count: Int) async throws -> Double {
            var fastest = Double.infinity
            for _ in 0..<3 {
                let start = ContinuousClock.now
                let answer = try await store.execute(query).items.count
                fastest = min(fastest, seconds(ContinuousClock.now - start) * 1000)
                if answer != count { throw BenchError("\(query) gave \(answer) documents, not \(count)") }
            }
            return fastest
        }
        let some = (0..<documents).count { $0 % 3 == 0 && $0 % 7 == 3 }
        let one = "SELECT * FROM docs WHERE n = 4242", someQuery = "SELECT * FROM docs WHERE color = 'red' AND size = 3"
        let range = "SELECT * FROM docs WHERE n >= 4242 AND n < 4252"
        let oneFiltered = try await best(one, expecting: 1)
        let oneUnfiltered = try await best("SELECT * FROM docs WHERE NOT (n != 4242)", expecting: 1)
        let someFiltered = try await best(someQuery, expecting: some)
        let someUnfiltered = try await best("SELECT * FROM docs WHERE NOT (color != 'red' OR size != 3)", expecting: some)
        let rangeFiltered = try await best(range, expecting: 10)
        let rangeUnfiltered = try await best("SELECT * FROM docs WHERE NOT (n < 4242 OR n >= 4252)", expecting: 10)
        let building = ContinuousClock.now
        let built = await store.buildAskedIndexes()
        let automaticBuild = seconds(ContinuousClock.now - building) * 1000
        if built.count != 3 || built.values.contains(where: { $0 != .built }) {
            throw BenchError("the automatic indexes asked for were not all built: \(built)")
        }
        let oneAutomatic = try await best(one, expecting: 1), someAutomatic = try await best(someQuery, expecting: some)
        let rangeAutomatic = try await best(range, expecting: 10)
        let start = ContinuousClock.now
        _ = try await store.execute("CREATE INDEX by_n ON docs (n)")
        let indexBuild = seconds(ContinuousClock.now - start) * 1000
        _ = try await store.execute("CREATE INDEX by_color_size ON docs (color, size)")
        return Queries(
            oneFiltered: oneFiltered, oneUnfiltered: oneUnfiltered, oneIndexed: try await best(one, expecting: 1),
            someFiltered: someFiltered, someUnfiltered: someUnfiltered, someIndexed: try await best(someQuery, expecting: some),
            rangeFiltered: rangeFiltered, rangeUnfiltered: rangeUnfiltered, rangeIndexed: try await best(range, expecting: 10),
            oneAutomatic: oneAutomatic, someAutomatic: someAutomatic, rangeAutomatic: rangeAutomatic, automaticBuild: automaticBuild,
            indexBuild: indexBuild)
    }

    static func appliedTransactions(_ database: PostgresHubDatabase) async throws -> Int {
        let rows = try await database.pool.query("SELECT count(*) FROM txn WHERE state = 1", logger: logger)
        for try await count in rows.decode(Int64.self) { return Int(count) }
        return 0
    }

    static func documentCount(_ database: PostgresHubDatabase) async throws -> Int {
        let rows = try await database.pool.query(
            "SELECT count(*) FROM document WHERE collection = 'docs' AND NOT deleted", logger: logger)
        for try await count in rows.decode(Int64.self) { return Int(count) }
        return 0
    }

    /// A one-document UPDATE on a device behind hub 1 until an observer on a device
    /// behind hub 2 sees it, one at a time, idle.
    static func crossHubLatency(samples: Int) async throws -> Latency.Figure {
        let a = try TestNode(name: "a", syncLogger: logger)
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM probe"], syncLogger: logger)
        defer {
            a.remove()
            b.remove()
        }
        let probe = try await ProbeLatency(writer: a.store, reader: b.store)
        defer { probe.observer.cancel() }
        let latencies = try await TemporaryPostgresDatabase.withDatabase(hubs: 2, logger: logger) { databases in
            var stores: [PostgresStore] = []
            for database in databases { stores.append(try await PostgresStore.open(database, logger: logger)) }
            defer { for store in stores { store.close() } }
            let engines = stores.enumerated().map { i, store in
                SyncEngine(store: store, configuration: SyncConfiguration(nodeName: "hub\(i + 1)"), logger: logger)
            }
            for engine in engines { try engine.subscribe("SELECT * FROM probe") }
            return try await withThrowingTaskGroup(of: Void.self) { group in
                // The slow timer at an hour: only the announcements carry a commit across.
                for store in stores { group.addTask { await store.followOtherHubs(every: .seconds(3600)) } }
                defer { group.cancelAll() }
                return try await InProcessMesh.withLink(a.sync, engines[0]) { () async throws -> [Double] in
                    try await InProcessMesh.withLink(b.sync, engines[1]) { () async throws -> [Double] in
                        try await probe.measure(writer: a.store, samples: samples, pause: .milliseconds(5))
                    }
                }
            }
        }
        return Latency.Figure(label: "cross-hub", latencies: latencies)
    }

    /// CPU seconds (user and system) this process has used.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec)
            + Double(usage.ru_stime.tv_usec) / 1e6
    }

    static func table(_ r: Result) -> String {
        let rows: [[String]] = [
            ["PostgreSQL's own inserts (same rows, 100 per transaction)", String(format: "%.0f docs/s", r.baselineDocumentsPerSecond), ""],
            [
                "PostgreSQL's own inserts, two writers at once", String(format: "%.0f docs/s", r.twoWritersDocumentsPerSecond),
                String(format: "%.2fx one writer: the ceiling of a second hub here", r.twoWritersDocumentsPerSecond / r.baselineDocumentsPerSecond),
            ],
            [
                "one device into one hub", String(format: "%.0f docs/s", r.oneHubDocumentsPerSecond),
                String(
                    format: "%.2fx PostgreSQL's; %.1f CPU s here, %.1f on the machine (%.0f%% of %d cores busy)",
                    r.oneHubDocumentsPerSecond / r.baselineDocumentsPerSecond, r.oneHubCPUSeconds, r.oneHubMachine.busySeconds,
                    r.oneHubMachine.busy * 100, r.oneHubMachine.cores),
            ],
            [
                "two devices into two hubs", String(format: "%.0f docs/s", r.twoHubsDocumentsPerSecond),
                String(
                    format: "%.2fx one hub; %.1f CPU s here, %.1f on the machine (%.0f%% of %d cores busy)",
                    r.twoHubsDocumentsPerSecond / r.oneHubDocumentsPerSecond, r.twoHubsCPUSeconds, r.twoHubsMachine.busySeconds,
                    r.twoHubsMachine.busy * 100, r.twoHubsMachine.cores),
            ],
            [
                "device -> hub 1 -> PostgreSQL -> hub 2 -> device observer", String(format: "p50 %.2f ms", r.latency.p50),
                String(format: "p99 %.2f ms, max %.2f ms (%d samples)", r.latency.p99, r.latency.max, r.latency.samples),
            ],
            [
                "SELECT ... WHERE n = 4242 on the hub (1 match)", String(format: "%.1f ms", r.queries.oneFiltered),
                String(
                    format: "%.1f ms unfiltered, NOT (n != 4242): %.1fx faster", r.queries.oneUnfiltered,
                    r.queries.oneUnfiltered / r.queries.oneFiltered),
            ],
            [
                "SELECT ... WHERE color = 'red' AND size = 3 (1 in 21)", String(format: "%.1f ms", r.queries.someFiltered),
                String(
                    format: "%.1f ms unfiltered: %.1fx faster", r.queries.someUnfiltered, r.queries.someUnfiltered / r.queries.someFiltered),
            ],
            [
                "SELECT ... WHERE n >= 4242 AND n < 4252 (10 matches)", String(format: "%.1f ms", r.queries.rangeFiltered),
                String(
                    format: "%.1f ms unfiltered: %.1fx faster", r.queries.rangeUnfiltered,
                    r.queries.rangeUnfiltered / r.queries.rangeFiltered),
            ],
            [
                "the automatic indexes those asked for (n, color, size)", String(format: "%.0f ms", r.queries.automaticBuild),
                "built as the hubs' one writer",
            ],
            [
                "the three, automatically indexed",
                String(format: "%.1f, %.1f, %.1f ms", r.queries.oneAutomatic, r.queries.someAutomatic, r.queries.rangeAutomatic),
                String(
                    format: "%.0fx, %.1fx, %.0fx faster than filtered", r.queries.oneFiltered / r.queries.oneAutomatic,
                    r.queries.someFiltered / r.queries.someAutomatic, r.queries.rangeFiltered / r.queries.rangeAutomatic),
            ],
            [
                "CREATE INDEX by_n ON docs (n)", String(format: "%.0f ms", r.queries.indexBuild),
                "and by_color_size ON docs (color, size)",
            ],
            [
                "the three, indexed", String(format: "%.1f, %.1f, %.1f ms", r.queries.oneIndexed, r.queries.someIndexed, r.queries.rangeIndexed),
                String(
                    format: "%.0fx, %.1fx, %.0fx faster than filtered", r.queries.oneFiltered / r.queries.oneIndexed,
                    r.queries.someFiltered / r.queries.someIndexed, r.queries.rangeFiltered / r.queries.rangeIndexed),
            ],
        ]
        return "shoal-bench --hubs: \(r.documents) documents of 5 fields, in process (hubs and devices over the in-memory transport)\n"
            + renderTable(["FIGURE", "", ""], rows)
    }

    static func json(_ r: Result) -> String {
        let object: [String: Any] = [
            "documents": r.documents, "baselineDocumentsPerSecond": r.baselineDocumentsPerSecond,
            "twoWritersDocumentsPerSecond": r.twoWritersDocumentsPerSecond,
            "oneHubDocumentsPerSecond": r.oneHubDocumentsPerSecond, "twoHubsDocumentsPerSecond": r.twoHubsDocumentsPerSecond,
            "oneHubCPUSeconds": r.oneHubCPUSeconds, "twoHubsCPUSeconds": r.twoHubsCPUSeconds,
            "oneHubMachineCPUSeconds": r.oneHubMachine.busySeconds, "twoHubsMachineCPUSeconds": r.twoHubsMachine.busySeconds,
            "oneHubMachineBusy": r.oneHubMachine.busy, "twoHubsMachineBusy": r.twoHubsMachine.busy,
            "oneHubSeconds": r.oneHubMachine.wallSeconds, "twoHubsSeconds": r.twoHubsMachine.wallSeconds,
            "cores": r.oneHubMachine.cores,
            "crossHubLatency": [
                "samples": r.latency.samples, "p50Millis": r.latency.p50, "p99Millis": r.latency.p99, "maxMillis": r.latency.max,
            ],
            "queries": [
                "oneFilteredMillis": r.queries.oneFiltered, "oneUnfilteredMillis": r.queries.oneUnfiltered,
                "someFilteredMillis": r.queries.someFiltered, "someUnfilteredMillis": r.queries.someUnfiltered,
                "rangeFilteredMillis": r.queries.rangeFiltered, "rangeUnfilteredMillis": r.queries.rangeUnfiltered,
                "oneIndexedMillis": r.queries.oneIndexed, "someIndexedMillis": r.queries.someIndexed,
                "rangeIndexedMillis": r.queries.rangeIndexed, "indexBuildMillis": r.queries.indexBuild,
                "oneAutomaticMillis": r.queries.oneAutomatic, "someAutomaticMillis": r.queries.someAutomatic,
                "rangeAutomaticMillis": r.queries.rangeAutomatic, "automaticBuildMillis": r.queries.automaticBuild,
            ],
        ]
        let data = try! JSONSerialization.data(withJSONObject: ["hubs": object], options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}

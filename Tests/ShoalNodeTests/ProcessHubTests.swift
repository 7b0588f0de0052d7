import Foundation
import Logging
import ShoalPostgres
import ShoalTesting
import Testing

extension ProcessSuites {
/// Hubs as real `shoal run --store postgresql://…` processes on one database, with
/// devices on loopback (ARCHITECTURE.md, "Hubs on PostgreSQL").
@Suite(.serialized, .enabled(if: TemporaryPostgresDatabase.serverURL != nil, Comment(rawValue: TemporaryPostgresDatabase.skipReason)))
struct ProcessHubTests {
    static func digest(_ node: NodeProcess) -> String? {
        ((try? node.status()["collections"] as? [String: Any])?["t"] as? [String: Any])?["digest"] as? String
    }

    static func hub(_ name: String, _ dirs: TemporaryDirectory, store: String, port: Int = 0) throws -> NodeProcess {
        try NodeProcess(
            name: name, dataDirectory: dirs.path + "/" + name, listenPort: port,
            extra: ["--store", store, "--subscribe", "SELECT * FROM t"])
    }

    /// Two hubs on one database and three devices spread over them, each device given
    /// both hubs: everyone writes, the same documents included, in transactions of two
    /// documents and increments of one counter; hub 1 is killed (SIGKILL) half-way and
    /// its devices go on through hub 2. At the end every device and both hubs (hub 1
    /// started again) hold the same documents: every acknowledged increment counted
    /// once, every acknowledged pair whole.
    /// What `killOneHub` saw, checked by the test (an expectation is recorded only in
    /// the test's task, not on the thread the processes are driven from).
    struct Outcome: Sendable {
        var sites: [String?] = []
        var counterSeeded = false
        var seen = false
        var crashed = false
        var increments = 0
        var pairs: [Int] = []
        var converged = false
        var digests: [String] = []
        /// Per node: its name, the counter, the pairs it holds and how many pair documents.
        var nodes: [(name: String, hits: Int?, pairs: Set<Int>, halves: Int)] = []
    }

    @Test func devicesKeepSyncingThroughTheOtherHubWhenOneIsKilled() async throws {
        let outcome = try await TemporaryPostgresDatabase.withDatabase { databases in
            let store = databases[0].location.description
            return try await onOwnThread { try Self.killOneHub(store: store) }
        }
        #expect(outcome.sites.count == 2 && outcome.sites[0] != nil && outcome.sites[0] == outcome.sites[1], "two processes, one node")
        #expect(outcome.counterSeeded && outcome.seen && outcome.crashed)
        // 3 rounds of 5 writers, 3 of 4, 2 of 5: each write is acknowledged.
        #expect(outcome.increments == 37 && outcome.pairs.count == 37, "increments \(outcome.increments), pairs \(outcome.pairs.count)")
        #expect(outcome.converged, "digests: \(outcome.digests)")
        #expect(outcome.nodes.count == 5)
        for node in outcome.nodes {
            #expect(node.hits == outcome.increments, "\(node.name): every acknowledged increment once")
            #expect(Set(outcome.pairs).isSubset(of: node.pairs), "\(node.name): every acknowledged pair")
            #expect(node.halves == 2 * node.pairs.count, "\(node.name): no pair held in part")
        }
    }

    static func killOneHub(store: String) throws -> Outcome {
        var outcome = Outcome()
        let dirs = TemporaryDirectory(prefix: "shoal-hubs")
        defer { dirs.remove() }
        var hub1 = try Self.hub("hub1", dirs, store: store)
        let hub1Port = hub1.port
        let hub2 = try Self.hub("hub2", dirs, store: store)
        defer {
            hub1.stop()
            hub2.stop()
        }
        outcome.sites = try [hub1.status(), hub2.status()].map { $0["siteID"] as? String }
        var devices: [NodeProcess] = []
        defer { for device in devices { device.stop() } }
        for (i, first) in [hub1, hub2, hub1].enumerated() {
            let second = first === hub1 ? hub2 : hub1
            devices.append(
                try NodeProcess(
                    name: "d\(i + 1)", dataDirectory: dirs.path + "/d\(i + 1)",
                    extra: ["--peer", first.address, "--peer", second.address, "--subscribe", "SELECT * FROM t"]))
        }
        func write(_ round: Int, on nodes: [NodeProcess]) throws {
            for (n, node) in nodes.enumerated() {
                let id = round * 10 + n
                // The same documents everywhere: the last writer wins, everywhere alike.
                let same = "INSERT INTO t DOCUMENTS ({'_id': 'shared\(round % 3)', 'by': '\(node.name)', 'round': \(round)}) ON ID CONFLICT DO UPDATE"
                let pair = "INSERT INTO t DOCUMENTS ({'_id': 'a\(id)', 'pair': \(id)}), ({'_id': 'b\(id)', 'pair': \(id)})"
                let increment = "UPDATE COLLECTION t (hits COUNTER) APPLY hits INCREMENT BY 1 WHERE _id = 'counter'"
                if try node.exec("\(same); \(pair)").status == 0 { outcome.pairs.append(id) }
                if try node.exec(increment).status == 0 { outcome.increments += 1 }
            }
        }
        outcome.counterSeeded =
            try hub2.exec("INSERT INTO COLLECTION t (hits COUNTER) DOCUMENTS ({'_id': 'counter', 'hits': 0})").status == 0
        outcome.seen = eventually(30) { devices.allSatisfy { (try? ProcessMeshTests.documents($0, "SELECT * FROM t").count) == 1 } }
        for round in 0..<3 { try write(round, on: devices + [hub1, hub2]) }
        hub1.crash()
        outcome.crashed = eventually(10) { !hub1.isRunning }
        for round in 3..<6 { try write(round, on: devices + [hub2]) }
        hub1 = try Self.hub("hub1", dirs, store: store, port: hub1Port)
        for round in 6..<8 { try write(round, on: devices + [hub1, hub2]) }

        let everyone = devices + [hub1, hub2]
        outcome.converged = eventually(60) {
            let digests = everyone.map(Self.digest)
            return digests[0] != nil && Set(digests).count == 1
        }
        outcome.digests = everyone.map { "\($0.name): \(Self.digest($0) ?? "none")" }
        for node in everyone {
            let documents = try ProcessMeshTests.documents(node, "SELECT * FROM t")
            outcome.nodes.append(
                (
                    node.name, documents.first { $0["_id"] as? String == "counter" }?["hits"] as? Int,
                    Set(documents.compactMap { $0["pair"] as? Int }), documents.filter { $0["pair"] != nil }.count
                ))
        }
        return outcome
    }

    /// What `hubServesEverything` saw, checked in the test's task.
    struct Faces: Sendable {
        var engines: [String?] = []
        var locations: [String?] = []
        var processes: [Int?] = []
        var statusText = ""
        var imported: [String: Int] = [:]
        var exportedLines = 0
        /// `shoal exec` with a WHERE the hub narrows in SQL, through hub 2, and an UPDATE's
        /// marks through hub 1, read back through hub 2.
        var filtered: [String] = []
        var updated: [String] = []
        /// An automatic index made for a queried path, through the other hub.
        var automatic = false
        /// `transaction_trace_interval_ms` after `ALTER SYSTEM SET` through hub 1, read
        /// through hub 1 and hub 2.
        var traceIntervals: [Int] = []
        /// `CREATE INDEX` through hub 1, and `SHOW INDEXES` through hub 2.
        var indexCreated: Int32 = -1
        var indexes: [String] = []
        var attachmentPut = ""
        var tokenSeen = false
        var fetched = false
        var getError = ""
        var compacted: [String: Int] = [:]
        var compactError = ""
        var statusAfter: [String: Int] = [:]
        var metrics = ""
    }

    /// What a node offers beyond sync, on a hub process: `status` saying it is a hub and
    /// counting the others, `import` through one hub and `export` through the other, a
    /// `CREATE INDEX` through one hub listed by the other, a query and an UPDATE whose
    /// WHERE the hub narrows in SQL, an attachment put on a
    /// device behind hub 1 fetched by a device behind hub 2, `compact`
    /// removing overwritten transactions, and a metrics scrape.
    @Test func aHubServesStatusBulkAttachmentsCompactionAndMetrics() async throws {
        let faces = try await TemporaryPostgresDatabase.withDatabase { databases in
            let store = databases[0].location.description
            return try await onOwnThread { try Self.hubServesEverything(store: store) }
        }
        #expect(faces.engines == ["postgresql", "postgresql"])
        #expect(faces.locations.allSatisfy { $0?.hasPrefix("postgresql://") == true && $0?.contains("@127.0.0.1:") == true }, "\(faces.locations)")
        #expect(faces.processes == [2, 2], "two hubs on the database, each counting both")
        #expect(faces.statusText.contains("a hub on postgresql://") && faces.statusText.contains("1 other hub"), "\(faces.statusText)")
        #expect(faces.imported["documents"] == 300 && faces.imported["batches"] == 3, "\(faces.imported)")
        #expect(faces.exportedLines == 300, "every imported document exported through the other hub")
        #expect(faces.indexCreated == 0)
        #expect(faces.indexes == ["by_n"], "an index declared through one hub is the other's")
        #expect(faces.filtered == ["doc-298", "doc-299", "doc-7"], "a WHERE narrowed in SQL on the hub, through the index")
        #expect(faces.updated == ["doc-1", "doc-2"], "an UPDATE's WHERE, narrowed in SQL, through the other hub")
        #expect(faces.automatic, "an automatic index for the path a query filtered on")
        #expect(faces.traceIntervals == [250, 5_000], "ALTER SYSTEM sets the parameters of the hub process it runs on")
        #expect(faces.attachmentPut.contains("\"attachment\""), "\(faces.attachmentPut)")
        #expect(faces.tokenSeen)
        #expect(faces.fetched, "the bytes a device behind hub 1 put reach a device behind hub 2: \(faces.getError)")
        // Nineteen of the twenty overwrites went (the last holds the value).
        #expect((faces.compacted["transactionsRemoved"] ?? 0) >= 19, "\(faces.compacted) \(faces.compactError)")
        #expect(faces.statusAfter["compactedThrough"].map { $0 > 0 } == true, "\(faces.statusAfter)")
        #expect(faces.metrics.contains("shoal_change_log_rows"), "a scrape of a hub's metrics")
        // Hub 1's own commits (the import's three batches) are timed, as a node's on SQLite are.
        let commits = faces.metrics.split(separator: "\n").first { $0.hasPrefix("shoal_commit_duration_seconds_count ") }
        #expect(commits.flatMap { Int($0.split(separator: " ").last ?? "") }.map { $0 >= 3 } == true, "\(commits ?? "no commit timer")")
    }

    /// A hub process started with a smaller document limit than its device's
    /// (`--document-size-hard-limit 300`): the transaction over it is refused whole and
    /// reported (the hub's status, the device's log), everything after it arrives, and
    /// the session stays up, as on SQLite (`ProcessLimitTests`).
    @Test func aHubWithASmallerDocumentLimitRefusesWholeAndSyncGoesOn() async throws {
        let outcome = try await TemporaryPostgresDatabase.withDatabase { databases in
            let store = databases[0].location.description
            return try await onOwnThread { try Self.smallerLimit(store: store) }
        }
        #expect(outcome.written, "both writes acknowledged on the device")
        #expect(outcome.ids == ["after"], "only what fits arrives: \(outcome.ids)")
        #expect(outcome.refused == 1 && outcome.reason.contains("over what this node said it takes"), "\(outcome.refused): \(outcome.reason)")
        #expect(outcome.deviceTold, "the device hears of the refusal in the hub's Ack")
        #expect(outcome.sessions == 1, "one session all along")
    }

    /// A device writes a document whose `_id` is longer than a hub can index (a device
    /// holds it; PostgreSQL's btree entries cannot): the hub process refuses that
    /// transaction whole and says why, the device hears of it, and what follows
    /// arrives in the same session.
    @Test func aHubRefusesADocumentItCannotIndexAndSyncGoesOn() async throws {
        let outcome = try await TemporaryPostgresDatabase.withDatabase { databases in
            let store = databases[0].location.description
            return try await onOwnThread { try Self.longKey(store: store) }
        }
        #expect(outcome.written, "every write acknowledged on the device")
        #expect(outcome.ids == ["after", "before"], "all but the long key arrives: \(outcome.ids)")
        #expect(outcome.refused == 1 && outcome.reasons.first?.contains("this node can index") == true, "\(outcome.refused): \(outcome.reasons)")
        #expect(outcome.deviceTold, "the device hears of the refusal in the hub's Ack")
        #expect(outcome.sessions == 1, "one session all along")
    }

    static func longKey(store: String) throws -> SmallerLimit {
        var outcome = SmallerLimit()
        let dirs = TemporaryDirectory(prefix: "shoal-hub-key")
        defer { dirs.remove() }
        let hub = try NodeProcess(name: "hub", dataDirectory: dirs.path + "/hub", extra: ["--store", store, "--subscribe", "SELECT * FROM t"])
        defer { hub.stop() }
        let device = try NodeProcess(
            name: "device", dataDirectory: dirs.path + "/device", extra: ["--peer", hub.address, "--subscribe", "SELECT * FROM t"])
        defer { device.stop() }
        // Random, so that PostgreSQL cannot compress it below its limit.
        let long = (0..<1_600).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let before = try device.exec("INSERT INTO t DOCUMENTS ({'_id': 'before'})")
        let longKey = try device.exec("INSERT INTO t DOCUMENTS ({'_id': :id})", args: "{\"id\": \"\(long)\"}")
        let after = try device.exec("INSERT INTO t DOCUMENTS ({'_id': 'after'})")
        outcome.written = before.status == 0 && longKey.status == 0 && after.status == 0
        _ = eventually(30) { (try? ProcessMeshTests.documents(hub, "SELECT _id FROM t").count) == 2 }
        outcome.ids = (try? ProcessMeshTests.documents(hub, "SELECT _id FROM t ORDER BY _id").compactMap { $0["_id"] as? String }) ?? []
        let transactions = (try? hub.status()["transactions"] as? [String: Any]) ?? [:]
        outcome.refused = transactions["refused"] as? Int ?? -1
        outcome.reasons = ((transactions["refusals"] as? [[String: Any]]) ?? []).compactMap { $0["reason"] as? String }
        outcome.deviceTold = eventually(20) { device.log().contains("peer hub refused transaction") }
        outcome.sessions = hub.log().components(separatedBy: "peer connected").count - 1
        return outcome
    }

    struct SmallerLimit: Sendable {
        var written = false
        var ids: [String] = []
        var refused = 0
        var reason = ""
        var reasons: [String] = []
        var deviceTold = false
        var sessions = 0
    }

    static func smallerLimit(store: String) throws -> SmallerLimit {
        var outcome = SmallerLimit()
        let dirs = TemporaryDirectory(prefix: "shoal-hub-limit")
        defer { dirs.remove() }
        let hub = try NodeProcess(
            name: "hub", dataDirectory: dirs.path + "/hub",
            extra: [
                "--store", store, "--subscribe", "SELECT * FROM t", "--document-size-soft-limit", "50",
                "--document-size-hard-limit", "300",
            ])
        defer { hub.stop() }
        let device = try NodeProcess(
            name: "device", dataDirectory: dirs.path + "/device", extra: ["--peer", hub.address, "--subscribe", "SELECT * FROM t"])
        defer { device.stop() }
        let big = try device.exec(
            "INSERT INTO t DOCUMENTS ({'_id': 'big', 'v': :v}), ({'_id': 'beside', 'v': 1})",
            args: "{\"v\": \"\(String(repeating: "y", count: 500))\"}")
        let after = try device.exec("INSERT INTO t DOCUMENTS ({'_id': 'after'})")
        outcome.written = big.status == 0 && after.status == 0
        _ = eventually(30) { (try? ProcessMeshTests.documents(hub, "SELECT _id FROM t").count) == 1 }
        outcome.ids = (try? ProcessMeshTests.documents(hub, "SELECT _id FROM t").compactMap { $0["_id"] as? String }) ?? []
        let transactions = (try? hub.status()["transactions"] as? [String: Any]) ?? [:]
        outcome.refused = transactions["refused"] as? Int ?? -1
        outcome.reason = ((transactions["refusals"] as? [[String: Any]])?.first?["reason"] as? String) ?? ""
        outcome.deviceTold = eventually(20) { device.log().contains("peer hub refused transaction") }
        outcome.sessions = hub.log().components(separatedBy: "peer connected").count - 1
        return outcome
    }

    /// A hub's database restored from a real backup (`pg_dump` before anything was
    /// written, `pg_restore --clean` after the hub wrote 'one', which the device holds),
    /// the hub stopped meanwhile. Started again on its data directory (`remembering`), the
    /// hub finds the database went back as it opens, from what it kept there, and repairs
    /// it before it writes: 'two' takes a new number. Started on a new data directory (a
    /// hub moved to another machine), it knows nothing and gives 'one's number to 'two';
    /// when the device connects the hub repairs the database rather than refuse it
    /// (DATA_MODEL.md §4.5): 'two' is committed again under a new number. Either way the
    /// device sends 'one' back, and what the hub writes next reaches the device.
    @Test(arguments: [true, false]) func aHubDatabaseRestoredFromABackupIsRepaired(remembering: Bool) async throws {
        let outcome = try await TemporaryPostgresDatabase.withDatabase { databases in
            let store = databases[0].location.description
            return try await onOwnThread { try Self.restoredBackup(store: store, remembering: remembering) }
        }
        #expect(outcome.backedUp && outcome.restored, "pg_dump and pg_restore ran: \(outcome.tools)")
        #expect(outcome.reused == !remembering, "after the restore the hub gave 'one's number again only when it knew nothing")
        #expect(outcome.repaired, "the hub's log says it committed its transactions again")
        #expect(outcome.device == ["one", "two", "three"], "the device: \(outcome.device)")
        #expect(outcome.hub == ["one", "two", "three"], "the hub: \(outcome.hub)")
    }

    struct RestoredBackup: Sendable {
        var backedUp = false
        var restored = false
        var tools = ""
        var reused = false
        var repaired = false
        var device: Set<String> = []
        var hub: Set<String> = []
        var reconnects = 0
    }

    /// The `_id`s a node holds in t.
    static func ids(_ node: NodeProcess) -> Set<String> {
        Set((try? ProcessMeshTests.documents(node, "SELECT _id FROM t").compactMap { $0["_id"] as? String }) ?? [])
    }

    /// Runs a PostgreSQL tool, keeping what it said on standard error; whether it succeeded.
    static func pgTool(_ outcome: inout RestoredBackup, _ path: String, _ arguments: [String]) throws -> Bool {
        let run = try ChildProcess.run(path, arguments, timeout: 60)
        outcome.tools += String(decoding: run.stderr, as: UTF8.self)
        return run.status == 0
    }

    static func restoredBackup(store: String, remembering: Bool) throws -> RestoredBackup {
        var outcome = RestoredBackup()
        let dirs = TemporaryDirectory(prefix: "shoal-hub-restore")
        defer { dirs.remove() }
        var hub = try Self.hub("hub", dirs, store: store)
        let port = hub.port
        defer { hub.stop() }
        let backup = dirs.path + "/backup.dump"
        outcome.backedUp = try Self.pgTool(&outcome, "/usr/bin/pg_dump", ["--format=custom", "--file=" + backup, "--dbname=" + store])
        func startDevice() throws -> NodeProcess {
            try NodeProcess(
                name: "device", dataDirectory: dirs.path + "/device", extra: ["--peer", hub.address, "--subscribe", "SELECT * FROM t"])
        }
        var device = try startDevice()
        defer { device.stop() }
        _ = try hub.exec("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
        guard eventually(30, { ids(device) == ["one"] }) else { return outcome }
        hub.stop()
        outcome.restored = try Self.pgTool(
            &outcome, "/usr/bin/pg_restore", ["--clean", "--if-exists", "--single-transaction", "--dbname=" + store, backup])
        // Started again on the restored database, on its address, with the device away.
        device.stop()
        hub = try Self.hub(remembering ? "hub" : "hub-moved", dirs, store: store, port: port)
        let two = try hub.exec("INSERT INTO t DOCUMENTS ({'_id': 'two'})", extra: ["--json"])
        outcome.reused = two.stdout.trimmingCharacters(in: .whitespacesAndNewlines).hasSuffix(":1\"}")
        if remembering { outcome.repaired = hub.log().contains("the database went back under it") }
        device = try startDevice()
        _ = eventually(30) { ids(device) == ["one", "two"] && ids(hub) == ["one", "two"] }
        _ = try hub.exec("INSERT INTO t DOCUMENTS ({'_id': 'three'})")
        _ = eventually(30) { ids(device).count == 3 }
        if !remembering { outcome.repaired = hub.log().contains("are committed again as") }
        outcome.device = ids(device)
        outcome.hub = ids(hub)
        return outcome
    }

    /// A hub's database restored from a backup (`pg_restore --clean`) while the hub runs
    /// and its device stays connected, as a failover that lost commits leaves it: no
    /// Subscribe tells, so the hub finds it itself at its next write. 'two', written
    /// after the restore, reaches the device on the connection it kept, and what the
    /// database lost comes back from the device: the hub's 'one' and the device's 'mine'.
    @Test func aHubDatabaseRestoredUnderTheRunningHubIsRepairedWithoutAReconnect() async throws {
        let outcome = try await TemporaryPostgresDatabase.withDatabase { databases in
            let store = databases[0].location.description
            return try await onOwnThread { try Self.restoredUnderRunningHub(store: store) }
        }
        #expect(outcome.backedUp && outcome.restored, "pg_dump and pg_restore ran: \(outcome.tools)")
        #expect(outcome.repaired, "the hub's log says its database went back under it")
        #expect(outcome.device == ["one", "mine", "two"], "the device: \(outcome.device)")
        #expect(outcome.hub == ["one", "mine", "two"], "the hub: \(outcome.hub)")
        #expect(outcome.reconnects == 0, "the device kept its connection")
    }

    static func restoredUnderRunningHub(store: String) throws -> RestoredBackup {
        var outcome = RestoredBackup()
        let dirs = TemporaryDirectory(prefix: "shoal-hub-restore-running")
        defer { dirs.remove() }
        let hub = try Self.hub("hub", dirs, store: store)
        defer { hub.stop() }
        let backup = dirs.path + "/backup.dump"
        outcome.backedUp = try Self.pgTool(&outcome, "/usr/bin/pg_dump", ["--format=custom", "--file=" + backup, "--dbname=" + store])
        let device = try NodeProcess(
            name: "device", dataDirectory: dirs.path + "/device", extra: ["--peer", hub.address, "--subscribe", "SELECT * FROM t"])
        defer { device.stop() }
        _ = try hub.exec("INSERT INTO t DOCUMENTS ({'_id': 'one'})")
        _ = try device.exec("INSERT INTO t DOCUMENTS ({'_id': 'mine'})")
        guard eventually(30, { ids(device) == ["one", "mine"] && ids(hub) == ["one", "mine"] }) else { return outcome }
        let connected = device.log().components(separatedBy: "peer connected").count
        outcome.restored = try Self.pgTool(
            &outcome, "/usr/bin/pg_restore", ["--clean", "--if-exists", "--single-transaction", "--dbname=" + store, backup])
        _ = try hub.exec("INSERT INTO t DOCUMENTS ({'_id': 'two'})")
        _ = eventually(30) { ids(device) == ["one", "mine", "two"] && ids(hub) == ["one", "mine", "two"] }
        outcome.repaired = hub.log().contains("the database went back under it")
        outcome.device = ids(device)
        outcome.hub = ids(hub)
        outcome.reconnects = device.log().components(separatedBy: "peer connected").count - connected
        return outcome
    }

    /// A hub process cut off from PostgreSQL (a proxy between them refusing) fails a
    /// write within its `--store-timeout` (2 s here, 10 s by default), saying it cannot
    /// reach the server, and serves again once the link heals.
    @Test func aHubCutOffFromItsDatabaseFailsWritesWithinItsStoreTimeout() async throws {
        let outcome = try await TemporaryPostgresDatabase.withDatabase { databases in
            let location = databases[0].location
            return try await onOwnThread { try Self.cutOff(location) }
        }
        #expect(outcome.before == 0, "a write while the link is up")
        #expect(outcome.cut != 0 && outcome.cutError.contains("cannot reach the server"), "\(outcome.cutError)")
        let waited = try #require(outcome.waitedSeconds, "the error says how long the hub waited: \(outcome.cutError)")
        #expect(waited < 10, "the hub gave up after its store timeout, not the default: \(outcome.cutError)")
        #expect(outcome.healed, "a write succeeds once the link heals")
        #expect(outcome.documents == 2, "the first write and the one after the link healed, nothing else")
    }

    /// A hub process whose COMMIT answer its connection to PostgreSQL lost answers `shoal
    /// exec` as the write ended: done when it committed, failed with nothing kept when the
    /// COMMIT never arrived, and "unknown" (`OUTCOME_UNKNOWN`) when the database could not
    /// be asked since; every increment that committed is counted once. `shoal shell`
    /// piped in says the same and exits 3.
    @Test func aHubProcessAnswersAWriteWhoseCommitAnswerWasLostAsItEnded() async throws {
        let outcome = try await TemporaryPostgresDatabase.withDatabase { databases in
            let location = databases[0].location
            return try await onOwnThread { try Self.lostAnswers(location) }
        }
        #expect(outcome.statuses == [0, 0, 3, 1, 3], "exit status 3 for the unknown outcome: \(outcome.errors)")
        #expect(outcome.errors[2].contains("whether the write committed is unknown"), "\(outcome.errors[2])")
        #expect(outcome.errors[3].contains("nothing of it was kept"), "\(outcome.errors[3])")
        // The shell, piped in: it says so and stops there, with exit status 3 as exec's.
        #expect(outcome.errors[4].contains("whether the write committed is unknown"), "\(outcome.errors[4])")
        #expect(outcome.shellLines.errors == 1 && outcome.shellLines.results == 0, "piped input stops at the first error: \(outcome.errors[4])")
        #expect(outcome.lost == 4, "the proxy broke four COMMITs' connections")
        #expect(outcome.counter == 4, "the first, the delivered one and the two unknown ones, which committed")
    }

    struct LostAnswers: Sendable {
        var statuses: [Int32] = []
        var errors: [String] = []
        var lost = 0
        var counter: Int?
        /// The shell's lines on standard error (its errors) and standard output (results).
        var shellLines = (errors: 0, results: 0)
    }

    static func lostAnswers(_ location: PostgresLocation) throws -> LostAnswers {
        var outcome = LostAnswers()
        let dirs = TemporaryDirectory(prefix: "shoal-hub-lost")
        defer { dirs.remove() }
        let (hub, proxy) = try Self.hubThroughProxy(location, dirs)
        defer {
            hub.stop()
            proxy.stop()
        }
        let increment = "INSERT INTO t DOCUMENTS ({'_id': 'k'}) ON ID CONFLICT DO NOTHING; UPDATE t APPLY n INCREMENT BY 1 WHERE _id = 'k'"
        func send() throws {
            let answer = try hub.exec(increment)
            outcome.statuses.append(answer.status)
            outcome.errors.append(answer.stderr)
        }
        try send()
        // The writer's last statement before its COMMIT sets log_end.
        let commit = Array("COMMIT\0".utf8), setsEnd = Array("WHERE key = 'log_end' RETURNING".utf8)
        for (delivering, cutting) in [(true, false), (true, true), (false, false)] {
            proxy.loseAnswer(to: commit, after: setsEnd, delivering: delivering, cutting: cutting)
            try send()
            proxy.restore()
            // The pool connects again before the next round.
            _ = eventually(30) { (try? hub.exec("SELECT * FROM t WHERE _id = 'k'").status) == 0 }
        }
        proxy.loseAnswer(to: commit, after: setsEnd, delivering: true, cutting: true)
        let shell = try ShoalBinary.run(["shell", "--node", hub.address], input: Data("UPDATE t APPLY n INCREMENT BY 1 WHERE _id = 'k';\nINSERT INTO t DOCUMENTS ({'_id': 'after'});\n".utf8))
        proxy.restore()
        outcome.statuses.append(shell.status)
        outcome.errors.append(shell.stderr)
        _ = eventually(30) { (try? hub.exec("SELECT * FROM t WHERE _id = 'k'").status) == 0 }
        outcome.shellLines = (
            shell.stderr.split(separator: "\n").filter { $0.hasPrefix("shoal:") }.count,
            shell.stdout.split(separator: "\n").filter { !$0.isEmpty }.count
        )
        outcome.lost = proxy.answersLost
        let items = try? ProcessMeshTests.documents(hub, "SELECT * FROM t WHERE _id = 'k'")
        outcome.counter = (items?.first?["n"] as? NSNumber)?.intValue
        return outcome
    }

    struct CutOff: Sendable {
        var before: Int32 = -1
        var cut: Int32 = 0
        var cutError = ""
        var waitedSeconds: Int?
        var healed = false
        var documents = 0
    }

    /// A hub process (store timeout 2 s) that reaches PostgreSQL through a proxy of the test's.
    static func hubThroughProxy(_ location: PostgresLocation, _ dirs: TemporaryDirectory) throws -> (NodeProcess, LoopbackProxy) {
        let proxy = try LoopbackProxy(to: location.port)
        var through = location
        through.host = "127.0.0.1"
        through.port = proxy.port
        do {
            let hub = try NodeProcess(
                name: "hub", dataDirectory: dirs.path + "/hub",
                extra: ["--store", through.description, "--store-timeout", "2", "--subscribe", "SELECT * FROM t"])
            return (hub, proxy)
        } catch {
            proxy.stop()
            throw error
        }
    }

    static func cutOff(_ location: PostgresLocation) throws -> CutOff {
        var outcome = CutOff()
        let dirs = TemporaryDirectory(prefix: "shoal-hub-cut")
        defer { dirs.remove() }
        let (hub, proxy) = try Self.hubThroughProxy(location, dirs)
        defer {
            hub.stop()
            proxy.stop()
        }
        outcome.before = try hub.exec("INSERT INTO t DOCUMENTS ({'_id': 'before'})").status
        proxy.cut()
        let failed = try hub.exec("INSERT INTO t DOCUMENTS ({'_id': 'cut'})")
        outcome.cut = failed.status
        outcome.cutError = failed.stderr
        if let range = failed.stderr.range(of: "no connection for ") {
            outcome.waitedSeconds = Int(failed.stderr[range.upperBound...].prefix { $0.isNumber })
        }
        proxy.restore()
        outcome.healed = eventually(30) { (try? hub.exec("INSERT INTO t DOCUMENTS ({'_id': 'after'}) ON ID CONFLICT DO NOTHING").status) == 0 }
        outcome.documents = (try? ProcessMeshTests.documents(hub, "SELECT * FROM t").count) ?? -1
        return outcome
    }

    static func hubServesEverything(store: String) throws -> Faces {
        var faces = Faces()
        let dirs = TemporaryDirectory(prefix: "shoal-hubs")
        defer { dirs.remove() }
        let hub1 = try NodeProcess(
            name: "hub1", dataDirectory: dirs.path + "/hub1",
            extra: ["--store", store, "--subscribe", "SELECT * FROM t", "--metrics", "127.0.0.1:0"])
        let hub2 = try Self.hub("hub2", dirs, store: store)
        let d1 = try NodeProcess(name: "d1", dataDirectory: dirs.path + "/d1", extra: ["--peer", hub1.address, "--subscribe", "SELECT * FROM t"])
        let d2 = try NodeProcess(name: "d2", dataDirectory: dirs.path + "/d2", extra: ["--peer", hub2.address, "--subscribe", "SELECT * FROM t"])
        defer {
            for node in [d1, d2, hub1, hub2] { node.stop() }
        }
        let storage = { (node: NodeProcess) in try? node.status()["storage"] as? [String: Any] }
        for hub in [hub1, hub2] {
            let s = storage(hub)
            faces.engines.append(s?["engine"] as? String)
            faces.locations.append(s?["location"] as? String)
            faces.processes.append(s?["processes"] as? Int)
        }
        faces.statusText = try ShoalBinary.run(["status", "--node", hub1.address]).stdout

        // Bulk: 300 documents imported through hub 1, exported through hub 2.
        let file = dirs.path + "/t.ndjson"
        try (0..<300).map { "{\"_id\": \"doc-\($0)\", \"n\": \($0)}" }.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let imported = try ShoalBinary.run(["import", "--node", hub1.address, "--collection", "t", "--batch", "100", "--json", file])
        if let object = try? JSONSerialization.jsonObject(with: Data(imported.stdout.utf8)) as? [String: Any] {
            faces.imported = object.compactMapValues { $0 as? Int }
        }
        let exported = try ShoalBinary.run(["export", "--node", hub2.address, "--batch", "70", "SELECT * FROM t"])
        faces.exportedLines = exported.stdout.split(separator: "\n").count
        func ids(_ node: NodeProcess, _ query: String) -> [String] {
            ((try? ProcessMeshTests.documents(node, query)) ?? []).compactMap { $0["_id"] as? String }
        }
        faces.indexCreated = try hub1.exec("CREATE INDEX by_n ON t (n)").status
        faces.indexes = ((try? ProcessMeshTests.documents(hub2, "SHOW INDEXES")) ?? []).compactMap { $0["name"] as? String }
        faces.filtered = ids(hub2, "SELECT _id FROM t WHERE n >= 298 OR n = 7 ORDER BY _id")
        _ = try hub1.exec("UPDATE t SET tag = 'x' WHERE n < 3 AND n >= 1")
        faces.updated = ids(hub2, "SELECT _id FROM t WHERE tag = 'x' ORDER BY _id")
        _ = try hub1.exec("ALTER SYSTEM SET transaction_trace_interval_ms = 250")
        for hub in [hub1, hub2] {
            let rows = (try? ProcessMeshTests.documents(hub, "SHOW transaction_trace_interval_ms")) ?? []
            faces.traceIntervals += rows.compactMap { $0["value"] as? Int }
        }
        // That query's path, `tag`, which no declared index leads with: hub 2 builds an
        // automatic index for it in the background, which hub 1 lists.
        faces.automatic = eventually(30) {
            ((try? ProcessMeshTests.documents(hub1, "SHOW INDEXES")) ?? []).contains {
                $0["automatic"] as? Bool == true && $0["paths"] as? [String] == ["tag"]
            }
        }

        // An attachment put on d1 (behind hub 1), fetched on d2 (behind hub 2).
        let source = dirs.path + "/scan.bin"
        let bytes = Data((0..<1_500_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 10) })
        _ = FileManager.default.createFile(atPath: source, contents: bytes)
        let put = try ShoalBinary.run(["attachment", "put", "--node", d1.address, source])
        faces.attachmentPut = put.stdout + put.stderr
        let token = put.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        if let id = (try? JSONSerialization.jsonObject(with: Data(token.utf8)) as? [String: Any])?["attachment"] as? String,
            try d1.exec("INSERT INTO COLLECTION t (scan ATTACHMENT) DOCUMENTS ({'_id': 'scan', 'scan': :t})", args: "{\"t\": \(token)}").status == 0
        {
            faces.tokenSeen = eventually(30) {
                (try? ProcessMeshTests.documents(d2, "SELECT * FROM t WHERE _id = 'scan'").first?["scan"]) != nil
            }
            let target = dirs.path + "/fetched.bin"
            let get = try ShoalBinary.run(["attachment", "get", "--node", d2.address, id, target])
            faces.getError = get.stderr
            faces.fetched = get.status == 0 && FileManager.default.contents(atPath: target) == bytes
        }

        // Twenty overwrites of one document through hub 2, then `compact` through hub 1.
        for i in 0..<20 { _ = try hub2.exec("UPDATE t SET n = \(1_000 + i) WHERE _id = 'doc-0'") }
        _ = try hub2.exec("INSERT INTO t DOCUMENTS ({'_id': 'last'})")
        let compacted = try ShoalBinary.run(["compact", "--node", hub1.address, "--json"])
        faces.compactError = compacted.stderr
        if let object = try? JSONSerialization.jsonObject(with: Data(compacted.stdout.utf8)) as? [String: Any] {
            faces.compacted = object.compactMapValues { $0 as? Int }
        }
        faces.statusAfter = (storage(hub2) ?? [:]).compactMapValues { $0 as? Int }

        if let address = hub1.metricsAddress, let port = Int(address.split(separator: ":").last ?? "") {
            faces.metrics = (try? ProcessMetricsTests.get(port: port).body) ?? ""
        }
        return faces
    }
}
}

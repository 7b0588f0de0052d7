import Foundation
import ShoalCRDT
import ShoalCheck
import ShoalNode
import ShoalSync
import ShoalTesting

#if canImport(Glibc)
import Glibc
#endif

/// One run: the cluster built from the seed, the setup, writers, a reader and the
/// fault injector until the duration is up, then healing, settling and the checks.
struct CheckRun {
    let plan: Plan
    let universe: Universe
    let recorder: Recorder

    init(plan: Plan) {
        self.plan = plan
        universe = Universe(documents: plan.documents)
        recorder = Recorder(quiet: plan.json, oneNode: Array(0..<plan.hubs))
    }

    func say(_ text: String) {
        if !plan.json { emit("shoal-check: \(text)") }
    }

    /// Runs everything and prints the summary; returns whether every check passed. With
    /// hubs, on a new database of the PostgreSQL server, dropped at the end.
    func run() async throws -> Bool {
        guard plan.hubs > 0 else { return try await run(hubDatabase: nil) }
        return try await HubDatabase.with { database in try await run(hubDatabase: database) }
    }

    /// Runs everything, the hubs on `hubDatabase`.
    func run(hubDatabase: HubDatabase?) async throws -> Bool {
        let store = hubDatabase?.store
        var random = SplitMix(state: plan.seed)
        let directory = (plan.directory as NSString).appendingPathComponent("shoal-check-\(plan.seed)-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let (cluster, diskNode, notes) = try build(directory: directory, store: store, storePassword: hubDatabase?.password, &random)
        for note in notes { say(note) }
        Self.stopOnInterrupt(cluster, hubDatabase: hubDatabase)
        defer {
            cluster.shutdown()
            if diskNode != nil { _ = Self.run("/bin/umount", ["-l", cluster.nodes[diskNode!.node].dataDirectory]) }
        }
        for node in cluster.nodes.indices { try await blocking { try cluster.start(node) } }
        let workload = Workload(universe: universe, kinds: plan.operations, cluster: cluster, recorder: recorder)
        let faults = FaultInjector(
            kinds: plan.faults, cluster: cluster, recorder: recorder, workload: workload, diskNode: diskNode, hubDatabase: hubDatabase)
        try await setUp(cluster)

        let deadline = recorder.now() + plan.duration
        let streams = (0..<(plan.writers + 2)).map { SplitMix(state: plan.seed &+ UInt64($0 + 1) &* 0x9E37_79B9_7F4A_7C15) }
        await withTaskGroup(of: Void.self) { group in
            for writer in 0..<plan.writers where !plan.operations.isEmpty {
                group.addTask {
                    var random = streams[writer]
                    while recorder.now() < deadline {
                        guard let node = cluster.running.randomElement(using: &random) else {
                            try? await Task.sleep(for: .milliseconds(100))
                            continue
                        }
                        await workload.perform(on: node, &random)
                    }
                }
            }
            group.addTask {
                var random = streams[plan.writers]
                while recorder.now() < deadline {
                    try? await Task.sleep(for: .milliseconds(Int.random(in: 300...1500, using: &random)))
                    guard let node = cluster.running.randomElement(using: &random) else { continue }
                    let collections = cluster.checkedMidRun(node)
                    if let read = try? await workload.read(node, collections: collections, timeout: 5) { recorder.record(read) }
                }
            }
            group.addTask {
                var random = streams[plan.writers + 1]
                await faults.run(until: deadline, &random)
            }
        }
        recorder.say("operations and faults stop; healing every link and node")
        await faults.heal()
        let settled = await settle(cluster)
        recorder.say(settled.converged ? "settled: the nodes agree" : "not settled after \(Int(plan.settle)) s")
        let report = await check(cluster, settled: settled)
        let passed = report.findings.isEmpty
        emit(summary(report, passed: passed, directory: directory, cluster: cluster))
        if passed && !plan.keep {
            cluster.shutdown()
            if let diskNode { _ = Self.run("/bin/umount", ["-l", cluster.nodes[diskNode.node].dataDirectory]) }
            try? FileManager.default.removeItem(atPath: directory)
        } else {
            writeRecord(to: directory + "/history.txt")
        }
        return passed
    }

    // MARK: the cluster

    /// Nodes, links and limits from the seed. With hubs (nodes 0 to `plan.hubs - 1`, on
    /// `store`), the topology joins the devices, and every device dials every hub too:
    /// hubs are one node, never linked to each other.
    func build(
        directory: String, store: String?, storePassword: String? = nil, _ random: inout SplitMix
    ) throws -> (Cluster, (node: Int, ballast: String)?, [String]) {
        let count = plan.nodes
        let hubs = plan.hubs
        let devices = Array(hubs..<count)
        let topology = plan.topology ?? ShoalCheckCommand.Topology.allCases.randomElement(using: &random)!
        // Among the topology's members: every node, or with hubs the devices alone.
        let members = hubs == 0 ? Array(0..<count) : devices
        var edges: [(from: Int, to: Int)] = []
        switch topology {
        case .line: edges = (1..<members.count).map { (members[$0], members[$0 - 1]) }
        case .star: edges = (1..<members.count).map { (members[$0], members[0]) }
        case .mesh: edges = (1..<members.count).flatMap { i in (0..<i).map { (members[i], members[$0]) } }
        case .random:
            for i in 1..<max(1, members.count) {
                let first = Int.random(in: 0..<i, using: &random)
                edges.append((members[i], members[first]))
                for j in 0..<i where j != first && Int.random(in: 0..<4, using: &random) == 0 { edges.append((members[i], members[j])) }
            }
        }
        for device in devices where hubs > 0 { for hub in 0..<hubs { edges.append((device, hub)) } }
        var notes = ["\(count) nodes, \(topology.rawValue): \(edges.map { "n\($0.from)->n\($0.to)" }.joined(separator: ", ")); run directory \(directory)"]
        if let store, hubs > 0 {
            notes.append("n0\(hubs > 1 ? " to n\(hubs - 1)" : "") \(hubs > 1 ? "are hubs" : "is a hub") on \(store)")
        }
        let ports = (0..<count).map { _ in freeLoopbackPort() }
        let links = try edges.map { Cluster.Link(from: $0.from, to: $0.to, proxy: try LoopbackProxy(to: ports[$0.to])) }
        let all = Set(universe.names)
        var collections = Array(repeating: all, count: count)
        // A node with a narrower subscription, now and then: it still relays the rest.
        if count >= 3 && devices.count >= 2 && Int.random(in: 0..<5, using: &random) < 2 {
            let node = Int.random(in: max(1, hubs)..<count, using: &random)
            collections[node] = Set(universe.names.shuffled(using: &random).prefix(2))
            notes.append("n\(node) subscribes to \(collections[node].sorted().joined(separator: " and ")) only")
        }
        var flags = Array(repeating: [String](), count: count)
        var limited: Set<Int> = []
        if plan.faults.contains(.limits) {
            let node = Int.random(in: max(1, hubs)..<count, using: &random)
            limited.insert(node)
            let choice = Int.random(in: 0..<3, using: &random)
            if choice != 1 { flags[node] += ["--max-frame-size", "262144"] }
            if choice != 0 { flags[node] += ["--document-size-hard-limit", "131072"] }
            notes.append("n\(node) has smaller limits: \(flags[node].joined(separator: " "))")
        }
        var diskNode: (node: Int, ballast: String)?
        let dataDirectories = (0..<count).map { directory + "/n\($0)" }
        if plan.faults.contains(.disk) {
            let node = count - 1
            let mountPoint = dataDirectories[node]
            try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
            if Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=512m", "tmpfs", mountPoint]) == 0 {
                // The ballast goes beside the data, on the same filesystem.
                diskNode = (node, mountPoint + "/ballast")
                notes.append("n\(node)'s data directory is on a 512 MiB tmpfs")
            } else {
                notes.append("disk: skipped: mounting a tmpfs is not permitted here (needs root and mount rights)")
            }
        }
        var clockFiles = Array(repeating: String?.none, count: count)
        if plan.faults.contains(.skew) {
            if let reason = Cluster.fakeTimeUnavailable(in: directory) {
                notes.append("skew: skipped: \(reason)")
            } else {
                for node in 0..<count {
                    clockFiles[node] = directory + "/clock-n\(node)"
                    try "+0\n".write(toFile: clockFiles[node]!, atomically: true, encoding: .utf8)
                }
            }
        }
        // A `big` document cannot pass a limited node: where it is the only way between
        // others, they are excused from `big` too.
        var excused = Array(repeating: Set<String>(), count: count)
        if !limited.isEmpty {
            let unlimited = (0..<count).filter { !limited.contains($0) }
            var reached: Set<Int> = [unlimited[0]]
            var frontier = [unlimited[0]]
            while let node = frontier.popLast() {
                for edge in edges where !limited.contains(edge.from) && !limited.contains(edge.to) {
                    for (a, b) in [(edge.from, edge.to), (edge.to, edge.from)] where a == node && reached.insert(b).inserted {
                        frontier.append(b)
                    }
                }
            }
            for node in 0..<count where limited.contains(node) || reached.count < unlimited.count { excused[node] = ["big"] }
        }
        let nodes = (0..<count).map { i in
            Cluster.Node(
                index: i, store: i < hubs ? store : nil, dataDirectory: dataDirectories[i], port: ports[i],
                peers: links.filter { $0.from == i }.map(\.proxy.address), collections: collections[i],
                excused: excused[i], flags: flags[i], clockFile: clockFiles[i], logPath: directory + "/n\(i).log")
        }
        var common = ["--idle-timeout", "10", "--handshake-timeout", "5", "--coverage-wait", "10"]
        if plan.faults.contains(.compact) { common += ["--compaction-interval", "15"] }
        if let level = plan.nodeLogLevel { common += ["--log-level", level] }
        let cluster = Cluster(nodes: nodes, links: links, directory: directory, common: common, storePassword: storePassword)
        return (cluster, diskNode, notes)
    }

    /// Every document created on n0 and seen by every node before operations start.
    func setUp(_ cluster: Cluster) async throws {
        var statements: [String] = []
        var arguments: [String: Value] = [:]
        var writes: [Slot: SlotValue] = [:]
        for collection in universe.collections {
            let documents: [Value] = collection.documents.map { id in
                var body: [String: Value] = ["_id": .string(id)]
                switch collection.name {
                case "reg": body["f0"] = "t0"
                case "mp": body["m"] = .object([:])
                case "ct": body["n"] = 0
                default: break
                }
                return .object(body)
            }
            statements.append("INSERT INTO \(collection.name) DOCUMENTS (:\(collection.name))")
            arguments[collection.name] = .array(documents)
        }
        for slot in universe.slots() { writes[slot] = slot.field == "f0" ? .token("t0") : .absent }
        let sent = Moment(node: 0, epoch: 0, time: recorder.now())
        let result = try await cluster.client(0, timeout: 30).exec(
            statements.joined(separator: "; "), argumentsJSON: Value.object(arguments).canonicalJSON)
        recorder.record(
            Mutation(
                id: 0, kind: Mutation.setup, sent: sent, acknowledgedAt: recorder.now(), outcome: .acknowledged,
                transactionID: result.transactionID, token: "t0", writes: writes, text: "setup"))
        let expected = Dictionary(uniqueKeysWithValues: universe.collections.map { ($0.name, UInt64($0.documents.count)) })
        let deadline = recorder.now() + 60
        for node in cluster.nodes {
            while true {
                let status = try? await cluster.client(node.index).status()
                let held = Dictionary(status?.collections.map { ($0.name, $0.documents) } ?? [], uniquingKeysWith: { $1 })
                if node.collections.allSatisfy({ held[$0] == expected[$0] }) { break }
                guard recorder.now() < deadline else {
                    throw NodeProcessError(message: "\(node.name) did not receive the setup's documents within 60 s (log: \(node.logPath))")
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        recorder.say("setup: \(universe.slots().count) slots in \(universe.collections.count) collections on every node")
    }

    // MARK: settling

    struct Settled {
        var converged: Bool
        var statuses: [Int: NodeStatus]
        /// Why a node gave no status, by node.
        var errors: [Int: String] = [:]
    }

    /// Waits until, for every collection, the nodes that hold it agree on its digest,
    /// none holds a transaction back or lists one applied in part (completing one takes
    /// an ask and its answer), and every connected peer of every node has acknowledged
    /// all that node's log (`lag_deltas` 0: a peer that received whole transactions and
    /// has not committed them yet shows in nothing else), twice in a row; or until
    /// `plan.settle` runs out.
    func settle(_ cluster: Cluster) async -> Settled {
        let deadline = recorder.now() + plan.settle
        var agreeing = 0
        var statuses: [Int: NodeStatus] = [:]
        var errors: [Int: String] = [:]
        while true {
            statuses = [:]
            errors = [:]
            for node in cluster.nodes.indices {
                let client = cluster.client(node, timeout: 30)
                do {
                    statuses[node] = try await withTimeout(30) { try await client.status(digests: true) }
                } catch {
                    errors[node] = "\(error)"
                }
            }
            let quiet =
                errors.isEmpty
                && statuses.values.allSatisfy { status in
                    status.transactions.waiting.isEmpty && status.transactions.partial.isEmpty
                        && status.peers.allSatisfy { $0.state != "connected" || ($0.lagDeltas ?? 0) == 0 }
                }
            if quiet && disagreements(cluster, statuses).isEmpty { agreeing += 1 } else { agreeing = 0 }
            if agreeing >= 2 { return Settled(converged: true, statuses: statuses) }
            if recorder.now() >= deadline { return Settled(converged: false, statuses: statuses, errors: errors) }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// Collections whose holders' digests differ, with each holder's digest.
    func disagreements(_ cluster: Cluster, _ statuses: [Int: NodeStatus]) -> [(collection: String, digests: [Int: String])] {
        universe.names.compactMap { name in
            var digests: [Int: String] = [:]
            // A node that gave no status is a finding of its own (`nodes`).
            for node in cluster.nodes where node.collections.contains(name) && !node.excused.contains(name) {
                guard let status = statuses[node.index] else { continue }
                digests[node.index] = status.collections.first { $0.name == name }.map { $0.digest ?? "-" } ?? "(empty)"
            }
            return Set(digests.values).count > 1 ? (name, digests) : nil
        }
    }

    // MARK: checks

    struct Report {
        var findings: [Finding] = []
        /// What each check looked at: slots, counters, reads, attachments…
        var checked: [Finding.Check: Int] = [:]
        var settleConverged = false
    }

    func check(_ cluster: Cluster, settled: Settled) async -> Report {
        var report = Report()
        report.settleConverged = settled.converged
        let midRun = recorder.history.reads.count
        var finals: [Read] = []
        for node in cluster.nodes {
            let collections = node.collections.subtracting(node.excused)
            do {
                let read = try await Workload(universe: universe, kinds: [], cluster: cluster, recorder: recorder)
                    .read(node.index, collections: collections, timeout: 60)
                recorder.record(read)
                finals.append(read)
            } catch {
                report.findings.append(Finding(.nodes, node: node.index, "the final read failed: \(error) (log: \(node.logPath))"))
            }
        }
        let checker = Checker(history: recorder.history)
        let disagreements = disagreements(cluster, settled.statuses)
        report.checked[.digests] = universe.names.count
        for (collection, digests) in disagreements {
            let list = digests.sorted { $0.key < $1.key }.map { "n\($0.key) \($0.value.prefix(12))" }.joined(separator: ", ")
            report.findings.append(Finding(.digests, documents: [collection], "the nodes disagree on \(collection): \(list)"))
        }
        let held = Dictionary(grouping: finals.flatMap { read in read.values.map { (slot: $0.key, node: read.node, value: $0.value) } }) { $0.slot }
        for (slot, values) in held.sorted(by: { $0.key < $1.key }) {
            report.checked[.acknowledgedWrites, default: 0] += values.count
            report.findings += checker.checkFinal(slot, holds: values.map { ($0.node, $0.value) })
        }
        for read in finals {
            for (slot, value) in read.counters.sorted(by: { $0.key < $1.key }) {
                report.checked[.counters, default: 0] += 1
                if let finding = checker.checkCounter(slot, holds: value, node: read.node) { report.findings.append(finding) }
            }
            report.findings += checker.halfTransactions(in: read, excludingEvicted: false)
        }
        let reads = recorder.history.reads
        report.checked[.halfTransactions] = reads.count
        var seenHalf: Set<String> = []
        for read in reads.prefix(midRun) {
            for finding in checker.halfTransactions(in: read, excludingEvicted: true) where seenHalf.insert(finding.message.components(separatedBy: " saw ").last ?? "").inserted {
                report.findings.append(finding)
            }
            for (slot, value) in read.values {
                report.checked[.unknownValues, default: 0] += 1
                if let finding = checker.unknown(value, in: slot, node: read.node) { report.findings.append(finding) }
            }
        }
        report.checked[.nodes] = cluster.nodes.count
        // A node that crashed and was started again (or crashed while it stopped) leaves
        // nothing in the data to see: its log says so.
        for node in cluster.nodes {
            let log = (try? String(contentsOfFile: node.logPath, encoding: .utf8)) ?? ""
            if let line = log.split(separator: "\n").first(where: { $0.contains("Fatal error") || $0.contains("Program crashed") }) {
                report.findings.append(Finding(.nodes, node: node.index, "crashed: \(line) (log: \(node.logPath))"))
            }
        }
        for (node, error) in settled.errors.sorted(by: { $0.key < $1.key }) {
            report.findings.append(
                Finding(.nodes, node: node, "status with digests failed at the end: \(error) (log: \(cluster.nodes[node].logPath))"))
        }
        let history = recorder.history
        for (node, status) in settled.statuses.sorted(by: { $0.key < $1.key }) {
            report.checked[.pendingTransactions, default: 0] += 1
            for pending in status.transactions.partial {
                // Its origin's restore threw away the only whole copy: partial is all
                // any node can hold of it now, and the node says so.
                if history.lostToARestore(pending.id) {
                    recorder.say("n\(node) holds transaction \(pending.id) applied in part (\(pending.haveDocuments) of \(pending.needDocuments) documents): a restore of its origin lost the rest")
                    continue
                }
                report.findings.append(
                    Finding(
                        .pendingTransactions, node: node,
                        "transaction \(pending.id) was applied in part (\(pending.haveDocuments) of \(pending.needDocuments) documents, \(Int(pending.ageSeconds)) s ago) and never completed"))
            }
            for pending in status.transactions.waiting {
                report.findings.append(
                    Finding(
                        .pendingTransactions, node: node,
                        "transaction \(pending.id) still waits (\(pending.reason), \(pending.haveDocuments) of \(pending.needDocuments) documents, \(Int(pending.ageSeconds)) s)"))
            }
        }
        await checkAttachments(cluster, finals, &report)
        return report
    }

    /// Every attachment a document names, fetched through each node that holds it: the
    /// bytes must hash to what was put.
    func checkAttachments(_ cluster: Cluster, _ finals: [Read], _ report: inout Report) async {
        let hashes = recorder.attachments
        let bytesMaybeLost = recorder.bytesMaybeLost
        for read in finals {
            for (slot, value) in read.values where slot.field == "a" {
                guard let token = value.token, let hash = hashes[token], !bytesMaybeLost.contains(token) else { continue }
                report.checked[.attachments, default: 0] += 1
                // As a user would, asked again when a fetch fails: one that waited out a
                // peer's answer on a starved machine is not bytes lost. Three failures are.
                var failures: [String] = []
                for attempt in 1...3 {
                    let client = cluster.client(read.node, timeout: 60)
                    let bytes = Locked([UInt8]())
                    do {
                        try await withTimeout(60) {
                            try await client.getAttachment(hash: hash) { part in bytes.withLock { $0 += part.data } }
                        }
                        let got = AdminClient.attachmentHash(of: bytes.withLock { $0 })
                        if got != hash {
                            report.findings.append(
                                Finding(.attachments, node: read.node, documents: [slot.document], "\(slot) names \(hash.prefix(12)), but the bytes served hash to \(got.prefix(12))"))
                        }
                        failures = []
                        break
                    } catch {
                        failures.append("\(error)")
                        if attempt < 3 { try? await Task.sleep(for: .seconds(5)) }
                    }
                }
                if let last = failures.last {
                    report.findings.append(
                        Finding(.attachments, node: read.node, documents: [slot.document], "\(slot) names \(hash.prefix(12)) (\(token)), which the node could not serve, asked three times 5 s apart: \(last)"))
                }
            }
        }
    }

    // MARK: output

    func summary(_ report: Report, passed: Bool, directory: String, cluster: Cluster) -> String {
        let outcomes = recorder.outcomes
        func total(_ outcome: Mutation.Outcome) -> Int { outcomes.values.reduce(0) { $0 + ($1[outcome] ?? 0) } }
        let faults = recorder.faults
        let failing = Dictionary(grouping: report.findings, by: \.check)
        if plan.json {
            let object: [String: Any] = [
                "seed": "\(plan.seed)", "passed": passed, "duration": plan.duration, "nodes": plan.nodes,
                "settled": report.settleConverged,
                "operations": [
                    "acknowledged": total(.acknowledged), "unanswered": total(.indeterminate), "refused": total(.refused),
                    "byKind": outcomes.mapValues { Dictionary(uniqueKeysWithValues: $0.map { ($0.key.rawValue, $0.value) }) },
                ],
                "faults": faults,
                "checks": Dictionary(uniqueKeysWithValues: Finding.Check.allCases.map { check in
                    (check.rawValue, ["checked": report.checked[check] ?? 0, "failed": failing[check]?.count ?? 0])
                }),
                "findings": report.findings.map { finding -> [String: Any] in
                    ["check": finding.check.rawValue, "node": finding.node as Any, "documents": finding.documents, "message": finding.message]
                },
                "directory": passed && !plan.keep ? NSNull() : directory,
                "logs": passed && !plan.keep ? [] : cluster.nodes.map(\.logPath),
            ]
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
            return String(decoding: data, as: UTF8.self)
        }
        var lines: [String] = []
        lines.append(
            "shoal-check: \(total(.acknowledged)) operations acknowledged, \(total(.indeterminate)) unanswered, \(total(.refused)) refused; "
                + outcomes.keys.sorted().map { "\($0) \(outcomes[$0]?[.acknowledged] ?? 0)" }.joined(separator: ", "))
        lines.append(
            "shoal-check: \(faults.values.reduce(0, +)) faults: "
                + (faults.isEmpty ? "none" : faults.keys.sorted().map { "\($0) \(faults[$0]!)" }.joined(separator: ", ")))
        for check in Finding.Check.allCases {
            let count = failing[check]?.count ?? 0
            let checked = report.checked[check] ?? 0
            lines.append("shoal-check: \(count == 0 ? "passed" : "FAILED"): \(check.rawValue) (\(checked) checked\(count == 0 ? "" : ", \(count) failed"))")
        }
        for (check, findings) in failing.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            for finding in findings.prefix(12) { lines.append("  \(finding)") }
            if findings.count > 12 { lines.append("  … and \(findings.count - 12) more \(check.rawValue) findings") }
        }
        if passed {
            lines.append("shoal-check: PASSED, seed \(plan.seed)")
        } else {
            lines.append("shoal-check: FAILED, seed \(plan.seed); the run's directory is kept: \(directory)")
            for node in cluster.nodes { lines.append("  n\(node.index) log: \(node.logPath)") }
            lines.append("  every operation and fault: \(directory)/history.txt")
        }
        return lines.joined(separator: "\n")
    }

    /// Every operation with its outcome and writes, and every line printed, for a look after a failure.
    func writeRecord(to path: String) {
        let history = recorder.history
        let checker = Checker(history: history)
        var text = recorder.lines.joined(separator: "\n") + "\n\n"
        for operation in history.operations.sorted(by: { $0.id < $1.id }) {
            let writes = operation.writes.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            let increments = operation.increments.sorted { $0.key < $1.key }.map { "\($0.key)+=\($0.value)" }.joined(separator: " ")
            text += "\(checker.describe(operation)): \(operation.text) | \(writes) \(increments)\n"
        }
        try? text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    // MARK: processes

    static func run(_ command: String, _ arguments: [String]) -> Int32 {
        guard let process = try? ChildProcess(command, arguments) else { return -1 }
        return process.wait(timeout: 60)
    }

    /// Ctrl-C stops every node before the checker exits, so none is left running, and
    /// drops the hubs' database, so none is left on the server.
    static func stopOnInterrupt(_ cluster: Cluster, hubDatabase: HubDatabase? = nil) {
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler {
            emit("shoal-check: interrupted; stopping the nodes")
            cluster.shutdown()
            if let hubDatabase {
                // The process exits next: the drop is waited for here, 15 s at most.
                let dropped = DispatchSemaphore(value: 0)
                Task {
                    await hubDatabase.drop()
                    dropped.signal()
                }
                _ = dropped.wait(timeout: .now() + 15)
            }
            exit(130)
        }
        source.resume()
        interruptSource.withLock { $0 = source }
    }

    /// Kept for as long as the process runs.
    static let interruptSource = Locked<(any DispatchSourceSignal)?>(nil)
}

import Foundation
import ShoalCRDT
import ShoalCheck
import ShoalNode
import ShoalSync
import ShoalTesting

#if canImport(Glibc)
import Glibc
#endif

/// The kinds of fault a run injects, by the names `--faults` takes.
enum FaultKind: String, CaseIterable, Sendable {
    /// A link reset and refused, blackholed (bytes dropped, connection kept) or
    /// stalled (bytes held back), each way or one, for 1 to 10 s.
    case link
    /// kill -9, and a start again 0.5 to 5 s later.
    case kill
    /// SIGSTOP for 0.5 to 6 s, then SIGCONT.
    case freeze
    /// SIGTERM, then a start at once.
    case restart
    /// A node's data directory replaced by a copy taken at an earlier kill.
    case restore
    /// `shoal compact` on a node, and every node compacting on its own every 15 s.
    case compact
    /// A node's wall clock set 90 s or 5 min off, or 3 h ahead (past the drift limit), through libfaketime.
    case skew
    /// The disk of one node's data directory (a 512 MiB tmpfs) filled for 1 to 6 s.
    case disk
    /// One node started with a smaller frame and document size limit than the others.
    case limits
    /// `shoal subscribe` on a node to a collection it does not hold (one of the
    /// workload's, or one nobody writes), and `shoal unsubscribe` 1 to 10 s later: the
    /// mesh's relays widen and narrow for it while everything else goes on.
    case interest
    /// `shoal unsubscribe` on a node from one of its own collections, and `shoal
    /// subscribe` again 1 to 10 s later: it must then catch up on what it missed,
    /// although it held the collection's history up to the drop, while its relays keep
    /// carrying the collection for its neighbours.
    case narrow

    /// The known bug this fault finds on the code as it is, not fixed yet: `--skip-known`
    /// leaves it out, as CI does. Remove the entry with the fix, so CI runs the fault again.
    var knownBug: String? {
        switch self {
        default: nil
        }
    }

    /// Faults that need no injection during the run: how nodes are started.
    var atStart: Bool { self == .limits }

    var weight: Int {
        switch self {
        case .link: 6
        case .kill: 3
        case .freeze: 2
        case .restart: 1
        case .restore: 1
        case .compact: 2
        case .skew: 2
        case .disk: 1
        case .limits: 0
        case .interest: 2
        case .narrow: 2
        }
    }
}

/// Injects faults at random moments and undoes each after a while; `heal()` undoes
/// what is still in force at the end.
final class FaultInjector: @unchecked Sendable {  // `pending` and `busy` behind `state`
    let kinds: [FaultKind]
    let cluster: Cluster
    let recorder: Recorder
    let workload: Workload
    /// The node whose data directory is on a small tmpfs, and its ballast file.
    let diskNode: (node: Int, ballast: String)?
    /// The hubs' database, with hubs.
    let hubDatabase: HubDatabase?

    private struct State {
        /// Undo actions, by when they are due.
        var pending: [(due: Double, label: String, node: Int?, action: @Sendable () async -> Void)] = []
        /// Nodes some pending action will act on: no other fault picks them meanwhile.
        var busy: Set<Int> = []
        var busyLinks: Set<Int> = []
        /// When the hubs' database was copied, and the hubs' epoch then.
        var hubCopy: (epoch: Int, at: Double)?
    }
    private let state = Locked(State())

    init(
        kinds: [FaultKind], cluster: Cluster, recorder: Recorder, workload: Workload, diskNode: (node: Int, ballast: String)?,
        hubDatabase: HubDatabase? = nil
    ) {
        self.kinds = kinds.filter { !$0.atStart && $0.weight > 0 }
        self.cluster = cluster
        self.recorder = recorder
        self.workload = workload
        self.diskNode = diskNode
        self.hubDatabase = hubDatabase
    }

    private func later(_ delay: Double, _ label: String, node: Int? = nil, link: Int? = nil, _ action: @escaping @Sendable () async -> Void) {
        let due = recorder.now() + delay
        state.withLock { s in
            s.pending.append((due, label, node, action))
            if let node { s.busy.insert(node) }
            if let link { s.busyLinks.insert(link) }
        }
    }

    private func release(node: Int? = nil, link: Int? = nil) {
        state.withLock { s in
            if let node { s.busy.remove(node) }
            if let link { s.busyLinks.remove(link) }
        }
    }

    /// Runs the undo actions that are due.
    func runDue(all: Bool = false) async {
        let now = recorder.now()
        let due = state.withLock { s -> [(due: Double, label: String, node: Int?, action: @Sendable () async -> Void)] in
            let due = s.pending.filter { all || $0.due <= now }.sorted { $0.due < $1.due }
            s.pending.removeAll { all || $0.due <= now }
            return due
        }
        for item in due { await item.action() }
    }

    /// Injects faults until `deadline`, one every 0.5 to 3 s, running undo actions as they fall due.
    func run(until deadline: Double, _ random: inout SplitMix) async {
        guard !kinds.isEmpty else { return }
        var next = recorder.now() + Double.random(in: 0.5...3, using: &random)
        while recorder.now() < deadline {
            await runDue()
            if recorder.now() >= next {
                await inject(pick(&random), &random)
                next = recorder.now() + Double.random(in: 0.5...3, using: &random)
            }
            try? await Task.sleep(for: .milliseconds(100))
        }
    }

    private func pick(_ random: inout SplitMix) -> FaultKind {
        let total = kinds.reduce(0) { $0 + $1.weight }
        var roll = Int.random(in: 0..<total, using: &random)
        for kind in kinds {
            roll -= kind.weight
            if roll < 0 { return kind }
        }
        return kinds[0]
    }

    /// A running node no pending action holds, or nil.
    private func freeNode(_ random: inout SplitMix, _ allowed: (Int) -> Bool = { _ in true }) -> Int? {
        let busy = state.withLock { $0.busy }
        return cluster.running.filter { !busy.contains($0) && allowed($0) }.randomElement(using: &random)
    }

    private func inject(_ kind: FaultKind, _ random: inout SplitMix) async {
        switch kind {
        case .link:
            let busy = state.withLock { $0.busyLinks }
            guard let index = cluster.links.indices.filter({ !busy.contains($0) }).randomElement(using: &random) else { return }
            let link = cluster.links[index]
            let flows: [(LoopbackProxy.Mode, String)] = [
                (LoopbackProxy.Mode(refused: true), "reset and refused"),
                (LoopbackProxy.Mode(forward: .blackhole, backward: .blackhole), "blackholed"),
                (LoopbackProxy.Mode(forward: .blackhole), "blackholed one way (dialer to listener)"),
                (LoopbackProxy.Mode(backward: .blackhole), "blackholed one way (listener to dialer)"),
                (LoopbackProxy.Mode(forward: .stall, backward: .stall), "stalled"),
                (LoopbackProxy.Mode(backward: .stall), "stalled one way (listener to dialer)"),
            ]
            let (mode, words) = flows.randomElement(using: &random)!
            let seconds = Double.random(in: 1...10, using: &random)
            link.proxy.set(mode)
            recorder.fault("link", "link \(link.name): \(words) for \(String(format: "%.1f", seconds)) s")
            later(seconds, "heal", link: index) { [self] in
                link.proxy.restore()
                release(link: index)
                recorder.say("link \(link.name): healed")
            }
        case .kill:
            guard let node = freeNode(&random) else { return }
            // A hub's data is in PostgreSQL: no directory of it to copy.
            let copy = kinds.contains(.restore) && !cluster.nodes[node].isHub && Bool.random(using: &random)
            let at = recorder.now()
            cluster.kill(node)
            if copy { try? cluster.takeCopy(node, at: at) }
            let seconds = Double.random(in: 0.5...5, using: &random)
            recorder.fault("kill", "kill -9 n\(node)\(copy ? " (its data directory copied aside)" : ""); start again in \(String(format: "%.1f", seconds)) s")
            later(seconds, "start", node: node) { [self] in
                await startAgain(node)
                release(node: node)
            }
        case .freeze:
            guard let node = freeNode(&random) else { return }
            let seconds = Double.random(in: 0.5...6, using: &random)
            cluster.freeze(node)
            recorder.fault("freeze", "SIGSTOP n\(node) for \(String(format: "%.1f", seconds)) s")
            later(seconds, "thaw", node: node) { [self] in
                cluster.thaw(node)
                release(node: node)
                recorder.say("SIGCONT n\(node)")
            }
        case .restart:
            guard let node = freeNode(&random) else { return }
            recorder.fault("restart", "SIGTERM n\(node), then start it again")
            state.withLock { _ = $0.busy.insert(node) }
            await blockingQuietly { [cluster] in cluster.terminate(node) }
            await startAgain(node)
            release(node: node)
        case .restore:
            await restore(&random)
        case .compact:
            guard let node = freeNode(&random) else { return }
            recorder.fault("compact", "shoal compact on n\(node)")
            let client = cluster.client(node, timeout: 60)
            do {
                let progress = try await withTimeout(60) { try await client.compact() }
                recorder.say("n\(node) compacted: \(progress.transactionsRemoved) transactions removed")
            } catch {
                recorder.say("n\(node) compact failed: \(error)")
            }
        case .skew:
            guard let node = cluster.nodes.indices.filter({ cluster.nodes[$0].clockFile != nil }).randomElement(using: &random) else { return }
            let offset = ["+90s", "-90s", "+5m", "-5m", "+3h"].randomElement(using: &random)!
            let seconds = Double.random(in: 3...20, using: &random)
            cluster.skew(node, offset)
            recorder.fault("skew", "n\(node)'s wall clock set \(offset) for \(String(format: "%.1f", seconds)) s")
            later(seconds, "clock") { [self] in
                cluster.skew(node, "+0")
                recorder.say("n\(node)'s wall clock true again")
            }
        case .disk:
            guard let (node, ballast) = diskNode, state.withLock({ !$0.busy.contains(node) }) else { return }
            let seconds = Double.random(in: 1...6, using: &random)
            let filled = Self.fill(directory: cluster.nodes[node].dataDirectory, ballast: ballast)
            recorder.fault("disk", "n\(node)'s disk filled (\(filled / 1024) KiB of ballast) for \(String(format: "%.1f", seconds)) s")
            later(seconds, "disk", node: node) { [self] in
                try? FileManager.default.removeItem(atPath: ballast)
                release(node: node)
                recorder.say("n\(node)'s disk has room again")
            }
        case .limits:
            break
        case .narrow:
            // Not on a hub: its subscriptions are the node's, which every hub shares.
            guard
                let node = freeNode(&random, {
                    !self.cluster.nodes[$0].isHub && !self.cluster.nodes[$0].collections.subtracting(self.cluster.nodes[$0].excused).isEmpty
                })
            else { return }
            let own = cluster.nodes[node].collections.subtracting(cluster.nodes[node].excused).sorted()
            let collection = own.randomElement(using: &random)!
            await narrow(node, collection, for: Double.random(in: 1...10, using: &random))
        case .interest:
            guard let node = freeNode(&random, { !self.cluster.nodes[$0].isHub }) else { return }
            let held = cluster.nodes[node].collections
            let others = workload.universe.names.filter { !held.contains($0) }
            let collection = others.randomElement(using: &random) ?? "unwritten"
            let query = "SELECT * FROM \(collection)"
            let seconds = Double.random(in: 1...10, using: &random)
            let client = cluster.client(node, timeout: 10)
            do {
                _ = try await withTimeout(10) { try await client.subscribe(query) }
                recorder.fault("interest", "n\(node) subscribes to \(collection) for \(String(format: "%.1f", seconds)) s")
            } catch {
                recorder.say("n\(node) could not subscribe to \(collection): \(error)")
                return
            }
            later(seconds, "unsubscribe", node: node) { [self] in
                do {
                    _ = try await withTimeout(10) { [cluster] in try await cluster.client(node, timeout: 10).unsubscribe(query) }
                    recorder.say("n\(node) unsubscribed from \(collection)")
                } catch {
                    recorder.say("n\(node) could not unsubscribe from \(collection): \(error)")
                }
                release(node: node)
            }
        }
    }

    /// `narrow`: node `node` drops `collection`, one of its own, for `seconds`.
    private func narrow(_ node: Int, _ collection: String, for seconds: Double) async {
        let query = "SELECT * FROM \(collection)"
        cluster.narrow(node, collection)
        do {
            _ = try await withTimeout(10) { [cluster] in try await cluster.client(node, timeout: 10).unsubscribe(query) }
            recorder.fault("narrow", "n\(node) drops its own \(collection) for \(String(format: "%.1f", seconds)) s")
        } catch {
            recorder.say("n\(node) could not drop \(collection): \(error)")
            return
        }
        // The node is not held busy: a kill, restart or restore meanwhile brings back its
        // configured subscriptions, which is part of what this fault tries.
        later(seconds, "subscribe") { [self] in await subscribeAgain(node, collection) }
    }

    /// Subscribes node `node` to `collection` again after `narrow`, trying again every 2 s
    /// while it does not answer: a node frozen meanwhile keeps its narrowed subscription
    /// (only a restart brings back the configured ones), and would rightly lack the
    /// collection at the end.
    private func subscribeAgain(_ node: Int, _ collection: String, attempt: Int = 1) async {
        do {
            _ = try await withTimeout(10) { [cluster] in
                try await cluster.client(node, timeout: 10).subscribe("SELECT * FROM \(collection)")
            }
            recorder.say("n\(node) subscribes to \(collection) again")
        } catch {
            recorder.say("n\(node) could not subscribe to \(collection) again (attempt \(attempt)): \(error)")
            guard attempt < 20 else { return }
            later(2, "subscribe") { [self] in await subscribeAgain(node, collection, attempt: attempt + 1) }
        }
    }

    /// Starts a node again, saying so (and why not, when it cannot).
    func startAgain(_ node: Int) async {
        do {
            try await blocking { [cluster] in try cluster.start(node) }
            recorder.say("n\(node) started")
        } catch {
            recorder.say("n\(node) did not start: \(error)")
        }
    }

    /// A node's data directory replaced by its copy: the writes it acknowledged after the
    /// copy that no other node holds now may be gone for good; those another node holds
    /// must survive. With no copy yet, one is taken (at a kill) instead.
    private func restore(_ random: inout SplitMix) async {
        if let hubDatabase, Bool.random(using: &random) {
            await restoreHubs(hubDatabase, &random)
            return
        }
        let device = { (node: Int) in !self.cluster.nodes[node].isHub }
        guard let node = freeNode(&random, { self.cluster.copy(of: $0) != nil }) ?? freeNode(&random, device) else { return }
        state.withLock { _ = $0.busy.insert(node) }
        defer { release(node: node) }
        guard let copy = cluster.copy(of: node) else {
            let at = recorder.now()
            cluster.kill(node)
            try? cluster.takeCopy(node, at: at)
            recorder.fault("kill", "kill -9 n\(node) to copy its data directory aside; start again")
            await startAgain(node)
            return
        }
        cluster.kill(node)
        let killedAt = recorder.now()
        // What the other nodes hold now, as far as they answer.
        var held: [Slot: Set<String>] = [:]
        for other in cluster.running where other != node {
            let collections = cluster.nodes[other].collections
            if let read = try? await workload.read(other, collections: collections) {
                recorder.record(workload.recordable(read))
                Self.note(read, in: &held)
            }
        }
        let history = recorder.history
        let sent = Self.sentTimes(history)
        let epoch = cluster.epoch(node)
        var lost: Set<Int> = [], lostInPart: Set<Int> = []
        var attachments: Set<String> = []
        for operation in history.operations where operation.sent.node == node && operation.outcome != .refused {
            // Acknowledged (or sent) after the copy, in the lineage being thrown away.
            let after = operation.acknowledgedAt.map { $0 >= copy.at } ?? (operation.sent.time >= copy.at)
            guard after, history.precedes(operation.sent, Moment(node: node, epoch: epoch, time: killedAt)) || operation.sent.epoch == epoch
            else { continue }
            switch History.loss(of: operation, held: held, sentAt: { sent[$0] }) {
            case .whole: lost.insert(operation.id)
            case .inPart: lostInPart.insert(operation.id)
            case .none: break
            }
            if operation.kind == OperationKind.attachment.rawValue { attachments.insert(operation.token) }
        }
        recorder.markMaybeLost(lost, inPart: lostInPart)
        // Attachment bytes travel when asked for (DATA_MODEL.md, ATTACHMENT): a document
        // another node holds may name bytes that only this node held.
        let bytesLost = await bytesHeldNowhere(attachments, except: node)
        recorder.markBytesMaybeLost(bytesLost)
        let bytesNote = bytesLost.isEmpty ? "" : "; so may the bytes of \(bytesLost.count) attachment\(bytesLost.count == 1 ? "" : "s") other nodes name"
        let newEpoch = recorder.restore(from: copy.epoch, copiedAt: copy.at)
        // Half the time into the same files (a backup copied over them, a rolled-back
        // machine): only a peer can then tell the store went back (DATA_MODEL.md §4.5).
        let inPlace = Bool.random(using: &random)
        do {
            try cluster.restoreCopy(node, epoch: newEpoch, inPlace: inPlace)
        } catch {
            recorder.say("n\(node): restoring the copy failed: \(error)")
        }
        recorder.fault(
            "restore",
            "kill -9 n\(node), its data directory restored \(inPlace ? "in place " : "")from the copy taken at \(String(format: "%.2f", copy.at)) s (\(lost.count) of its writes since, held by no other node, may be lost, \(lostInPart.count) in part\(bytesNote))")
        await startAgain(node)
    }

    /// The hubs' database replaced by its copy, as a backup of the node's database
    /// restored: what the hubs acknowledged after the copy that no device holds now may
    /// be gone for good; what a device holds must come back (DATA_MODEL.md §4.5, a hub's
    /// database repaired). Half the time every hub is killed meanwhile; otherwise it goes
    /// back under running hubs, as a failover that lost commits: they are frozen while
    /// it is replaced (their connections to it ended), so that they finish nothing
    /// meanwhile, and thawed on it with their sessions and the devices' links kept, so
    /// that they must find it themselves (docs/ARCHITECTURE.md, "Hubs on PostgreSQL");
    /// of several, one may be killed and started on it again, a hub that knows less. With
    /// no copy yet, one is taken, with every hub down.
    private func restoreHubs(_ database: HubDatabase, _ random: inout SplitMix) async {
        let hubs = cluster.hubs
        let free = state.withLock { s in hubs.allSatisfy { !s.busy.contains($0) } }
        guard free, hubs.allSatisfy({ cluster.life($0) == .running }) else { return }
        state.withLock { s in s.busy.formUnion(hubs) }
        defer { state.withLock { s in s.busy.subtract(hubs) } }
        let names = hubs.map { "n\($0)" }.joined(separator: ", ")
        let underRunning = state.withLock { $0.hubCopy } != nil && Bool.random(using: &random)
        let killed = !underRunning ? hubs : hubs.count > 1 && Bool.random(using: &random) ? [hubs.randomElement(using: &random)!] : []
        for hub in hubs where !killed.contains(hub) { cluster.freeze(hub) }
        for hub in killed { cluster.kill(hub) }
        let killedAt = recorder.now()
        guard let copy = state.withLock({ $0.hubCopy }) else {
            do {
                try await database.takeCopy()
                state.withLock { $0.hubCopy = (cluster.epoch(hubs[0]), killedAt) }
                recorder.fault("kill", "kill -9 \(names) to copy the hubs' database aside; start them again")
            } catch {
                recorder.say("copying the hubs' database failed: \(error)")
            }
            for hub in hubs { await startAgain(hub) }
            return
        }
        // What the devices hold now, as far as they answer.
        var held: [Slot: Set<String>] = [:]
        for device in cluster.running where !cluster.nodes[device].isHub {
            if let read = try? await workload.read(device, collections: cluster.nodes[device].collections) {
                recorder.record(workload.recordable(read))
                Self.note(read, in: &held)
            }
        }
        let history = recorder.history
        let sent = Self.sentTimes(history)
        let epoch = cluster.epoch(hubs[0])
        var lost: Set<Int> = [], lostInPart: Set<Int> = []
        var attachments: Set<String> = []
        for operation in history.operations where cluster.nodes[operation.sent.node].isHub && operation.outcome != .refused {
            let after = operation.acknowledgedAt.map { $0 >= copy.at } ?? (operation.sent.time >= copy.at)
            guard after, history.precedes(operation.sent, Moment(node: hubs[0], epoch: epoch, time: killedAt)) || operation.sent.epoch == epoch
            else { continue }
            switch History.loss(of: operation, held: held, sentAt: { sent[$0] }) {
            case .whole: lost.insert(operation.id)
            case .inPart: lostInPart.insert(operation.id)
            case .none: break
            }
            if operation.kind == OperationKind.attachment.rawValue { attachments.insert(operation.token) }
        }
        recorder.markMaybeLost(lost, inPart: lostInPart)
        // A hub keeps attachment bytes in the database too: those no device serves may be gone.
        let bytesLost = await bytesHeldNowhere(attachments, except: hubs[0])
        recorder.markBytesMaybeLost(bytesLost)
        let newEpoch = recorder.restore(from: copy.epoch, copiedAt: copy.at)
        do {
            try await database.restoreCopy()
            for hub in hubs { cluster.setEpoch(hub, newEpoch) }
        } catch {
            recorder.say("restoring the hubs' database failed: \(error)")
        }
        let bytesNote = bytesLost.isEmpty ? "" : "; so may the bytes of \(bytesLost.count) attachment\(bytesLost.count == 1 ? "" : "s") other nodes name"
        let how =
            !underRunning
            ? "kill -9 \(names), the hubs' database restored"
            : "SIGSTOP \(names)\(killed.map { ", kill -9 n\($0)" }.joined()), the hubs' database restored under them"
        recorder.fault(
            "restore",
            "\(how) from the copy taken at \(String(format: "%.2f", copy.at)) s (\(lost.count) of their writes since, held by no device, may be lost, \(lostInPart.count) in part\(bytesNote))")
        for hub in hubs where !killed.contains(hub) {
            cluster.thaw(hub)
            recorder.say("SIGCONT n\(hub)")
        }
        for hub in killed { await startAgain(hub) }
    }

    /// Of these attachment writes' tokens, those whose bytes no running node but `node`
    /// serves: each asked of every other node at once (a node that does not hold them
    /// asks its peers; `node` is down, so only a copy elsewhere answers).
    private func bytesHeldNowhere(_ tokens: Set<String>, except node: Int) async -> Set<String> {
        let hashes = recorder.attachments
        let others = cluster.running.filter { $0 != node }
        let served = await withTaskGroup(of: String?.self) { group in
            for token in tokens {
                guard let hash = hashes[token] else { continue }
                for other in others {
                    let client = cluster.client(other, timeout: 15)
                    group.addTask {
                        do {
                            try await withTimeout(15) { try await client.getAttachment(hash: hash) { _ in } }
                            return token
                        } catch {
                            return nil
                        }
                    }
                }
            }
            var served: Set<String> = []
            for await token in group { if let token { served.insert(token) } }
            return served
        }
        return tokens.filter { hashes[$0] != nil }.subtracting(served)
    }

    /// When each operation was sent, by its token.
    static func sentTimes(_ history: History) -> [String: Double] {
        Dictionary(history.operations.map { ($0.token, $0.sent.time) }, uniquingKeysWith: min)
    }

    /// Adds the tokens `read` shows, slot by slot, to `held`.
    static func note(_ read: Read, in held: inout [Slot: Set<String>]) {
        for (slot, value) in read.values {
            if let token = value.token { held[slot, default: []].insert(token) }
        }
    }

    /// Fills the filesystem of `directory` to within 64 KiB with a ballast file; returns its size.
    static func fill(directory: String, ballast: String) -> Int {
        var stats = statvfs()
        guard statvfs(directory, &stats) == 0 else { return 0 }
        let free = Int(stats.f_bavail) * Int(stats.f_frsize)
        let size = max(0, free - 64 * 1024)
        let fd = open(ballast, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        let chunk = [UInt8](repeating: 0, count: 1 << 20)
        var written = 0
        while written < size {
            let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, min(chunk.count, size - written)) }
            if n <= 0 { break }
            written += n
        }
        return written
    }

    /// Undoes every fault still in force: links healed, nodes thawed and started, disks freed.
    func heal() async {
        await runDue(all: true)
        for link in cluster.links { link.proxy.restore() }
        for node in cluster.nodes.indices {
            switch cluster.life(node) {
            case .frozen: cluster.thaw(node)
            case .down: await startAgain(node)
            case .running: break
            }
        }
        // What failed while a node was frozen or down tries again, now that all run.
        for _ in 0..<20 where state.withLock({ !$0.pending.isEmpty }) { await runDue(all: true) }
    }
}

/// Runs blocking work on a thread of its own, ignoring what it throws.
func blockingQuietly(_ body: @escaping @Sendable () throws -> Void) async {
    _ = try? await blocking(body)
}

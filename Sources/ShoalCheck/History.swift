/// One field of one document the checker writes: the unit its verdicts are about.
///
/// Documents have `_id`s unique across collections (`r0`, `p1`, `c2`), so a slot
/// names its collection through `Universe`. A map entry is the field `m.k0`.
public struct Slot: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var document: String
    public var field: String

    public init(_ document: String, _ field: String) {
        self.document = document
        self.field = field
    }

    public var description: String { "\(document).\(field)" }

    public static func < (a: Slot, b: Slot) -> Bool { (a.document, a.field) < (b.document, b.field) }
}

/// What a slot holds, as the checker sees it: the token of the operation that wrote
/// it, or nothing.
public enum SlotValue: Hashable, Sendable, CustomStringConvertible {
    case token(String)
    case absent

    public var description: String {
        switch self {
        case .token(let token): token
        case .absent: "(absent)"
        }
    }

    public var token: String? {
        if case .token(let token) = self { return token }
        return nil
    }
}

/// A moment on one node: real time (seconds since the run began) in one of its
/// epochs. A node's epoch changes when its data directory is restored from a copy.
public struct Moment: Hashable, Sendable {
    public var node: Int
    public var epoch: Int
    public var time: Double

    public init(node: Int, epoch: Int, time: Double) {
        self.node = node
        self.epoch = epoch
        self.time = time
    }
}

/// A write operation sent to a node and what came of it.
public struct Mutation: Sendable, Identifiable {
    public enum Outcome: String, Sendable {
        /// `exec` (or COMMIT) answered: the transaction committed.
        case acknowledged
        /// No answer (a timeout, a connection lost): it may or may not have committed.
        case indeterminate
        /// The node answered with an error: nothing of it was written, so its token
        /// must never appear.
        case refused
    }

    /// The kind of the operation that creates every document before the others start:
    /// every node held it before any other was sent, so every other write follows it.
    public static let setup = "setup"

    public var id: Int
    /// `upsert`, `update`, `transaction`, … as the workload names them.
    public var kind: String
    /// Where it was sent, and when.
    public var sent: Moment
    /// When the answer came (nil unless acknowledged).
    public var acknowledgedAt: Double?
    public var outcome: Outcome
    /// The transaction ID the node answered with.
    public var transactionID: String?
    /// The token its value writes carry: unique to this operation.
    public var token: String
    /// What it wrote to each slot: its token, or `.absent` (UNSET, DELETE). For an
    /// acknowledged operation, exactly what it wrote; for an indeterminate one, what
    /// it meant to.
    public var writes: [Slot: SlotValue]
    /// Writes that may not have happened even if the operation committed (an UPDATE
    /// whose document the node may not have held): not expected together with the rest.
    public var uncertain: Set<Slot> = []
    /// Counter increments, by counter slot.
    public var increments: [Slot: Int64] = [:]
    /// Set when a restore from an earlier copy may legitimately have lost it: an
    /// acknowledged write of the restored node after the copy that no other node held.
    public var maybeLost = false
    /// Set when a restore may legitimately have lost part of it: an acknowledged write of
    /// the restored node after the copy, some of whose writes other nodes held, and not
    /// all (`History.loss(of:held:sentAt:)`). Those nodes may hold it applied in part for good.
    public var maybeLostInPart = false
    /// The statements, for messages.
    public var text: String

    public init(
        id: Int, kind: String, sent: Moment, acknowledgedAt: Double?, outcome: Outcome, transactionID: String?,
        token: String, writes: [Slot: SlotValue], uncertain: Set<Slot> = [], increments: [Slot: Int64] = [:],
        text: String
    ) {
        self.id = id
        self.kind = kind
        self.sent = sent
        self.acknowledgedAt = acknowledgedAt
        self.outcome = outcome
        self.transactionID = transactionID
        self.token = token
        self.writes = writes
        self.uncertain = uncertain
        self.increments = increments
        self.text = text
    }

    /// The moment the node answered, on the node it ran on.
    public var acknowledged: Moment? {
        acknowledgedAt.map { Moment(node: sent.node, epoch: sent.epoch, time: $0) }
    }

    /// Slots it certainly wrote its token to, had it committed at all.
    public var certainTokenSlots: [Slot] {
        writes.filter { $0.value == .token(token) && !uncertain.contains($0.key) }.map(\.key).sorted()
    }
}

/// A read of every slot on one node, in one snapshot.
public struct Read: Sendable {
    public var node: Int
    public var epoch: Int
    public var startedAt: Double
    public var finishedAt: Double
    /// The slots this node is expected to hold (its subscriptions), with what it held.
    public var values: [Slot: SlotValue]
    /// Counter values, by counter slot (nil: the field is missing).
    public var counters: [Slot: Double?] = [:]
    /// Transaction IDs the node said (status, before or after the read) it applied in part.
    public var partial: Set<String> = []

    public init(node: Int, epoch: Int, startedAt: Double, finishedAt: Double, values: [Slot: SlotValue]) {
        self.node = node
        self.epoch = epoch
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.values = values
    }

    public var finished: Moment { Moment(node: node, epoch: epoch, time: finishedAt) }
}

/// An EVICT that ran on a node.
public struct Eviction: Sendable {
    public var at: Moment
    public var documents: Set<String>

    public init(at: Moment, documents: Set<String>) {
        self.at = at
        self.documents = documents
    }
}

/// Everything that happened in a run, as the checker needs it: operations with their
/// outcomes, reads, evictions, and each node's epochs.
///
/// Events on one node are ordered by real time within its lineage: the epoch it runs
/// and, back through each restore, the epochs it was restored from up to the moment
/// their copy was taken. What a node did after the copy and before the restore is in
/// no lineage of the later epochs: its clock and its data went back.
public struct History: Sendable {
    public private(set) var operations: [Mutation] = []
    public private(set) var reads: [Read] = []
    public private(set) var evictions: [Eviction] = []
    /// For each epoch, the epoch it was restored from and when that one's copy was taken.
    private var parents: [Int: (epoch: Int, copiedAt: Double)] = [:]
    private var nextEpoch = 1
    /// Processes that are one node (hubs on one database), each mapped to the first of
    /// them: what happens on any of them is ordered as on one node, since they share one
    /// store and one clock that never goes back (PROTOCOL.md, hubs).
    public private(set) var sameNode: [Int: Int] = [:]

    /// A history whose processes `oneNode` are one node (empty: every process is a node of its own).
    public init(oneNode: [Int] = []) {
        if let first = oneNode.min() { for process in oneNode { sameNode[process] = first } }
    }

    /// The node `process` belongs to: itself, or the first of the processes it is one node with.
    public func node(of process: Int) -> Int { sameNode[process] ?? process }

    /// A new epoch for a node whose data directory was restored from a copy of
    /// `epoch` taken at `copiedAt`.
    public mutating func restore(from epoch: Int, copiedAt: Double) -> Int {
        let new = nextEpoch
        nextEpoch += 1
        parents[new] = (epoch, copiedAt)
        return new
    }

    public mutating func record(_ operation: Mutation) { operations.append(operation) }
    public mutating func record(_ read: Read) { reads.append(read) }
    public mutating func record(_ eviction: Eviction) { evictions.append(eviction) }

    /// Marks `ids` as writes a restore may have lost, and `inPart` as writes it may have
    /// lost part of.
    public mutating func markMaybeLost(_ ids: Set<Int>, inPart: Set<Int> = []) {
        for index in operations.indices {
            if ids.contains(operations[index].id) { operations[index].maybeLost = true }
            if inPart.contains(operations[index].id) { operations[index].maybeLostInPart = true }
        }
    }

    /// What a restore of the node that acknowledged `operation`, to a copy taken before
    /// it, may have lost of it, given the tokens each slot showed on the other nodes
    /// (`held`) just before.
    public enum Loss: Sendable, Equatable {
        /// Every slot it wrote its token to showed it elsewhere.
        case none
        /// Some did, not all: another node may hold it applied in part for good, its
        /// only whole copy gone.
        case inPart
        /// Its token showed nowhere.
        case whole
    }

    /// What a restore may have lost of `operation` (`Loss`).
    ///
    /// A slot counts as missing its token only where the other nodes were seen to hold
    /// it, and held there only writes sent before this one (`sentAt`, by token): one a
    /// later write may have overwritten, or that no node subscribes to, says nothing, nor
    /// does a slot the write was not sure to write (`uncertain`).
    public static func loss(of operation: Mutation, held: [Slot: Set<String>], sentAt: (String) -> Double?) -> Loss {
        let written = operation.writes.filter { $0.value == .token(operation.token) && !operation.uncertain.contains($0.key) }
            .map(\.key)
        let shown = written.filter { held[$0]?.contains(operation.token) ?? false }
        if shown.isEmpty {
            // One that wrote no token (a DELETE, an UNSET) or an increment only: shown
            // anywhere under its token, or lost.
            return held.values.contains { $0.contains(operation.token) } ? .none : .whole
        }
        let missing = written.contains { slot in
            guard let tokens = held[slot], !tokens.contains(operation.token) else { return false }
            return tokens.allSatisfy { (sentAt($0) ?? .infinity) < operation.sent.time }
        }
        return missing ? .inPart : .none
    }

    /// Whether transaction `id` (`SITE:SEQUENCE`), which a node holds applied in part, may
    /// rightly stay so: every operation acknowledged under that ID was one a restore may
    /// have lost, in whole or in part, the rest of it held by no node since.
    public func lostToARestore(_ id: String) -> Bool {
        let named = operations.filter { $0.transactionID == id }
        return !named.isEmpty && named.allSatisfy { $0.maybeLost || $0.maybeLostInPart }
    }

    /// Whether `earlier` happened before `later` on the same node (`node(of:)`), in
    /// `later`'s lineage.
    public func precedes(_ earlier: Moment, _ later: Moment) -> Bool {
        guard node(of: earlier.node) == node(of: later.node), earlier.time < later.time else { return false }
        var epoch = later.epoch
        var limit = Double.infinity
        while true {
            if epoch == earlier.epoch { return earlier.time < limit }
            guard let parent = parents[epoch] else { return false }
            limit = min(limit, parent.copiedAt)
            epoch = parent.epoch
        }
    }
}

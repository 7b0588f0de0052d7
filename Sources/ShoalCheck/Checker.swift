/// The verdicts on a `History`: which values each slot may end with, the bounds of
/// each counter, and whether a read saw part of a transaction.
///
/// It never needs the nodes' clocks. A write W' provably comes after a write W of
/// the same slot (`follows`) when W' is sent to a node after
///
/// - that node acknowledged W (a node's clock only goes forward, so W' takes a
///   later version), or
/// - a read on that node showed W's token in the slot (a local write takes a version
///   above the one its node holds for the register, DATA_MODEL.md §4.2),
///
/// both within the node's lineage (`History.precedes`): a restore from an earlier
/// copy takes the node's clock and data back. A map entry's removal removes only
/// what its node holds, so one sent after an EVICT of the document on that node
/// proves nothing. A slot may end with the value of any write that no write known to
/// have happened (acknowledged, or seen by a read) provably follows; nothing else.
/// Every operation follows the setup's, which every node held before the first was sent.
public struct Checker: Sendable {
    public let history: History
    private let byToken: [String: Mutation]
    private let writers: [Slot: [Mutation]]
    /// Tokens some read saw, anywhere.
    private let seen: Set<String>
    /// For each node (`History.node(of:)`), slot and token, the earliest read of each
    /// epoch that saw it there.
    private let seenAt: [Int: [Slot: [String: [Int: Double]]]]

    public init(history: History) {
        self.history = history
        var byToken: [String: Mutation] = [:]
        var writers: [Slot: [Mutation]] = [:]
        for operation in history.operations {
            byToken[operation.token] = operation
            guard operation.outcome != .refused else { continue }
            for slot in Set(operation.writes.keys).union(operation.increments.keys) { writers[slot, default: []].append(operation) }
        }
        var seen: Set<String> = []
        var seenAt: [Int: [Slot: [String: [Int: Double]]]] = [:]
        for read in history.reads {
            for (slot, value) in read.values {
                guard let token = value.token else { continue }
                seen.insert(token)
                let node = history.node(of: read.node)
                let earliest = seenAt[node]?[slot]?[token]?[read.epoch] ?? .infinity
                seenAt[node, default: [:]][slot, default: [:]][token, default: [:]][read.epoch] = min(earliest, read.finishedAt)
            }
        }
        self.byToken = byToken
        self.writers = writers
        self.seen = seen
        self.seenAt = seenAt
    }

    /// The operation that wrote `token`, if any did.
    public func operation(writing token: String) -> Mutation? { byToken[token] }

    /// Whether `operation` happened and was not lost to a restore: acknowledged, or
    /// seen by a read, and not marked as a write a restore may have taken away.
    public func isReal(_ operation: Mutation) -> Bool {
        guard !operation.maybeLost, operation.outcome != .refused else { return false }
        return operation.outcome == .acknowledged || seen.contains(operation.token)
    }

    /// Whether `later`'s write of `slot` provably has a higher version than `earlier`'s.
    public func follows(_ later: Mutation, _ earlier: Mutation, on slot: Slot) -> Bool {
        guard later.id != earlier.id, let laterValue = later.writes[slot], let earlierValue = earlier.writes[slot] else {
            return false
        }
        if earlier.kind == Mutation.setup { return true }
        if laterValue == .absent, Universe.isMapEntry(slot), evicted(slot.document, before: later.sent) { return false }
        if let acknowledged = earlier.acknowledged, history.precedes(acknowledged, later.sent) { return true }
        if let token = earlierValue.token, let epochs = seenAt[history.node(of: later.sent.node)]?[slot]?[token] {
            for (epoch, time) in epochs
            where history.precedes(Moment(node: later.sent.node, epoch: epoch, time: time), later.sent) {
                return true
            }
        }
        return false
    }

    private func evicted(_ document: String, before moment: Moment) -> Bool {
        history.evictions.contains { $0.at.node == moment.node && $0.at.time < moment.time && $0.documents.contains(document) }
    }

    /// The writes a real write of `slot` provably follows: those whose values `slot` may no longer hold.
    public func overwriters(of operation: Mutation, on slot: Slot) -> [Mutation] {
        (writers[slot] ?? []).filter { later in
            isReal(later) && !later.uncertain.contains(slot) && follows(later, operation, on: slot)
        }
    }

    /// The writes whose value `slot` may end with.
    public func allowed(_ slot: Slot) -> [Mutation] {
        (writers[slot] ?? []).filter { overwriters(of: $0, on: slot).isEmpty }
    }

    /// Checks what each node ended with in `slot` (the writes it may hold are worked
    /// out once for all of them).
    public func checkFinal(_ slot: Slot, holds values: [(node: Int, value: SlotValue)]) -> [Finding] {
        let allowed = allowed(slot)
        return values.compactMap { node, value in
            if allowed.contains(where: { $0.writes[slot] == value }) { return nil }
            if let finding = unknown(value, in: slot, node: node) { return finding }
            var message = "\(slot) holds \(value)"
            if let token = value.token, let writer = byToken[token] {
                message += ", written by \(describe(writer)), which \(list(overwriters(of: writer, on: slot))) provably followed"
            } else {
                message += ", which no write that could be last left there"
            }
            let expected = allowed.filter(isReal)
            message += expected.isEmpty ? "" : "; expected the value of \(list(expected))"
            return Finding(.acknowledgedWrites, node: node, documents: [slot.document], message)
        }
    }

    /// Checks what one node ended with in `slot`.
    public func checkFinal(_ slot: Slot, holds value: SlotValue, node: Int) -> Finding? {
        checkFinal(slot, holds: [(node, value)]).first
    }

    /// A value that no recorded operation wrote to `slot`, or that a refused one did.
    public func unknown(_ value: SlotValue, in slot: Slot, node: Int) -> Finding? {
        guard let token = value.token else { return nil }
        guard let writer = byToken[token] else {
            return Finding(.unknownValues, node: node, documents: [slot.document], "\(slot) holds \(token), which no operation wrote")
        }
        if writer.outcome == .refused {
            return Finding(
                .unknownValues, node: node, documents: [slot.document],
                "\(slot) holds \(token), written by \(describe(writer)), which the node refused")
        }
        if writer.writes[slot] == nil {
            return Finding(
                .unknownValues, node: node, documents: [slot.document],
                "\(slot) holds \(token), but \(describe(writer)) wrote it elsewhere only")
        }
        return nil
    }

    /// The range a counter may end in: its first value and every real increment,
    /// plus any subset of the others.
    public func counterBounds(_ slot: Slot) -> (low: Int64, high: Int64) {
        var low: Int64 = 0, high: Int64 = 0
        for operation in writers[slot] ?? [] where operation.outcome != .refused {
            guard let amount = operation.increments[slot] else { continue }
            if isReal(operation) {
                low += amount
                high += amount
            } else if amount < 0 {
                low += amount
            } else {
                high += amount
            }
        }
        return (low, high)
    }

    /// Checks a counter one node ended with.
    public func checkCounter(_ slot: Slot, holds value: Double?, node: Int) -> Finding? {
        let (low, high) = counterBounds(slot)
        if let value, value >= Double(low), value <= Double(high) { return nil }
        let increments = (writers[slot] ?? []).filter { $0.increments[slot] != nil }
        let real = increments.filter(isReal)
        return Finding(
            .counters, node: node, documents: [slot.document],
            "\(slot) is \(value.map { "\($0)" } ?? "missing"), outside \(low)...\(high): \(real.count) acknowledged increments sum to \(real.reduce(0) { $0 + ($1.increments[slot] ?? 0) }), \(increments.count - real.count) more unanswered or lost to a restore")
    }

    /// Transactions `read` saw in part: a slot showing the token of an operation
    /// while another slot it certainly wrote shows neither its token nor a value
    /// that may have come after it. `excludingEvicted` leaves out documents the node
    /// had evicted before the read (during a run, they may not be back yet).
    public func halfTransactions(in read: Read, excludingEvicted: Bool) -> [Finding] {
        var findings: [Finding] = []
        let evictedHere: Set<String> =
            excludingEvicted
            ? Set(history.evictions.filter { $0.at.node == read.node && $0.at.time < read.finishedAt }.flatMap(\.documents))
            : []
        // Only the operations whose token the read shows somewhere can be seen in part.
        let shownTokens = Set(read.values.values.compactMap(\.token))
        for token in shownTokens.sorted() {
            guard let operation = byToken[token], operation.outcome != .refused else { continue }
            let slots = operation.certainTokenSlots.filter { read.values[$0] != nil && !evictedHere.contains($0.document) }
            guard slots.count >= 2 else { continue }
            let shown = slots.filter { read.values[$0] == .token(operation.token) }
            guard !shown.isEmpty, shown.count < slots.count else { continue }
            if let id = operation.transactionID, read.partial.contains(id) { continue }
            let missing = slots.filter { slot in
                guard read.values[slot] != .token(operation.token) else { return false }
                return !mayHaveFollowed(read.values[slot]!, operation, on: slot)
            }
            guard !missing.isEmpty else { continue }
            let holding = missing.map { "\($0) holds \(read.values[$0]!)" }.joined(separator: ", ")
            findings.append(
                Finding(
                    .halfTransactions, node: read.node, documents: Array(Set(slots.map(\.document))).sorted(),
                    "a read at \(format(read.finishedAt)) s saw \(describe(operation)) in \(shown.map(\.description).joined(separator: ", ")) but not in the rest: \(holding)"))
        }
        return findings
    }

    /// Whether `value` in `slot` can be a write that came after `operation`'s.
    private func mayHaveFollowed(_ value: SlotValue, _ operation: Mutation, on slot: Slot) -> Bool {
        switch value {
        case .token(let token):
            guard let writer = byToken[token], writer.id != operation.id, writer.writes[slot] == value else { return false }
            return !follows(operation, writer, on: slot)
        case .absent:
            return (writers[slot] ?? []).contains { writer in
                writer.id != operation.id && writer.outcome != .refused && writer.writes[slot] == .absent
                    && !follows(operation, writer, on: slot)
            }
        }
    }

    /// Up to three operations as messages name them, and how many more.
    func list(_ operations: [Mutation]) -> String {
        let sorted = operations.sorted { $0.id > $1.id }
        let more = sorted.count > 3 ? " and \(sorted.count - 3) more" : ""
        return sorted.prefix(3).map(describe).joined(separator: "; ") + more
    }

    /// An operation as messages name it.
    public func describe(_ operation: Mutation) -> String {
        let answer =
            switch operation.outcome {
            case .acknowledged:
                "acknowledged at \(format(operation.acknowledgedAt ?? 0)) s" + (operation.transactionID.map { " as \($0)" } ?? "")
            case .indeterminate: "unanswered"
            case .refused: "refused"
            }
        let lost = operation.maybeLost ? ", maybe lost to a restore" : ""
        return "\(operation.token) (\(operation.kind) on n\(operation.sent.node), sent at \(format(operation.sent.time)) s, \(answer)\(lost))"
    }
}

func format(_ seconds: Double) -> String {
    let tenths = Int((seconds * 100).rounded())
    return "\(tenths / 100).\(tenths % 100 < 10 ? "0" : "")\(tenths % 100)"
}

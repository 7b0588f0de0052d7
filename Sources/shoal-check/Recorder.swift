import Foundation
import ShoalCRDT
import ShoalCheck

/// What a run records as it goes: the history the checker judges, counts for the
/// summary, and the lines it prints. Shared by the writers, the reader and the faults.
final class Recorder: Sendable {
    private let started = ContinuousClock.now
    let quiet: Bool
    private struct State {
        var history: History
        var nextID = 1
        var outcomes: [String: [Mutation.Outcome: Int]] = [:]
        var faults: [String: Int] = [:]
        /// Attachment hashes by the token of the write that named them.
        var attachments: [String: String] = [:]
        /// Tokens of attachment writes whose bytes only a restored node held: its copy
        /// predates them, so the bytes may be gone everywhere (the document may survive).
        var bytesMaybeLost: Set<String> = []
        var lines: [String] = []
    }
    private let state: Locked<State>

    /// `oneNode`: the processes that are one node (hubs on one database).
    init(quiet: Bool, oneNode: [Int] = []) {
        self.quiet = quiet
        state = Locked(State(history: History(oneNode: oneNode)))
    }

    /// Seconds since the run began.
    func now() -> Double {
        let elapsed = ContinuousClock.now - started
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    /// A fresh operation ID and the token its writes carry.
    func nextToken() -> (id: Int, token: String) {
        state.withLock { s in
            defer { s.nextID += 1 }
            return (s.nextID, "t\(s.nextID)")
        }
    }

    var history: History { state.withLock { $0.history } }
    var outcomes: [String: [Mutation.Outcome: Int]] { state.withLock { $0.outcomes } }
    var faults: [String: Int] { state.withLock { $0.faults } }
    var attachments: [String: String] { state.withLock { $0.attachments } }
    var lines: [String] { state.withLock { $0.lines } }
    var bytesMaybeLost: Set<String> { state.withLock { $0.bytesMaybeLost } }

    func record(_ operation: Mutation) {
        state.withLock { s in
            s.history.record(operation)
            s.outcomes[operation.kind, default: [:]][operation.outcome, default: 0] += 1
        }
    }

    func record(_ read: Read) { state.withLock { $0.history.record(read) } }
    func record(_ eviction: Eviction) { state.withLock { $0.history.record(eviction) } }
    func recordAttachment(token: String, hash: String) { state.withLock { $0.attachments[token] = hash } }
    func markBytesMaybeLost(_ tokens: Set<String>) { state.withLock { $0.bytesMaybeLost.formUnion(tokens) } }

    func markMaybeLost(_ ids: Set<Int>, inPart: Set<Int>) { state.withLock { $0.history.markMaybeLost(ids, inPart: inPart) } }

    /// A new epoch for a node restored from a copy of `epoch` taken at `copiedAt`.
    func restore(from epoch: Int, copiedAt: Double) -> Int {
        state.withLock { $0.history.restore(from: epoch, copiedAt: copiedAt) }
    }

    /// Counts a fault of `kind` and prints its line.
    func fault(_ kind: String, _ text: String) {
        state.withLock { $0.faults[kind, default: 0] += 1 }
        say(text)
    }

    /// Prints a line with the time since the start (unless quiet), and keeps it for the run's log.
    func say(_ text: String) {
        let line = String(format: "[%7.2f s] ", now()) + text
        state.withLock { $0.lines.append(line) }
        if !quiet { emit(line) }
    }
}

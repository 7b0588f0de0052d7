import ShoalCRDT
import Testing

@testable import ShoalCheck

/// The checker's own verdicts on histories made by hand: it must pass what Shoal may
/// do and fail a lost write, a wrong counter and a transaction seen in part.
struct CheckerTests {
    static let f = Slot("r0", "f0")
    static let g = Slot("r1", "f0")

    static func operation(
        _ id: Int, on node: Int, sent: Double, acknowledged: Double?, _ writes: [Slot: SlotValue], epoch: Int = 0,
        increments: [Slot: Int64] = [:], uncertain: Set<Slot> = []
    ) -> Mutation {
        Mutation(
            id: id, kind: "test", sent: Moment(node: node, epoch: epoch, time: sent), acknowledgedAt: acknowledged,
            outcome: acknowledged == nil ? .indeterminate : .acknowledged, transactionID: acknowledged == nil ? nil : "s:\(id)",
            token: "t\(id)", writes: writes, uncertain: uncertain, increments: increments, text: "")
    }

    /// The setup write every slot starts from.
    static func history() -> History {
        var history = History()
        var setup = operation(0, on: 0, sent: 0, acknowledged: 0.1, [f: .token("t0"), g: .token("t0")])
        setup.kind = Mutation.setup
        history.record(setup)
        return history
    }

    @Test func aWriteAcknowledgedAfterAnotherOnItsNodeMustWin() {
        var history = Self.history()
        history.record(Self.operation(1, on: 0, sent: 1, acknowledged: 1.1, [Self.f: .token("t1")]))
        history.record(Self.operation(2, on: 0, sent: 2, acknowledged: 2.1, [Self.f: .token("t2")]))
        let checker = Checker(history: history)
        #expect(checker.checkFinal(Self.f, holds: .token("t2"), node: 0) == nil)
        // The earlier write, or the setup's, left at the end: the later write was lost.
        let lost = checker.checkFinal(Self.f, holds: .token("t1"), node: 1)
        #expect(lost?.check == .acknowledgedWrites)
        #expect(lost?.message.contains("t2") == true)
        #expect(checker.checkFinal(Self.f, holds: .token("t0"), node: 1)?.check == .acknowledgedWrites)
        #expect(checker.checkFinal(Self.f, holds: .absent, node: 1)?.check == .acknowledgedWrites)
    }

    @Test func concurrentWritesOnTwoNodesMayEitherWin() {
        var history = Self.history()
        history.record(Self.operation(1, on: 0, sent: 1, acknowledged: 1.1, [Self.f: .token("t1")]))
        history.record(Self.operation(2, on: 1, sent: 1.05, acknowledged: 1.2, [Self.f: .token("t2")]))
        let checker = Checker(history: history)
        #expect(checker.checkFinal(Self.f, holds: .token("t1"), node: 0) == nil)
        #expect(checker.checkFinal(Self.f, holds: .token("t2"), node: 0) == nil)
        #expect(checker.checkFinal(Self.f, holds: .token("t0"), node: 0) != nil)
    }

    @Test func aReadOfAnotherNodesWriteOrdersTheNextWriteAfterIt() {
        var history = Self.history()
        history.record(Self.operation(1, on: 0, sent: 1, acknowledged: 1.1, [Self.f: .token("t1")]))
        history.record(Read(node: 1, epoch: 0, startedAt: 2, finishedAt: 2.1, values: [Self.f: .token("t1"), Self.g: .token("t0")]))
        history.record(Self.operation(2, on: 1, sent: 3, acknowledged: 3.1, [Self.f: .token("t2")]))
        let checker = Checker(history: history)
        #expect(checker.checkFinal(Self.f, holds: .token("t2"), node: 0) == nil)
        #expect(checker.checkFinal(Self.f, holds: .token("t1"), node: 0)?.check == .acknowledgedWrites)
    }

    @Test func anUnansweredWriteMayOrMayNotBeThereButNeverHidesAnAcknowledgedOne() {
        var history = Self.history()
        history.record(Self.operation(1, on: 0, sent: 1, acknowledged: nil, [Self.f: .token("t1")]))
        history.record(Self.operation(2, on: 1, sent: 2, acknowledged: 2.1, [Self.g: .token("t2")]))
        let checker = Checker(history: history)
        #expect(checker.checkFinal(Self.f, holds: .token("t1"), node: 0) == nil)
        #expect(checker.checkFinal(Self.f, holds: .token("t0"), node: 0) == nil)
        #expect(checker.checkFinal(Self.g, holds: .token("t0"), node: 0)?.check == .acknowledgedWrites)
    }

    @Test func aValueNoOperationWroteIsFound() {
        let checker = Checker(history: Self.history())
        #expect(checker.checkFinal(Self.f, holds: .token("t99"), node: 0)?.check == .unknownValues)
    }

    @Test func aRestoreExcusesTheRestoredNodesLaterWritesThatNoOneElseHeld() {
        var history = Self.history()
        history.record(Self.operation(1, on: 0, sent: 1, acknowledged: 1.1, [Self.f: .token("t1")]))
        // Copied at 2; t2 acknowledged after it, held by no other node; restored at 4.
        history.record(Self.operation(2, on: 0, sent: 3, acknowledged: 3.1, [Self.f: .token("t2")]))
        #expect(Checker(history: history).checkFinal(Self.f, holds: .token("t1"), node: 0) != nil)
        history.markMaybeLost([2])
        let epoch = history.restore(from: 0, copiedAt: 2)
        history.record(Self.operation(3, on: 0, sent: 5, acknowledged: 5.1, [Self.g: .token("t3")], epoch: epoch))
        let checker = Checker(history: history)
        #expect(checker.checkFinal(Self.f, holds: .token("t1"), node: 0) == nil)
        #expect(checker.checkFinal(Self.f, holds: .token("t2"), node: 0) == nil)
        // The restored node's clock went back: its new epoch is ordered after the copy, not after t2.
        #expect(history.precedes(Moment(node: 0, epoch: 0, time: 1.1), Moment(node: 0, epoch: epoch, time: 5)))
        #expect(!history.precedes(Moment(node: 0, epoch: 0, time: 3.1), Moment(node: 0, epoch: epoch, time: 5)))
    }

    @Test func countersAreTheSumOfAcknowledgedIncrementsPlusAnyOfTheUnanswered() {
        let n = Slot("c0", "n")
        var history = Self.history()
        history.record(Self.operation(1, on: 0, sent: 1, acknowledged: 1.1, [:], increments: [n: 5]))
        history.record(Self.operation(2, on: 1, sent: 1, acknowledged: 1.2, [:], increments: [n: -2]))
        history.record(Self.operation(3, on: 1, sent: 2, acknowledged: nil, [:], increments: [n: 4]))
        let checker = Checker(history: history)
        #expect(checker.counterBounds(n) == (3, 7))
        #expect(checker.checkCounter(n, holds: 3, node: 0) == nil)
        #expect(checker.checkCounter(n, holds: 7, node: 0) == nil)
        // An increment lost: 5 without the -2 is 5, in range; without the 5, -2 is not.
        #expect(checker.checkCounter(n, holds: -2, node: 0)?.check == .counters)
        #expect(checker.checkCounter(n, holds: nil, node: 0)?.check == .counters)
    }

    @Test func aTransactionSeenInPartIsFoundUnlessALaterWriteExplainsIt() {
        var history = Self.history()
        history.record(Self.operation(1, on: 0, sent: 1, acknowledged: 1.1, [Self.f: .token("t1"), Self.g: .token("t1")]))
        let half = Read(node: 1, epoch: 0, startedAt: 2, finishedAt: 2.1, values: [Self.f: .token("t1"), Self.g: .token("t0")])
        history.record(half)
        var checker = Checker(history: history)
        let findings = checker.halfTransactions(in: half, excludingEvicted: true)
        #expect(findings.map(\.check) == [.halfTransactions])
        #expect(findings.first?.documents == ["r0", "r1"])
        // A write of g that may have come after t1 (another node, not ordered) explains it.
        history.record(Self.operation(2, on: 1, sent: 1.5, acknowledged: 1.6, [Self.g: .token("t2")]))
        let later = Read(node: 1, epoch: 0, startedAt: 3, finishedAt: 3.1, values: [Self.f: .token("t1"), Self.g: .token("t2")])
        history.record(later)
        checker = Checker(history: history)
        #expect(checker.halfTransactions(in: later, excludingEvicted: true).isEmpty)
        // A node that said it applied the transaction in part is excused.
        var excused = half
        excused.partial = ["s:1"]
        #expect(checker.halfTransactions(in: excused, excludingEvicted: true).isEmpty)
    }

    @Test func aWriteOfARefusedOperationMustNeverAppear() {
        var history = Self.history()
        var refused = Self.operation(1, on: 0, sent: 1, acknowledged: nil, [Self.f: .token("t1")])
        refused.outcome = .refused
        history.record(refused)
        let checker = Checker(history: history)
        #expect(checker.checkFinal(Self.f, holds: .token("t1"), node: 0)?.check == .unknownValues)
        #expect(checker.checkFinal(Self.f, holds: .token("t0"), node: 0) == nil)
    }

    @Test func bodiesShowTokensInEverySlotKind() throws {
        let universe = Universe(documents: 1)
        let items: [Value] = [
            ["_id": "r0", "f0": "t1", "f2": "t2"],
            ["_id": "p0", "m": ["k1": "t3"]],
            ["_id": "c0", "n": 7, "w": "t4"],
            ["_id": "a0", "a": ["attachment": "00", "length": 1, "metadata": ["w": "t5"]]],
        ]
        let (values, counters) = universe.read(items, collections: ["reg", "mp", "ct", "att", "big"])
        #expect(values[Slot("r0", "f0")] == .token("t1"))
        #expect(values[Slot("r0", "f1")] == .absent)
        #expect(values[Slot("r1", "f0")] == .absent)
        #expect(values[Slot("p0", "m.k1")] == .token("t3"))
        #expect(values[Slot("p0", "m.k0")] == .absent)
        #expect(values[Slot("c0", "w")] == .token("t4"))
        #expect(counters[Slot("c0", "n")] == .some(7))
        #expect(values[Slot("a0", "a")] == .token("t5"))
        #expect(values[Slot("b0", "v")] == .absent)
    }
}

extension CheckerTests {
    /// Hubs on one database are one node: a write sent through one hub after another
    /// hub acknowledged or showed a write follows it, and must win; processes that are
    /// nodes of their own order nothing between them.
    @Test func hubsOfOneDatabaseOrderWritesAsOneNode() {
        func history(oneNode: [Int]) -> History {
            var history = History(oneNode: oneNode)
            var setup = Self.operation(0, on: 0, sent: 0, acknowledged: 0.1, [Self.f: .token("t0"), Self.g: .token("t0")])
            setup.kind = Mutation.setup
            history.record(setup)
            history.record(Self.operation(1, on: 0, sent: 1, acknowledged: 1.1, [Self.f: .token("t1")]))
            history.record(Self.operation(2, on: 1, sent: 2, acknowledged: 2.1, [Self.f: .token("t2")]))
            history.record(Self.operation(3, on: 2, sent: 3, acknowledged: 3.1, [Self.g: .token("t3")]))
            history.record(Read(node: 1, epoch: 0, startedAt: 4, finishedAt: 4.1, values: [Self.f: .token("t2"), Self.g: .token("t3")]))
            history.record(Self.operation(4, on: 0, sent: 5, acknowledged: 5.1, [Self.g: .token("t4")]))
            return history
        }
        let hubs = Checker(history: history(oneNode: [0, 1]))
        #expect(hubs.history.node(of: 1) == 0 && hubs.history.node(of: 2) == 2)
        // t2 went through hub 1 after hub 0 acknowledged t1: t1 at the end is a lost write.
        #expect(hubs.checkFinal(Self.f, holds: .token("t1"), node: 2)?.check == .acknowledgedWrites)
        #expect(hubs.checkFinal(Self.f, holds: .token("t2"), node: 2) == nil)
        // t4 went through hub 0 after a read through hub 1 showed t3.
        #expect(hubs.checkFinal(Self.g, holds: .token("t3"), node: 2)?.check == .acknowledgedWrites)
        #expect(hubs.checkFinal(Self.g, holds: .token("t4"), node: 2) == nil)
        // Two nodes of their own: either may win.
        let apart = Checker(history: history(oneNode: []))
        #expect(apart.checkFinal(Self.f, holds: .token("t1"), node: 2) == nil)
        #expect(apart.checkFinal(Self.g, holds: .token("t3"), node: 2) == nil)
    }

    /// What a restore may have lost of a write is read from what the other nodes showed
    /// just before, slot by slot: a transaction some of whose slots showed its token
    /// elsewhere, not all, was lost in part, and only such a one (or one lost whole)
    /// excuses a node holding its transaction applied in part at the end.
    @Test func aWriteARestoreLostInPartExcusesItsTransactionHeldInPart() {
        let sent: [String: Double] = ["t0": 0, "t1": 1, "t2": 2, "t9": 9]
        func loss(_ operation: Mutation, _ held: [Slot: Set<String>]) -> History.Loss {
            History.loss(of: operation, held: held, sentAt: { sent[$0] })
        }
        let both = Self.operation(1, on: 0, sent: 1, acknowledged: 1.1, [Self.f: .token("t1"), Self.g: .token("t1")])
        #expect(loss(both, [Self.f: ["t1"], Self.g: ["t1", "t0"]]) == .none)
        #expect(loss(both, [Self.f: ["t1"], Self.g: ["t0"]]) == .inPart, "g shows only a write sent before it")
        #expect(loss(both, [Self.f: ["t1"], Self.g: ["t9"]]) == .none, "g may have been overwritten by a later write")
        #expect(loss(both, [Self.f: ["t1"]]) == .none, "no node showed g")
        #expect(loss(both, [Self.f: ["t0"]]) == .whole)
        var unsure = both
        unsure.uncertain = [Self.g]
        #expect(loss(unsure, [Self.f: ["t1"], Self.g: ["t0"]]) == .none, "g was not surely written")
        let delete = Self.operation(2, on: 0, sent: 2, acknowledged: 2.1, [Self.f: .absent])
        #expect(loss(delete, [Self.f: ["t1"]]) == .whole, "a write of no token is lost unless its token shows")

        var history = Self.history()
        history.record(both)
        history.record(delete)
        var reissued = Self.operation(3, on: 0, sent: 3, acknowledged: 3.1, [Self.f: .token("t3")])
        reissued.transactionID = "s:2"
        history.record(reissued)
        history.markMaybeLost([], inPart: [1])
        #expect(history.lostToARestore("s:1"))
        #expect(!history.lostToARestore("s:2"), "the number given again to a write that was not lost")
        history.markMaybeLost([2, 3])
        #expect(history.lostToARestore("s:2"))
        #expect(!history.lostToARestore("s:9"), "no write under that number")
        #expect(!history.lostToARestore("s:0"), "the setup, never lost")
    }
}

import ShoalCRDT
import ShoalStorage
@testable import ShoalSync
import Testing

/// One inbound commit's decisions on values: pieces and what the store held in, steps
/// out, no store.
@Suite struct InboundCommitPlanTests {
    typealias Txn = CoverageAssemblerTests.Txn
    static let relay = CoverageAssemblerTests.relay
    static let all = CoverageAssemblerTests.all

    static func plan(
        _ items: [InboundPipeline.Item], assembler: CoverageAssembler = CoverageAssembler(),
        states: [TransactionID: TransactionRecord.State] = [:], records: [TransactionID: TransactionRecord] = [:]
    ) -> InboundCommitPlan {
        InboundCommitPlan(assembler: assembler, subscriptions: all, now: 1_000, states: states, records: records)
    }

    /// Receives every piece, decides, and finishes, as the pipeline does; each apply
    /// goes as `refuse` says (a refusal for the transactions it names).
    static func run(
        _ plan: inout InboundCommitPlan, _ items: [InboundPipeline.Item], refuse: Set<TransactionID> = [],
        applied: Set<TransactionID> = [], routes: Routing.Snapshot = .init(), limits: DocumentLimits = DocumentLimits()
    ) -> [InboundCommitPlan.Step] {
        var steps: [InboundCommitPlan.Step] = []
        func carry(_ new: [InboundCommitPlan.Step]) {
            for step in new {
                steps.append(step)
                if case .apply(let apply) = step {
                    let refusal = refuse.contains(apply.record.id)
                        ? DocumentRefusal(document: DocumentRef(collection: "accounts", id: "x"), reason: .tooDeep(limit: 128)) : nil
                    carry(plan.applied(apply, refusal: refusal, newlyLogged: refusal == nil ? apply.deltas.count : 0))
                }
            }
        }
        for item in items {
            for piece in item.pieces {
                if let apply = plan.receive(piece, from: item.source, mayWrite: item.mayWrite) { carry([.apply(apply)]) }
            }
        }
        for decision in plan.decide(isApplied: { applied.contains($0) }) { carry(plan.steps(for: decision)) }
        carry(plan.finish(items, routes: routes, limits: limits))
        return steps
    }

    static func names(_ steps: [InboundCommitPlan.Step]) -> [String] {
        steps.map { step in
            switch step {
            case .apply(let a):
                switch a.kind {
                case .latePiece: "late \(a.record.id.sequence)"
                case .partialPiece: "partial piece \(a.record.id.sequence)"
                case .whole: "apply \(a.record.id.sequence)\(a.buffered ? " buffered" : "")"
                case .partial: "apply partially \(a.record.id.sequence)"
                }
            case .markApplied(let id, _): "mark applied \(id.sequence)"
            case .settleRest(let id, _, _, _): "settle \(id.sequence)"
            case .refuse(let record, _): "refuse \(record.id.sequence)"
            case .buffer(let id, let deltas, _, _): "buffer \(id.sequence) (\(deltas.count))"
            case .save(let record): "save \(record.id.sequence) \(record.state)"
            case .recordCursor(_, _, let through, _): "cursor \(through)"
            case .warn(_, let id, _): "warn \(id.sequence)"
            }
        }
    }

    @Test func whatTheStoreMustReadFirstIsWhatTheAssemblerDoesNotHold() {
        let t1 = Txn(1, ["x"]), t2 = Txn(2, ["y"]), t3 = Txn(3, ["z"])
        var assembler = CoverageAssembler()
        _ = assembler.add(t1.piece(sending: ["x"], last: false), from: Self.relay, now: 0)
        let items = [
            InboundPipeline.Item(
                source: Self.relay, pieces: [t1.piece(sending: ["x"]), t2.piece(sending: ["y"])],
                offered: [RouteTable.Offer(t3.id, at: 9)])
        ]
        let noted = TransactionID(origin: SiteID(0xD), sequence: 4)
        #expect(InboundCommitPlan.toRead(items, assembler: assembler, routes: .init(noted: [noted])) == [t2.id, t3.id, noted].sorted())
    }

    @Test func aWholeNewTransactionIsAppliedFromThePiecesAloneAndTheCursorRecorded() {
        let t = Txn(1, ["x", "y"])
        let items = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["x", "y"])], cursor: ("k", 40, 0))]
        var plan = Self.plan(items)
        let steps = Self.run(&plan, items)
        #expect(Self.names(steps) == ["apply 1", "cursor 40"])
        #expect(plan.result.applied == [t.id])
        #expect(plan.result.assembler.records.isEmpty)
    }

    /// Only a transaction first heard of in this commit, of which the store held no
    /// record, is applied as new (its logged deltas not read); one that waited, one the
    /// store held, and a piece of one applied before are not.
    @Test func onlyATransactionTheStoreNeverRecordedIsAppliedAsNew() {
        let t = Txn(1, ["x", "y"]), late = Txn(2, ["z"]), known = Txn(3, ["w", "v"])
        let items = [
            InboundPipeline.Item(
                source: Self.relay,
                pieces: [t.piece(sending: ["x", "y"]), late.piece(sending: ["z"]), known.piece(sending: ["w"], last: false)])
        ]
        var plan = Self.plan(items, states: [late.id: .applied])
        let steps = Self.run(&plan, items)
        let applies = steps.compactMap { step -> (UInt64, Bool)? in
            guard case .apply(let apply) = step else { return nil }
            return (apply.record.id.sequence, apply.isNew)
        }
        #expect(applies.map(\.0) == [2, 1])
        #expect(applies.first { $0.0 == 1 }?.1 == true, "t: first heard of here")
        #expect(applies.first { $0.0 == 2 }?.1 == false, "a late piece: the log holds some of it")
        // The waiting one, completed in a later commit, is not new: its record is stored.
        let rest = [InboundPipeline.Item(source: Self.relay, pieces: [known.piece(sending: ["v"])])]
        var next = Self.plan(rest, assembler: plan.result.assembler)
        let later = Self.run(&next, rest).compactMap { step -> Bool? in
            guard case .apply(let apply) = step else { return nil }
            return apply.isNew
        }
        #expect(later == [false])
    }

    /// A transaction missing pieces waits: its pieces go to the buffer and its record is
    /// saved; when the rest comes in a later commit, it applies with what was buffered.
    @Test func aTransactionMissingPiecesWaitsInTheBufferThenAppliesWithIt() {
        let t = Txn(1, ["x", "y"])
        let first = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["x"], last: false)], cursor: ("k", 10, 0))]
        var plan = Self.plan(first)
        #expect(Self.names(Self.run(&plan, first)) == ["buffer 1 (2)", "save 1 waiting", "cursor 10"])
        let second = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["y"])], cursor: ("k", 20, 0))]
        var next = Self.plan(second, assembler: plan.result.assembler)
        #expect(Self.names(Self.run(&next, second)) == ["apply 1 buffered", "cursor 20"])
        #expect(next.result.applied == [t.id])
    }

    /// The first piece of transaction `seq` (documents x and y, x sent), with one context
    /// field of document x in `collection` named `field`: its transaction must wait.
    static func waiting(_ seq: UInt64, context collection: String, field: String, cursor: UInt64) -> [InboundPipeline.Item] {
        var piece = Txn(seq, ["x", "y"]).piece(sending: ["x"], last: false)
        piece.context = [
            ContextField(
                document: DocumentRef(collection: collection, id: "x"), field: field, valueJSON: "1",
                timestamp: HybridTimestamp(rawValue: 1 << 16), transaction: TransactionID(origin: SiteID(0xC), sequence: 1))
        ]
        return [InboundPipeline.Item(source: relay, pieces: [piece], cursor: ("k", cursor, 0))]
    }

    /// A transaction that must wait, a piece of which writes a document whose key is over
    /// the store's bound (a hub's), is refused whole then rather than buffered: a hub
    /// keeps buffered context under keys its indexes hold. Under the bound it waits.
    @Test func aWaitingTransactionWritingAKeyOverTheBoundIsRefusedNotBuffered() {
        let long = "\"" + String(repeating: "k", count: 30) + "\""
        let t = Txn(1, [long, "y"])
        let first = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: [long], last: false)], cursor: ("k", 10, 0))]
        var plan = Self.plan(first)
        // "accounts" (8) + the key (32) + "f0" (2) = 42.
        #expect(Self.names(Self.run(&plan, first, limits: DocumentLimits(keyBytes: 41))) == ["refuse 1", "cursor 10"])
        #expect(plan.result.refused.map(\.id) == [t.id])
        #expect(plan.result.refused.first?.reason.contains("this node can index") == true)
        var under = Self.plan(first)
        #expect(Self.names(Self.run(&under, first, limits: DocumentLimits(keyBytes: 42))) == ["buffer 1 (2)", "save 1 waiting", "cursor 10"])

        // A context field alone over the bound, its deltas under it: refused too.
        let withContext = Self.waiting(2, context: "accounts", field: String(repeating: "c", count: 40), cursor: 11)
        var context = Self.plan(withContext)
        // "accounts" (8) + "x" (1) + 40 = 49; its deltas, 8 + 1 + 2 = 11.
        #expect(Self.names(Self.run(&context, withContext, limits: DocumentLimits(keyBytes: 48))) == ["refuse 2", "cursor 11"])
        var fits = Self.plan(withContext)
        #expect(Self.names(Self.run(&fits, withContext, limits: DocumentLimits(keyBytes: 49))) == ["buffer 2 (2)", "save 2 waiting", "cursor 11"])

        // A context field of a collection named with U+0000, where names cannot hold it.
        let withOdd = Self.waiting(3, context: "acc\u{0}ounts", field: "c", cursor: 12)
        var refusing = Self.plan(withOdd)
        #expect(Self.names(Self.run(&refusing, withOdd, limits: DocumentLimits(collectionNamesHoldNul: false))) == ["refuse 3", "cursor 12"])
        #expect(refusing.result.refused.first?.reason.contains("U+0000") == true)
        var holding = Self.plan(withOdd)
        #expect(Self.names(Self.run(&holding, withOdd, limits: DocumentLimits())) == ["buffer 3 (2)", "save 3 waiting", "cursor 12"])
    }

    /// On a store other processes write (hubs on one database), the transactions the
    /// assembler holds are read too, and the store's state wins: one another hub applied
    /// meanwhile is let go, and its last piece is a late piece, never applied whole again
    /// nor in part when its wait runs out; one another hub applied in part is held as partial.
    @Test func aHeldTransactionAnotherHubAppliedIsLetGoNotAppliedAgain() {
        let t = Txn(1, ["x", "y"]), u = Txn(2, ["z", "w"])
        let first = [
            InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["x"], last: false), u.piece(sending: ["z"], last: false)])
        ]
        var plan = Self.plan(first)
        _ = Self.run(&plan, first)
        let held = plan.result.assembler
        #expect(Set(held.records.keys) == [t.id, u.id])
        let second = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["y"])])]
        #expect(InboundCommitPlan.toRead(second, assembler: held, routes: .init()).isEmpty)
        #expect(InboundCommitPlan.toRead(second, assembler: held, routes: .init(), shared: true) == [t.id, u.id])
        var partial = held.records[u.id]!
        partial.state = .partial
        var next = Self.plan(second, assembler: held, states: [t.id: .applied, u.id: .partial], records: [u.id: partial])
        #expect(Self.names(Self.run(&next, second)) == ["late 1"])
        #expect(next.result.assembler.records[t.id] == nil)
        #expect(next.result.assembler.records[u.id]?.state == .partial)
        #expect(next.result.applied.isEmpty)
        // Long after: the waits have run out, yet what the store says was applied is not applied again.
        var idle = InboundCommitPlan(
            assembler: held, subscriptions: Self.all, now: 1_000_000, states: [t.id: .applied, u.id: .applied], records: [:])
        #expect(Self.names(Self.run(&idle, [])).filter { $0.hasPrefix("apply") }.isEmpty)
        // Not told, the plan would have: the check above could fail.
        var unaware = InboundCommitPlan(assembler: held, subscriptions: Self.all, now: 1_000_000, states: [:], records: [:])
        #expect(Self.names(Self.run(&unaware, [])).contains("apply partially 1"))
    }

    /// A held transaction another hub refused is let go, and the peers that sent this hub
    /// pieces of it are told it was refused, as when this hub refuses one.
    @Test func aHeldTransactionAnotherHubRefusedIsLetGoAndItsSendersTold() {
        let t = Txn(1, ["x", "y"])
        // The relay's last piece: it holds y, and does not know whether this node may have it.
        let first = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["x"], verdicts: [.unknown])])]
        var plan = Self.plan(first)
        _ = Self.run(&plan, first)
        let held = plan.result.assembler
        #expect(held.records[t.id]?.state == .waiting)
        var next = Self.plan([], assembler: held, states: [t.id: .refused], records: [:])
        #expect(Self.names(Self.run(&next, [])).isEmpty)
        #expect(next.result.assembler.records[t.id] == nil)
        #expect(next.result.refused.map(\.id) == [t.id] && next.result.refused.first?.from == [Self.relay])
        // One it does not hold is not reported: this hub's peers sent none of it.
        var other = Self.plan([], states: [t.id: .refused], records: [:])
        _ = Self.run(&other, [])
        #expect(other.result.refused.isEmpty)
    }

    /// Pieces of one transaction reaching two hubs: hub A holds x, hub B then buffered y
    /// (its record, read again because another hub wrote it, holds both), and A takes the
    /// last piece. With the store's record A applies it whole at once; holding only what
    /// it received itself, A would wait for y until its coverage wait ran out.
    @Test func aHeldTransactionAnotherHubBufferedMoreOfIsJudgedOnTheStoresRecord() {
        let t = Txn(1, ["x", "y", "z"])
        let first = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["x"], last: false)])]
        var hubA = Self.plan(first)
        _ = Self.run(&hubA, first)
        let heldByA = hubA.result.assembler
        let both = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["x"], last: false), t.piece(sending: ["y"], last: false)])]
        var hubB = Self.plan(both)
        _ = Self.run(&hubB, both)
        let stored = hubB.result.assembler.records[t.id]!
        #expect(stored.state == .waiting)
        let last = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["z"])])]
        var told = Self.plan(last, assembler: heldByA, states: [t.id: .waiting], records: [t.id: stored])
        #expect(Self.names(Self.run(&told, last)) == ["apply 1 buffered"])
        #expect(told.result.assembler.records[t.id] == nil)
        // Not told, it waits: the check above could fail.
        var unaware = Self.plan(last, assembler: heldByA, states: [t.id: .waiting], records: [:])
        #expect(!Self.names(Self.run(&unaware, last)).contains { $0.hasPrefix("apply") })
        #expect(unaware.result.assembler.records[t.id]?.state == .waiting)
    }

    /// A transaction the store applied before gets its late piece applied at once, with
    /// its record left alone; one it refused gets nothing.
    @Test func lateAndRefusedPiecesFollowWhatTheStoreHeld() {
        let applied = Txn(1, ["x"]), refused = Txn(2, ["y"])
        let items = [
            InboundPipeline.Item(
                source: Self.relay, pieces: [applied.piece(sending: ["x"]), refused.piece(sending: ["y"])], cursor: ("k", 5, 0))
        ]
        var plan = Self.plan(items, states: [applied.id: .applied, refused.id: .refused])
        let steps = Self.run(&plan, items)
        #expect(Self.names(steps) == ["late 1", "cursor 5"])
        guard case .apply(let late) = steps.first else {
            Issue.record("the first step is not the late piece's apply")
            return
        }
        #expect(late.state == nil && late.rest == nil)
        #expect(plan.result.applied.isEmpty && plan.result.refused.isEmpty)
    }

    /// An apply refused (a body this node cannot hold) refuses the transaction whole:
    /// the assembler forgets it, and the result says why. A late piece refused is only
    /// dropped, with a warning.
    @Test func anApplyRefusedRefusesTheTransactionWholeAndALatePieceIsDropped() {
        let t = Txn(1, ["x"]), late = Txn(2, ["y"])
        let items = [InboundPipeline.Item(source: Self.relay, pieces: [late.piece(sending: ["y"]), t.piece(sending: ["x"])])]
        var plan = Self.plan(items, states: [late.id: .applied])
        let steps = Self.run(&plan, items, refuse: [t.id, late.id])
        #expect(Self.names(steps) == ["late 2", "warn 2", "apply 1", "refuse 1"])
        #expect(plan.result.routes.lastPieces.contains { $0.id == late.id }, "a late last piece dropped still resolves its sender's offer")
        #expect(plan.result.refused.map(\.id) == [t.id])
        #expect(plan.result.applied.isEmpty)
        #expect(plan.result.assembler.records[t.id] == nil)
    }

    /// Of two transactions one decision applies, the first refused does not stop the
    /// second: the refusal follows its own apply, and the second applies.
    @Test func aRefusalInADecisionOfSeveralRefusesThatOneAlone() {
        let a = Txn(1, ["x"]), b = Txn(2, ["y"])
        let items = [InboundPipeline.Item(source: Self.relay, pieces: [a.piece(sending: ["x"]), b.piece(sending: ["y"])])]
        var plan = Self.plan(items)
        #expect(Self.names(Self.run(&plan, items, refuse: [a.id])) == ["apply 1", "refuse 1", "apply 2"])
        #expect(plan.result.refused.map(\.id) == [a.id])
        #expect(plan.result.applied == [b.id])
    }

    /// An offer of a transaction the assembler held when the commit began is held, even
    /// when this commit applies it without a piece of it (it waited behind an earlier one
    /// of its origin): no read at the end says so, the plan knows.
    @Test func anOfferOfATransactionHeldAtTheStartIsHeld() {
        let t1 = Txn(1, ["x", "y"]), t2 = Txn(2, ["x"])
        let first = [InboundPipeline.Item(source: Self.relay, pieces: [t1.piece(sending: ["x"], last: false), t2.piece(sending: ["x"])])]
        var plan = Self.plan(first)
        _ = Self.run(&plan, first)
        #expect(Set(plan.result.assembler.records.keys) == [t1.id, t2.id], "the second waits behind the first")
        let second = [
            InboundPipeline.Item(
                source: Self.relay, pieces: [t1.piece(sending: ["y"])], cursor: ("k", 50, 0), offered: [RouteTable.Offer(t2.id, at: 10)])
        ]
        var next = Self.plan(second, assembler: plan.result.assembler)
        #expect(Self.names(Self.run(&next, second, routes: .init(noted: [t2.id]))) == ["apply 1 buffered", "apply 2 buffered", "cursor 50"])
        #expect(next.result.routes.held == [t2.id])
        #expect(next.result.routes.offers.isEmpty)
    }

    /// A cursor stays below an offer of a transaction this node does not hold; one it
    /// holds (a record before, or touched by this commit) does not hold it back.
    @Test func aCursorStaysBelowAnOfferNotHeld() {
        let t = Txn(1, ["x"]), offered = Txn(2, ["y"]), known = Txn(3, ["z"])
        let items = [
            InboundPipeline.Item(
                source: Self.relay, pieces: [t.piece(sending: ["x"])], cursor: ("k", 100, 0),
                offered: [RouteTable.Offer(offered.id, at: 60), RouteTable.Offer(known.id, at: 30), RouteTable.Offer(t.id, at: 20)])
        ]
        var plan = Self.plan(items, states: [known.id: .applied])
        let steps = Self.run(&plan, items, routes: .init(noted: [known.id, offered.id]))
        #expect(Self.names(steps) == ["apply 1", "cursor 59"])
        #expect(plan.result.routes.offers[Self.relay] == [RouteTable.Offer(offered.id, at: 60)])
        #expect(plan.result.routes.held == [known.id])
    }

    /// An applied transaction that left out a collection this node takes now (it took
    /// it up since) is not done with as far as offers go: its offer is noted and holds
    /// the cursor back, whether a peer said it was not covered or none vouched for it.
    /// One that left out only what the node still does not take is done with.
    @Test func anOfferOfATransactionAppliedWithoutACollectionTakenUpSinceIsNoted() {
        let short = Txn(1, ["x"]), whole = Txn(2, ["y"])
        let boats = CoverageAssemblerTests.set("SELECT * FROM boats")
        let items = [
            InboundPipeline.Item(
                source: Self.relay, pieces: [], cursor: ("k", 100, 0),
                offered: [RouteTable.Offer(short.id, at: 40), RouteTable.Offer(whole.id, at: 30)])
        ]
        let states: [TransactionID: TransactionRecord.State] = [short.id: .applied, whole.id: .applied]
        // Applied under {boats}: accounts, vouched not covered by it, is taken now.
        let rests = [
            short.id: [Verdict(collection: "accounts", coverage: .notCovered(boats.filter))],
            whole.id: [Verdict(collection: "boats", coverage: .notCovered(Self.all.filter))],
        ]
        // The rests read with the states: those of offers, noted ones and last pieces are used.
        let other = Txn(3, ["z"])
        let read = rests.merging([other.id: rests[short.id]!]) { $1 }
        #expect(InboundCommitPlan.restsUsed(read, items: items, routes: .init(noted: [])) == rests)
        let last = [InboundPipeline.Item(source: Self.relay, pieces: [other.piece(sending: ["z"])])]
        #expect(InboundCommitPlan.restsUsed(read, items: last, routes: .init(noted: [whole.id])).keys.sorted() == [whole.id, other.id])
        var plan = InboundCommitPlan(
            assembler: CoverageAssembler(), subscriptions: Self.all, now: 1_000, states: states, records: [:], rests: rests)
        #expect(Self.names(Self.run(&plan, items, routes: .init(noted: [whole.id]))) == ["cursor 39"])
        #expect(plan.result.routes.offers[Self.relay] == [RouteTable.Offer(short.id, at: 40)])
        #expect(plan.result.routes.held == [whole.id])
        #expect(plan.result.routes.leftOut == [short.id], "asked however busy its origin")
        // A relay takes what its neighbours take: the same for the nodes it carries for.
        let relayed = [short.id: [Verdict(collection: "boats", coverage: .notCovered(Self.all.filter))]]
        var relay = InboundCommitPlan(
            assembler: CoverageAssembler(), subscriptions: Self.all, now: 1_000, states: states, records: [:], rests: relayed,
            carried: { CoverageAssemblerTests.set("SELECT * FROM accounts", "SELECT * FROM boats") })
        _ = Self.run(&relay, items, routes: .init(noted: []))
        #expect(relay.result.routes.offers[Self.relay] == [RouteTable.Offer(short.id, at: 40)])
        // Applied while no peer vouched for accounts: its `unknown` leaves accounts out as well.
        let unvouched = [short.id: [Verdict(collection: "accounts", coverage: .unknown)]]
        var unknown = InboundCommitPlan(
            assembler: CoverageAssembler(), subscriptions: Self.all, now: 1_000, states: states, records: [:], rests: unvouched)
        _ = Self.run(&unknown, items, routes: .init(noted: []))
        #expect(unknown.result.routes.offers[Self.relay] == [RouteTable.Offer(short.id, at: 40)])
        #expect(unknown.result.routes.leftOut == [short.id])
    }

    /// A relay records, of a collection it carries for a neighbour but does not take,
    /// the word of a reporter that vouches for what it carries, not the first reporter's:
    /// with the narrower word it would ask for every offer of the transaction.
    @Test func aRelayRecordsTheRestThatVouchesForWhatItCarries() {
        let t = Txn(5, ["x"])
        let eu = CoverageAssemblerTests.eu, other = CoverageAssemblerTests.other
        let items = [
            InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: [], verdicts: [.notCovered(eu.filter)])]),
            InboundPipeline.Item(source: other, pieces: [t.piece(sending: [], verdicts: [.notCovered(Self.all.filter)])]),
        ]
        func applied(carried: SubscriptionSet?) -> [Verdict]? {
            var plan = InboundCommitPlan(
                assembler: CoverageAssembler(), subscriptions: CoverageAssemblerTests.set("SELECT * FROM boats"), now: 1_000,
                states: [:], records: [:], carried: carried.map { set -> @Sendable () -> SubscriptionSet in { set } })
            for case .apply(let apply) in Self.run(&plan, items) { return apply.rest }
            return nil
        }
        let vouching = [Verdict(collection: "accounts", coverage: .notCovered(Self.all.filter))]
        #expect(applied(carried: CoverageAssemblerTests.set("SELECT * FROM accounts", "SELECT * FROM boats")) == vouching)
        #expect(applied(carried: nil) == [Verdict(collection: "accounts", coverage: .notCovered(eu.filter))], "its own subscriptions alone")
        // What it carries is read only where reporters differ, and once a commit.
        let reads = Locked(0)
        func count(_ items: [InboundPipeline.Item]) -> Int {
            reads.withLock { $0 = 0 }
            var plan = InboundCommitPlan(
                assembler: CoverageAssembler(), subscriptions: CoverageAssemblerTests.set("SELECT * FROM boats"), now: 1_000,
                states: [:], records: [:],
                carried: {
                    reads.withLock { $0 += 1 }
                    return CoverageAssemblerTests.set("SELECT * FROM accounts", "SELECT * FROM boats")
                })
            _ = Self.run(&plan, items)
            return reads.withLock { $0 }
        }
        #expect(count([items[0]]) == 0, "one reporter")
        let u = Txn(6, ["y"])
        let both = items + [InboundPipeline.Item(source: other, pieces: [u.piece(sending: [], verdicts: [.notCovered(eu.filter)])]),
            InboundPipeline.Item(source: Self.relay, pieces: [u.piece(sending: [], verdicts: [.notCovered(Self.all.filter)])])]
        #expect(count(both) == 1, "two transactions with a choice, one read")
    }

    /// What an applied transaction leaves out once a late last piece came: a collection
    /// the log now holds whole is dropped; one the piece's verdicts vouch for takes them;
    /// any other verdict stays, as does one the node's subscriptions do not take.
    @Test func aLateLastPieceSettlesWhatATransactionLeftOut() {
        let boats = CoverageAssemblerTests.set("SELECT * FROM boats")
        let wide = CoverageAssemblerTests.set("SELECT * FROM accounts", "SELECT * FROM boats", "SELECT * FROM cars")
        let rest = [
            Verdict(collection: "accounts", coverage: .notCovered(boats.filter)),
            Verdict(collection: "cars", coverage: .notCovered(boats.filter)),
            Verdict(collection: "vans", coverage: .notCovered(boats.filter)),
        ]
        let manifest = [
            CollectionCount(collection: "accounts", documents: 2, deltas: 3), CollectionCount(collection: "cars", documents: 1, deltas: 1),
            CollectionCount(collection: "vans", documents: 1, deltas: 1),
        ]
        let a1 = DocumentRef(collection: "accounts", id: "a1"), a2 = DocumentRef(collection: "accounts", id: "a2")
        var filters = VerdictFilters()
        func leavesOut(_ rest: [Verdict], _ subscriptions: SubscriptionSet) -> Bool { filters.leavesOut(rest, for: subscriptions) }
        #expect(leavesOut(rest, wide))
        // A filter this node cannot read proves nothing, but only of a collection it takes.
        let unreadable = [Verdict(collection: "vans", coverage: .notCovered(SubscriptionFilter([.init(query: "SELECT FROM", argumentsJSON: "")])))]
        #expect(!leavesOut(unreadable, wide))
        #expect(leavesOut(unreadable, CoverageAssemblerTests.set("SELECT * FROM vans")))
        #expect(!leavesOut(rest, boats), "a node that still takes boats alone is done with it")
        // No peer vouched for cars when it applied: an `unknown` leaves it out, of a
        // collection taken (compaction's are kept apart). `overLimit` is about limits, and
        // `superseded` writes come on their own.
        let unvouched = [Verdict(collection: "cars", coverage: .unknown)]
        #expect(leavesOut(unvouched, wide))
        #expect(!leavesOut(unvouched, boats))
        let unmendable = [
            Verdict(collection: "vans", coverage: .overLimit),
            Verdict(collection: "cars", coverage: .superseded([TransactionID(origin: SiteID(0x78), sequence: 1)])),
        ]
        #expect(!leavesOut(unmendable, wide))
        // accounts whole in the log; cars vouched for by the piece; vans not taken.
        let vouched = [Verdict(collection: "cars", coverage: .notCovered(wide.filter))]
        func settle(_ logged: [DocumentRef: Set<UInt32>], _ verdicts: [Verdict], applied: Set<TransactionID> = []) -> [Verdict] {
            InboundCommitPlan.settled(
                rest, subscriptions: wide, manifest: manifest, logged: logged, verdicts: verdicts, filters: &filters,
                isApplied: applied.contains)
        }
        let settled = settle([a1: [0, 1], a2: [2]], vouched)
        #expect(settled == vouched + [rest[2]])
        #expect(!leavesOut(settled, wide))
        // Accounts held in part and no verdict on it: it stays as it was; cars' unknown vouches for nothing.
        #expect(settle([a1: [0, 1]], [Verdict(collection: "cars", coverage: .unknown)]) == rest)
        // Superseded by a later transaction: it vouches once that one is applied here, as
        // the coverage assembler asks of a waiting one, and not before.
        let later = TransactionID(origin: SiteID(0x77), sequence: 9)
        let superseded = [Verdict(collection: "cars", coverage: .superseded([later]))]
        #expect(settle([a1: [0, 1], a2: [2]], superseded) == [rest[1], rest[2]])
        #expect(settle([a1: [0, 1], a2: [2]], superseded, applied: [later]) == superseded + [rest[2]])
        // An `unknown` the apply recorded settles as a `notCovered` does: the piece vouches, or it stays.
        func settleUnknown(_ verdicts: [Verdict]) -> [Verdict] {
            InboundCommitPlan.settled(
                unvouched, subscriptions: wide, manifest: manifest, logged: [:], verdicts: verdicts, filters: &filters,
                isApplied: { _ in false })
        }
        #expect(settleUnknown(vouched) == vouched)
        #expect(settleUnknown([Verdict(collection: "cars", coverage: .unknown)]) == unvouched)
    }

    /// A lane that stopped recording cursors applies, and records none.
    @Test func aLaneThatStoppedRecordingCursorsRecordsNone() {
        let t = Txn(1, ["x"])
        let lane = InboundPipeline.Lane()
        lane.stopRecordingCursors()
        let items = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["x"])], cursor: ("k", 7, 0), lane: lane)]
        var plan = Self.plan(items)
        #expect(Self.names(Self.run(&plan, items)) == ["apply 1"])
    }

    /// A piece from a sender that may not write a collection its manifest names is
    /// refused and adds nothing: the transaction is not applied in part, not refused for
    /// good, and a peer that may write it still brings it whole. A piece whose context
    /// names such a collection is refused the same way.
    @Test func aPieceWrittenWhereItsSenderMayNotWriteIsRefusedAndTheTransactionLeftToOthers() {
        let t = Txn(1, ["x", "y"]), other = Txn(2, ["z"])
        let items = [
            InboundPipeline.Item(
                source: Self.relay, pieces: [t.piece(sending: ["x", "y"])], cursor: ("k", 5, 0), mayWrite: .collections(["orders"])),
            InboundPipeline.Item(source: Self.relay, pieces: [other.piece(sending: ["z"])], mayWrite: .collections(["accounts"])),
        ]
        var plan = Self.plan(items)
        #expect(Self.names(Self.run(&plan, items)) == ["apply 2", "cursor 5"])
        #expect(plan.result.forbidden.map(\.id) == [t.id] && plan.result.forbidden.first?.reason.contains("may not write accounts") == true)
        #expect(plan.result.refused.isEmpty && plan.result.applied == [other.id])
        #expect(plan.result.assembler.records[t.id] == nil, "nothing of it is held")
        #expect(plan.result.routes.lastPieces.contains { $0.id == t.id }, "its offer from there is resolved, not asked again and again")
        // Waiting with a piece from a sender that may: a forbidden piece changes nothing,
        // and the allowed sender's last piece then applies it whole.
        var waiting = CoverageAssembler()
        _ = waiting.add(t.piece(sending: ["x"], last: false), from: Self.relay, now: 1)
        let forbidden = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["y"])], mayWrite: .collections([]))]
        var again = Self.plan(forbidden, assembler: waiting)
        #expect(Self.names(Self.run(&again, forbidden)).isEmpty && again.result.assembler.records[t.id]?.state == .waiting)
        let allowed = [InboundPipeline.Item(source: Self.relay, pieces: [t.piece(sending: ["y"])])]
        var last = Self.plan(allowed, assembler: again.result.assembler)
        #expect(Self.names(Self.run(&last, allowed)) == ["apply 1 buffered"])
        // Context in a collection the sender may not write is a write too.
        var piece = other.piece(sending: ["z"])
        piece.context = [
            ContextField(
                document: DocumentRef(collection: "staff", id: "me"), field: "pay", valueJSON: "1000000",
                timestamp: HybridTimestamp(rawValue: 1 << 40), transaction: other.id)
        ]
        let sneaky = [InboundPipeline.Item(source: Self.relay, pieces: [piece], mayWrite: .collections(["accounts"]))]
        var context = Self.plan(sneaky)
        #expect(Self.names(Self.run(&context, sneaky)).isEmpty)
        #expect(context.result.forbidden.first?.reason.contains("may not write staff") == true)
    }
}

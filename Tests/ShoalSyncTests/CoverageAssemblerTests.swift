import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import Testing

/// The coverage assembler alone: pieces in, decisions out, no store and no clock.
@Suite struct CoverageAssemblerTests {
    static let origin = SiteID(0xA)
    static let relay = SiteID(0xB), other = SiteID(0xC)

    static func set(_ queries: String...) -> SubscriptionSet {
        var s = SubscriptionSet()
        for q in queries { try! s.add(query: q) }
        return s
    }

    static let all = set("SELECT * FROM accounts")
    static let eu = set("SELECT * FROM accounts WHERE region = 'eu'")

    /// A transaction of `origin`:`seq` writing `fields` deltas to each of `documents` in `accounts`.
    struct Txn {
        var id: TransactionID
        var documents: [String]
        var fields = 2

        init(_ seq: UInt64, _ documents: [String], fields: Int = 2, origin: SiteID = CoverageAssemblerTests.origin) {
            id = TransactionID(origin: origin, sequence: seq)
            self.documents = documents
            self.fields = fields
        }

        var deltaCount: UInt32 { UInt32(documents.count * fields) }

        func deltas(of document: String) -> [Delta] {
            let d = documents.firstIndex(of: document)!
            return (0..<fields).map { f in
                Delta(
                    collection: "accounts", documentID: document, field: "f\(f)", valueJSON: "\(id.sequence)",
                    timestamp: HybridTimestamp(rawValue: id.sequence << 16), transaction: id,
                    index: UInt32(d * fields + f), count: deltaCount)
            }
        }

        /// A piece carrying `deltas` (all of `sent` documents' by default), last or not, with verdicts.
        func piece(sending sent: [String], deltas: [Delta]? = nil, last: Bool = true, verdicts: [Coverage] = []) -> TransactionPiece {
            let carried = deltas ?? sent.flatMap(self.deltas(of:))
            var counts: [DocumentRef: UInt32] = [:]
            for d in carried { counts[DocumentRef(collection: "accounts", id: d.documentID)] = UInt32(fields) }
            return TransactionPiece(
                id: id, deltaCount: deltaCount, documentCount: UInt32(documents.count),
                collections: [CollectionCount(collection: "accounts", documents: UInt32(documents.count), deltas: deltaCount)],
                deltas: carried, documentDeltaCounts: counts,
                verdicts: last ? verdicts.map { Verdict(collection: "accounts", coverage: $0) } : [], isLast: last)
        }
    }

    static func decide(
        _ a: inout CoverageAssembler, _ subscriptions: SubscriptionSet = all, now: UInt64 = 1_000,
        applied: Set<TransactionID> = []
    ) -> [CoverageAssembler.Decision] {
        a.decide(subscriptions: subscriptions, now: now) { applied.contains($0) }
    }

    static func applies(_ decisions: [CoverageAssembler.Decision]) -> [TransactionID] {
        decisions.flatMap { if case .apply(let ids) = $0 { return ids } else { return [] } }
    }

    @Test func aWholeTransactionInOnePieceAppliesAtOnce() {
        var a = CoverageAssembler()
        let t = Txn(1, ["x", "y"])
        let fresh = a.add(t.piece(sending: ["x", "y"]), from: Self.origin, now: 1_000)
        #expect(fresh.count == 4)
        #expect(Self.decide(&a) == [.apply([t.id])])
    }

    /// Pieces come from two peers in any order: the origin's stream is still
    /// running while a relay that knows less has finished.
    @Test func piecesOutOfOrderWaitForEachOther() {
        var a = CoverageAssembler()
        let t = Txn(1, ["x", "y", "z"])
        a.add(t.piece(sending: ["z"], last: false), from: Self.origin, now: 1_000)
        #expect(Self.decide(&a).isEmpty, "nothing said of x and y yet: no question either")
        a.add(t.piece(sending: ["y"], verdicts: [.unknown]), from: Self.relay, now: 1_001)
        #expect(Self.applies(Self.decide(&a)).isEmpty)
        #expect(a.waits[t.id] == .coverage(missing: ["accounts"]))
        a.add(t.piece(sending: ["x"], last: false), from: Self.origin, now: 1_002)
        #expect(Self.decide(&a) == [.apply([t.id])], "every document held whole: no verdict needed")
    }

    @Test func duplicatePiecesAreHeldOnce() {
        var a = CoverageAssembler()
        let t = Txn(1, ["x", "y"])
        let first = t.piece(sending: ["x"], last: false)
        #expect(a.add(first, from: Self.relay, now: 1_000).count == 2)
        #expect(a.add(first, from: Self.other, now: 1_000).isEmpty, "the same deltas by another path")
        #expect(a.records[t.id]?.documents[DocumentRef(collection: "accounts", id: "x")]?.received.count == 2)
        // Half of y twice is still half of y.
        let half = Array(t.deltas(of: "y").prefix(1))
        a.add(t.piece(sending: ["y"], deltas: half, last: false), from: Self.relay, now: 1_001)
        a.add(t.piece(sending: ["y"], deltas: half, last: true, verdicts: [.notCovered(Self.all.filter)]), from: Self.other, now: 1_001)
        #expect(Self.applies(Self.decide(&a)).isEmpty)
        a.add(t.piece(sending: ["y"], last: true), from: Self.relay, now: 1_002)
        #expect(Self.decide(&a) == [.apply([t.id])])
    }

    /// A piece part of whose deltas were held before, in turns (new, held, new, held,
    /// new): only the new ones come back, in the piece's order; a piece all new comes
    /// back whole.
    @Test func aPiecePartlyHeldGivesBackOnlyItsNewDeltasInOrder() {
        var a = CoverageAssembler()
        let t = Txn(1, ["x", "y", "z"], fields: 3)
        let x = t.deltas(of: "x"), y = t.deltas(of: "y"), z = t.deltas(of: "z")
        let held = [x[1], y[0], y[1], z[2]]
        #expect(a.add(t.piece(sending: ["x", "y", "z"], deltas: held, last: false), from: Self.relay, now: 1_000) == held)
        let fresh = a.add(t.piece(sending: ["x", "y", "z"]), from: Self.origin, now: 1_001)
        #expect(fresh.map(\.index) == [0, 2, 5, 6, 7])
        #expect(fresh == [x[0], x[2], y[2], z[0], z[1]])
        #expect(a.records[t.id]?.documents.values.map(\.received.count).sorted() == [3, 3, 3])
        #expect(a.add(t.piece(sending: ["x", "y", "z"]), from: Self.other, now: 1_002).isEmpty)
        #expect(Self.decide(&a) == [.apply([t.id])])
    }

    /// Every node subscribes to the same query: what the relay left out, this node
    /// does not want either, so nothing ever waits.
    @Test func theSameSubscriptionsNeverWait() {
        var a = CoverageAssembler()
        let t = Txn(1, ["eu-1", "us-1"])
        a.add(t.piece(sending: ["eu-1"], verdicts: [.notCovered(Self.eu.filter)]), from: Self.relay, now: 1_000)
        #expect(Self.decide(&a, Self.eu) == [.apply([t.id])])
        // And a narrower query is just as safe; a wider one is not.
        var b = CoverageAssembler()
        b.add(t.piece(sending: ["eu-1"], verdicts: [.notCovered(Self.eu.filter)]), from: Self.relay, now: 1_000)
        let narrower = Self.set("SELECT * FROM accounts WHERE region = 'eu' AND kind = 'savings'")
        #expect(Self.decide(&b, narrower) == [.apply([t.id])])
        var c = CoverageAssembler()
        c.add(t.piece(sending: ["eu-1"], verdicts: [.notCovered(Self.eu.filter)]), from: Self.relay, now: 1_000)
        #expect(Self.decide(&c, Self.all) == [.ask(t.id, collections: ["accounts"])])
    }

    /// What a waiting transaction holds counts its document IDs and collections, not
    /// only its values: a delta of a megabyte's ID counted 34 bytes, and the buffer's
    /// bound held nothing back (found by an audit).
    @Test func theBufferCountsWhatItHoldsOfEachDelta() {
        var a = CoverageAssembler(configuration: .init(maximumWait: .seconds(30)))
        let long = String(repeating: "x", count: 1 << 20)
        let t = Txn(7, [long, "us-1"])
        _ = a.add(t.piece(sending: [long], last: false), from: Self.relay, now: 1_000)
        #expect(a.waitingCount == 1 && a.bufferedBytes >= 2 << 20, "\(a.bufferedBytes)")
    }

    /// A relay narrower than this node: the transaction waits, this node asks the
    /// other peers once, applies what it holds after the maximum wait (partial), and
    /// completes it when the rest comes from elsewhere.
    @Test func aNarrowRelayMakesItWaitThenPartialThenComplete() {
        var a = CoverageAssembler(configuration: .init(maximumWait: .seconds(30)))
        let t = Txn(7, ["eu-1", "us-1"])
        let fresh = a.add(t.piece(sending: ["eu-1"], verdicts: [.notCovered(Self.eu.filter)]), from: Self.relay, now: 1_000)
        #expect(fresh.count == 2)
        #expect(Self.decide(&a, now: 1_000) == [.ask(t.id, collections: ["accounts"])])
        #expect(Self.decide(&a, now: 2_000).isEmpty, "asked once, not on every decision")
        #expect(a.waitingCount == 1 && a.bufferedBytes > 0)
        #expect(!a.mayRelease(now: 30_999), "a commit before its wait is over writes only what it names")
        #expect(a.mayRelease(now: 31_000))
        #expect(Self.decide(&a, now: 31_000) == [.applyPartially(t.id, .timeout)])
        #expect(!a.mayRelease(now: 40_000), "a partial one waits for nothing")
        #expect(a.records[t.id]?.state == .partial)
        #expect(a.questions(for: Self.other).map(\.0) == [t.id], "a peer that connects later is asked about it")
        #expect(a.rest(of: t.id, subscriptions: Self.all) == [Verdict(collection: "accounts", coverage: .notCovered(Self.eu.filter))])
        // The origin answers with the rest.
        let rest = a.add(t.piece(sending: ["us-1"], verdicts: [.notCovered(Self.all.filter)]), from: Self.origin, now: 40_000)
        #expect(rest.map(\.documentID) == ["us-1", "us-1"])
        #expect(Self.decide(&a, now: 40_000) == [.completed(t.id)])
        a.remove(t.id)
        #expect(a.records.isEmpty)
    }

    /// Two relays: one knows nothing of part of the transaction, the other vouches
    /// for it. The better report wins.
    @Test func severalRelaysTheBestReportCounts() {
        var a = CoverageAssembler()
        let t = Txn(3, ["eu-1", "us-1"])
        a.add(t.piece(sending: ["eu-1"], verdicts: [.unknown]), from: Self.relay, now: 1_000)
        #expect(Self.applies(Self.decide(&a, Self.eu)).isEmpty)
        a.add(t.piece(sending: ["eu-1"], verdicts: [.notCovered(Self.eu.filter)]), from: Self.other, now: 1_001)
        #expect(Self.decide(&a, Self.eu) == [.apply([t.id])])
    }

    /// A relay whose copy of a field was overwritten says so: the transaction goes
    /// with the one that overwrote it, never alone before it.
    @Test func aSupersededPieceAppliesTogetherWithItsSuccessor() {
        let t1 = Txn(1, ["x", "y"]), t2 = Txn(2, ["y"], origin: SiteID(0xD))
        // Already applied here: t1 may go alone.
        var a = CoverageAssembler()
        a.add(t1.piece(sending: ["x"], verdicts: [.superseded([t2.id])]), from: Self.relay, now: 1_000)
        #expect(Self.decide(&a, applied: [t2.id]) == [.apply([t1.id])])
        // Not held yet: t1 waits for t2 and both go in one commit.
        var b = CoverageAssembler()
        b.add(t1.piece(sending: ["x"], verdicts: [.superseded([t2.id])]), from: Self.relay, now: 1_000)
        #expect(Self.applies(Self.decide(&b)).isEmpty)
        #expect(b.waits[t1.id] == .coverage(missing: []))
        b.add(t2.piece(sending: ["y"]), from: Self.relay, now: 1_001)
        #expect(Self.decide(&b) == [.apply([t1.id, t2.id])])
    }

    /// One that waits holds back later ones of the same origin on the same
    /// documents, and only those.
    @Test func originOrderHoldsBackLaterTransactionsOnTheSameDocuments() {
        var a = CoverageAssembler()
        let t1 = Txn(1, ["x", "y"]), t2 = Txn(2, ["x"]), t3 = Txn(3, ["z"])
        a.add(t1.piece(sending: ["x"], verdicts: [.unknown]), from: Self.relay, now: 1_000)  // y missing
        a.add(t2.piece(sending: ["x"]), from: Self.relay, now: 1_001)
        a.add(t3.piece(sending: ["z"]), from: Self.relay, now: 1_002)
        let first = Self.decide(&a)
        #expect(Self.applies(first) == [t3.id])
        #expect(a.waits[t2.id] == .order(after: t1.id))
        a.remove(t3.id)
        a.add(t1.piece(sending: ["y"]), from: Self.origin, now: 1_003)
        #expect(Self.decide(&a) == [.apply([t1.id, t2.id])])
    }

    @Test func theBufferStaysWithinItsBounds() {
        var a = CoverageAssembler(configuration: .init(maximumTransactions: 2))
        let waiting = (1...3).map { Txn(UInt64($0), ["d\($0)", "e\($0)"]) }
        for (i, t) in waiting.enumerated() {
            a.add(t.piece(sending: ["d\(i + 1)"], last: false), from: Self.relay, now: 1_000 + UInt64(i))
        }
        #expect(a.mayRelease(now: 1_000), "over its bounds")
        #expect(Self.decide(&a) == [.applyPartially(waiting[0].id, .overflow)], "the oldest goes, in part")
        #expect(!a.mayRelease(now: 1_000))
        #expect(a.waitingCount == 2)
        var bytes = CoverageAssembler(configuration: .init(maximumBytes: 100))
        bytes.add(waiting[0].piece(sending: ["d1"], last: false), from: Self.relay, now: 1_000)
        #expect(Self.decide(&bytes).isEmpty)
        let big = Delta(
            collection: "accounts", documentID: "e1", field: "f0", valueJSON: String(repeating: "1", count: 200),
            timestamp: HybridTimestamp(rawValue: 1), transaction: waiting[0].id, index: 2, count: 4)
        bytes.add(waiting[0].piece(sending: ["e1"], deltas: [big], last: false), from: Self.relay, now: 1_001)
        #expect(Self.decide(&bytes) == [.applyPartially(waiting[0].id, .overflow)])
    }

    /// The records are what the store keeps; an assembler built from them after a
    /// restart decides as the one before would have.
    @Test func aRestartFromTheDurableRecordsDecidesTheSame() {
        var a = CoverageAssembler()
        let t = Txn(5, ["x", "y"])
        a.add(t.piece(sending: ["x"], last: false), from: Self.relay, now: 1_000)
        #expect(Self.decide(&a).isEmpty)
        // The store round-trips the header and reports as text, the deltas as rows.
        var record = a.records[t.id]!
        record.reports = TransactionRecord.Report.decode(TransactionRecord.Report.encode(record.reports))
        record.collections = CollectionCount.decode(CollectionCount.encode(record.collections))!
        var restarted = CoverageAssembler(records: [record])
        #expect(Self.decide(&restarted).isEmpty)
        restarted.add(t.piece(sending: ["y"]), from: Self.relay, now: 2_000)
        #expect(Self.decide(&restarted) == [.apply([t.id])])
    }

    /// Collections this node does not subscribe to are not waited for.
    @Test func onlyCoveredCollectionsCount() {
        var a = CoverageAssembler()
        let id = TransactionID(origin: Self.origin, sequence: 9)
        let delta = Delta(
            collection: "accounts", documentID: "x", field: "f", valueJSON: "1", timestamp: HybridTimestamp(rawValue: 1),
            transaction: id, index: 0, count: 2)
        let piece = TransactionPiece(
            id: id, deltaCount: 2, documentCount: 2,
            collections: [
                CollectionCount(collection: "accounts", documents: 1, deltas: 1),
                CollectionCount(collection: "audit", documents: 1, deltas: 1),
            ],
            deltas: [delta], documentDeltaCounts: [DocumentRef(collection: "accounts", id: "x"): 1],
            verdicts: [Verdict(collection: "audit", coverage: .unknown)], isLast: true)
        a.add(piece, from: Self.relay, now: 1_000)
        #expect(Self.decide(&a) == [.apply([id])])
    }
    /// What a node says of a collection it does not hold whole comes from a peer that
    /// vouches for its subscriptions where one does: a narrower reporter that came first
    /// would make it look as if the transaction left out what the node takes.
    @Test func theRestComesFromAReporterThatVouchesForTheSubscriptions() {
        var a = CoverageAssembler()
        let t = Txn(7, ["eu-1", "us-1"])
        a.add(t.piece(sending: ["eu-1"], last: false), from: Self.origin, now: 1_000)
        #expect(!a.hasChoiceOfRest(t.id), "no peer said anything yet")
        a.add(t.piece(sending: ["eu-1"], verdicts: [.notCovered(Self.eu.filter)]), from: Self.relay, now: 1_000)
        a.add(t.piece(sending: ["eu-1"], verdicts: [.notCovered(Self.all.filter)]), from: Self.other, now: 1_000)
        #expect(a.hasChoiceOfRest(t.id))
        #expect(a.rest(of: t.id, subscriptions: Self.all) == [Verdict(collection: "accounts", coverage: .notCovered(Self.all.filter))])
        // Both vouch for the narrower set: the first reporter's word stands.
        #expect(a.rest(of: t.id, subscriptions: Self.eu) == [Verdict(collection: "accounts", coverage: .notCovered(Self.eu.filter))])
        // Two reporters saying the same: no choice to make.
        var b = CoverageAssembler()
        b.add(t.piece(sending: ["eu-1"], verdicts: [.notCovered(Self.eu.filter)]), from: Self.relay, now: 1_000)
        b.add(t.piece(sending: ["eu-1"], verdicts: [.notCovered(Self.eu.filter)]), from: Self.other, now: 1_000)
        #expect(!b.hasChoiceOfRest(t.id))
    }

    /// A relay that does not subscribe to a collection but carries it for a neighbour
    /// holds a document of it in part (the rest was over its limits): it waits for the
    /// sender's last piece before applying, so what it passes on says why the rest is
    /// missing instead of `unknown`, which would leave the neighbour waiting for ever.
    @Test func aCollectionHeldInPartWaitsForTheLastPieceEvenUnsubscribed() {
        var a = CoverageAssembler()
        let boats = Self.set("SELECT * FROM boats")
        let t = Txn(3, ["x"])
        a.add(t.piece(sending: ["x"], deltas: Array(t.deltas(of: "x").prefix(1)), last: false), from: Self.origin, now: 1_000)
        #expect(Self.decide(&a, boats).isEmpty, "applied before the sender said why the rest is missing")
        a.add(t.piece(sending: [], last: true, verdicts: [.overLimit]), from: Self.origin, now: 1_001)
        #expect(Self.decide(&a, boats) == [.apply([t.id])])
        #expect(a.rest(of: t.id, subscriptions: boats) == [Verdict(collection: "accounts", coverage: .overLimit)])
        // A collection held whole needs no last piece.
        var b = CoverageAssembler()
        let u = Txn(4, ["y"])
        b.add(u.piece(sending: ["y"], last: false), from: Self.origin, now: 1_000)
        #expect(Self.decide(&b, boats) == [.apply([u.id])])
    }

    /// A peer's last piece says a covered collection holds what this node cannot take
    /// (`overLimit`): the transaction can never be whole here, so it is refused whole,
    /// and the assembler lets go of it as it decides: the decision carries the record
    /// (found by FuzzCoverage, whose harness expected the record still held).
    @Test func aTransactionOverTheLimitOfACoveredCollectionIsRefusedAndLetGo() {
        var a = CoverageAssembler()
        let t = Txn(5, ["x", "y"])
        a.add(t.piece(sending: ["x"], last: true, verdicts: [.overLimit]), from: Self.origin, now: 1_000)
        let decisions = Self.decide(&a)
        #expect(decisions.count == 1)
        guard case .refuse(let record, let collections)? = decisions.first else {
            Issue.record("expected a refusal, got \(decisions)")
            return
        }
        #expect(record.id == t.id && collections == ["accounts"])
        #expect(a.records[t.id] == nil && a.waitingCount == 0)
        #expect(Self.decide(&a, now: 100_000).isEmpty, "nothing of it comes back")
    }
}

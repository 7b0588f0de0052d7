public import ShoalCRDT
public import ShoalStorage

/// Puts remote transactions together from their pieces and decides when each one
/// can be applied, whole, without ever showing half of one as whole.
///
/// ```
///   piece ──add──► waiting ──every covered collection held or vouched for──► apply (whole)
///                    │  │                     (an earlier waiting one of the same
///                    │  │                      origin on the same documents holds it back)
///                    │  └── stuck after a peer's last piece ──► ask the other peers
///                    └── maximum wait, or the buffer over its bounds ──► apply what is held: partial
///                                                          partial ──rest arrives──► completed
/// ```
///
/// A remote transaction T is **whole** for this node, with subscriptions R, when for
/// every collection c of T's manifest that R names, either every document of c that
/// T wrote is held with all its deltas, or one peer that sent T's last piece
/// vouched for the rest of c (and, if a document of c is held in part, said that
/// some of its deltas were `superseded`):
/// - `notCovered(S)`, where R is provably narrower than S on c (what S left out, R
///   does not want either);
/// - `superseded(by: T')`, where T' is applied here or is applied in the same commit;
/// - never `unknown`.
///
/// The assembler is a value: no I/O, no clock. The inbound pipeline feeds it pieces
/// and the time, carries out its decisions against the store, and keeps its records
/// durable; tests drive it directly.
public struct CoverageAssembler: Sendable {
    public struct Configuration: Sendable, Hashable {
        /// How long a transaction waits for missing pieces before what is held is applied (partial).
        public var maximumWait: Duration
        /// Transactions held back (waiting) at most; over it the oldest is applied in part.
        public var maximumTransactions: Int
        /// Bytes of deltas held back at most; over it the oldest is applied in part.
        public var maximumBytes: Int

        public init(maximumWait: Duration = .seconds(30), maximumTransactions: Int = 10_000, maximumBytes: Int = 256 << 20) {
            self.maximumWait = maximumWait
            self.maximumTransactions = maximumTransactions
            self.maximumBytes = maximumBytes
        }
    }

    /// Why a transaction was applied before it was whole.
    public enum PartialReason: String, Sendable, Hashable {
        /// It waited `maximumWait`.
        case timeout
        /// The buffer went over one of its bounds.
        case overflow
    }

    public enum Decision: Sendable, Hashable {
        /// Apply these waiting transactions whole, in this order, in one commit.
        case apply([TransactionID])
        /// Apply what is held of this waiting transaction now; it becomes partial.
        case applyPartially(TransactionID, PartialReason)
        /// This partial transaction is whole now.
        case completed(TransactionID)
        /// Ask other peers for the missing documents of these collections.
        case ask(TransactionID, collections: [String])
        /// Refuse this waiting transaction whole: a peer that sent its last piece holds
        /// documents of these covered collections that this node said it cannot take
        /// (`overLimit`), so it can never be whole here.
        case refuse(TransactionRecord, collections: [String])
    }

    /// Why a transaction waits, for status.
    public enum Wait: Sendable, Hashable {
        case coverage(missing: [String])
        /// An earlier transaction of the same origin, touching the same documents, waits.
        case order(after: TransactionID)
    }

    public let configuration: Configuration
    /// Waiting and partial transactions.
    public private(set) var records: [TransactionID: TransactionRecord] = [:]
    /// Peers asked for each transaction's missing pieces (not durable: asked again after a restart).
    public private(set) var asked: [TransactionID: Set<SiteID>] = [:]
    /// Why each waiting transaction waited at the last decision.
    public private(set) var waits: [TransactionID: Wait] = [:]
    /// Transactions for which an `.ask` decision was made.
    private var stuck: Set<TransactionID> = []
    /// The filters of the verdicts it judged, parsed once.
    var filters = VerdictFilters()

    public init(configuration: Configuration = Configuration(), records: [TransactionRecord] = []) {
        self.configuration = configuration
        for record in records where record.state != .applied { self.records[record.id] = record }
    }

    public var bufferedBytes: Int { records.values.reduce(0) { $0 + ($1.state == .waiting ? $1.bufferedBytes : 0) } }
    public var waitingCount: Int { records.values.count { $0.state == .waiting } }

    /// Takes a record the store had (a partial transaction read back on demand).
    public mutating func adopt(_ record: TransactionRecord) {
        guard record.state != .applied, records[record.id] == nil else { return }
        records[record.id] = record
    }

    /// Adds a piece received from `source` at `now` (milliseconds since 1970).
    ///
    /// Returns the deltas it holds that were not held before, and the record as it
    /// is now: a waiting transaction's new deltas go to the durable buffer, a partial
    /// one's are applied at once.
    @discardableResult
    public mutating func add(_ piece: TransactionPiece, from source: SiteID, now: UInt64) -> [Delta] {
        // Taken out while it changes, so that its tables are changed in place, not copied.
        var record: TransactionRecord
        if let held = records.removeValue(forKey: piece.id) {
            record = held
        } else {
            record = TransactionRecord(
                id: piece.id, deltaCount: piece.deltaCount, documentCount: piece.documentCount,
                collections: piece.collections, firstSeen: now)
            // Sized once for the documents this piece carries (not for those the manifest
            // claims, which a peer could inflate), not grown a document at a time.
            record.documents.reserveCapacity(piece.documentDeltaCounts.count)
        }
        let deltas = piece.deltas
        // The deltas not held before. Nearly always every one of the piece: then the
        // piece's own array is returned, not a copy; `repeated` is the first delta
        // held before, from which on `fresh` collects.
        var repeated: Int?
        var fresh: [Delta] = []
        var start = deltas.startIndex
        // A document's deltas mostly come one after the other: a run is looked up once.
        while start < deltas.endIndex {
            let ref = DocumentRef(collection: deltas[start].collection, id: deltas[start].documentID)
            var end = start + 1
            while end < deltas.endIndex, deltas[end].documentID == ref.id, deltas[end].collection == ref.collection { end += 1 }
            let expected = piece.documentDeltaCounts[ref]
            Self.note(
                deltas, start..<end, expected: expected, in: &record.documents[ref, default: .init(expected: expected ?? 1)],
                repeated: &repeated, fresh: &fresh)
            start = end
        }
        if repeated == nil { fresh = deltas }
        if piece.isLast || !piece.verdicts.isEmpty {
            var report = record.reports[source] ?? .init()
            report.isLast = report.isLast || piece.isLast
            if piece.isLast { report.verdicts = piece.verdicts }
            record.reports[source] = report
        }
        if record.state == .waiting {
            // Each delta as it is held: its collection and document ID too (on SQLite
            // nothing bounds an ID, and one of megabytes counted as its value alone).
            record.bufferedBytes += fresh.reduce(0) {
                $0 + $1.valueJSON.utf8.count + $1.field.utf8.count + $1.collection.utf8.count + $1.documentID.utf8.count + 32
            }
        }
        records[piece.id] = record
        return fresh
    }

    /// Notes one document's run of deltas (`run` of `deltas`) in its progress. Until a
    /// delta held before turns up, nothing is copied; at the first (`repeated`), the
    /// new ones before it go to `fresh`, and from then on every new one does.
    private static func note(
        _ deltas: [Delta], _ run: Range<Int>, expected: UInt32?, in progress: inout TransactionRecord.Progress,
        repeated: inout Int?, fresh: inout [Delta]
    ) {
        if let expected, expected > progress.expected { progress.expected = expected }
        for i in run {
            let new = progress.received.insert(deltas[i].index)
            if repeated == nil {
                guard !new else { continue }
                repeated = i
                fresh.reserveCapacity(deltas.count)
                fresh.append(contentsOf: deltas[..<i])
            } else if new {
                fresh.append(deltas[i])
            }
        }
    }

    /// Notes that `peers` were asked for `id`'s missing pieces.
    public mutating func noteAsked(_ id: TransactionID, peers: some Sequence<SiteID>) {
        asked[id, default: []].formUnion(peers)
    }

    /// The transactions to ask a newly connected peer about: those stuck or partial
    /// that it was not asked about yet, oldest first.
    public func questions(for peer: SiteID, limit: Int = 1000) -> [(TransactionID, [String])] {
        records.values
            .filter { ($0.state == .partial || stuck.contains($0.id)) && asked[$0.id]?.contains(peer) != true }
            .sorted { $0.firstSeen < $1.firstSeen }
            .prefix(limit)
            .map { record in
                if case .coverage(let missing)? = waits[record.id] { return (record.id, missing) }
                return (record.id, [])
            }
    }

    /// A partial transaction's held deltas are applied: nothing of it stays buffered.
    public mutating func releaseBuffer(_ id: TransactionID) {
        records[id]?.bufferedBytes = 0
    }

    /// What this node says, when it relays the transaction, of the documents of each
    /// collection it does not hold whole: what a peer that sent its last piece said
    /// without an `unknown`, preferring one that vouches for `subscriptions` (what the
    /// node carries: a narrower reporter's `notCovered` would leave out what it or its
    /// neighbours take); with no such peer, `unknown`. Collections held whole get
    /// nothing. Where reporters agree (`hasChoiceOfRest` false), `subscriptions` changes
    /// nothing, so a caller may pass its own instead of reading what it carries.
    public mutating func rest(of id: TransactionID, subscriptions: SubscriptionSet) -> [Verdict] {
        guard let record = records[id] else { return [] }
        var out: [Verdict] = []
        for count in record.collections where !Self.holdsWhole(record, count) {
            let candidates = Self.restCandidates(record, count.collection)
            if let chosen = candidates.first(where: { verdicts in !verdicts.contains { filters.leavesOut($0, for: subscriptions) } })
                ?? candidates.first
            {
                out += chosen
            } else {
                out.append(Verdict(collection: count.collection, coverage: .unknown))
            }
        }
        return out
    }

    /// Whether peers said different things of a collection of `id` this node does not
    /// hold whole: then which subscriptions `rest(of:subscriptions:)` judges by matters.
    public func hasChoiceOfRest(_ id: TransactionID) -> Bool {
        guard let record = records[id] else { return false }
        return record.collections.contains { count in
            guard !Self.holdsWhole(record, count) else { return false }
            let candidates = Self.restCandidates(record, count.collection)
            return candidates.contains { $0 != candidates.first }
        }
    }

    private static func holdsWhole(_ record: TransactionRecord, _ count: CollectionCount) -> Bool {
        record.documents.count { $0.key.collection == count.collection && $0.value.isComplete } >= Int(count.documents)
    }

    /// What each peer that sent the last piece said of `collection`, by site ID, of those
    /// that said something and no `unknown`.
    private static func restCandidates(_ record: TransactionRecord, _ collection: String) -> [[Verdict]] {
        record.reports.sorted { $0.key < $1.key }.map(\.value).filter(\.isLast)
            .map { $0.verdicts.filter { $0.collection == collection } }
            .filter { verdicts in !verdicts.isEmpty && !verdicts.contains { $0.coverage == .unknown } }
    }

    /// A held transaction as the store holds it now, read again because other processes
    /// write the store too (hubs on one database): one applied or refused there is let
    /// go; one whose record was written there (more of it buffered, its reports or its
    /// state moved on) takes the store's `record`, which holds all this node held of it,
    /// keeping what this node asked and why it waited.
    public mutating func refresh(_ id: TransactionID, state: TransactionRecord.State, record: TransactionRecord?) {
        guard records[id] != nil else { return }
        switch state {
        case .applied, .refused: remove(id)
        case .waiting, .partial: if let record, record.state == state { records[id] = record }
        }
    }

    /// Removes a transaction once it is applied whole.
    public mutating func remove(_ id: TransactionID) {
        records[id] = nil
        asked[id] = nil
        waits[id] = nil
        stuck.remove(id)
    }

    /// The transactions the last reports of held transactions name as superseding
    /// (`superseded` verdicts), other than themselves: what `decide` asks `isApplied`
    /// about, so a caller can read their states first.
    public func supersedingNamed() -> Set<TransactionID> {
        var named: Set<TransactionID> = []
        for record in records.values where record.state == .waiting || record.state == .partial {
            for report in record.reports.values where report.isLast {
                for verdict in report.verdicts {
                    if case .superseded(let ids) = verdict.coverage { named.formUnion(ids.filter { $0 != record.id }) }
                }
            }
        }
        return named
    }

    /// Decides what can be applied now.
    ///
    /// - Parameter isApplied: whether a transaction the assembler does not hold is
    ///   applied here (whole or partial): superseding transactions are looked up with it.
    public mutating func decide(
        subscriptions: SubscriptionSet, now: UInt64, isApplied: (TransactionID) -> Bool
    ) -> [Decision] {
        var decisions: [Decision] = []
        let waitMillis = self.waitMillis

        // Partial ones whose rest has come.
        for record in records.values.sorted(by: { $0.id < $1.id }) where record.state == .partial {
            if case .whole = evaluate(record, subscriptions, isApplied) { decisions.append(.completed(record.id)) }
        }

        // Waiting ones a sender said hold what this node cannot take: never whole here.
        let covered = subscriptions.collections
        for record in records.values.sorted(by: { $0.id < $1.id }) where record.state == .waiting {
            let over = Set(
                record.reports.values.filter(\.isLast).flatMap(\.verdicts)
                    .filter { $0.coverage == .overLimit && covered.contains($0.collection) }.map(\.collection))
            guard !over.isEmpty else { continue }
            remove(record.id)
            decisions.append(.refuse(record, collections: over.sorted()))
        }

        // Waiting ones: whole, whole once superseding ones apply with them, or missing pieces.
        var needs: [TransactionID: Set<TransactionID>] = [:]
        var candidates: Set<TransactionID> = []
        var missing: [TransactionID: [String]] = [:]
        for record in records.values where record.state == .waiting {
            switch evaluate(record, subscriptions, isApplied) {
            case .whole:
                candidates.insert(record.id)
            case .wholeWith(let superseding):
                candidates.insert(record.id)
                needs[record.id] = superseding
            case .missing(let collections):
                missing[record.id] = collections
            }
        }
        var ready: Set<TransactionID> = []
        while true {
            (ready, waits) = settle(candidates: candidates, needs: needs, missing: missing)
            // Waited too long for coverage, or the buffer is over its bounds: apply what is held.
            let overdue = records.values.filter { record in
                guard record.state == .waiting, !ready.contains(record.id), case .coverage? = waits[record.id] else { return false }
                return now >= record.firstSeen && now - record.firstSeen >= waitMillis
            }.sorted { ($0.firstSeen, $0.id) < ($1.firstSeen, $1.id) }
            var partial = overdue.map { ($0.id, PartialReason.timeout) }
            if partial.isEmpty,
                waitingCount - ready.count > configuration.maximumTransactions
                    || bufferedBytes - ready.reduce(0, { $0 + records[$1]!.bufferedBytes }) > configuration.maximumBytes,
                let oldest = records.values.filter({ $0.state == .waiting && !ready.contains($0.id) })
                    .min(by: { ($0.firstSeen, $0.id) < ($1.firstSeen, $1.id) })
            {
                partial = [(oldest.id, .overflow)]
            }
            if partial.isEmpty { break }
            for (id, reason) in partial {
                records[id]!.state = .partial
                candidates.remove(id)
                missing[id] = nil
                decisions.append(.applyPartially(id, reason))
            }
        }
        for (id, collections) in missing.sorted(by: { $0.key < $1.key })
        where !stuck.contains(id) && records[id]!.reports.values.contains(where: \.isLast) {
            stuck.insert(id)
            decisions.append(.ask(id, collections: collections))
        }
        if !ready.isEmpty { decisions.append(.apply(ready.sorted())) }
        return decisions
    }

    /// `configuration.maximumWait` in milliseconds.
    private var waitMillis: UInt64 {
        UInt64(configuration.maximumWait.components.seconds) * 1000
            + UInt64(configuration.maximumWait.components.attoseconds / 1_000_000_000_000_000)
    }

    /// Whether `decide` at `now` may let a waiting transaction go partial: one has waited
    /// `maximumWait`, or the buffer is over its bounds. Such a decision writes the
    /// documents of a transaction no piece of the commit names.
    public func mayRelease(now: UInt64) -> Bool {
        guard waitingCount > 0 else { return false }
        if waitingCount > configuration.maximumTransactions || bufferedBytes > configuration.maximumBytes { return true }
        let waitMillis = self.waitMillis
        return records.values.contains { $0.state == .waiting && now >= $0.firstSeen && now - $0.firstSeen >= waitMillis }
    }

    /// The candidates that can go now: each one's superseding transactions go with it,
    /// and no earlier waiting transaction of its origin touching its documents stays behind.
    private func settle(
        candidates: Set<TransactionID>, needs: [TransactionID: Set<TransactionID>], missing: [TransactionID: [String]]
    ) -> (Set<TransactionID>, [TransactionID: Wait]) {
        var ready = candidates
        var waits: [TransactionID: Wait] = missing.mapValues { .coverage(missing: $0) }
        var byOrigin: [SiteID: [TransactionRecord]] = [:]
        for record in records.values where record.state == .waiting { byOrigin[record.id.origin, default: []].append(record) }
        var changed = true
        while changed {
            changed = false
            for id in ready {
                if let superseding = needs[id], !superseding.isSubset(of: ready) {
                    ready.remove(id)
                    waits[id] = .coverage(missing: [])
                    changed = true
                    continue
                }
                let documents = records[id]!.documents.keys
                if let blocker = byOrigin[id.origin]?.first(where: { other in
                    other.id.sequence < id.sequence && !ready.contains(other.id)
                        && !documents.allSatisfy { other.documents[$0] == nil }
                }) {
                    ready.remove(id)
                    waits[id] = .order(after: blocker.id)
                    changed = true
                }
            }
        }
        return (ready, waits)
    }

    enum Evaluation: Equatable {
        case whole
        case wholeWith(superseding: Set<TransactionID>)
        case missing([String])
    }

    /// Whether the record is whole for `subscriptions`, see the type's documentation.
    mutating func evaluate(
        _ record: TransactionRecord, _ subscriptions: SubscriptionSet, _ isApplied: (TransactionID) -> Bool
    ) -> Evaluation {
        let covered = subscriptions.collections
        var missing: [String] = []
        var superseding: Set<TransactionID> = []
        // A collection this node does not subscribe to and does not hold whole (it may
        // carry part of it for a neighbour): what it passes on of it (`rest(of:)`) is
        // only as good as a last piece's verdicts, so it waits for one. Applied at once,
        // it would say `unknown` for ever, though the sender says why (an `overLimit`,
        // say) a moment later in the same stream.
        if record.state == .waiting, !record.reports.values.contains(where: \.isLast) {
            for count in record.collections where !covered.contains(count.collection) {
                let held = record.documents.count { $0.key.collection == count.collection && $0.value.isComplete }
                if held < Int(count.documents) { missing.append(count.collection) }
            }
        }
        for count in record.collections where covered.contains(count.collection) {
            let c = count.collection
            let held = record.documents.count { $0.key.collection == c && $0.value.isComplete }
            if held >= Int(count.documents) { continue }
            // A document held in part is explained only by deltas overwritten at the sender.
            let heldInPart = record.documents.contains { $0.key.collection == c && !$0.value.isComplete }
            var best: Set<TransactionID>?
            for report in record.reports.values where report.isLast {
                let verdicts = report.verdicts.filter { $0.collection == c }
                guard !verdicts.isEmpty else { continue }
                if heldInPart, !verdicts.contains(where: { if case .superseded = $0.coverage { true } else { false } }) {
                    continue
                }
                var vouches = true
                var needed: Set<TransactionID> = []
                for verdict in verdicts {
                    switch verdict.coverage {
                    case .notCovered(let filter):
                        if !narrower(subscriptions, than: filter, on: c) { vouches = false }
                    case .superseded(let ids):
                        for later in ids where later != record.id && !isApplied(later) { needed.insert(later) }
                    case .unknown, .overLimit:
                        vouches = false
                    }
                }
                if vouches, best == nil || needed.count < best!.count { best = needed }
            }
            if let best { superseding.formUnion(best) } else { missing.append(c) }
        }
        if !missing.isEmpty { return .missing(missing.sorted()) }
        return superseding.isEmpty ? .whole : .wholeWith(superseding: superseding)
    }

    private mutating func narrower(_ subscriptions: SubscriptionSet, than filter: SubscriptionFilter, on collection: String) -> Bool {
        filters.isNarrower(subscriptions, than: filter, on: collection)
    }
}

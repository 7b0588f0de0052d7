public import ShoalCRDT

/// Cuts the pieces a page read for a peer into DeltaBatches that the peer can take,
/// and withholds what it cannot take at all (PROTOCOL.md §8.3, "Fitting the receiver").
///
/// A peer says in its Hello the largest frame payload it takes and the largest
/// document it holds (`PeerLimits`). A sender that ignored them would send a frame
/// the peer refuses, reconnect, and send it again, for ever. So:
///
/// ```
///  pieces ──estimate ≤ limit──────────────────────────────► one batch (no encoding here)
///     │ over
///     ▼
///  encode ── fits ──► a batch                 a document over the peer's document limit,
///     │ too large                             or one delta that alone cannot fit a frame:
///     ▼                                       withheld, and its collection gets an
///  halve: the pieces; one piece by its        `overLimit` verdict on the transaction's
///  documents; one document by its deltas      last piece (this page's, or a later one)
/// ```
///
/// The left half of a piece cut in two is not last and carries no verdicts or
/// context; the right half keeps them. A value that the peer cannot hold makes the
/// transaction impossible to hold whole there: the peer refuses it, and says so.
///
/// A value: the session state machine keeps one across pages (`pending`: collections
/// withheld from transactions whose last piece has not been sent yet).
public struct BatchFitter: Sendable, Hashable {
    /// The largest payload the peer takes.
    public var limit: Int
    /// The largest document the peer holds (field names and values of one transaction's
    /// deltas to it); 0: it did not say.
    public var documentLimit: Int
    /// Whether the peer understands `overLimit` verdicts (it said its limits).
    public var saysLimits: Bool
    /// Collections withheld from transactions whose last piece is still to come.
    public private(set) var pending: [TransactionID: Set<String>] = [:]
    /// Documents withheld from the transactions of this call: the rest of their deltas
    /// is not worth sending either.
    private var withheld: [TransactionID: Set<DocumentRef>] = [:]

    public init(limits: PeerLimits) {
        self.limit = limits.framePayload
        self.documentLimit = limits.documentSizeHardLimit
        self.saysLimits = limits.areKnown
    }

    /// Measures an encoded batch of pieces: its payload's length.
    public typealias Measure = ([TransactionPiece]) -> Int

    /// The batches to send for `pieces`, in order; each fits `limit` when `measure` says
    /// so. Empty when nothing is left to send.
    public mutating func fit(_ pieces: [TransactionPiece], measure: Measure) -> [[TransactionPiece]] {
        var out: [[TransactionPiece]] = []
        withheld = [:]
        defer { withheld = [:] }
        let pieces = pieces.compactMap { withholdOversizedDocuments($0) }
        if Self.estimate(pieces) <= limit, pending.isEmpty || !pieces.contains(where: { $0.isLast && pending[$0.id] != nil }) {
            return pieces.isEmpty ? [] : [pieces]
        }
        place(pieces, into: &out, measure: measure)
        return out
    }

    /// Withholds the documents of `piece` over the peer's document limit; nil when
    /// nothing is left worth sending.
    private mutating func withholdOversizedDocuments(_ piece: TransactionPiece) -> TransactionPiece? {
        guard documentLimit > 0 else { return piece }
        var sizes: [DocumentRef: Int] = [:]
        for delta in piece.deltas {
            sizes[DocumentRef(collection: delta.collection, id: delta.documentID), default: 0] +=
                delta.field.utf8.count + delta.valueJSON.utf8.count
        }
        let over = Set(sizes.filter { $0.value > documentLimit }.keys)
        guard !over.isEmpty else { return piece }
        return withhold(over, from: piece)
    }

    /// Puts `group` in `out` whole if it fits, or in halves.
    private mutating func place(_ group: [TransactionPiece], into out: inout [[TransactionPiece]], measure: Measure) {
        var group = group
        for i in group.indices {
            if let documents = withheld[group[i].id] {
                group[i].deltas.removeAll { documents.contains(DocumentRef(collection: $0.collection, id: $0.documentID)) }
                group[i].context.removeAll { documents.contains($0.document) }
            }
            if group[i].isLast, let collections = pending.removeValue(forKey: group[i].id) {
                addOverLimit(collections, to: &group[i])
            }
        }
        group.removeAll { $0.deltas.isEmpty && $0.context.isEmpty && !$0.isLast }
        guard !group.isEmpty else { return }
        if measure(group) <= limit {
            out.append(group)
            return
        }
        if group.count > 1 {
            let middle = group.count / 2
            place(Array(group[..<middle]), into: &out, measure: measure)
            place(Array(group[middle...]), into: &out, measure: measure)
            return
        }
        let piece = group[0]
        if let (left, right) = Self.halve(piece) {
            place([left], into: &out, measure: measure)
            place([right], into: &out, measure: measure)
            return
        }
        // One delta (or none, with context) that cannot fit a frame on its own.
        let documents = Set(piece.deltas.map { DocumentRef(collection: $0.collection, id: $0.documentID) })
            .union(piece.context.map(\.document))
        if let rest = withhold(documents, from: piece) {
            // What is left is the bare last piece with its verdicts: small, unless the
            // verdicts alone are too large, which no halving can help.
            if rest.deltas.isEmpty, rest.context.isEmpty, measure([rest]) > limit { return }
            place([rest], into: &out, measure: measure)
        }
    }

    /// Takes `documents` out of `piece`, noting their collections as withheld; nil when
    /// what is left is not worth sending (no delta, and not the transaction's last piece).
    private mutating func withhold(_ documents: Set<DocumentRef>, from piece: TransactionPiece) -> TransactionPiece? {
        var piece = piece
        piece.deltas.removeAll { documents.contains(DocumentRef(collection: $0.collection, id: $0.documentID)) }
        piece.context.removeAll { documents.contains($0.document) }
        for document in documents { piece.documentDeltaCounts[document] = nil }
        withheld[piece.id, default: []].formUnion(documents)
        let collections = Set(documents.map(\.collection))
        if piece.isLast {
            addOverLimit(collections, to: &piece)
        } else {
            pending[piece.id, default: []].formUnion(collections)
        }
        return piece.deltas.isEmpty && !piece.isLast ? nil : piece
    }

    /// Says on a last piece that documents of `collections` were withheld as over the
    /// peer's limits. A peer that did not say its limits predates the verdict: it gets
    /// `unknown`, which it understands, and waits for its coverage timeout.
    func addOverLimit(_ collections: Set<String>, to piece: inout TransactionPiece) {
        for collection in collections.sorted() {
            piece.verdicts.append(Verdict(collection: collection, coverage: saysLimits ? .overLimit : .unknown))
        }
    }

    /// A piece cut in two: by its documents when it has several, else by its deltas.
    /// The left half goes first and is not last; the right half keeps the verdicts and
    /// the last flag, and each half the context of its documents. A last piece of one
    /// delta gives the delta (with its context) and a last piece of verdicts alone. nil
    /// for one delta otherwise.
    static func halve(_ piece: TransactionPiece) -> (TransactionPiece, TransactionPiece)? {
        let deltas = piece.deltas
        if deltas.count == 1, piece.isLast, !piece.verdicts.isEmpty {
            // The delta on its own, the verdicts in a last piece with none.
            var left = piece, right = piece
            left.isLast = false
            left.verdicts = []
            right.deltas = []
            right.documentDeltaCounts = [:]
            right.context = []
            return (left, right)
        }
        guard deltas.count > 1 else { return nil }
        // Where one document's run of deltas gives way to another's, nearest the middle
        // (from it onwards, else before it); in the middle of the one document otherwise.
        func startsRun(_ i: Int) -> Bool {
            deltas[i].documentID != deltas[i - 1].documentID || deltas[i].collection != deltas[i - 1].collection
        }
        let middle = deltas.count / 2
        let cut =
            (middle..<deltas.count).first(where: startsRun)
            ?? (1..<middle).reversed().first(where: startsRun)
            ?? middle
        var left = piece, right = piece
        left.deltas = Array(piece.deltas[..<cut])
        right.deltas = Array(piece.deltas[cut...])
        let leftDocuments = Set(left.deltas.map { DocumentRef(collection: $0.collection, id: $0.documentID) })
        let rightDocuments = Set(right.deltas.map { DocumentRef(collection: $0.collection, id: $0.documentID) })
        left.documentDeltaCounts = piece.documentDeltaCounts.filter { leftDocuments.contains($0.key) }
        right.documentDeltaCounts = piece.documentDeltaCounts.filter { rightDocuments.contains($0.key) }
        // Context goes with the last deltas of its document.
        left.context = piece.context.filter { leftDocuments.contains($0.document) && !rightDocuments.contains($0.document) }
        right.context = piece.context.filter { !left.context.contains($0) }
        left.isLast = false
        left.verdicts = []
        return (left, right)
    }

    /// An upper bound of the payload `pieces` encode to, from their sizes alone.
    static func estimate(_ pieces: [TransactionPiece]) -> Int {
        var total = 32
        for piece in pieces {
            total += 96 + piece.collections.reduce(0) { $0 + 24 + $1.collection.utf8.count }
            var last: DocumentRef?
            for delta in piece.deltas {
                total += 32 + delta.field.utf8.count + delta.valueJSON.utf8.count
                if last?.id != delta.documentID || last?.collection != delta.collection {
                    total += 32 + delta.collection.utf8.count + delta.documentID.utf8.count
                    last = DocumentRef(collection: delta.collection, id: delta.documentID)
                }
            }
            for field in piece.context {
                total += 64 + field.field.utf8.count + field.valueJSON.utf8.count + field.document.collection.utf8.count
                    + field.document.id.utf8.count
            }
            for verdict in piece.verdicts {
                total += 32 + verdict.collection.utf8.count
                switch verdict.coverage {
                case .notCovered(let filter):
                    total += filter.entries.reduce(0) { $0 + 16 + $1.query.utf8.count + $1.argumentsJSON.utf8.count }
                case .superseded(let ids): total += 24 * ids.count
                case .unknown, .overLimit: break
                }
            }
        }
        return total
    }
}

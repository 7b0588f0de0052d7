import ShoalCRDT

/// Where a piece's deltas stand on the wire: grouped by document in order of first
/// appearance, each document's in the order they stand in the piece, with the
/// smallest timestamp as the piece's base (PROTOCOL.md §8.3).
///
/// ```
///  piece.deltas   d0(x) d1(x) d2(y) d3(x) d4(z)
///  documents      x: d0 d1 d3 · y: d2 · z: d4        (order 0 1 3 2 4)
/// ```
///
/// Both the messages `PieceCodec.encode` builds and the bytes `DeltaBatchWriter`
/// writes follow it, so they agree byte for byte.
struct PieceLayout {
    struct Document {
        var ref: DocumentRef
        /// How many deltas the transaction wrote to the document in all.
        var deltaCount: UInt32
        /// Its deltas' places in `order`.
        var range: Range<Int>
    }

    var documents: [Document] = []
    /// The smallest timestamp of the piece's deltas, 0 when it has none.
    var base: UInt64 = 0
    /// The piece's deltas in wire order, by their positions in `piece.deltas`; nil when
    /// that is the piece's own order (every document's deltas stand together).
    private var order: [Int]?

    init(_ piece: TransactionPiece) {
        let deltas = piece.deltas
        guard !deltas.isEmpty else { return }
        var base = UInt64.max
        var groups: [(ref: DocumentRef, size: Int)] = []
        var groupOf: [Int] = []
        groupOf.reserveCapacity(deltas.count)
        var known: [DocumentRef: Int] = Dictionary(minimumCapacity: piece.documentDeltaCounts.count)
        var regrouped = false
        // A document's deltas mostly come one after the other: a run is looked up once.
        var run = -1
        for delta in deltas {
            base = min(base, delta.timestamp.rawValue)
            if run < 0 || !groups[run].ref.is(collection: delta.collection, id: delta.documentID) {
                let ref = DocumentRef(collection: delta.collection, id: delta.documentID)
                if let group = known[ref] {
                    run = group
                    regrouped = true
                } else {
                    run = groups.count
                    known[ref] = run
                    groups.append((ref, 0))
                }
            }
            groups[run].size += 1
            groupOf.append(run)
        }
        self.base = base
        var start = 0
        documents.reserveCapacity(groups.count)
        for (ref, size) in groups {
            documents.append(Document(ref: ref, deltaCount: piece.documentDeltaCounts[ref] ?? 1, range: start..<start + size))
            start += size
        }
        guard regrouped else { return }
        // A document came back after another: its deltas join its group, in piece order.
        var next = documents.map(\.range.lowerBound)
        var order = [Int](repeating: 0, count: deltas.count)
        for (position, group) in groupOf.enumerated() {
            order[next[group]] = position
            next[group] += 1
        }
        self.order = order
    }

    /// The position in `piece.deltas` of the delta at `place` in wire order.
    func position(_ place: Int) -> Int { order?[place] ?? place }

    /// The numbers a delta's position and timestamp travel as, one delta after the
    /// other in wire order: absolute (`index`, `timestampOffset` from the base) or
    /// stepped from the delta before (`indexStep`, `timestampStep`); the others are 0.
    struct Numbers {
        var index: UInt32 = 0
        var timestampOffset: Int64 = 0
        var indexStep: Int32 = 0
        var timestampStep: Int64 = 0
    }

    /// Works out `Numbers` delta by delta; one per pass over a piece in wire order.
    struct Stepper {
        let encoding: PieceCodec.DeltaEncoding
        let base: UInt64
        private var index = UInt32.max  // -1, modulo 2^32
        private var timestamp: UInt64

        init(_ encoding: PieceCodec.DeltaEncoding, base: UInt64) {
            self.encoding = encoding
            self.base = base
            self.timestamp = base &- 1
        }

        mutating func next(_ delta: Delta) -> Numbers {
            let ts = delta.timestamp.rawValue
            switch encoding {
            case .absolute:
                return Numbers(index: delta.index, timestampOffset: Int64(bitPattern: ts &- base))
            case .stepped:
                defer {
                    index = delta.index
                    timestamp = ts
                }
                return Numbers(
                    indexStep: Int32(bitPattern: delta.index &- index &- 1), timestampStep: Int64(bitPattern: ts &- timestamp &- 1))
            }
        }
    }
}

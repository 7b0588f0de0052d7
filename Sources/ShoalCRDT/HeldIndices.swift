/// The delta indices (positions in a transaction) held of one document.
///
/// A document's deltas hold consecutive indices in their transaction and nearly
/// always arrive together, so the indices held are one run: kept inline, it costs
/// no allocation and no hashing, where a `Set<UInt32>` allocated and hashed each
/// index. A few more runs (a document split between pieces, or between peers) go to
/// a short array. Past `maximumRuns` runs (indices sent scattered, as only a broken
/// or hostile peer sends them) every index goes to a set, so that an insert never
/// costs more than a hash, however the indices come.
public struct HeldIndices: Sendable, Hashable, ExpressibleByArrayLiteral {
    /// The most runs kept as runs.
    static let maximumRuns = 16

    /// The lowest run (empty when nothing is held, or when `scattered` holds all).
    /// Bounds are 64-bit so that a run can end past `UInt32.max`.
    private var first: Range<UInt64> = 0..<0
    /// The runs above `first`, ascending, with a gap before each.
    private var rest: [Range<UInt64>] = []
    /// Every index held, once they fell into more than `maximumRuns` runs.
    private var scattered: Set<UInt32>?
    /// How many indices are held.
    public private(set) var count: Int = 0

    public init() {}

    public init(arrayLiteral elements: UInt32...) {
        formUnion(elements)
    }

    public init(_ elements: some Sequence<UInt32>) {
        formUnion(elements)
    }

    public var isEmpty: Bool { count == 0 }

    public func contains(_ index: UInt32) -> Bool {
        if let scattered { return scattered.contains(index) }
        let i = UInt64(index)
        return first.contains(i) || rest.contains { $0.contains(i) }
    }

    /// Adds `index`; true when it was not held before.
    @discardableResult
    public mutating func insert(_ index: UInt32) -> Bool {
        if scattered != nil {
            guard scattered!.insert(index).inserted else { return false }
            count += 1
            return true
        }
        let i = UInt64(index)
        if rest.isEmpty {
            // The usual cases: the first index, or the next one of the one run.
            if count == 0 {
                first = i..<(i + 1)
                count = 1
                return true
            }
            if i == first.upperBound {
                first = first.lowerBound..<(i + 1)
                count += 1
                return true
            }
            if first.contains(i) { return false }
        }
        return insertIntoRuns(i)
    }

    public mutating func formUnion(_ other: some Sequence<UInt32>) {
        for index in other { insert(index) }
    }

    /// The indices held, ascending.
    public var sorted: [UInt32] {
        if let scattered { return scattered.sorted() }
        var out: [UInt32] = []
        out.reserveCapacity(count)
        for run in runs { out.append(contentsOf: run.lazy.map { UInt32($0) }) }
        return out
    }

    /// Equal when they hold the same indices, however each keeps them.
    public static func == (lhs: HeldIndices, rhs: HeldIndices) -> Bool {
        guard lhs.count == rhs.count else { return false }
        if lhs.scattered == nil, rhs.scattered == nil { return lhs.first == rhs.first && lhs.rest == rhs.rest }
        return lhs.sorted == rhs.sorted
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
        for index in sorted { hasher.combine(index) }
    }

    private var runs: [Range<UInt64>] { count == 0 ? [] : [first] + rest }

    /// Merges `i` into the sorted runs, joining the runs it makes touch; past
    /// `maximumRuns` runs, moves every index to `scattered`.
    private mutating func insertIntoRuns(_ i: UInt64) -> Bool {
        var all = runs
        // The first run that ends at or after `i`.
        var low = 0
        var high = all.count
        while low < high {
            let mid = (low + high) / 2
            if all[mid].upperBound < i { low = mid + 1 } else { high = mid }
        }
        if low < all.count, all[low].contains(i) { return false }
        if low < all.count, all[low].upperBound == i {
            all[low] = all[low].lowerBound..<(i + 1)
            if low + 1 < all.count, all[low + 1].lowerBound == i + 1 {
                all[low] = all[low].lowerBound..<all[low + 1].upperBound
                all.remove(at: low + 1)
            }
        } else if low < all.count, all[low].lowerBound == i + 1 {
            all[low] = i..<all[low].upperBound
        } else {
            all.insert(i..<(i + 1), at: low)
        }
        count += 1
        if all.count > Self.maximumRuns {
            var set = Set<UInt32>(minimumCapacity: count)
            for run in all { for index in run { set.insert(UInt32(index)) } }
            scattered = set
            first = 0..<0
            rest = []
        } else {
            first = all[0]
            rest = Array(all.dropFirst())
        }
        return true
    }
}

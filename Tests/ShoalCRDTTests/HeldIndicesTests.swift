import ShoalCRDT
import ShoalTesting
import Testing

/// The delta indices held of a document: a set, however the indices arrive, kept as
/// runs so that equal sets are equal values.
@Suite struct HeldIndicesTests {
    @Test func aRunInOrderIsHeldOnceEach() {
        var held = HeldIndices()
        #expect(held.isEmpty)
        let answers = [10, 11, 12, 13, 14, 12, 10, 14].map { held.insert($0) }
        #expect(answers == [true, true, true, true, true, false, false, false])
        #expect(held.count == 5)
        #expect(held.sorted == [10, 11, 12, 13, 14])
        #expect(!held.contains(9))
        #expect(!held.contains(15))
    }

    @Test func indicesOutOfOrderJoinTheirRuns() {
        var held: HeldIndices = [5, 1]
        #expect(held.count == 2)
        // 3 alone, 2 joins 1 and 3, 4 joins 1...3 and 5, 0 comes before the first run.
        let answers = [3, 2, 4, 0, 3].map { held.insert($0) }
        #expect(answers == [true, true, true, true, false])
        #expect(held.sorted == [0, 1, 2, 3, 4, 5])
        #expect(held == HeldIndices(0..<6))
        // The ends of the index space.
        var ends: HeldIndices = [UInt32.max, 0]
        let atTheEnd = [UInt32.max - 1, UInt32.max].map { ends.insert($0) }
        #expect(atTheEnd == [true, false])
        #expect(ends.sorted == [0, UInt32.max - 1, UInt32.max])
        #expect(ends.contains(UInt32.max))
    }

    /// Random inserts against `Set<UInt32>`: the same answers, the same members, and
    /// equal values (and hashes) for equal sets reached by different orders.
    @Test func randomInsertsAgreeWithASet() {
        var rng = SplitMix(state: 0x1D1CE5)
        for _ in 0..<500 {
            var held = HeldIndices()
            var plain = Set<UInt32>()
            for _ in 0..<Int(rng.next() % 60) {
                // Mostly a small range, so that runs meet and join.
                let i = rng.next() % 8 == 0 ? UInt32(truncatingIfNeeded: rng.next()) : UInt32(rng.next() % 40)
                let added = held.insert(i)
                #expect(added == plain.insert(i).inserted)
                #expect(held.contains(i))
            }
            #expect(held.count == plain.count)
            #expect(held.sorted == plain.sorted())
            let reordered = HeldIndices(plain.shuffled(using: &rng))
            #expect(reordered == held)
            #expect(reordered.hashValue == held.hashValue)
            for probe in 0..<UInt32(45) { #expect(held.contains(probe) == plain.contains(probe)) }
        }
    }

    /// Indices sent scattered (every other one, as only a broken or hostile peer sends
    /// them) leave the runs for a set past a few runs, and stay the same set: the same
    /// answers, and equal to the one run they make once the gaps are filled.
    @Test func scatteredIndicesStayASet() {
        var held = HeldIndices()
        var plain = Set<UInt32>()
        for i in stride(from: UInt32(0), to: 2_000, by: 2) {
            let added = held.insert(i)
            #expect(added == plain.insert(i).inserted)
        }
        #expect(held.count == 1_000)
        #expect(held.contains(1_998))
        #expect(!held.contains(1_999))
        #expect(held.sorted == plain.sorted())
        let again = [0, 1_000, 1_998].map { held.insert($0) }
        #expect(again == [false, false, false])
        for i in stride(from: UInt32(1), to: 2_000, by: 2) { held.insert(i) }
        #expect(held.count == 2_000)
        let run = HeldIndices(0..<2_000)
        #expect(held == run)
        #expect(held.hashValue == run.hashValue)
        #expect(held != HeldIndices(0..<1_999))
    }
}

import ShoalWire
import Testing

@Suite struct InboundProgressTests {
    /// Progress is 16 KiB more than at the last mark, however it arrived; less is not.
    @Test func sixteenKilobytesSinceTheLastMarkIsProgress() {
        var progress = InboundProgress(bytes: 100)
        let step = InboundProgress.progressBytes
        var seen: [Bool] = []
        for bytes in [100, 100 + step - 1, 100 + step, 100 + step + 10, 100 + 3 * step] {
            seen.append(progress.advanced(to: bytes))
        }
        // The third moved the mark: the next 16 KiB count from there.
        #expect(seen == [false, false, true, false, true])
    }

    /// A byte at a time never adds up to progress within one check, however many checks.
    @Test func aTrickleIsNotProgress() {
        var progress = InboundProgress()
        var bytes: UInt64 = 0
        var marks = 0
        for _ in 0..<1000 {
            bytes += 1
            if progress.advanced(to: bytes) { marks += 1 }
        }
        #expect(marks == 0)
    }

    @Test func theCounterAddsWhatTheHandlerSees() {
        let counter = InboundByteCounter()
        counter.add(10)
        counter.add(16_384)
        #expect(counter.bytes == 16_394)
    }
}

import ShoalCRDT
import ShoalStore
import ShoalStorage

/// The probe of the in-process latency runs: a one-document UPDATE on a writer's store
/// until an observer on a reader's store shows it, one at a time.
struct ProbeLatency {
    let observer: StoreObserver
    private let seen: AsyncStream<(Int64, ContinuousClock.Instant)>

    /// Writes the probe on `writer` and observes it on `reader`, which has to be linked
    /// to it (directly or through others) before `measure` runs.
    init(writer: DocumentStore, reader: DocumentStore) async throws {
        _ = try await writer.execute("INSERT INTO probe DOCUMENTS ({'_id': 'p', 'n': -1})")
        let (seen, continuation) = AsyncStream.makeStream(of: (Int64, ContinuousClock.Instant).self)
        self.seen = seen
        observer = try reader.registerObserver("SELECT n FROM probe WHERE _id = 'p'") { observation in
            let now = ContinuousClock.now
            if case .int(let n)? = observation.items.first?["n"] { continuation.yield((n, now)) }
        }
    }

    /// Waits for the probe to reach the reader, then times `samples` UPDATEs on
    /// `writer`, pausing `pause` between them: milliseconds each.
    func measure(writer: DocumentStore, samples: Int, pause: Duration = .zero) async throws -> [Double] {
        var latencies: [Double] = []
        var arrivals = seen.makeAsyncIterator()
        while let (n, _) = await arrivals.next(), n != -1 {}
        for i in 0..<samples {
            let t = ContinuousClock.now
            _ = try await writer.execute("UPDATE probe SET n = :n WHERE _id = 'p'", arguments: ["n": .int(Int64(i))])
            while let (n, at) = await arrivals.next() {
                if n == Int64(i) {
                    latencies.append(seconds(at - t) * 1000)
                    break
                }
            }
            if pause > .zero { try await Task.sleep(for: pause) }
        }
        return latencies
    }
}

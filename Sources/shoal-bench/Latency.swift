import Foundation
import ShoalCRDT
import ShoalNode
import ShoalSync
import ShoalWire

/// From a one-document transaction sent to A until an observer on B sees it: the
/// probe document's `n` is set to the sample's number, and the sample ends when B's
/// observation of the probe shows that number. Each sample also times the write's
/// own round trip (until A answered it, committed), the part of the latency spent
/// before anything reaches B.
enum Latency {
    struct Figure: Sendable {
        var label: String
        var samples: Int
        var p50: Double
        var p99: Double
        var max: Double
        /// The write's round trip to A: p50 and p99.
        var writeP50: Double
        var writeP99: Double

        /// The percentiles of `latencies` and of `writes` (milliseconds, in any order).
        init(label: String, latencies: [Double], writes: [Double] = []) {
            func percentile(_ sorted: [Double], _ p: Double) -> Double {
                sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
            }
            let sorted = latencies.sorted()
            let writes = writes.sorted()
            self.label = label
            samples = sorted.count
            p50 = percentile(sorted, 0.5)
            p99 = percentile(sorted, 0.99)
            max = sorted.last ?? 0
            writeP50 = percentile(writes, 0.5)
            writeP99 = percentile(writes, 0.99)
        }
    }

    static func measure(
        writer: AdminClient, observer: AdminClient, samples: Int, label: String, stop: Shared<Bool>? = nil
    ) async throws -> Figure {
        let base = Int.random(in: 1_000_000...1_000_000_000)
        let (seen, continuation) = AsyncStream.makeStream(of: (Int64, ContinuousClock.Instant).self)
        var latencies: [Double] = []
        var writes: [Double] = []
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await observer.observe("SELECT n FROM probe WHERE _id = 'p'") { observation in
                    let now = ContinuousClock.now
                    if let item = observation.itemsJSON.first, case .int(let n)? = (try? JSON.parse(item))?["n"] {
                        continuation.yield((n, now))
                    }
                }
            }
            defer { group.cancelAll() }
            var arrivals = seen.makeAsyncIterator()
            try await writer.withSession { session in
                _ = try await session.exec("INSERT INTO probe DOCUMENTS ({'_id': 'p', 'n': :n}) ON ID CONFLICT DO UPDATE", argumentsJSON: "{\"n\":\(base)}")
                while let (n, _) = await arrivals.next(), n != Int64(base) {}
                for i in 1...samples {
                    if stop?.withLock({ $0 }) == true { break }
                    let value = Int64(base + i)
                    let start = ContinuousClock.now
                    _ = try await session.exec("UPDATE probe SET n = :n WHERE _id = 'p'", argumentsJSON: "{\"n\":\(value)}")
                    writes.append(seconds(ContinuousClock.now - start) * 1000)
                    while let (n, at) = await arrivals.next() {
                        if n == value {
                            latencies.append(seconds(at - start) * 1000)
                            break
                        }
                    }
                }
            }
        }
        return Figure(label: label, latencies: latencies, writes: writes)
    }
}

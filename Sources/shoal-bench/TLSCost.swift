import Foundation

/// The replication run (A, B dialing A, C dialing B, D joining A) over plaintext links
/// and over TLS 1.3, alternating, in one run: what TLS costs, as ratios of figures
/// measured side by side.
enum TLSCost {
    struct Pair: Sendable {
        var plaintext: Replication.Result
        var tls: Replication.Result
    }

    static func measure(plan: Plan, pairs: Int, progress: Progress) async throws -> [Pair] {
        var result: [Pair] = []
        for pair in 1...pairs {
            progress.say("pair \(pair)/\(pairs): plaintext")
            let plain = try await Replication.measure(plan: plan, progress: progress, tls: false)
            progress.say("pair \(pair)/\(pairs): TLS")
            let tls = try await Replication.measure(plan: plan, progress: progress, tls: true)
            result.append(Pair(plaintext: plain, tls: tls))
        }
        return result
    }

    /// Each figure's name and how to read it from a run.
    static let figures: [(name: String, value: @Sendable (Replication.Result) -> Double)] = [
        ("replication, one hop (docs/s)", { Double($0.replication.documents) / $0.replication.oneHopSeconds }),
        ("replication, two hops (docs/s)", { Double($0.replication.documents) / $0.replication.twoHopSeconds }),
        ("initial sync of a joining node (s)", { $0.initialSync }),
        ("latency idle, p50 (ms)", { $0.latencyIdle.p50 }),
        ("latency idle, p99 (ms)", { $0.latencyIdle.p99 }),
        ("latency under load, p50 (ms)", { $0.latencyUnderLoad.p50 }),
        ("wire A -> B (bytes/doc)", { $0.wire.bytesPerDocument }),
        ("CPU of A, B and C (s)", { $0.resources.reduce(0) { $0 + $1.cpuSeconds } }),
        ("peak RSS of a node (MB)", { Double($0.resources.map(\.peakResidentBytes).max() ?? 0) / 1e6 }),
    ]

    static func table(_ pairs: [Pair], plan: Plan) -> String {
        var out = "shoal-bench --tls: \(plan.documents) documents, A - B - C, plaintext and TLS 1.3 alternating, \(pairs.count) pair(s)\n"
        out += "  TLS/plain is the median over pairs of each pair's ratio\n\n"
        let header = ["FIGURE", "PLAINTEXT", "TLS", "TLS/PLAIN"]
        var rows: [[String]] = []
        for figure in figures {
            let plain = pairs.map { figure.value($0.plaintext) }, tls = pairs.map { figure.value($0.tls) }
            let ratios = zip(tls, plain).map { $1 > 0 ? $0 / $1 : 0 }.sorted()
            rows.append([
                figure.name, pairs.count == 1 ? format(plain[0]) : plain.map(format).joined(separator: " "),
                pairs.count == 1 ? format(tls[0]) : tls.map(format).joined(separator: " "),
                String(format: "%.2fx", ratios[ratios.count / 2]),
            ])
        }
        out += renderTable(header, rows)
        return out
    }

    static func json(_ pairs: [Pair]) -> String {
        let rows = figures.map { figure in
            let plain = pairs.map { String(format: "%.4f", figure.value($0.plaintext)) }.joined(separator: ",")
            let tls = pairs.map { String(format: "%.4f", figure.value($0.tls)) }.joined(separator: ",")
            return "{\"figure\":\"\(figure.name)\",\"plaintext\":[\(plain)],\"tls\":[\(tls)]}"
        }
        return "{\"tls\":[" + rows.joined(separator: ",") + "]}"
    }

    static func format(_ value: Double) -> String {
        value >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value)
    }
}

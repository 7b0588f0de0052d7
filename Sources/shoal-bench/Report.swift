import Foundation

/// Every figure of one run, as a table (ratios first) or as JSON.
struct Report: Sendable {
    var plan: Plan
    var sqlite: [RawSQLite.Figure] = []
    var local: [LocalWrites.Figure] = []
    var replication: Replication.Figure?
    var initialSync: Double?
    var latencyIdle: Latency.Figure?
    var latencyUnderLoad: Latency.Figure?
    var wire: Replication.Wire?
    var resources: [Replication.Resources] = []
    var peer: Result<PeerRun.Figure, BenchError>?

    var sqlite100: Double { sqlite.first { $0.perTransaction == "100" }?.documentsPerSecond ?? 0 }
    var local100: Double { local.first { $0.perTransaction == 100 }?.documentsPerSecond ?? 0 }
    var oneHopRate: Double { replication.map { Double($0.documents) / $0.oneHopSeconds } ?? 0 }
    var twoHopRate: Double { replication.map { Double($0.documents) / $0.twoHopSeconds } ?? 0 }
    var peerOneHopRate: Double? {
        if case .success(let p)? = peer { return Double(p.updates) / p.oneHopSeconds }
        return nil
    }

    /// (what, measured, target, met) — the targets of Benchmarks/README.md.
    var ratios: [(String, String, String, Bool?)] {
        var out: [(String, String, String, Bool?)] = []
        func ratio(_ x: Double) -> String { String(format: "%.2fx", x) }
        out.append(("replication, one hop / raw SQLite (100 per txn)", ratio(oneHopRate / sqlite100), ">= 0.50x", oneHopRate / sqlite100 >= 0.5))
        if let peerRate = peerOneHopRate {
            out.append(("replication, one hop / pycrdt-websocket", ratio(oneHopRate / peerRate), ">= 2.00x", oneHopRate / peerRate >= 2))
        } else {
            out.append(("replication, one hop / pycrdt-websocket", "not run", ">= 2.00x", nil))
        }
        if let r = replication {
            out.append(("two hops / one hop (time)", ratio(r.twoHopSeconds / r.oneHopSeconds), "< 1.30x", r.twoHopSeconds / r.oneHopSeconds < 1.3))
        }
        out.append(("local writes, 100 per txn / raw SQLite", ratio(local100 / sqlite100), ">= 0.50x", local100 / sqlite100 >= 0.5))
        if let w = wire {
            let x = w.bytesPerDocument / w.plainJSONBytesPerDocument
            out.append(("wire / plain JSON", ratio(x), "< 0.50x", x < 0.5))
        }
        if let l = latencyIdle {
            out.append(("observer latency idle, p50", String(format: "%.2f ms", l.p50), "< 1 ms", l.p50 < 1))
            out.append(("observer latency idle, p99", String(format: "%.2f ms", l.p99), "< 5 ms", l.p99 < 5))
        }
        if let s = initialSync {
            let scaled = s * 100_000 / Double(plan.documents)
            out.append(("initial sync of \(plan.documents) documents", String(format: "%.2f s", s), "< \(String(format: "%.1f", 5 * Double(plan.documents) / 100_000)) s", scaled < 5))
        }
        if let peak = resources.map(\.peakResidentBytes).max() {
            out.append(("peak RSS of a node", String(format: "%.0f MB", Double(peak) / 1e6), "< 150 MB", Double(peak) < 150e6))
        }
        return out
    }

    var table: String {
        var out = "\nShoal against its limits (ratios measured in this run; targets from Benchmarks/README.md)\n"
        out += render(["FIGURE", "MEASURED", "TARGET", ""], ratios.map { [$0.0, $0.1, $0.2, $0.3.map { $0 ? "met" : "MISSED" } ?? "-"] })
        out += "\nAbsolute figures (this machine, this run)\n"
        var rows: [[String]] = []
        for f in sqlite {
            rows.append(["raw SQLite, \(f.perTransaction) per txn", String(format: "%.0f docs/s", f.documentsPerSecond), String(format: "%.0f rows/s", f.rowsPerSecond), "\(f.documents) docs in \(String(format: "%.2f", f.seconds)) s"])
        }
        for f in local {
            rows.append(["Shoal local writes, \(f.perTransaction) per txn", String(format: "%.0f docs/s", f.documentsPerSecond), String(format: "%.2fx raw", f.documentsPerSecond / (sqlite.first { $0.perTransaction == "\(f.perTransaction)" }?.documentsPerSecond ?? .nan)), "\(f.documents) docs in \(String(format: "%.2f", f.seconds)) s"])
        }
        if let r = replication {
            rows.append(["written on A (admin session, 100 per txn, \(plan.inFlight) in flight)", String(format: "%.0f docs/s", Double(r.documents) / r.writtenSeconds), "", String(format: "%.2f s", r.writtenSeconds)])
            rows.append(["replicated to B, one hop", String(format: "%.0f docs/s", oneHopRate), String(format: "%.0f deltas/s", Double(r.deltas) / r.oneHopSeconds), String(format: "%.2f s", r.oneHopSeconds)])
            rows.append(["replicated to C, two hops", String(format: "%.0f docs/s", twoHopRate), String(format: "%.0f deltas/s", Double(r.deltas) / r.twoHopSeconds), String(format: "%.2f s", r.twoHopSeconds)])
        }
        if case .success(let p)? = peer {
            rows.append(["pycrdt-websocket, one hop", String(format: "%.0f updates/s", Double(p.updates) / p.oneHopSeconds), "", String(format: "%.2f s", p.oneHopSeconds)])
            rows.append(["pycrdt-websocket, two hops", String(format: "%.0f updates/s", Double(p.updates) / p.twoHopSeconds), "", String(format: "%.2f s", p.twoHopSeconds)])
        } else if case .failure(let e)? = peer {
            rows.append(["pycrdt-websocket", "not run", "", e.description])
        }
        if let s = initialSync { rows.append(["initial sync, a node joining A", String(format: "%.2f s", s), "", "\(plan.documents) docs"]) }
        for l in [latencyIdle, latencyUnderLoad].compactMap({ $0 }) {
            rows.append(["latency A -> observer on B, \(l.label)", String(format: "p50 %.2f ms", l.p50), String(format: "p99 %.2f ms", l.p99), String(format: "max %.2f ms, %d samples", l.max, l.samples)])
            rows.append(["  of which the write on A, \(l.label)", String(format: "p50 %.2f ms", l.writeP50), String(format: "p99 %.2f ms", l.writeP99), "round trip until A answered"])
        }
        if let w = wire {
            rows.append(["wire A -> B", String(format: "%.1f B/doc", w.bytesPerDocument), String(format: "plain JSON %.1f B/doc", w.plainJSONBytesPerDocument), ""])
        }
        for r in resources {
            rows.append(["node \(r.node)", String(format: "peak RSS %.0f MB", Double(r.peakResidentBytes) / 1e6), String(format: "CPU %.2f s", r.cpuSeconds), ""])
        }
        out += render(["FIGURE", "", "", ""], rows)
        return out
    }

    var json: String {
        var object: [String: Any] = [
            "documents": plan.documents, "samples": plan.samples, "inFlight": plan.inFlight,
            "sqlite": sqlite.map { ["perTransaction": $0.perTransaction, "documents": $0.documents, "seconds": $0.seconds, "documentsPerSecond": $0.documentsPerSecond, "rowsPerSecond": $0.rowsPerSecond] },
            "localWrites": local.map { ["perTransaction": $0.perTransaction, "documents": $0.documents, "seconds": $0.seconds, "documentsPerSecond": $0.documentsPerSecond] },
            "resources": resources.map { ["node": $0.node, "peakResidentBytes": $0.peakResidentBytes, "cpuSeconds": $0.cpuSeconds] },
            "ratios": ratios.map { ["figure": $0.0, "measured": $0.1, "target": $0.2, "met": $0.3 as Any] },
        ]
        if let r = replication {
            object["replication"] = ["documents": r.documents, "deltas": r.deltas, "writtenSeconds": r.writtenSeconds, "oneHopSeconds": r.oneHopSeconds, "twoHopSeconds": r.twoHopSeconds, "oneHopDocumentsPerSecond": oneHopRate, "twoHopDocumentsPerSecond": twoHopRate]
        }
        if let s = initialSync { object["initialSyncSeconds"] = s }
        for (key, l) in [("latencyIdle", latencyIdle), ("latencyUnderLoad", latencyUnderLoad)] {
            if let l {
                object[key] = [
                    "samples": l.samples, "p50Millis": l.p50, "p99Millis": l.p99, "maxMillis": l.max,
                    "writeP50Millis": l.writeP50, "writeP99Millis": l.writeP99,
                ]
            }
        }
        if let w = wire { object["wire"] = ["bytesPerDocument": w.bytesPerDocument, "plainJSONBytesPerDocument": w.plainJSONBytesPerDocument] }
        switch peer {
        case .success(let p)?: object["peer"] = ["tool": "pycrdt-websocket", "updates": p.updates, "oneHopSeconds": p.oneHopSeconds, "twoHopSeconds": p.twoHopSeconds]
        case .failure(let e)?: object["peer"] = ["error": e.description]
        case nil: break
        }
        let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }

    func render(_ header: [String], _ rows: [[String]]) -> String { renderTable(header, rows) }
}

/// Rows under a header, each column as wide as its widest cell.
func renderTable(_ header: [String], _ rows: [[String]]) -> String {
    let all = [header] + rows
    let widths = header.indices.map { i in all.map { $0[i].count }.max() ?? 0 }
    return all.map { row in
        "  " + row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
            .joined(separator: "  ")
    }.joined(separator: "\n") + "\n"
}

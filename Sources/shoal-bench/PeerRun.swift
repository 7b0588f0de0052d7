import Foundation
import ShoalTesting

/// The same replication workload through pycrdt-websocket (Yjs over websockets),
/// run by `Benchmarks/peers/yjs_bench.py` in the same run, on the same machine.
enum PeerRun {
    struct Figure: Sendable {
        var updates: Int
        var oneHopSeconds: Double
        var twoHopSeconds: Double
    }

    /// The peer's figures, or why there are none (python3 or pycrdt missing, say).
    static func measure(script: String, python: String, updates: Int) -> Result<Figure, BenchError> {
        guard FileManager.default.fileExists(atPath: script) else {
            return .failure(BenchError("\(script) not found (run shoal-bench from the repository's root, or pass --peer-script)"))
        }
        let run: (status: Int32, stdout: Data, stderr: Data)
        do {
            run = try ChildProcess.run("/usr/bin/env", [python, script, "--updates", "\(updates)"], timeout: 600)
        } catch {
            return .failure(BenchError("cannot run \(python): \(error)"))
        }
        let output = run.stdout
        let errors = String(decoding: run.stderr, as: UTF8.self)
        guard run.status == 0,
            let object = try? JSONSerialization.jsonObject(with: output) as? [String: Any],
            let oneHop = object["oneHopSeconds"] as? Double, let twoHops = object["twoHopSeconds"] as? Double
        else {
            let hint = errors.contains("No module named") ? " (pip install -r Benchmarks/peers/requirements.txt)" : ""
            return .failure(BenchError("the Yjs peer failed\(hint): \(errors.split(separator: "\n").last ?? "")"))
        }
        return .success(Figure(updates: updates, oneHopSeconds: oneHop, twoHopSeconds: twoHops))
    }
}

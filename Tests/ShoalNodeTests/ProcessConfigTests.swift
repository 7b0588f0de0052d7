import Foundation
import ShoalNode
import ShoalTesting
import Testing

extension ProcessSuites {
/// `shoal run --config FILE` as an operator uses it.
@Suite(.serialized) struct ProcessConfigTests {
    @Test func everyFlagOfRunIsAConfigKey() throws {
        let help = try ShoalBinary.run(["run", "--help"])
        #expect(help.status == 0)
        var flags = Set<String>()
        for word in help.stdout.split(whereSeparator: { " \n,[]<>/".contains($0) }) where word.hasPrefix("--") {
            var flag = String(word.dropFirst(2))
            if flag.hasPrefix("no-") { flag.removeFirst(3) }  // --[no-]discovery
            flags.insert(flag)
        }
        flags.remove("help")
        flags.remove("version")
        flags.remove("config")
        #expect(flags == Set(NodeSettings.keys.map(\.name)), "\(help.stdout)")
        // Each flag's default, as the node takes it (lines rewrapped as one).
        let text = help.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for key in NodeSettings.keys {
            guard let shown = key.defaultText else { continue }
            #expect(text.contains("(default: \(shown))"), "shoal run --help shows \(key.name)'s default, \(shown)")
        }
    }

    @Test func aNodeStartsFromAFileAndFlagsWin() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-config")
        defer { dirs.remove() }
        let file = dirs.path + "/shoal.toml"
        try """
            data = "node-db"
            name = "from-the-file"
            listen = "127.0.0.1:1"
            subscribe = ["SELECT * FROM cars"]
            discovery = false
            """.write(toFile: file, atomically: true, encoding: .utf8)
        let node = try NodeProcess(
            name: "configured", dataDirectory: dirs.path + "/unused", arguments: ["--config", file, "--listen", "127.0.0.1:0"])
        let status = try node.status()
        #expect(status["name"] as? String == "from-the-file")
        #expect(node.port != 1 && node.port != 0, "the flag's port 0 won over the file's port 1")
        #expect((status["subscriptions"] as? [[String: Any]])?.first?["query"] as? String == "SELECT * FROM cars")
        #expect(FileManager.default.fileExists(atPath: dirs.path + "/node-db/shoal.sqlite"), "data is relative to the file")
        #expect(node.interrupt() == 0)
    }

    /// `status --watch` redraws in place (home the cursor, clear the screen) until interrupted.
    @Test func statusWatchRedrawsInPlace() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-watch")
        defer { dirs.remove() }
        let node = try NodeProcess(name: "watched", dataDirectory: dirs.path + "/n")
        let watcher = try ChildProcess(ShoalBinary.path, ["status", "--node", node.address, "--watch", "0.2"], stdout: .pipe)
        let output = LineCollector(watcher.output!)
        // Long enough for three redraws even on a loaded machine (each is a new connection).
        Thread.sleep(forTimeInterval: 4)
        watcher.send(SIGINT)
        watcher.wait(timeout: 15)
        #expect(eventually { output.isFinished })
        let text = output.text
        let frames = text.components(separatedBy: "\u{1B}[H\u{1B}[2J").filter { !$0.isEmpty }
        #expect(frames.count >= 3, "\(frames.count) redraws: \(text)")
        #expect(frames.allSatisfy { $0.contains("Node watched") })
    }

    @Test func aBadFileStopsTheNodeNamingTheLineAndKey() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-config")
        defer { dirs.remove() }
        let file = dirs.path + "/bad.toml"
        try "data = \"db\"\n# the port\nmax-frame-size = \"big\"\n".write(toFile: file, atomically: true, encoding: .utf8)
        let run = try ShoalBinary.run(["run", "--config", file])
        #expect(run.status == 1)
        #expect(run.stderr.contains("bad.toml:3 (max-frame-size): 'max-frame-size' must be an integer, not a string"), "\(run.stderr)")
        // Malformed TOML is refused with its line and column, never a crash (the C++
        // reader Shoal used aborted, exit 134, on this text).
        try "data = \"db\"\n[[= [\"orderme = \"ar\n".write(toFile: file, atomically: true, encoding: .utf8)
        let malformed = try ShoalBinary.run(["run", "--config", file])
        #expect(malformed.status == 1)
        #expect(malformed.stderr.contains("bad.toml:2:3: expected a key"), "\(malformed.stderr)")
        let missing = try ShoalBinary.run(["run", "--config", dirs.path + "/nothing.toml"])
        #expect(missing.status == 1 && missing.stderr.contains("cannot read the config file"), "\(missing.stderr)")
    }
}
}

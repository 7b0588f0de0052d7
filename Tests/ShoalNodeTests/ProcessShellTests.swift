import Foundation
import ShoalTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension ProcessSuites {
/// `shoal shell` against a real node: piped statements, and transactions a shell
/// holds while other `shoal` processes write, read and ask for status.
@Suite(.serialized) struct ShellProcessTests {
    /// A `shoal shell` whose input the test writes line by line, reading what it prints.
    final class ShellProcess {
        let process: ChildProcess
        private let output: LineCollector
        private let errors: LineCollector

        init(node: NodeProcess) throws {
            process = try ChildProcess(
                ShoalBinary.path, ["shell", "--node", node.address], stdin: .pipe, stdout: .pipe, stderr: .pipe)
            output = LineCollector(process.output!)
            errors = LineCollector(process.errors!)
        }

        var stdout: String { output.text }
        var stderr: String { errors.text }

        func send(_ line: String) {
            process.input!.write(Data((line + "\n").utf8))
        }

        /// Sends a line and waits until the output holds `expected`.
        func run(_ line: String, expecting expected: String) -> Bool {
            send(line)
            return eventually(20) { stdout.contains(expected) }
        }

        func kill() {
            process.send(SIGKILL)
            process.wait()
        }

        /// Closes its input and waits for its exit status.
        func finish() -> Int32 {
            process.input!.close()
            return process.wait(timeout: 20)
        }
    }

    /// `shoal exec` started on a thread of its own; `output` is set once it exits.
    final class Background {
        let output = Shared<(status: Int32, stderr: String)?>(nil)

        init(_ arguments: [String]) {
            Thread.detachNewThread { [output] in
                let result = try? ShoalBinary.run(arguments)
                output.withLock { $0 = (result?.status ?? -1, result?.stderr ?? "did not start") }
            }
        }

        var finished: (status: Int32, stderr: String)? { output.withLock { $0 } }
    }

    /// One node in a fresh directory, which the caller removes.
    static func startNode() throws -> (TemporaryDirectory, NodeProcess) {
        let dirs = TemporaryDirectory(prefix: "shoal-shell")
        return (dirs, try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a"))
    }

    static func ids(_ node: NodeProcess) throws -> [String] {
        let output = try node.exec("SELECT _id FROM cars ORDER BY _id")
        let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any]
        return (object?["items"] as? [[String: Any]] ?? []).compactMap { $0["_id"] as? String }
    }

    static func sessions(_ node: NodeProcess) throws -> [[String: Any]] {
        (try node.status()["transactions"] as? [String: Any])?["sessions"] as? [[String: Any]] ?? []
    }

    @Test func pipedStatementsRunInOneTransactionAndTheRowsAreThereAfter() throws {
        let (dirs, node) = try Self.startNode()
        defer { dirs.remove() }
        let script = """
            BEGIN HINT 'piped';
            INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue'}),
                                       ({'_id': 'b', 'color': 'red; really'});
            SELECT * FROM cars ORDER BY _id;
            COMMIT;
            SELECT COUNT(*) AS n FROM cars;
            """
        let shell = try ShoalBinary.run(["shell", "--node", node.address], input: Data(script.utf8))
        #expect(shell.status == 0, "\(shell.stderr)")
        #expect(shell.stdout.contains("BEGIN read-write transaction") && shell.stdout.contains("(hint 'piped')"))
        #expect(shell.stdout.contains("mutated 2 document(s)\n"))
        #expect(shell.stdout.contains("  _id  color\n  a    blue\n  b    red; really\n(2 rows)\n"), "\(shell.stdout)")
        #expect(shell.stdout.contains("COMMIT as transaction "))
        #expect(shell.stdout.contains("  n\n  2\n(1 row)\n"))
        #expect(!shell.stdout.contains("shoal>"), "a prompt was printed to a pipe")
        #expect(try Self.ids(node) == ["a", "b"])

        let oneLine = try ShoalBinary.run(
            ["shell", "--node", node.address, "--json"],
            input: Data("BEGIN; INSERT INTO cars DOCUMENTS ({'_id': 'c'}); COMMIT;".utf8))
        #expect(oneLine.status == 0, "\(oneLine.stderr)")
        let lines = try oneLine.stdout.split(separator: "\n").map {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] ?? [:]
        }
        #expect(lines.map { $0["state"] as? String } == ["open", nil, "committed"])
        #expect(lines[1]["mutatedDocumentIDs"] as? [String] == ["c"])
        #expect((lines[2]["transactionID"] as? String)?.contains(":") == true)
        #expect(try Self.ids(node) == ["a", "b", "c"])
    }

    @Test func aShellHoldingBeginMakesOtherWritersWaitUntilCommitAndIsLoggedByItsHint() throws {
        let (dirs, node) = try Self.startNode()
        defer { dirs.remove() }
        #expect(try node.exec("ALTER SYSTEM SET transaction_duration_before_logging_ms = 300").status == 0)
        let shell = try ShellProcess(node: node)
        #expect(shell.run("BEGIN HINT 'hand edit';", expecting: "BEGIN read-write"), "\(shell.stderr)")
        #expect(shell.run("INSERT INTO cars DOCUMENTS ({'_id': 'a'});", expecting: "mutated 1 document(s)"))
        #expect(shell.run("SELECT * FROM cars;", expecting: "(1 row)"), "the transaction does not see its own write")
        let writer = Background(["exec", "--node", node.address, "INSERT INTO cars DOCUMENTS ({'_id': 'b'})"])
        usleep(1_000_000)
        #expect(writer.finished == nil, "the other writer did not wait: \(String(describing: writer.finished))")
        #expect(try Self.ids(node).isEmpty, "a reader saw the open transaction's write")
        #expect(eventually(10) { node.log().contains("(hint 'hand edit') has been open for") }, "\(node.log())")
        #expect(shell.run("COMMIT;", expecting: "COMMIT as transaction"))
        #expect(eventually(20) { writer.finished != nil })
        #expect(writer.finished?.status == 0, "\(writer.finished?.stderr ?? "")")
        #expect(try Self.ids(node) == ["a", "b"])
        #expect(shell.finish() == 0, "\(shell.stderr)")
    }

    @Test func aKilledShellRollsBackAndTheWaitingWriterProceeds() throws {
        let (dirs, node) = try Self.startNode()
        defer { dirs.remove() }
        let shell = try ShellProcess(node: node)
        #expect(shell.run("BEGIN;", expecting: "BEGIN read-write"), "\(shell.stderr)")
        #expect(shell.run("INSERT INTO cars DOCUMENTS ({'_id': 'a'});", expecting: "mutated 1 document(s)"))
        let writer = Background(["exec", "--node", node.address, "INSERT INTO cars DOCUMENTS ({'_id': 'b'})"])
        usleep(500_000)
        #expect(writer.finished == nil)
        shell.kill()
        #expect(eventually(20) { writer.finished != nil })
        #expect(writer.finished?.status == 0, "\(writer.finished?.stderr ?? "")")
        #expect(try Self.ids(node) == ["b"])
        #expect(try eventually(10) { try Self.sessions(node).isEmpty })
    }

    @Test(arguments: [
        ("COMMIT;", "COMMIT without a transaction"),
        ("ROLLBACK;", "ROLLBACK without a transaction"),
        ("BEGIN;\nBEGIN READ ONLY;", "BEGIN inside a transaction"),
        ("BEGIN HINT unquoted;", "HINT takes a quoted string"),
    ])
    func misplacedTransactionCommandsAreClearErrors(script: String, message: String) throws {
        let (dirs, node) = try Self.startNode()
        defer { dirs.remove() }
        let shell = try ShoalBinary.run(
            ["shell", "--node", node.address], input: Data((script + "\nINSERT INTO cars DOCUMENTS ({'_id': 'x'});\n").utf8))
        #expect(shell.status == 1)
        #expect(shell.stderr.contains(message), "\(shell.stderr)")
        // The first error stops piped input: the INSERT after it never ran.
        #expect(try Self.ids(node).isEmpty)
        #expect(try eventually(10) { try Self.sessions(node).isEmpty })
    }

    @Test func statusShowsTheOpenTransactionWithItsHintAndAge() throws {
        let (dirs, node) = try Self.startNode()
        defer { dirs.remove() }
        let shell = try ShellProcess(node: node)
        #expect(shell.run("BEGIN READ ONLY HINT 'monthly report';", expecting: "BEGIN read-only"), "\(shell.stderr)")
        usleep(1_200_000)
        let sessions = try Self.sessions(node)
        #expect(sessions.count == 1)
        #expect(sessions.first?["hint"] as? String == "monthly report")
        #expect(sessions.first?["readOnly"] as? Bool == true)
        #expect((sessions.first?["ageSeconds"] as? Double ?? 0) >= 1)
        #expect((sessions.first?["client"] as? String)?.hasPrefix("127.0.0.1:") == true)
        let table = try ShoalBinary.run(["status", "--node", node.address])
        #expect(table.stdout.contains("held open by shell sessions"), "\(table.stdout)")
        #expect(table.stdout.contains("monthly report") && table.stdout.contains("read-only"))
        #expect(shell.run("ROLLBACK;", expecting: "ROLLBACK"))
        #expect(try Self.sessions(node).isEmpty)
        #expect(shell.finish() == 0)
    }
}
}

import Foundation
import ShoalTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension ProcessSuites {
/// `shoal exec --timeout` against a node whose writer a `shoal shell` holds: the
/// timeout is the request's budget on the node (PROTOCOL.md §10.2), so a request the
/// CLI gave up on never commits later, and the CLI says whether it was applied.
@Suite(.serialized) struct ProcessTimeoutTests {
    typealias ShellProcess = ShellProcessTests.ShellProcess
    typealias Background = ShellProcessTests.Background

    static let increment = "UPDATE counters APPLY n INCREMENT BY 1 WHERE _id = 'c'"

    /// A node with counter `c` at 10, and a shell holding its writer.
    static func start(_ dirs: TemporaryDirectory) throws -> (NodeProcess, ShellProcess) {
        let node = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
        let setup = try node.exec("INSERT INTO counters DOCUMENTS ({'_id': 'c'}); UPDATE counters APPLY n INCREMENT BY 10 WHERE _id = 'c'")
        #expect(setup.status == 0, "\(setup.stderr)")
        #expect(try counter(node) == 10)
        let shell = try ShellProcess(node: node)
        #expect(shell.run("BEGIN HINT 'holds the writer';", expecting: "BEGIN read-write"), "\(shell.stderr)")
        return (node, shell)
    }

    static func counter(_ node: NodeProcess) throws -> Int? {
        let output = try node.exec("SELECT n FROM counters WHERE _id = 'c'")
        let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any]
        return ((object?["items"] as? [[String: Any]])?.first?["n"] as? NSNumber)?.intValue
    }

    /// The case: `--timeout 2` while another transaction holds the writer, the
    /// writer released after the timeout. Before, the CLI said "no answer … within 2.0
    /// seconds", the increment committed once the writer was free, and its retry made
    /// two. Now the node gives up at the budget and says nothing was written.
    ///
    /// ```
    ///  shell:      BEGIN ───────────────────────────────── COMMIT
    ///  exec:         increment waits for the writer ── 2 s: refused, not applied
    ///  retry:                                                     increment, applied once
    /// ```
    @Test func anIncrementThatTimedOutIsNeverAppliedAndItsRetryAppliesOnce() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-timeout")
        defer { dirs.remove() }
        let (node, shell) = try Self.start(dirs)
        let started = Date()
        let first = Background(["exec", "--node", node.address, "--timeout", "2", Self.increment])
        #expect(eventually(30) { first.finished != nil })
        let elapsed = Date().timeIntervalSince(started)
        let failed = try #require(first.finished)
        #expect(failed.status == 1)
        #expect(failed.stderr.contains("the request's budget of 2000 ms ran out"), "\(failed.stderr)")
        #expect(failed.stderr.contains("nothing was written, so it was not applied"), "\(failed.stderr)")
        #expect(elapsed >= 1.9, "it waited for its budget (\(elapsed) s)")

        // The writer is released only now, after the timeout: nothing is left to commit.
        #expect(shell.run("COMMIT;", expecting: "COMMIT (nothing written)"), "\(shell.stderr)")
        usleep(500_000)
        #expect(try Self.counter(node) == 10, "the increment that timed out was applied")

        let retry = try node.exec(Self.increment, extra: ["--timeout", "2"])
        #expect(retry.status == 0, "\(retry.stderr)")
        #expect(try Self.counter(node) == 11, "the retry was applied once")
        #expect(shell.finish() == 0, "\(shell.stderr)")
    }

    /// A request whose answer never comes (the node stopped after reading it): the CLI
    /// cannot know what happened and says so. The node, resumed, still keeps the budget.
    @Test func whenNoAnswerComesTheCLISaysTheOutcomeIsUnknown() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-timeout")
        defer { dirs.remove() }
        let (node, shell) = try Self.start(dirs)
        defer { node.signal(SIGCONT) }
        #expect(try node.exec("ALTER SYSTEM SET transaction_duration_before_logging_ms = 100").status == 0)
        let started = Date()
        let waiting = Background(["exec", "--node", node.address, "--timeout", "8", "--hint", "impatient", Self.increment])
        // The long-transaction log names it: the node has read it and waits for the writer.
        #expect(eventually(20) { node.log().contains("(hint 'impatient') has been open for") }, "\(node.log())")
        node.signal(SIGSTOP)
        #expect(eventually(30) { waiting.finished != nil })
        let elapsed = Date().timeIntervalSince(started)
        node.signal(SIGCONT)
        let failed = try #require(waiting.finished)
        #expect(failed.status == 3, "the outcome is unknown, which is not a failure")
        #expect(
            failed.stderr.contains("no answer from \(node.address) within 10 s (a timeout of 8 s and 2 s of grace)"), "\(failed.stderr)")
        #expect(failed.stderr.contains("the request may or may not have been applied: check before retrying"), "\(failed.stderr)")
        #expect(elapsed >= 9.9, "it waited for the timeout and the grace (\(elapsed) s)")

        #expect(shell.run("COMMIT;", expecting: "COMMIT (nothing written)"), "\(shell.stderr)")
        usleep(500_000)
        #expect(try Self.counter(node) == 10, "the node committed the increment after its budget")
        #expect(shell.finish() == 0, "\(shell.stderr)")
    }
}
}

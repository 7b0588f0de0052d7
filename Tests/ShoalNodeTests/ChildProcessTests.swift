import Foundation
import ShoalTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The child processes every process test starts: exit statuses, both streams,
/// what a child inherits, and the time limit.
@Suite struct ChildProcessTests {
    @Test func statusAndBothStreams() throws {
        let run = try ChildProcess.run("/bin/sh", ["-c", "echo out; echo err >&2; exit 3"])
        #expect(run.status == 3)
        #expect(String(decoding: run.stdout, as: UTF8.self) == "out\n")
        #expect(String(decoding: run.stderr, as: UTF8.self) == "err\n")
    }

    /// More than a pipe holds on standard error before anything on standard output:
    /// read one stream after the other, this would never end.
    @Test func bothStreamsAreDrainedTogether() throws {
        let run = try ChildProcess.run(
            "/bin/sh", ["-c", "head -c 300000 /dev/zero >&2; head -c 200000 /dev/zero"], timeout: 60)
        #expect(run.status == 0)
        #expect(run.stderr.count == 300_000)
        #expect(run.stdout.count == 200_000)
    }

    @Test func inputReachesTheChildWhole() throws {
        let text = String(repeating: "0123456789abcdef", count: 20_000)
        let run = try ChildProcess.run("/bin/cat", [], input: Data(text.utf8))
        #expect(run.status == 0)
        #expect(String(decoding: run.stdout, as: UTF8.self) == text)
    }

    /// A descriptor the parent holds open, without close-on-exec, is not the child's.
    @Test func theChildInheritsOnlyItsThreeStreams() throws {
        let held = open("/dev/null", O_RDONLY)
        #expect(held > 2)
        defer { close(held) }
        let run = try ChildProcess.run("/bin/sh", ["-c", "ls /proc/$$/fd"])
        let descriptors = String(decoding: run.stdout, as: UTF8.self).split(separator: "\n").compactMap { Int32($0) }
        #expect(descriptors.contains(1))
        #expect(!descriptors.contains(held), "\(descriptors)")
    }

    /// The parent ignores SIGPIPE (a write to a child that has gone fails instead);
    /// the child gets the default back, and is not left with any other ignored.
    @Test func theChildHandlesSignalsByDefault() throws {
        let child = try ChildProcess("/bin/sleep", ["30"])
        defer { child.send(SIGKILL) }
        let status = try String(contentsOfFile: "/proc/\(child.processIdentifier)/status", encoding: .utf8)
        let ignored = status.split(separator: "\n").first { $0.hasPrefix("SigIgn:") }
        let mask = UInt64(ignored?.split(separator: "\t").last ?? "", radix: 16)
        for signal in [SIGPIPE, SIGINT, SIGTERM] {
            #expect(mask.map { $0 & (1 << UInt64(signal - 1)) == 0 } == true, "\(signal) ignored: \(status)")
        }
        child.send(SIGINT)
        #expect(child.wait(timeout: 10) == SIGINT, "ended by the signal, whose number is its status")
        #expect(!child.isRunning)
    }

    @Test func aWriteToAChildThatHasGoneFails() throws {
        let child = try ChildProcess("/bin/true", [], stdin: .pipe)
        #expect(child.wait(timeout: 10) == 0)
        #expect(!child.input!.write(Data(repeating: 1, count: 200_000)))
    }

    @Test func aChildPastItsTimeIsKilled() throws {
        let started = Date()
        let run = try ChildProcess.run("/bin/sleep", ["30"], timeout: 0.5)
        #expect(run.status == SIGKILL)
        #expect(Date().timeIntervalSince(started) < 20)
    }

    @Test func aMissingExecutableIsAClearError() {
        #expect {
            try ChildProcess("/nonexistent/shoal", [])
        } throws: { error in
            "\(error)" == "cannot start /nonexistent/shoal: No such file or directory"
        }
    }
}

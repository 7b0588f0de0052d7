import Foundation
import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension ProcessSuites {
    /// Attachments of hundreds of megabytes between real `shoal` processes: put and
    /// fetched in chunks, streamed from and to disk in bounded memory, resumed after an
    /// interruption, and collected once no document names them.
    @Suite(.serialized) struct ProcessAttachmentTests {
        /// MiB of the large attachment: `SHOAL_ATTACHMENT_MB`, or 200.
        static var megabytes: Int {
            ProcessInfo.processInfo.environment["SHOAL_ATTACHMENT_MB"].flatMap { Int($0) } ?? 200
        }

        /// The resident memory each node must stay under, in bytes.
        static let residentLimit = 150 << 20

        @Test func aLargeAttachmentCrossesTwoNodesInBoundedMemory() throws {
            let dirs = TemporaryDirectory(prefix: "shoal-attach")
            defer { dirs.remove() }
            let size = Self.megabytes << 20
            let source = dirs.path + "/large.bin"
            let hash = try Self.writeRandomFile(source, bytes: size)
            let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
            let b = try NodeProcess(
                name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address, "--subscribe", "SELECT * FROM files"])

            let started = Date()
            let put = try Self.shoal(["attachment", "put", "--node", a.address, source])
            let putSeconds = Date().timeIntervalSince(started)
            #expect(put.status == 0, "\(put.stderr)")
            let token = put.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(token.contains(hash) && token.contains("\"length\":\(size)"), "\(token)")
            #expect(try a.exec("INSERT INTO COLLECTION files (f ATTACHMENT) DOCUMENTS ({'_id': 'big', 'f': :t})", args: "{\"t\": \(token)}").status == 0)
            #expect(try eventually { try b.exec("SELECT * FROM files").stdout.contains(hash) })

            let target = dirs.path + "/fetched.bin"
            let fetchStarted = Date()
            let get = try Self.shoal(["attachment", "get", "--quiet", "--node", b.address, hash, target])
            let getSeconds = Date().timeIntervalSince(fetchStarted)
            #expect(get.status == 0, "\(get.stderr)")
            #expect(try Self.sha256(ofFile: target) == hash, "the bytes fetched through B are the bytes put on A")
            #expect(!FileManager.default.fileExists(atPath: target + ".part"))

            let peakA = try #require(a.peakResidentBytes), peakB = try #require(b.peakResidentBytes)
            print(
                "attachment of \(size) bytes: put on A in \(String(format: "%.1f", putSeconds)) s, fetched by B and read through it in \(String(format: "%.1f", getSeconds)) s; peak RSS (VmHWM) A \(peakA >> 20) MiB, B \(peakB >> 20) MiB"
            )
            if let sanitizer = ProcessInfo.processInfo.environment["SHOAL_SANITIZER"] {
                // A sanitized node keeps freed memory in quarantine and maps shadow memory
                // (about 400 MiB each under AddressSanitizer), so its RSS says nothing of Shoal's.
                print("peak RSS not checked: the nodes run under the \(sanitizer) sanitizer")
            } else {
                #expect(peakA < Self.residentLimit, "A's peak RSS \(peakA) bytes")
                #expect(peakB < Self.residentLimit, "B's peak RSS \(peakB) bytes")
            }
        }

        /// B is killed while it fetches; once restarted it resumes the fetch at the
        /// offset it had stored. Then a client killed while it downloads resumes
        /// after the bytes its `.part` file holds.
        @Test func anInterruptedFetchAndAnInterruptedGetResume() throws {
            let dirs = TemporaryDirectory(prefix: "shoal-attach")
            defer { dirs.remove() }
            let size = 64 << 20
            let source = dirs.path + "/medium.bin"
            let hash = try Self.writeRandomFile(source, bytes: size)
            let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a")
            var b = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address])
            #expect(try Self.shoal(["attachment", "put", "--node", a.address, source]).status == 0)

            // B stores what it fetched as it goes: kill it once 8 MiB are on disk.
            let target = dirs.path + "/fetched.bin"
            let first = try Self.shoal(["attachment", "get", "--quiet", "--node", b.address, hash, target]) {
                if Self.bytesOnDisk(b.dataDirectory) > 8 << 20 { b.crash() }
                return false
            }
            #expect(first.status != 0, "the get fails with its node")
            b = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: ["--peer", a.address])
            #expect(try eventually { (try b.status()["peers"] as? [[String: Any]])?.contains { $0["state"] as? String == "connected" } == true })
            let second = try Self.shoal(["attachment", "get", "--quiet", "--node", b.address, hash, target])
            #expect(second.status == 0, "\(second.stderr)")
            #expect(try Self.sha256(ofFile: target) == hash)
            let resumedAt = try #require(Self.number(after: "resuming the fetch of attachment \(hash) at byte ", in: b.log()))
            print("B resumed its fetch at byte \(resumedAt) of \(size)")
            #expect(resumedAt > 0 && resumedAt < size)

            // The client, killed once its .part file holds 4 MiB, resumes after them.
            let copy = dirs.path + "/copy.bin"
            let killed = try Self.shoal(["attachment", "get", "--node", b.address, hash, copy]) {
                Self.fileSize(copy + ".part") > 4 << 20
            }
            #expect(killed.status != 0 && !FileManager.default.fileExists(atPath: copy))
            let held = Self.fileSize(copy + ".part")
            let resumed = try Self.shoal(["attachment", "get", "--node", b.address, hash, copy])
            #expect(resumed.status == 0, "\(resumed.stderr)")
            let from = try #require(Self.number(after: "resuming \(copy).part at byte ", in: resumed.stderr))
            print("the client resumed its download at byte \(from) of \(size)")
            #expect(from == held && from > 0)
            #expect(!resumed.stderr.contains("received \(1 << 20) of"), "nothing before the resume point came again")
            #expect(try Self.sha256(ofFile: copy) == hash)
        }

        /// With a five-second horizon, bytes no document names go within seconds, and
        /// the ones a document names stay. (A one-second horizon was too short under
        /// ThreadSanitizer: the sanitized CLI took longer than that between the put and
        /// the INSERT naming it, and the node rightly collected the bytes meanwhile.)
        @Test func bytesNoDocumentNamesAreCollectedAfterTheHorizon() throws {
            let dirs = TemporaryDirectory(prefix: "shoal-attach")
            defer { dirs.remove() }
            let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a", extra: ["--attachment-horizon", "5"])
            var hashes: [String] = []
            for name in ["named", "loose"] {
                let path = dirs.path + "/\(name).bin"
                hashes.append(try Self.writeRandomFile(path, bytes: 3 << 20))
                let put = try Self.shoal(["attachment", "put", "--node", a.address, path])
                #expect(put.status == 0, "\(put.stderr)")
                if name == "named" {
                    let token = put.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                    #expect(try a.exec("INSERT INTO COLLECTION files (f ATTACHMENT) DOCUMENTS ({'_id': 'n', 'f': :t})", args: "{\"t\": \(token)}").status == 0)
                }
            }
            let (named, loose) = (hashes[0], hashes[1])
            #expect(try eventually(40) {
                try Self.shoal(["attachment", "get", "--quiet", "--node", a.address, loose, dirs.path + "/l"]).stderr.contains("not held here")
            })
            #expect(a.log().contains("collected 1 attachments"), "\(a.log())")
            let kept = try Self.shoal(["attachment", "get", "--quiet", "--node", a.address, named, dirs.path + "/n"])
            #expect(kept.status == 0, "\(kept.stderr)")
            #expect(try Self.sha256(ofFile: dirs.path + "/n") == named, "the bytes a document names stay")
        }

        /// A – B – C with the bytes on A only and B subscribed to boats: the document
        /// naming them reaches C through B, and `attachment get` on C fetches the bytes
        /// through B too. B keeps what it carried: with A stopped, B serves them itself.
        @Test func anAttachmentCrossesARelayThatNeverHeldIt() throws {
            let dirs = TemporaryDirectory(prefix: "shoal-attach")
            defer { dirs.remove() }
            let b = try NodeProcess(name: "beta", dataDirectory: dirs.path + "/b", extra: ["--subscribe", "SELECT * FROM boats"])
            let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a", extra: ["--peer", b.address])
            let c = try NodeProcess(
                name: "gamma", dataDirectory: dirs.path + "/c", extra: ["--peer", b.address, "--subscribe", "SELECT * FROM files"])
            let source = dirs.path + "/far.bin"
            let hash = try Self.writeRandomFile(source, bytes: 3 << 20 + 12_345)
            let put = try Self.shoal(["attachment", "put", "--node", a.address, source])
            #expect(put.status == 0, "\(put.stderr)")
            let token = put.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(try a.exec("INSERT INTO COLLECTION files (f ATTACHMENT) DOCUMENTS ({'_id': 'far', 'f': :t})", args: "{\"t\": \(token)}").status == 0)
            #expect(try eventually { try c.exec("SELECT * FROM files").stdout.contains(hash) })

            let target = dirs.path + "/fetched.bin"
            let get = try Self.shoal(["attachment", "get", "--node", c.address, hash, target])
            #expect(get.status == 0, "\(get.stderr)")
            #expect(try Self.sha256(ofFile: target) == hash, "the bytes fetched through B are the bytes put on A")

            let missing = try Self.shoal(["attachment", "get", "--quiet", "--node", c.address, String(repeating: "b", count: 64), target + "2"])
            #expect(missing.status != 0 && missing.stderr.contains("could send it"), "\(missing.stderr)")

            a.stop()
            let copy = dirs.path + "/from-b.bin"
            let fromB = try Self.shoal(["attachment", "get", "--quiet", "--node", b.address, hash, copy])
            #expect(fromB.status == 0, "\(fromB.stderr)")
            #expect(try Self.sha256(ofFile: copy) == hash, "the relay holds what it carried")
        }

        // MARK: Helpers

        /// How a `shoal` command ended and what it printed.
        struct Run {
            var status: Int32
            var stdout: String
            var stderr: String
        }

        /// Writes `bytes` bytes from /dev/urandom to `path`, a MiB at a time (never all
        /// in memory); returns their SHA-256.
        static func writeRandomFile(_ path: String, bytes: Int) throws -> String {
            let random = try #require(FileHandle(forReadingAtPath: "/dev/urandom"))
            defer { try? random.close() }
            #expect(FileManager.default.createFile(atPath: path, contents: nil))
            let out = try #require(FileHandle(forWritingAtPath: path))
            defer { try? out.close() }
            var digest = AttachmentDigest()
            var left = bytes
            while left > 0 {
                let block = try #require(try random.read(upToCount: min(left, 1 << 20)))
                try out.write(contentsOf: block)
                digest.update(block)
                left -= block.count
            }
            return digest.finalize()
        }

        static func sha256(ofFile path: String) throws -> String {
            let file = try #require(FileHandle(forReadingAtPath: path))
            defer { try? file.close() }
            var digest = AttachmentDigest()
            while let block = try file.read(upToCount: 1 << 20), !block.isEmpty { digest.update(block) }
            return digest.finalize()
        }

        static func fileSize(_ path: String) -> Int {
            ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
        }

        /// The database and its WAL in a node's data directory.
        static func bytesOnDisk(_ directory: String) -> Int {
            fileSize(directory + "/shoal.sqlite") + fileSize(directory + "/shoal.sqlite-wal")
        }

        /// The integer after the first occurrence of `prefix` in `text`.
        static func number(after prefix: String, in text: String) -> Int? {
            guard let range = text.range(of: prefix) else { return nil }
            return Int(text[range.upperBound...].prefix { $0.isNumber })
        }

        /// Runs `shoal ARGUMENTS` with its output in files (so a long run never fills a
        /// pipe), for at most five minutes. `killWhen` is asked every 20 ms while it
        /// runs; when it says so, the process is killed (SIGKILL).
        static func shoal(_ arguments: [String], killWhen: () -> Bool = { false }) throws -> Run {
            let directory = TemporaryDirectory(prefix: "shoal-cli")
            defer { directory.remove() }
            let outPath = directory.path + "/out", errPath = directory.path + "/err"
            _ = FileManager.default.createFile(atPath: outPath, contents: nil)
            _ = FileManager.default.createFile(atPath: errPath, contents: nil)
            let process = try ChildProcess(ShoalBinary.path, arguments, stdout: .file(outPath), stderr: .file(errPath))
            let deadline = Date().addingTimeInterval(300)
            while process.isRunning && Date() < deadline {
                if killWhen() {
                    process.send(SIGKILL)
                    break
                }
                usleep(20_000)
            }
            return Run(
                status: process.wait(timeout: max(0, deadline.timeIntervalSinceNow)),
                stdout: (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "",
                stderr: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "")
        }
    }
}

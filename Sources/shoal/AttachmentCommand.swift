import ArgumentParser
import Foundation
import ShoalCRDT
import ShoalNode
import ShoalStorage
import ShoalSync

struct AttachmentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment",
        abstract: "Store and fetch attachments (bytes that ATTACHMENT fields name by hash).",
        subcommands: [Put.self, Get.self]
    )

    struct Put: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Store a file on a node and print its token, to pass as a statement argument.",
            discussion: """
                Example:
                  token=$(shoal attachment put photo.jpg)
                  shoal exec --args "{\\"t\\": $token}" \
                    "UPDATE COLLECTION cars (photo ATTACHMENT) SET photo = :t WHERE _id = 'a'"
                """
        )

        @OptionGroup var client: ClientOptions

        @Option(name: .long, help: "Metadata to keep in the token, a JSON object.")
        var metadata: String?

        @Argument(help: "The file to store.")
        var file: String

        func run() async throws {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory), !isDirectory.boolValue,
                FileManager.default.isReadableFile(atPath: file)
            else {
                throw fail("cannot read \(file)")
            }
            var metadataJSON = metadata ?? ""
            if metadataJSON.isEmpty {
                metadataJSON = Value.object(["name": .string((file as NSString).lastPathComponent)]).canonicalJSON
            }
            do {
                print(try await client.client().putAttachment(file: file, metadataJSON: metadataJSON))
            } catch let error as ShoalError {
                throw fail(error.message)
            }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch an attachment into a file, from the node or, through it, from its peers.",
            discussion: """
                The bytes are written to FILE.part as they arrive; once every byte is there and \
                its SHA-256 checked, FILE.part becomes FILE. If FILE.part is there from an \
                interrupted get, the get resumes after its bytes (unless --no-resume). Progress \
                goes to stderr.
                """
        )

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Print no progress.")
        var quiet = false

        @Flag(name: .long, help: "Start over even if FILE.part holds the start of the attachment.")
        var noResume = false

        @Argument(help: "The attachment ID (the token's \"attachment\") or the whole token JSON.")
        var attachment: String

        @Argument(help: "Where to write the bytes.")
        var file: String

        func run() async throws {
            let hash: String
            if let token = (try? JSON.parse(attachment)).flatMap(AttachmentTokenID.init) {
                hash = token.hash
            } else {
                hash = attachment
            }
            let partial = file + ".part"
            if noResume { try? FileManager.default.removeItem(atPath: partial) }
            let sink = DownloadSink(path: partial)
            let resumed = sink.received
            if resumed > 0 && !quiet { printError("resuming \(partial) at byte \(resumed)") }
            let quiet = quiet
            do {
                try await client.client().getAttachment(hash: hash, offset: UInt64(resumed)) { chunk in
                    try sink.write(chunk)
                    if !quiet {
                        printError("received \(sink.received) of \(chunk.totalLength) bytes")
                    }
                }
            } catch let error as ShoalError {
                sink.close()
                throw fail(error.message + (resumed > 0 ? " (resuming \(partial) at byte \(resumed); --no-resume starts over)" : ""))
            }
            let (received, digest) = sink.finish()
            guard digest == hash else {
                try? FileManager.default.removeItem(atPath: partial)
                throw fail("the bytes received do not match attachment \(hash); nothing written")
            }
            do {
                if FileManager.default.fileExists(atPath: file) { try FileManager.default.removeItem(atPath: file) }
                try FileManager.default.moveItem(atPath: partial, toPath: file)
            } catch {
                throw fail("cannot write \(file): \(error.localizedDescription)")
            }
            if !quiet { printError("wrote \(received) bytes to \(file)") }
        }
    }
}

/// The hash named by a token value.
struct AttachmentTokenID {
    var hash: String
    init?(_ value: Value) {
        guard case .string(let h)? = value["attachment"] else { return nil }
        hash = h
    }
}

/// Writes an attachment's chunks to a file as they arrive, hashing them on the way;
/// a file already there holds the start of the attachment (a get that resumes).
final class DownloadSink: Sendable {
    private struct State {
        var handle: FileHandle?
        var digest = AttachmentDigest()
        var received = 0
    }

    private let path: String
    /// The handler runs on the client's task; the command reads the totals after it.
    private let state = Locked(State())

    /// Hashes what `path` holds already, a MiB at a time.
    init(path: String) {
        self.path = path
        guard let handle = FileHandle(forReadingAtPath: path) else { return }
        defer { try? handle.close() }
        var state = State()
        while let data = try? handle.read(upToCount: 1 << 20), !data.isEmpty {
            state.digest.update(data)
            state.received += data.count
        }
        self.state.withLock { $0 = state }
    }

    var received: Int { state.withLock { $0.received } }

    /// Appends a chunk; one starting at 0 when more was held (a node that cannot
    /// resume) starts the file over.
    func write(_ chunk: AttachmentPart) throws {
        try state.withLock { state in
            if chunk.offset == 0 && state.received > 0 {
                try state.handle?.close()
                state = State()
                try? FileManager.default.removeItem(atPath: path)
            }
            guard chunk.offset == UInt64(state.received) else {
                throw ShoalError(.protocolError, "the node sent bytes from \(chunk.offset), expected \(state.received)")
            }
            if state.handle == nil {
                if !FileManager.default.fileExists(atPath: path) {
                    guard FileManager.default.createFile(atPath: path, contents: nil) else {
                        throw ShoalError(.file, "cannot write \(path)")
                    }
                }
                guard let handle = FileHandle(forWritingAtPath: path) else { throw ShoalError(.file, "cannot write \(path)") }
                try handle.truncate(atOffset: UInt64(state.received))
                try handle.seekToEnd()
                state.handle = handle
            }
            let data = Data(chunk.data)
            try state.handle!.write(contentsOf: data)
            state.digest.update(data)
            state.received += data.count
        }
    }

    func close() { state.withLock { try? $0.handle?.close() } }

    /// Closes the file; returns its length and the SHA-256 of its bytes.
    func finish() -> (received: Int, digest: String) {
        state.withLock { state in
            try? state.handle?.synchronize()
            try? state.handle?.close()
            state.handle = nil
            return (state.received, state.digest.finalize())
        }
    }
}

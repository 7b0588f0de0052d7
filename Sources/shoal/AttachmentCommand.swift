import ArgumentParser
import Foundation
import ShoalCRDT
import ShoalNode
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
            guard let data = FileManager.default.contents(atPath: file) else {
                throw fail("cannot read \(file)")
            }
            let limit = 16 << 20 - 64 * 1024
            guard data.count <= limit else {
                throw fail("\(file) is \(data.count) bytes; this version stores attachments of at most \(limit) bytes")
            }
            var metadataJSON = metadata ?? ""
            if metadataJSON.isEmpty {
                metadataJSON = Value.object(["name": .string((file as NSString).lastPathComponent)]).canonicalJSON
            }
            do {
                print(try await client.client().putAttachment(Array(data), metadataJSON: metadataJSON))
            } catch let error as NodeError {
                throw fail(error.message)
            }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch an attachment into a file, from the node or, through it, from its peers.",
            discussion: "Progress goes to stderr; the file is written only once every byte has arrived and its hash checked."
        )

        @OptionGroup var client: ClientOptions

        @Flag(name: .long, help: "Print no progress.")
        var quiet = false

        @Argument(help: "The attachment ID (the token's \"attachment\" value) or the whole token JSON.")
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
            let received = ChunkSink()
            let quiet = quiet
            do {
                try await client.client().getAttachment(hash: hash) { chunk in
                    received.append(chunk.data)
                    if !quiet {
                        printError("received \(received.count) of \(chunk.totalLength) bytes")
                    }
                }
            } catch let error as NodeError {
                throw fail(error.message)
            }
            let bytes = received.bytes
            guard AdminClient.attachmentHash(of: bytes) == hash else {
                throw fail("the bytes received do not match attachment \(hash); nothing written")
            }
            guard FileManager.default.createFile(atPath: file, contents: Data(bytes)) else {
                throw fail("cannot write \(file)")
            }
            if !quiet { printError("wrote \(bytes.count) bytes to \(file)") }
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

/// Collects chunks as they arrive (the handler runs on the client's task).
final class ChunkSink: Sendable {
    private let state = Locked<[UInt8]>([])
    func append(_ data: [UInt8]) { state.withLock { $0 += data } }
    var count: Int { state.withLock { $0.count } }
    var bytes: [UInt8] { state.withLock { $0 } }
}

import Foundation
import NIOCore
import ShoalWire
import Testing

/// The frames in Protocol/vectors/ are the spec's examples: each decodes to the
/// message below and re-encodes to the same bytes. Run with SHOAL_WRITE_VECTORS=1
/// to rewrite them after a deliberate protocol change.
@Suite struct VectorTests {
    struct Vector: Sendable, CustomStringConvertible {
        var file: String
        var comment: String
        var message: WireMessage
        var description: String { file }
    }

    static var vectorsDirectory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Protocol/vectors")
    }

    static let vectors: [Vector] = {
        var hello = Shoal_V1_Hello()
        hello.minVersion = 1
        hello.maxVersion = 1
        hello.siteID = 0x0123_4567_89ab_cdef
        hello.nodeName = "alpha"
        hello.meshName = "default"
        hello.nonce = Data((0..<32).map { UInt8($0) })
        hello.role = .peer
        hello.listenAddress = "127.0.0.1:7470"
        var error = Shoal_V1_Error()
        error.code = .meshKeyMismatch
        error.message = "mesh key mismatch: the peer's proof does not match this node's mesh key"
        error.fatal = true
        return [
            Vector(
                file: "hello.hex",
                comment: """
                    Hello (type 0x01), uncompressed. min_version 1, max_version 1, site_id 0x0123456789abcdef,
                    node_name "alpha", mesh_name "default", nonce 00 01 .. 1f, role PEER, listen_address "127.0.0.1:7470".
                    """,
                message: .hello(hello)),
            Vector(
                file: "delta-batch-compressed.hex",
                comment: """
                    DeltaBatch (type 0x07), flags 0x01: the payload is a zlib stream. One transaction
                    (origin_site 0x1122334455667788, origin_sequence 9, delta_count 40) setting field "color" to "blue"
                    on documents "car-0" .. "car-39" of collection "cars"; timestamp (1700000000000 << 16) | i;
                    through_sequence 40.
                    """,
                message: .deltaBatch(MessageCodecTests.batch(deltas: 40))),
            Vector(
                file: "error.hex",
                comment: """
                    Error (type 0x03), uncompressed. code MESH_KEY_MISMATCH (4), fatal true, message
                    "mesh key mismatch: the peer's proof does not match this node's mesh key".
                    """,
                message: .error(error)),
        ]
    }()

    static func hexDump(_ bytes: [UInt8], comment: String) -> String {
        var out = comment.split(separator: "\n").map { "# \($0)" }.joined(separator: "\n") + "\n"
        for start in stride(from: 0, to: bytes.count, by: 16) {
            out += bytes[start..<min(start + 16, bytes.count)].map { String(format: "%02x", $0) }.joined(separator: " ") + "\n"
        }
        return out
    }

    static func parseHex(_ text: String) throws -> [UInt8] {
        var bytes: [UInt8] = []
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            for token in line.split(separator: " ") {
                bytes.append(try #require(UInt8(token, radix: 16), "bad hex byte '\(token)'"))
            }
        }
        return bytes
    }

    @Test(arguments: vectors)
    func decodesAndReencodesByteForByte(vector: Vector) throws {
        let codec = MessageCodec()
        let url = Self.vectorsDirectory.appendingPathComponent(vector.file)
        var encoded = ByteBuffer()
        codec.encode(vector.message).encode(into: &encoded)
        if ProcessInfo.processInfo.environment["SHOAL_WRITE_VECTORS"] == "1" {
            try Self.hexDump(Array(encoded.readableBytesView), comment: vector.comment)
                .write(to: url, atomically: true, encoding: .utf8)
        }
        let bytes = try Self.parseHex(String(contentsOf: url, encoding: .utf8))
        var buffer = ByteBuffer(bytes: bytes)
        let frame = try #require(try FrameDecoder().next(from: &buffer))
        #expect(buffer.readableBytes == 0)
        #expect(try codec.decode(frame) == vector.message)
        #expect(Array(encoded.readableBytesView) == bytes)
    }
}

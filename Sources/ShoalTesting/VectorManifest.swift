public import Foundation
public import ShoalWire
import SwiftProtobuf

/// `Protocol/vectors/manifest.json`: every vector and transcript of the protocol's
/// conformance kit, with the protocol versions it holds at, how it must match, and what
/// it exercises (PROTOCOL.md §15.5).
///
/// The tests of each kind read the manifest and run every entry of their kind, and the
/// kit's own tests check that every file of the folder is an entry and every entry is a
/// file, so a vector cannot go untested nor a test lose its vector.
public struct VectorManifest: Sendable, Decodable {
    /// What a vector is, and so which tests run it.
    public enum Kind: String, Sendable, Decodable, CaseIterable {
        /// One frame (`.hex`): `VectorTests`.
        case frame
        /// One LAN discovery datagram (`.hex`): `VectorTests.announcementVectors`.
        case datagram
        /// A sync session from one node's side (`.transcript`): `SessionTranscriptTests`.
        case sessionTranscript = "session-transcript"
        /// An admin session from the node's side (`.transcript`): `AdminTranscriptTests`.
        case adminTranscript = "admin-transcript"
    }

    /// How another implementation must reproduce a vector.
    public enum Match: String, Sendable, Decodable {
        /// Encoding the expected message gives these bytes exactly.
        case exact
        /// The bytes decode to the expected message; another encoder may write other
        /// bytes (a compressed payload: only the inflated payload must be the same).
        case decode
        /// Each line of the transcript says (`<` exact, `<~` decoded, some fields aside).
        case lines
    }

    public struct MessageTypeEntry: Sendable, Decodable {
        public var name: String
        /// The frame's type byte; nil for what is not a frame (a datagram's payload).
        public var type: UInt8?
        public var protobuf: String
    }

    public struct Version: Sendable, Decodable {
        public var version: UInt32
        public var directory: String
        /// The message types a session at this version may carry: each has a vector valid at it.
        public var messageTypes: [String]
        public var note: String?
    }

    public struct Entry: Sendable, Decodable, CustomStringConvertible {
        public var file: String
        public var kind: Kind
        public var messageType: String?
        /// The first protocol version it holds at, and the last (nil: every later one too).
        public var since: UInt32
        public var until: UInt32?
        public var match: Match
        /// The expected message, as proto3 JSON with the proto's field names.
        public var expected: String?
        /// A datagram's mesh key, as text; nil for an open mesh.
        public var key: String?
        public var exercises: String

        public var description: String { file }

        public func holds(at version: UInt32) -> Bool {
            since <= version && until.map { version <= $0 } ?? true
        }
    }

    public var format: Int
    public var messageTypes: [MessageTypeEntry]
    public var versions: [Version]
    public var vectors: [Entry]

    public static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Protocol/vectors")
    }

    public static func url(_ path: String) -> URL { directory.appendingPathComponent(path) }

    /// The manifest, or why it cannot be read (every test of the kit fails then).
    public static let kit: Result<VectorManifest, KitError> = {
        do {
            let data = try Data(contentsOf: url("manifest.json"))
            let decoder = JSONDecoder()
            decoder.keyDecodingStrategy = .convertFromSnakeCase
            return .success(try decoder.decode(VectorManifest.self, from: data))
        } catch {
            return .failure(KitError("Protocol/vectors/manifest.json: \(error)"))
        }
    }()

    /// The entries of one kind, the arguments of the tests that run them (none when
    /// the manifest cannot be read: `VectorTests` fails on that).
    public static func entries(_ kind: Kind) -> [Entry] {
        (try? kit.get())?.vectors.filter { $0.kind == kind } ?? []
    }

    // MARK: Hex files

    /// The bytes of a `.hex` file: `#` lines are comments, the rest hex pairs.
    public static func bytes(hex text: String) throws(KitError) -> [UInt8] {
        var bytes: [UInt8] = []
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            bytes += try Self.bytes(hexPairs: line)
        }
        return bytes
    }

    /// Space-separated hex pairs.
    public static func bytes(hexPairs text: some StringProtocol) throws(KitError) -> [UInt8] {
        var bytes: [UInt8] = []
        for token in text.split(separator: " ") {
            guard token.count == 2, let byte = UInt8(token, radix: 16) else { throw KitError("bad hex byte '\(token)'") }
            bytes.append(byte)
        }
        return bytes
    }

    public static func hexPairs(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { String(format: "%02x", $0) }.joined(separator: " ")
    }

    /// A `.hex` file: the comment's lines after `# `, then the bytes 16 to a line.
    public static func hexDump(_ bytes: [UInt8], comment: String) -> String {
        var out = comment.split(separator: "\n").map { "# \($0)" }.joined(separator: "\n") + "\n"
        for start in stride(from: 0, to: bytes.count, by: 16) {
            out += hexPairs(bytes[start..<min(start + 16, bytes.count)]) + "\n"
        }
        return out
    }

    /// Whether vectors are being written (`SHOAL_WRITE_VECTORS=1`) rather than checked.
    public static var writing: Bool { ProcessInfo.processInfo.environment["SHOAL_WRITE_VECTORS"] == "1" }
}

public struct KitError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Messages as proto3 JSON with the proto's own field names, the form the kit's
/// expected messages and a transcript's `<~` rule use: any protobuf library reads and
/// writes it, so another implementation compares messages without Swift.
public enum ProtoJSON {
    static let encoding: JSONEncodingOptions = {
        var options = JSONEncodingOptions()
        options.preserveProtoFieldNames = true
        return options
    }()

    public static func compact(_ message: WireMessage) -> String {
        (try? protobuf(message).jsonString(options: encoding)) ?? "{}"
    }

    /// Pretty, with members sorted by name, for a file a person reads.
    public static func pretty(_ message: WireMessage) -> String {
        pretty(compact(message))
    }

    public static func pretty(_ json: String) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)),
            let data = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        else { return json }
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    /// The message of `type` that `json` holds.
    public static func message(_ type: MessageType, json: String) throws -> WireMessage {
        switch type {
        case .hello: .hello(try Shoal_V1_Hello(jsonString: json))
        case .proof: .proof(try Shoal_V1_Proof(jsonString: json))
        case .error: .error(try Shoal_V1_Error(jsonString: json))
        case .ping: .ping(try Shoal_V1_Ping(jsonString: json))
        case .pong: .pong(try Shoal_V1_Ping(jsonString: json))
        case .subscribe: .subscribe(try Shoal_V1_Subscribe(jsonString: json))
        case .deltaBatch: .deltaBatch(try Shoal_V1_DeltaBatch(jsonString: json))
        case .ack: .ack(try Shoal_V1_Ack(jsonString: json))
        case .attachmentRequest: .attachmentRequest(try Shoal_V1_AttachmentRequest(jsonString: json))
        case .attachmentChunk: .attachmentChunk(try Shoal_V1_AttachmentChunk(jsonString: json))
        case .transactionRequest: .transactionRequest(try Shoal_V1_TransactionRequest(jsonString: json))
        case .transactionPieces: .transactionPieces(try Shoal_V1_TransactionPieces(jsonString: json))
        case .routeUpdate: .routeUpdate(try Shoal_V1_RouteUpdate(jsonString: json))
        case .adminRequest: .adminRequest(try Shoal_V1_AdminRequest(jsonString: json))
        case .adminResponse: .adminResponse(try Shoal_V1_AdminResponse(jsonString: json))
        }
    }

    /// A discovery datagram's payload as JSON, and back.
    public static func compact(announcement payload: [UInt8]) throws -> String {
        try Shoal_V1_Announcement(serializedBytes: payload).jsonString(options: encoding)
    }

    public static func announcement(json: String) throws -> [UInt8] {
        try Shoal_V1_Announcement(jsonString: json).serializedBytes()
    }

    static func protobuf(_ message: WireMessage) -> any SwiftProtobuf.Message {
        switch message {
        case .hello(let m): m
        case .proof(let m): m
        case .error(let m): m
        case .ping(let m), .pong(let m): m
        case .subscribe(let m): m
        case .deltaBatch(let m): m
        case .ack(let m): m
        case .attachmentRequest(let m): m
        case .attachmentChunk(let m): m
        case .transactionRequest(let m): m
        case .transactionPieces(let m): m
        case .routeUpdate(let m): m
        case .adminRequest(let m): m
        case .adminResponse(let m): m
        }
    }

    /// Whether `a` and `b` are the same type and, as JSON, the same once the members
    /// at `paths` (dotted, as `transaction.id`) are taken out of both.
    public static func equal(_ a: WireMessage, _ b: WireMessage, except paths: [String]) -> Bool {
        guard a.type == b.type else { return false }
        func object(_ m: WireMessage) -> NSDictionary? {
            guard var object = (try? JSONSerialization.jsonObject(with: Data(compact(m).utf8))) as? [String: Any] else {
                return nil
            }
            for path in paths { remove(path.split(separator: ".").map(String.init), from: &object) }
            return object as NSDictionary
        }
        guard let x = object(a), let y = object(b) else { return false }
        return x.isEqual(y)
    }

    static func remove(_ path: [String], from object: inout [String: Any]) {
        guard let first = path.first else { return }
        if path.count == 1 {
            object[first] = nil
        } else if var inner = object[first] as? [String: Any] {
            remove(Array(path.dropFirst()), from: &inner)
            object[first] = inner
        }
    }
}

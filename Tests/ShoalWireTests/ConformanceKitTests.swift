import Foundation
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// The conformance kit as a whole (`Protocol/vectors/manifest.json`, PROTOCOL.md §15.5):
/// every file of the folder is an entry (or an entry's expected message) and every
/// entry a file, so nothing in the kit goes unchecked; each version has a vector of
/// every message type a session at it may carry; the versions are those the node
/// speaks, so a version the node adds must bring its folder and entries.
///
/// The tests of each kind run every entry of their kind: `VectorTests` (frames and
/// datagrams), `SessionTranscriptTests` and `AdminTranscriptTests`; each also checks
/// that its definitions and the manifest's entries are the same.
@Suite struct ConformanceKitTests {
    static func manifest() throws -> VectorManifest {
        try VectorManifest.kit.get()
    }

    /// The paths of every file under `Protocol/vectors/`, relative to it.
    static func files() -> Set<String> {
        let root = VectorManifest.directory.standardizedFileURL.path + "/"
        let enumerator = FileManager.default.enumerator(at: VectorManifest.directory, includingPropertiesForKeys: [.isRegularFileKey])
        var out: Set<String> = []
        while let url = enumerator?.nextObject() as? URL {
            guard (try? url.resourceValues(forKeys: [.isRegularFileKey]))?.isRegularFile == true else { continue }
            out.insert(String(url.standardizedFileURL.path.dropFirst(root.count)))
        }
        return out
    }

    @Test func everyFileIsAnEntryAndEveryEntryAFile() throws {
        let manifest = try Self.manifest()
        #expect(manifest.format == 1)
        let named = Set(manifest.vectors.flatMap { [$0.file] + ($0.expected.map { [$0] } ?? []) })
        #expect(named.count == manifest.vectors.count + manifest.vectors.compactMap(\.expected).count, "a file named twice")
        let files = Self.files()
        #expect(!files.isEmpty)
        for file in files.subtracting(named).subtracting(["manifest.json"]).sorted() {
            Issue.record("Protocol/vectors/\(file) is in no entry of manifest.json, so no test runs it")
        }
        for file in named.subtracting(files).sorted() {
            Issue.record("manifest.json names Protocol/vectors/\(file), which does not exist")
        }
    }

    /// A vector sits in the folder of the first version it holds at, and its file says
    /// what kind it is; frames and datagrams have an expected message beside them.
    @Test func everyEntryIsWhereAndWhatItSays() throws {
        let manifest = try Self.manifest()
        let folders = Dictionary(uniqueKeysWithValues: manifest.versions.map { ($0.version, $0.directory) })
        for entry in manifest.vectors {
            let folder = try #require(folders[entry.since], "\(entry.file): no version \(entry.since) in the manifest")
            #expect(entry.file.hasPrefix(folder + "/"), "\(entry.file) holds since version \(entry.since), so it sits in \(folder)/")
            #expect(entry.until.map { $0 >= entry.since } ?? true, "\(entry.file): until is before since")
            #expect(!entry.exercises.isEmpty, "\(entry.file) says nothing of what it exercises")
            switch entry.kind {
            case .frame, .datagram:
                #expect(entry.file.hasSuffix(".hex") && entry.expected == String(entry.file.dropLast(4)) + ".json", "\(entry.file)")
                #expect(entry.match != .lines, "\(entry.file)")
                #expect(entry.kind == .datagram ? entry.messageType == "Announcement" : entry.messageType != nil, "\(entry.file)")
            case .sessionTranscript, .adminTranscript:
                #expect(entry.file.hasSuffix(".transcript") && entry.expected == nil && entry.match == .lines, "\(entry.file)")
            }
        }
    }

    /// At each version, a frame vector of every message type a session at it may carry.
    @Test func everyVersionHasAVectorOfEveryMessageType() throws {
        let manifest = try Self.manifest()
        for version in manifest.versions {
            for type in version.messageTypes {
                let vectors = manifest.vectors.filter { $0.kind == .frame && $0.messageType == type && $0.holds(at: version.version) }
                #expect(!vectors.isEmpty, "no \(type) vector holds at version \(version.version)")
            }
        }
        let all = Set(MessageType.allCases.map(\.description))
        #expect(Set(manifest.versions.last?.messageTypes ?? []) == all, "the newest version carries every type")
    }

    /// The manifest's versions are exactly those the node speaks: a version 4 of the
    /// node fails here until the kit has its folder and entries.
    @Test func theVersionsAreTheOnesTheNodeSpeaks() throws {
        let manifest = try Self.manifest()
        #expect(manifest.versions.map(\.version) == Array(HandshakeStateMachine.supportedVersions))
        #expect(manifest.versions.map(\.directory) == manifest.versions.map { "v\($0.version)" })
        for entry in manifest.vectors {
            #expect(entry.until.map { HandshakeStateMachine.supportedVersions.contains($0) } ?? true, "\(entry.file)")
        }
    }

    /// The table of message types is the wire's own: names, type bytes and messages.
    @Test func theMessageTypesAreTheWiresOwn() throws {
        let manifest = try Self.manifest()
        let frames = manifest.messageTypes.filter { $0.type != nil }
        #expect(frames.map(\.name) == MessageType.allCases.map(\.description))
        #expect(frames.map(\.type) == MessageType.allCases.map(\.rawValue))
        for type in frames {
            let protobuf = type.name == "Pong" ? "Ping" : type.name
            #expect(type.protobuf == "shoal.v1.\(protobuf)")
        }
        #expect(manifest.messageTypes.contains { $0.name == "Announcement" && $0.type == nil && $0.protobuf == "shoal.v1.Announcement" })
        let names = Set(manifest.messageTypes.map(\.name))
        for entry in manifest.vectors where entry.messageType != nil {
            #expect(names.contains(entry.messageType!), "\(entry.file): unknown message type")
        }
    }

    /// Each frame and datagram this code writes is an entry of the manifest, and each
    /// entry is written here: a vector added on one side only fails.
    @Test func theDefinitionsAreTheEntries() throws {
        let manifest = try Self.manifest()
        let frames = Set(manifest.vectors.filter { $0.kind == .frame }.map(\.file))
        #expect(Set(VectorTests.frames.map(\.path)) == frames)
        #expect(VectorTests.frames.count == frames.count, "a path defined twice")
        #expect(Set(VectorTests.datagrams) == Set(manifest.vectors.filter { $0.kind == .datagram }.map(\.file)))
    }
}

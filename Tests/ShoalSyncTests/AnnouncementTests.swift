import ShoalCRDT
import ShoalSync
import Testing

/// Discovery datagrams: what a node accepts and why it refuses the rest (PROTOCOL.md §16).
struct AnnouncementTests {
    static let key = Array("correct horse battery staple".utf8)
    static let other = Array("a different key of 32 bytes!....".utf8)
    static let announcement = Announcement(
        meshName: "home", siteID: SiteID(7), nodeName: "n", listenAddresses: ["127.0.0.1:7471"], sequence: 1)

    @Test func roundTripsOpenAndSigned() throws {
        #expect(try Announcement.decode(Self.announcement.encode(key: nil), meshName: "home", key: nil) == Self.announcement)
        #expect(try Announcement.decode(Self.announcement.encode(key: Self.key), meshName: "home", key: Self.key) == Self.announcement)
    }

    enum Kind: Sendable { case malformed, otherMesh, keyMismatch }

    static func kind(_ refusal: Announcement.Refusal) -> Kind {
        switch refusal {
        case .malformed: return .malformed
        case .otherMesh: return .otherMesh
        case .keyMismatch: return .keyMismatch
        }
    }

    @Test func refusals() {
        func refusal(_ bytes: [UInt8], mesh: String = "home", key: [UInt8]? = nil) -> Kind? {
            do throws(Announcement.Refusal) {
                _ = try Announcement.decode(bytes, meshName: mesh, key: key)
                return nil
            } catch {
                return Self.kind(error)
            }
        }
        let open = Self.announcement.encode(key: nil), signed = Self.announcement.encode(key: Self.key)
        #expect(refusal(open, mesh: "work") == .otherMesh)
        #expect(refusal(open, key: Self.key) == .keyMismatch, "unsigned, and this mesh has a key")
        #expect(refusal(signed) == .keyMismatch, "signed, and this node has no key")
        #expect(refusal(signed, key: Self.other) == .keyMismatch, "signed with another key")
        var tampered = signed
        tampered[10] ^= 1
        #expect(refusal(tampered, key: Self.key) == .keyMismatch, "a changed byte breaks the MAC")
        #expect(refusal(Array(open.dropLast())) == .malformed, "length does not match")
        #expect(refusal([0x53, 0x01, 0, 0, 0, 0]) == .malformed, "a Shoal frame header is not an announcement")
        var version = open
        version[2] = 2
        #expect(refusal(version) == .malformed)
        var flags = open
        flags[3] = 0x02
        #expect(refusal(flags) == .malformed)
        #expect(refusal([UInt8](repeating: 0x53, count: 2000)) == .malformed, "larger than any announcement")
        let nobody = Announcement(meshName: "home", siteID: SiteID(0), nodeName: "", listenAddresses: [], sequence: 1)
        #expect(refusal(nobody.encode(key: nil)) == .malformed, "site 0")
    }
}

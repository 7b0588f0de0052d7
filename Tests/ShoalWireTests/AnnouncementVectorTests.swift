import Foundation
import ShoalCRDT
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// The discovery datagrams of PROTOCOL.md §16.3, entries of the kit of kind `datagram`:
/// `v1/announcement.hex` (signed with the key of §15.3) and `v1/announcement-open.hex`
/// (no key) decode to the announcement below, their payload to the expected JSON, and
/// they are re-encoded byte for byte. SHOAL_WRITE_VECTORS=1 rewrites them.
extension VectorTests {
    static let announcement = Announcement(
        meshName: "default", siteID: SiteID(0x0123_4567_89ab_cdef), nodeName: "alpha",
        listenAddresses: ["192.168.1.20:7470"], versions: 1...2, sequence: 3)
    static let announcementKey = "correct horse battery staple"

    @Test(arguments: VectorManifest.entries(.datagram))
    func announcementVectors(_ entry: VectorManifest.Entry) throws {
        #expect(Self.datagrams.contains(entry.file), "no definition writes \(entry.file)")
        let signed = entry.file == "v1/announcement.hex"
        #expect(entry.key == (signed ? Self.announcementKey : nil))
        let key = entry.key.map { Array($0.utf8) }
        let encoded = Self.announcement.encode(key: key)
        let url = VectorManifest.url(entry.file)
        let expectedURL = VectorManifest.url(try #require(entry.expected))
        if VectorManifest.writing {
            let comment = """
                LAN discovery datagram (PROTOCOL.md section 16), \(signed ? "signed with the key \"correct horse battery staple\"" : "in an open mesh (no MAC)"):
                mesh "default", site 0123456789abcdef, name "alpha", listening on 192.168.1.20:7470, versions 1-2, sequence 3.
                Sent to UDP 239.255.74.70:7470.
                """
            try VectorManifest.hexDump(encoded, comment: comment).write(to: url, atomically: true, encoding: .utf8)
            try ProtoJSON.pretty(try ProtoJSON.compact(announcement: Array(encoded[6..<(encoded.count - (signed ? 32 : 0))])))
                .write(to: expectedURL, atomically: true, encoding: .utf8)
        }
        let bytes = try VectorManifest.bytes(hex: String(contentsOf: url, encoding: .utf8))
        #expect(bytes == encoded)
        #expect(try Announcement.decode(bytes, meshName: "default", key: key) == Self.announcement)
        #expect(Array(bytes[0..<4]) == [0x53, 0x44, 0x01, signed ? 0x01 : 0x00])
        let length = Int(bytes[4]) << 8 | Int(bytes[5])
        #expect(bytes.count == 6 + length + (signed ? 32 : 0))
        let expected = try ProtoJSON.announcement(json: String(contentsOf: expectedURL, encoding: .utf8))
        #expect(Array(bytes[6..<(6 + length)]) == expected, "the payload is not the expected announcement")
    }
}

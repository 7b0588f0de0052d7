import Foundation
import ShoalCRDT
import ShoalSync
import ShoalWire
import Testing

/// The discovery datagrams of PROTOCOL.md §16.3: `announcement.hex` (signed with the
/// key of §15.3) and `announcement-open.hex` (no key) decode to the announcement
/// below and are re-encoded byte for byte. SHOAL_WRITE_VECTORS=1 rewrites them.
extension VectorTests {
    static let announcement = Announcement(
        meshName: "default", siteID: SiteID(0x0123_4567_89ab_cdef), nodeName: "alpha",
        listenAddresses: ["192.168.1.20:7470"], versions: 1...2, sequence: 3)
    static let announcementKey = Array("correct horse battery staple".utf8)

    @Test(arguments: [("announcement.hex", true), ("announcement-open.hex", false)])
    func announcementVectors(file: String, signed: Bool) throws {
        let key = signed ? Self.announcementKey : nil
        let encoded = Self.announcement.encode(key: key)
        let url = Self.vectorsDirectory.appendingPathComponent(file)
        if ProcessInfo.processInfo.environment["SHOAL_WRITE_VECTORS"] == "1" {
            let comment = """
                LAN discovery datagram (PROTOCOL.md section 16), \(signed ? "signed with the key \"correct horse battery staple\"" : "in an open mesh (no MAC)"):
                mesh "default", site 0123456789abcdef, name "alpha", listening on 192.168.1.20:7470, versions 1-2, sequence 3.
                Sent to UDP 239.255.74.70:7470.
                """
            try Self.hexDump(encoded, comment: comment).write(to: url, atomically: true, encoding: .utf8)
        }
        let bytes = try Self.parseHex(String(contentsOf: url, encoding: .utf8))
        #expect(bytes == encoded)
        #expect(try Announcement.decode(bytes, meshName: "default", key: key) == Self.announcement)
        #expect(Array(bytes[0..<4]) == [0x53, 0x44, 0x01, signed ? 0x01 : 0x00])
        #expect(bytes.count == 6 + (Int(bytes[4]) << 8 | Int(bytes[5])) + (signed ? 32 : 0))
    }
}

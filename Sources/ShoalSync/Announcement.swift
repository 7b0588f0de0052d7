public import ShoalCRDT
import ShoalWire
import Crypto
import Foundation

/// What a node tells its LAN about itself, once a second or two, over UDP multicast
/// (PROTOCOL.md §16): who it is, which mesh it is in and where to connect to it.
///
/// ```
///  byte 0     1        2         3        4        5
/// +--------+--------+---------+--------+--------+--------+-----------------+-----------------+
/// |  0x53  |  0x44  | version | flags  | payload length  |  payload        |  MAC (32 bytes) |
/// |  'S'   |  'D'   |  0x01   |        | (u16, big-end.) |  Announcement   |  if flags bit 0 |
/// +--------+--------+---------+--------+--------+--------+-----------------+-----------------+
/// MAC = HMAC-SHA256(mesh key, "shoal-announce-v1" || bytes 0 ..< 6 + payload length)
/// ```
///
/// The MAC proves that the sender holds the mesh key, so a node with a key dials
/// only what a holder of the same key announced. It does not stop a replay of a
/// real announcement from elsewhere; a replay only makes the node dial an address,
/// where the handshake's challenge–response decides (PROTOCOL.md §6).
public struct Announcement: Sendable, Hashable {
    public var meshName: String
    public var siteID: SiteID
    public var nodeName: String
    /// `host:port` addresses where the sender accepts connections.
    public var listenAddresses: [String]
    public var versions: ClosedRange<UInt32>
    /// Counts from 1 per start of the sender.
    public var sequence: UInt64

    public init(
        meshName: String, siteID: SiteID, nodeName: String, listenAddresses: [String],
        versions: ClosedRange<UInt32> = HandshakeStateMachine.supportedVersions, sequence: UInt64
    ) {
        self.meshName = meshName
        self.siteID = siteID
        self.nodeName = nodeName
        self.listenAddresses = listenAddresses
        self.versions = versions
        self.sequence = sequence
    }

    /// The UDP port and IPv4 group announcements go to.
    public static let port = 7470
    public static let group = "239.255.74.70"
    /// The largest datagram sent or accepted, in bytes: one Ethernet frame's worth.
    public static let maximumSize = 1400
    static let magic: [UInt8] = [0x53, 0x44]
    static let version: UInt8 = 1
    static let signedFlag: UInt8 = 0x01
    static let macLabel = Array("shoal-announce-v1".utf8)
    static let headerSize = 6
    static let macSize = 32

    /// Why a datagram is not an announcement this node acts on.
    public enum Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        /// Not a Shoal announcement at all (or a version this node does not know).
        case malformed(String)
        /// An announcement of another mesh.
        case otherMesh(String)
        /// Signed when this node has no key, unsigned when it has one, or signed with another key.
        case keyMismatch(String)

        public var description: String {
            switch self {
            case .malformed(let m), .otherMesh(let m), .keyMismatch(let m): return m
            }
        }
    }

    /// The datagram, signed with `key` when there is one.
    public func encode(key: [UInt8]?) -> [UInt8] {
        var message = Shoal_V1_Announcement()
        message.meshName = meshName
        message.siteID = siteID.rawValue
        message.nodeName = nodeName
        message.listenAddresses = listenAddresses
        message.minVersion = versions.lowerBound
        message.maxVersion = versions.upperBound
        message.sequence = sequence
        let payload = message.payload()
        var datagram = Self.magic + [Self.version, key == nil ? 0 : Self.signedFlag]
        datagram += [UInt8(truncatingIfNeeded: payload.count >> 8), UInt8(truncatingIfNeeded: payload.count)]
        datagram += payload
        if let key { datagram += Self.mac(key: key, signed: datagram) }
        return datagram
    }

    static func mac(key: [UInt8], signed: [UInt8]) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: macLabel + signed, using: SymmetricKey(data: key)))
    }

    /// Reads a datagram and checks it against this node's mesh and key, in this
    /// order: header, length, payload, key, mesh. The first failure wins.
    public static func decode(_ datagram: [UInt8], meshName: String, key: [UInt8]?) throws(Refusal) -> Announcement {
        guard datagram.count >= headerSize, datagram.count <= maximumSize, Array(datagram[0..<2]) == magic else {
            throw .malformed("not a Shoal announcement (\(datagram.count) bytes)")
        }
        guard datagram[2] == version else { throw .malformed("announcement version \(datagram[2]), this node reads 1") }
        let flags = datagram[3]
        guard flags & ~signedFlag == 0 else { throw .malformed("unknown announcement flags 0x\(String(flags, radix: 16))") }
        let length = Int(datagram[4]) << 8 | Int(datagram[5])
        let signed = flags & signedFlag != 0
        guard datagram.count == headerSize + length + (signed ? macSize : 0) else {
            throw .malformed("announcement length \(length) does not match its \(datagram.count) bytes")
        }
        let message: Shoal_V1_Announcement
        do {
            message = try Shoal_V1_Announcement(payload: Array(datagram[headerSize..<headerSize + length]))
        } catch {
            throw .malformed(error.message)
        }
        guard message.siteID != 0, message.minVersion <= message.maxVersion else {
            throw .malformed("announcement with site 0 or an empty version range")
        }
        switch (key, signed) {
        case (nil, false): break
        case (nil, true): throw .keyMismatch("signed with a mesh key, and this node has none")
        case (_?, false): throw .keyMismatch("not signed, and this mesh requires a key")
        case (let key?, true):
            let body = Array(datagram[0..<headerSize + length])
            let valid = HMAC<SHA256>.isValidAuthenticationCode(
                Array(datagram[(headerSize + length)...]), authenticating: macLabel + body, using: SymmetricKey(data: key))
            guard valid else { throw .keyMismatch("from site \(SiteID(message.siteID)) (\(message.nodeName)) signed with another mesh key") }
        }
        guard message.meshName == meshName else {
            throw .otherMesh("of mesh '\(message.meshName)' from site \(SiteID(message.siteID)) (\(message.nodeName))")
        }
        return Announcement(
            meshName: message.meshName, siteID: SiteID(message.siteID), nodeName: message.nodeName,
            listenAddresses: message.listenAddresses, versions: message.minVersion...message.maxVersion,
            sequence: message.sequence)
    }
}

import SwiftProtobuf

/// The protobuf payload of a LAN discovery datagram (PROTOCOL.md §16); the datagram's
/// header and MAC are ShoalSync's `Announcement`.
extension Shoal_V1_Announcement {
    /// The payload's bytes.
    public func payload() -> [UInt8] {
        (try? serializedBytes()) ?? []
    }

    /// Reads a payload; the error names what does not decode.
    public init(payload: [UInt8]) throws(WireError) {
        do {
            try self.init(serializedBytes: payload)
        } catch {
            throw WireError(.malformedPayload, "announcement payload does not decode: \(error)")
        }
    }
}

/// The largest frame payload a connection accepts: small for the frames of the
/// handshake, the node's limit after them.
///
/// A connection that has not finished its handshake is a stranger's. Its first two
/// frames can only be a Hello and a Proof (or an Error), so the decoder holds them to
/// `WireLimits.maximumHandshakeFrameSize`: a flood of connections that each announce
/// a large Hello then costs at most that much per connection, not the full frame limit
/// (PROTOCOL.md §12). From the third frame on the full limit applies, also while the
/// session is still checking the Proof: a client sends its first request as soon as it
/// has the node's Proof, and that request may be decoded before the node has looked at
/// the client's Proof. A stranger that sends a bogus Proof to get there is closed as
/// soon as the session reads it.
public struct FrameSizeLimit: Sendable, Hashable {
    /// The limit of the handshake's frames.
    public var handshake: Int
    /// The limit after them.
    public var full: Int
    /// How many frames the handshake's limit covers.
    public static let handshakeFrames = 2

    public init(handshake: Int, full: Int) {
        self.handshake = min(handshake, full)
        self.full = full
    }

    /// A limit that is `full` from the first frame.
    public init(_ full: Int) {
        self.init(handshake: full, full: full)
    }

    /// The limit of the frame that comes after `decoded` others on the connection.
    public func limit(afterFrames decoded: Int) -> Int {
        decoded < Self.handshakeFrames ? handshake : full
    }
}

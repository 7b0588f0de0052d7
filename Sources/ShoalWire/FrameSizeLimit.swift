import Synchronization

/// The largest frame payload a connection accepts now: small until the handshake
/// has proven the other side, then the node's limit.
///
/// A connection that has not finished its handshake is a stranger's. Before it
/// has, a frame can only be a Hello, a Proof or an Error, so the decoder allows
/// `WireLimits.maximumHandshakeFrameSize`; the session raises the limit once it is
/// established. A flood of connections that each announce a large frame then costs
/// at most that much memory per connection, not the full frame limit
/// (PROTOCOL.md §12).
public final class FrameSizeLimit: Sendable {
    private let value: Atomic<Int>
    private let full: Int

    /// A limit of `handshake` bytes until `establish()`, then `full` bytes.
    public init(handshake: Int, full: Int) {
        self.value = Atomic(min(handshake, full))
        self.full = full
    }

    /// A limit that is `full` from the start.
    public convenience init(_ full: Int) {
        self.init(handshake: full, full: full)
    }

    /// The limit a frame header is checked against now.
    public var current: Int { value.load(ordering: .relaxed) }

    /// Whether the handshake limit still applies.
    public var isHandshake: Bool { current < full }

    /// Raises the limit to the full one: the handshake is done.
    public func establish() {
        value.store(full, ordering: .relaxed)
    }
}

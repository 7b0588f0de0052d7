/// The size limits a connection enforces. All are configurable per node.
public struct WireLimits: Sendable, Hashable {
    /// The largest payload a frame header may announce, compressed or not (default 16 MiB).
    public var maximumFrameSize: Int
    /// The largest size a compressed payload may inflate to (default 16 MiB).
    public var maximumInflatedSize: Int
    /// Payloads at least this large are deflated before sending (default 1 KiB).
    public var compressionThreshold: Int

    public init(
        maximumFrameSize: Int = 16 << 20,
        maximumInflatedSize: Int = 16 << 20,
        compressionThreshold: Int = 1024
    ) {
        self.maximumFrameSize = maximumFrameSize
        self.maximumInflatedSize = maximumInflatedSize
        self.compressionThreshold = compressionThreshold
    }

    public static let `default` = WireLimits()

    /// The largest payload of a handshake frame (256 KiB, or the frame limit if that
    /// is lower): the most a Hello can need (4 096 freshness entries of at most 22
    /// bytes, and names), far below the full limit, so that connections nobody has
    /// proven cost little (`FrameSizeLimit`).
    public static let maximumHandshakeFrameSize = 256 << 10

    /// The limits of a new connection's frames: the handshake's for its first two,
    /// this connection's full limit after them.
    public func connectionLimit() -> FrameSizeLimit {
        FrameSizeLimit(handshake: Self.maximumHandshakeFrameSize, full: maximumFrameSize)
    }
}

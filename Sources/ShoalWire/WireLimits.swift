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
}

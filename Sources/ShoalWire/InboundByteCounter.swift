public import NIOCore
import Synchronization

/// Counts every byte a connection receives, whole frames or not.
///
/// An idle check that looked only at whole frames would cut off a peer on a slow
/// link in the middle of a large frame; one that counted any byte would keep a
/// peer that trickles a byte a second alive for ever. `InboundProgress` sits
/// between the two: a whole frame, or `progressBytes` of one, is progress.
///
/// ```
///  socket ──bytes──► InboundByteCountingHandler ──► FrameByteDecoder ──frames──► session
///                         │ add(n)
///                         ▼
///                  InboundByteCounter ◄── read by the session's idle check
/// ```
public final class InboundByteCounter: Sendable {
    private let total = Atomic<UInt64>(0)

    public init() {}

    /// Bytes received so far.
    public var bytes: UInt64 { total.load(ordering: .relaxed) }

    public func add(_ count: Int) {
        total.wrappingAdd(UInt64(count), ordering: .relaxed)
    }
}

/// The NIO handler in front of the frame decoder that feeds an `InboundByteCounter`.
public final class InboundByteCountingHandler: ChannelInboundHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer

    let counter: InboundByteCounter

    public init(counter: InboundByteCounter) {
        self.counter = counter
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        counter.add(unwrapInboundIn(data).readableBytes)
        context.fireChannelRead(data)
    }
}

/// Whether a connection made progress since the last time it did: at least
/// `progressBytes` more received (part of a frame counts).
public struct InboundProgress: Sendable {
    /// How many bytes of a frame still on its way count as a sign of life (16 KiB).
    /// A peer sending slower than this per idle timeout is treated as idle.
    public static let progressBytes: UInt64 = 16 * 1024

    private var mark: UInt64

    public init(bytes: UInt64 = 0) {
        self.mark = bytes
    }

    /// True, and a new mark set, when `bytes` is at least `progressBytes` past the last mark.
    public mutating func advanced(to bytes: UInt64) -> Bool {
        guard bytes >= mark &+ Self.progressBytes else { return false }
        mark = bytes
        return true
    }
}

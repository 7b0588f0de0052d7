public import ShoalSync
public import ShoalWire

/// Two ends of an in-process connection that carries frames, for tests that run
/// whole sessions without sockets.
///
/// Closing either end ends the inbound sequence of both, as a TCP close would.
public struct InMemoryConnection: Sendable {
    public struct End: Sendable {
        public let inbound: AsyncStream<Frame>
        public let transport: Transport
    }

    public final class Transport: SessionTransport {
        let outgoing: AsyncStream<Frame>.Continuation
        let incoming: AsyncStream<Frame>.Continuation
        let observe: (@Sendable (Frame) -> Void)?
        let cutBefore: (@Sendable (Frame) async -> Bool)?
        let rewrite: (@Sendable (Frame) -> Frame)?

        init(
            outgoing: AsyncStream<Frame>.Continuation, incoming: AsyncStream<Frame>.Continuation,
            observe: (@Sendable (Frame) -> Void)?, cutBefore: (@Sendable (Frame) async -> Bool)? = nil,
            rewrite: (@Sendable (Frame) -> Frame)? = nil
        ) {
            self.outgoing = outgoing
            self.incoming = incoming
            self.observe = observe
            self.cutBefore = cutBefore
            self.rewrite = rewrite
        }

        public func write(_ frame: Frame) async throws {
            let frame = rewrite?(frame) ?? frame
            observe?(frame)
            if await cutBefore?(frame) == true {
                // The connection breaks with this frame unsent, as a TCP link cut there would.
                outgoing.finish()
                incoming.finish()
                throw CancellationError()
            }
            if case .terminated = outgoing.yield(frame) {
                throw CancellationError()
            }
        }

        public func close() async {
            outgoing.finish()
            incoming.finish()
        }
    }

    public let a: End
    public let b: End

    /// A new connection whose end `a` is observed as this one's is: the next dial.
    public func another() -> InMemoryConnection { InMemoryConnection(observeFromA: a.transport.observe) }

    /// - Parameters:
    ///   - observeFromA: sees every frame end `a` writes, for tests that check what was sent.
    ///   - cutBeforeFromB: asked about every frame end `b` writes; true breaks the
    ///     connection there, the frame unsent: a link cut part way through a stream.
    ///     It may take its time to answer: end `b` writes nothing meanwhile.
    ///   - rewriteFromB: what end `b` writes instead of each frame: a peer that answers
    ///     otherwise than this node would.
    public init(
        observeFromA: (@Sendable (Frame) -> Void)? = nil, cutBeforeFromB: (@Sendable (Frame) async -> Bool)? = nil,
        rewriteFromB: (@Sendable (Frame) -> Frame)? = nil
    ) {
        let (toB, toBContinuation) = AsyncStream.makeStream(of: Frame.self)
        let (toA, toAContinuation) = AsyncStream.makeStream(of: Frame.self)
        a = End(inbound: toA, transport: Transport(outgoing: toBContinuation, incoming: toAContinuation, observe: observeFromA))
        b = End(
            inbound: toB,
            transport: Transport(
                outgoing: toAContinuation, incoming: toBContinuation, observe: nil, cutBefore: cutBeforeFromB, rewrite: rewriteFromB))
    }
}

public import ShoalWire

extension HandshakeStateMachine {
    /// How a handshake run over a connection ended, when no side refused the other.
    public enum Outcome: Sendable, Equatable {
        case established(PeerIdentity)
        /// The connection closed before the handshake was done.
        case closed
    }

    /// Runs the handshake over a connection: sends what the machine says and feeds it
    /// what arrives, until it is established, fails, or the connection closes.
    ///
    /// Throws the `SyncError` that failed it, after handing it to `reject` (which
    /// tells the peer when the refusal is this side's). A peer that refuses this side
    /// writes its Error frame and closes at once, so this side's next write can fail
    /// before it has read why: the refusal still waiting among the inbound frames is
    /// then what ended the handshake, not the failed write.
    public mutating func run(
        send: (WireMessage) async throws -> Void,
        next: () async throws -> WireMessage?,
        reject: (SyncError) async -> Void
    ) async throws -> Outcome {
        var pending = start()
        while true {
            for action in pending {
                switch action {
                case .send(let message):
                    do {
                        try await send(message)
                    } catch {
                        guard let refusal = await peerRefusal(next) else { throw error }
                        await reject(refusal)
                        throw refusal
                    }
                case .established(let identity):
                    return .established(identity)
                case .fail(let error):
                    await reject(error)
                    throw error
                }
            }
            guard let message = try await next() else { return .closed }
            pending = receive(message)
        }
    }

    /// The Error frame the peer sent before closing, if the frames left to read hold one.
    private mutating func peerRefusal(_ next: () async throws -> WireMessage?) async -> SyncError? {
        while let message = try? await next() {
            for case .fail(let error) in receive(message) where error.fromPeer {
                return error
            }
        }
        return nil
    }
}

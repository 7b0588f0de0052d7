import ShoalCRDT

/// The accepted connections still in their handshake, at most `capacity` of them:
/// one more closes the one that has waited longest.
///
/// Before its handshake a connection is a stranger's, and may hold up to the
/// handshake's frame limit in the decoder for up to the handshake timeout. Bounding
/// how many do bounds the memory a flood of them takes. Closing the oldest, rather
/// than refusing the newest, keeps the node reachable during a flood: a real peer or
/// CLI finishes its handshake in milliseconds, long before the flood can push it out.
final class HandshakeGate: Sendable {
    struct Ticket: Hashable, Sendable {
        fileprivate let number: UInt64
    }

    let capacity: Int
    private let state = Locked<(next: UInt64, waiting: [UInt64: @Sendable () -> Void], closed: UInt64)>((0, [:], 0))

    init(capacity: Int) {
        self.capacity = max(capacity, 1)
    }

    /// Admits a connection; `close` closes it if it must make room later. Returns its
    /// ticket and the close of the connection it pushed out, if any, to be run by
    /// the caller (outside the lock).
    func enter(close: @escaping @Sendable () -> Void) -> (Ticket, pushedOut: (@Sendable () -> Void)?) {
        state.withLock { state in
            state.next += 1
            let ticket = state.next
            var pushed: (@Sendable () -> Void)?
            if state.waiting.count >= capacity, let oldest = state.waiting.keys.min() {
                pushed = state.waiting.removeValue(forKey: oldest)
                state.closed += 1
            }
            state.waiting[ticket] = close
            return (Ticket(number: ticket), pushed)
        }
    }

    /// The connection finished its handshake or ended: it no longer counts.
    func leave(_ ticket: Ticket) {
        _ = state.withLock { $0.waiting.removeValue(forKey: ticket.number) }
    }

    /// Connections in their handshake now.
    var waiting: Int { state.withLock { $0.waiting.count } }

    /// Connections closed so far to make room.
    var pushedOut: UInt64 { state.withLock { $0.closed } }
}

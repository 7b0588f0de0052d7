import ShoalCRDT
import ShoalStorage

/// Whether a node listens yet, for `ShoalNode.ready()`: waiting, listening at an
/// address, or ended (run() failed before it listened, or the node stopped). Waiters
/// are resumed once, with the address or the error; a waiter whose task is cancelled
/// is resumed at once with a `.cancelled` error.
final class Readiness: Sendable {
    private enum State {
        case waiting([UInt64: CheckedContinuation<Result<HostAndPort, ShoalError>, Never>])
        case listening(HostAndPort)
        case ended(ShoalError)
    }

    /// The state, the last waiter's ticket, and the address the node listened at (kept
    /// once it stopped, for `ShoalNode.listenAddress`).
    private let state = Locked<(state: State, next: UInt64, address: HostAndPort?)>((.waiting([:]), 0, nil))

    /// The address the listener was bound to, once it was.
    var address: HostAndPort? { state.withLock { $0.address } }

    func wait() async throws(ShoalError) -> HostAndPort {
        let ticket = state.withLock { s -> UInt64 in
            s.next += 1
            return s.next
        }
        return try await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<HostAndPort, ShoalError>, Never>) in
                let outcome = state.withLock { s -> Result<HostAndPort, ShoalError>? in
                    switch s.state {
                    case .listening(let address): return .success(address)
                    case .ended(let error): return .failure(error)
                    case .waiting(var waiters):
                        if Task.isCancelled { return .failure(Self.cancelled) }
                        waiters[ticket] = continuation
                        s.state = .waiting(waiters)
                        return nil
                    }
                }
                if let outcome { continuation.resume(returning: outcome) }
            }
        } onCancel: {
            let waiter = state.withLock { s -> CheckedContinuation<Result<HostAndPort, ShoalError>, Never>? in
                guard case .waiting(var waiters) = s.state, let waiter = waiters.removeValue(forKey: ticket) else { return nil }
                s.state = .waiting(waiters)
                return waiter
            }
            waiter?.resume(returning: .failure(Self.cancelled))
        }.get()
    }

    private static let cancelled = ShoalError(.cancelled, "cancelled while waiting for the node to listen")

    /// The listener is bound: every waiter, and every later `wait`, gets `address`.
    func listening(at address: HostAndPort) {
        state.withLock { $0.address = address }
        resume(.listening(address), with: .success(address))
    }

    /// `run()` returned: waiters get `error`, and so does every later `wait`.
    func end(_ error: ShoalError) {
        resume(.ended(error), with: .failure(error))
    }

    private func resume(_ next: State, with outcome: Result<HostAndPort, ShoalError>) {
        let waiters = state.withLock { s -> [CheckedContinuation<Result<HostAndPort, ShoalError>, Never>] in
            defer { s.state = next }
            guard case .waiting(let waiters) = s.state else { return [] }
            return Array(waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }
}

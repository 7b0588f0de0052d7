import ShoalCRDT
import Testing

@testable import ShoalNode

/// At most `capacity` connections in their handshake: one more pushes out the one
/// that has waited longest; one that finishes or ends no longer counts.
@Suite struct HandshakeGateTests {
    @Test func oneMoreThanTheCapacityClosesTheLongestWaiting() {
        let gate = HandshakeGate(capacity: 2)
        let closed = Locked<[Int]>([])
        func admit(_ n: Int) -> HandshakeGate.Ticket {
            let (ticket, pushedOut) = gate.enter { closed.withLock { $0.append(n) } }
            pushedOut?()
            return ticket
        }
        let first = admit(1)
        _ = admit(2)
        #expect(gate.waiting == 2 && closed.withLock { $0 }.isEmpty)
        _ = admit(3)
        #expect(closed.withLock { $0 } == [1], "the longest waiting was closed")
        #expect(gate.waiting == 2 && gate.pushedOut == 1)
        gate.leave(first)  // already gone: nothing changes
        #expect(gate.waiting == 2)
        let fourth = admit(4)
        #expect(closed.withLock { $0 } == [1, 2])
        gate.leave(fourth)
        #expect(gate.waiting == 1)
        _ = admit(5)
        #expect(closed.withLock { $0 } == [1, 2], "room was left by the one that finished")
    }
}

import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// Each of a session's limits at its edge: the value itself passes, one more is refused.
@Suite struct SessionLimitTests {
    typealias M = SessionStateMachineTests

    static func machine(subscriptions: Int = 256, queryLength: Int = 64 << 10) -> SessionStateMachine {
        var m = SessionStateMachine(
            configuration: .init(peer: M.peer, maximumSubscriptions: subscriptions, maximumQueryLength: queryLength))
        _ = m.handle(.cursorRead(M.cars, resumeAfter: 0), now: 0)
        return m
    }

    static func queries(_ n: Int) -> SubscriptionSet {
        var set = SubscriptionSet()
        for i in 0..<n { try! set.add(query: "SELECT * FROM c\(i)") }
        return set
    }

    @Test func aPeerMayHoldAsManySubscriptionsAsTheLimitAndNoMore() {
        var m = Self.machine(subscriptions: 3)
        let atLimit = m.handle(.received(M.subscribe(Self.queries(3), generation: 1)), now: 1)
        #expect(M.closed(atLimit) == nil)
        let over = m.handle(.received(M.subscribe(Self.queries(4), generation: 2)), now: 2)
        #expect(M.closed(over)??.code == .limitExceeded)
        #expect(
            M.closed(over)??.message
                == "Subscribe carries 4 subscriptions; this node serves at most 3 per peer (--max-subscriptions-per-peer)")
    }

    @Test func aSubscriptionQueryMayBeAsLongAsTheLimitAndNoLonger() {
        let query = "SELECT * FROM cars WHERE color = 'blue'"
        let n = query.utf8.count
        var m = Self.machine(queryLength: n)
        #expect(M.closed(m.handle(.received(M.subscribe(M.set(query), generation: 1)), now: 1)) == nil)
        let longer = "SELECT * FROM cars WHERE color = 'bluer'"
        let over = m.handle(.received(M.subscribe(M.set(longer), generation: 2)), now: 2)
        #expect(M.closed(over)??.code == .invalidQuery)
        #expect(
            M.closed(over)??.message
                == "subscription query of \(n + 1) bytes refused: this node takes queries of at most \(n) bytes (--max-query-length)")
    }


    /// `maximumPeers` and `maximumAdminSessions`: one more session than the limit is
    /// refused after its handshake with LIMIT_EXCEEDED; the ones within it go on.
    @Test func aNodeServesAsManyPeersAndAdminClientsAsItsLimitsAndRefusesTheNext() async throws {
        let hub = try TestNode(name: "hub") { $0.maximumPeers = 1; $0.maximumAdminSessions = 1 }
        let first = try TestNode(name: "first", subscriptions: ["SELECT * FROM cars"])
        let second = try TestNode(name: "second", subscriptions: ["SELECT * FROM cars"])
        defer { hub.remove(); first.remove(); second.remove() }
        try await InProcessMesh.withLink(first.sync, hub.sync) {
            _ = try await hub.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
            #expect(try await InProcessMesh.eventually { try await first.store.execute("SELECT * FROM cars").items.count == 1 })
            // A second peer: refused after its handshake, told why.
            let extra = InMemoryConnection()
            async let hubSide = Result {
                try await hub.sync.serve(
                    inbound: extra.b.inbound, transport: extra.b.transport, direction: .inbound, remoteAddress: "memory:second")
            }
            var peer2 = HandshakeStateMachine(
                configuration: .init(siteID: second.store.siteID, nodeName: "second", meshName: "default", meshKey: nil))
            let told = try await Self.handshake(&peer2, over: extra.a, thenRead: true)
            guard case .error(let error)? = told else {
                Issue.record("expected an Error frame for the second peer, got \(String(describing: told))")
                return
            }
            #expect(error.code == .limitExceeded)
            #expect(error.message == "this node syncs with at most 1 peers at once (--max-peers)")
            if case .success = await hubSide { Issue.record("the hub's side ends in the error it sent") }
            // Admin clients: the first is served while it stays; a second at the same time is refused.
            let admin1 = InMemoryConnection(), admin2 = InMemoryConnection()
            async let served = Result {
                try await hub.sync.serve(
                    inbound: admin1.b.inbound, transport: admin1.b.transport, direction: .inbound, remoteAddress: "memory:cli1",
                    admin: NoAdmin())
            }
            var cli1 = HandshakeStateMachine(
                configuration: .init(siteID: SiteID(0), nodeName: "cli", meshName: "", meshKey: nil, role: .admin))
            try await Self.handshake(&cli1, over: admin1.a)
            #expect(cli1.isEstablished)
            async let second = Result {
                try await hub.sync.serve(
                    inbound: admin2.b.inbound, transport: admin2.b.transport, direction: .inbound, remoteAddress: "memory:cli2",
                    admin: NoAdmin())
            }
            var cli2 = HandshakeStateMachine(
                configuration: .init(siteID: SiteID(0), nodeName: "cli", meshName: "", meshKey: nil, role: .admin))
            let answer = try await Self.handshake(&cli2, over: admin2.a, thenRead: true)
            guard case .error(let refusal)? = answer else {
                Issue.record("expected an Error frame for the second admin client, got \(String(describing: answer))")
                return
            }
            #expect(refusal.code == .limitExceeded)
            #expect(refusal.message == "this node serves at most 1 admin connections at once (--max-admin-connections); try again later")
            if case .success = await second { Issue.record("the second admin session ends in an error") }
            await admin1.a.transport.close()
            _ = await served
            // With the first gone, the next is served.
            let admin3 = InMemoryConnection()
            async let third = Result {
                try await hub.sync.serve(
                    inbound: admin3.b.inbound, transport: admin3.b.transport, direction: .inbound, remoteAddress: "memory:cli3",
                    admin: NoAdmin())
            }
            var cli3 = HandshakeStateMachine(
                configuration: .init(siteID: SiteID(0), nodeName: "cli", meshName: "", meshKey: nil, role: .admin))
            try await Self.handshake(&cli3, over: admin3.a)
            #expect(cli3.isEstablished)
            await admin3.a.transport.close()
            _ = await third
            // The first peer was never disturbed.
            _ = try await hub.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'b'})")
            #expect(try await InProcessMesh.eventually { try await first.store.execute("SELECT * FROM cars").items.count == 2 })
        }
    }

    /// The handshake timeout: a connection that has not finished its handshake in time
    /// is closed (without an Error); one that finishes in time is served.
    /// Timed only from below: that it closes at all is the time limit's to say (under
    /// a sanitizer, beside the whole suite, the watchdog's one-second tick once waited
    /// minutes for a thread).
    @Test(.timeLimit(.minutes(10))) func aHandshakeThatStallsIsClosedAtTheTimeout() async throws {
        let node = try TestNode(name: "node") { $0.handshakeTimeout = .milliseconds(300) }
        defer { node.remove() }
        let silent = InMemoryConnection()
        let started = ContinuousClock.now
        async let served = Result {
            try await node.sync.serve(
                inbound: silent.b.inbound, transport: silent.b.transport, direction: .inbound, remoteAddress: "memory:silent")
        }
        var frames: [WireMessage] = []
        for await frame in silent.a.inbound { frames.append(try MessageCodec().decode(frame)) }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(300), "closed before the timeout, after \(elapsed)")
        #expect(frames.count == 1, "the node's Hello, and no Error")
        guard case .success(nil) = await served else {
            Issue.record("a handshake that never finished ends the session quietly")
            return
        }
    }

    /// The idle timeout of an admin session: a client that sends nothing (and runs no
    /// request) is closed once it has been silent longer than the limit.
    /// Timed only from below, like the handshake's: 155 s once under ThreadSanitizer.
    @Test(.timeLimit(.minutes(10))) func anIdleAdminClientIsClosedAfterTheIdleTimeout() async throws {
        let node = try TestNode(name: "node") { $0.idleTimeout = .milliseconds(1500) }
        defer { node.remove() }
        let connection = InMemoryConnection()
        async let served = Result {
            try await node.sync.serve(
                inbound: connection.b.inbound, transport: connection.b.transport, direction: .inbound,
                remoteAddress: "memory:cli", admin: NoAdmin())
        }
        var cli = HandshakeStateMachine(
            configuration: .init(siteID: SiteID(0), nodeName: "cli", meshName: "", meshKey: nil, role: .admin))
        let established = ContinuousClock.now
        let after = try await Self.handshake(&cli, over: connection.a, thenRead: true)
        let elapsed = ContinuousClock.now - established
        #expect(after == nil, "closed without an Error")
        #expect(elapsed > .milliseconds(1500), "closed before the idle timeout, after \(elapsed)")
        _ = await served
    }

    /// Runs a client's side of the handshake; with `thenRead`, returns the first frame
    /// after it (nil if the node closed instead).
    @discardableResult
    static func handshake(
        _ machine: inout HandshakeStateMachine, over end: InMemoryConnection.End, thenRead: Bool = false
    ) async throws -> WireMessage? {
        var iterator = end.inbound.makeAsyncIterator()
        guard try await handshake(&machine, over: end, reading: &iterator), thenRead, let next = await iterator.next() else { return nil }
        return try MessageCodec().decode(next)
    }

    /// The same, reading the node's frames from `frames`, which the caller goes on
    /// reading after; returns whether the handshake was established.
    static func handshake(
        _ machine: inout HandshakeStateMachine, over end: InMemoryConnection.End, reading frames: inout AsyncStream<Frame>.Iterator
    ) async throws -> Bool {
        var actions = machine.start()
        while true {
            for action in actions {
                if case .send(let m) = action { try await end.transport.write(MessageCodec().encode(m)) }
                if case .fail = action { return false }
            }
            if machine.isEstablished { return true }
            guard let frame = await frames.next() else { return false }
            actions = machine.receive(try MessageCodec().decode(frame))
        }
    }
}

/// An admin endpoint that answers nothing: the tests only count sessions.
struct NoAdmin: AdminRequestHandler, AdminConnection {
    func serve(client: String, role: PeerRights.AdminRole, _ body: (any AdminConnection) async throws -> Void) async throws {
        try await body(self)
    }
    func handle(
        _ request: AdminRequest, deadline: Deadline?, respond: @escaping @Sendable (AdminResponse) async throws -> Void
    ) async throws {}
}

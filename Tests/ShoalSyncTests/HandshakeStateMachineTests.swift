import ShoalCRDT
import ShoalSync
import ShoalWire
import Testing

@Suite struct HandshakeStateMachineTests {
    static let key = Array("correct horse battery staple".utf8)

    static func machine(
        site: UInt64, mesh: String = "default", key: [UInt8]? = nil, role: PeerRole = .peer,
        versions: ClosedRange<UInt32> = HandshakeStateMachine.supportedVersions
    ) -> HandshakeStateMachine {
        HandshakeStateMachine(
            configuration: .init(
                siteID: SiteID(site), nodeName: "n\(site)", meshName: mesh, meshKey: key, role: role, versions: versions))
    }

    /// Runs two machines against each other until neither has anything to send.
    /// Returns what each side ended with: its peer's identity or its failure.
    static func run(_ a: inout HandshakeStateMachine, _ b: inout HandshakeStateMachine)
        -> (a: HandshakeStateMachine.Action?, b: HandshakeStateMachine.Action?)
    {
        var toB: [WireMessage] = [], toA: [WireMessage] = []
        var endA: HandshakeStateMachine.Action?, endB: HandshakeStateMachine.Action?
        func absorb(_ actions: [HandshakeStateMachine.Action], outbox: inout [WireMessage], end: inout HandshakeStateMachine.Action?) {
            for action in actions {
                switch action {
                case .send(let m): outbox.append(m)
                case .established: end = action
                case .fail(let e):
                    end = action
                    if !e.fromPeer { outbox.append(e.frame) }
                }
            }
        }
        absorb(a.start(), outbox: &toB, end: &endA)
        absorb(b.start(), outbox: &toA, end: &endB)
        while !toA.isEmpty || !toB.isEmpty {
            if !toB.isEmpty, endB == nil { absorb(b.receive(toB.removeFirst()), outbox: &toA, end: &endB) } else if !toB.isEmpty { toB.removeFirst() }
            if !toA.isEmpty, endA == nil { absorb(a.receive(toA.removeFirst()), outbox: &toB, end: &endA) } else if !toA.isEmpty { toA.removeFirst() }
        }
        return (endA, endB)
    }

    static func failure(_ action: HandshakeStateMachine.Action?) -> SyncError? {
        if case .fail(let e)? = action { return e }
        return nil
    }

    @Test(arguments: [nil, key] as [[UInt8]?])
    func peersWithTheSameMeshAndKeyConnect(key: [UInt8]?) {
        var a = Self.machine(site: 1, key: key), b = Self.machine(site: 2, key: key)
        let (endA, endB) = Self.run(&a, &b)
        guard case .established(let seenByA)? = endA, case .established(let seenByB)? = endB else {
            Issue.record("expected both established, got \(String(describing: endA)) / \(String(describing: endB))")
            return
        }
        #expect(seenByA.siteID == SiteID(2) && seenByA.name == "n2" && seenByA.version == 4)
        #expect(seenByB.siteID == SiteID(1))
        #expect(a.isEstablished && b.isEstablished)
    }

    @Test func aWrongMeshKeyIsRefusedOnBothSides() {
        var a = Self.machine(site: 1, key: Self.key), b = Self.machine(site: 2, key: Array("another key entirely!".utf8))
        let (endA, endB) = Self.run(&a, &b)
        #expect(Self.failure(endA)?.code == .meshKeyMismatch)
        #expect(Self.failure(endB)?.code == .meshKeyMismatch)
        #expect(Self.failure(endA)?.message.contains("does not match") == true)
    }

    struct WriteFailed: Error {}

    /// `run` over scripted frames: the refuser's Hello and Error arrive, but this side's
    /// write after the Hello fails (the refuser closed): the refusal ends it.
    @Test func runEndsInThePeersRefusalWhenAWriteFailsFirst() async throws {
        // A node that takes no keyless admin clients, and an admin client with no key.
        var refuser = HandshakeStateMachine(
            configuration: .init(siteID: SiteID(2), nodeName: "n2", meshName: "default", meshKey: nil, acceptsKeylessAdmin: false))
        var client = Self.machine(site: 0, mesh: "", role: .admin)
        var inbound = refuser.start().compactMap { if case .send(let m) = $0 { m } else { nil } }
        for case .send(let hello) in client.start() {
            for case .fail(let error) in refuser.receive(hello) { inbound.append(error.frame) }
        }
        client = Self.machine(site: 0, mesh: "", role: .admin)
        var writes = 0, rejected: [SyncError] = []
        await #expect(throws: SyncError.self) {
            _ = try await client.run(
                send: { _ in
                    writes += 1
                    if writes > 1 { throw WriteFailed() }
                },
                next: { inbound.isEmpty ? nil : inbound.removeFirst() },
                reject: { rejected.append($0) })
        }
        // Hello went out; the refuser's Hello made this side answer, and that write failed.
        #expect(writes == 2)
        #expect(rejected.count == 1 && rejected[0].fromPeer && rejected[0].code == .meshKeyMismatch, "\(rejected)")

        // With no refusal left to read, the failed write is what ends it; a close before
        // the handshake is done is `.closed`.
        var alone = Self.machine(site: 1)
        await #expect(throws: WriteFailed.self) {
            _ = try await alone.run(send: { _ in throw WriteFailed() }, next: { nil }, reject: { _ in })
        }
        var closed = Self.machine(site: 1)
        let outcome = try await closed.run(send: { _ in }, next: { nil }, reject: { _ in })
        #expect(outcome == .closed)
    }

    @Test func aKeyOnOneSideOnlyIsRefused() {
        var a = Self.machine(site: 1, key: Self.key), b = Self.machine(site: 2, key: nil)
        let (endA, endB) = Self.run(&a, &b)
        #expect(Self.failure(endA)?.message == "mesh key mismatch: this mesh requires a key and the peer sent no proof")
        #expect(Self.failure(endB)?.message == "mesh key mismatch: the peer proves a mesh key, but this node has none")
    }

    @Test func disjointVersionsAreRefused() {
        var a = Self.machine(site: 1, versions: 1...1), b = Self.machine(site: 2, versions: 2...3)
        let (endA, _) = Self.run(&a, &b)
        let error = Self.failure(endA)
        #expect(error?.code == .unsupportedVersion)
        #expect(error?.message == "no common protocol version: the peer speaks 2–3, this node speaks 1–1")
    }

    @Test func overlappingVersionsAgreeOnTheHighestCommon() {
        var a = Self.machine(site: 1, versions: 1...2), b = Self.machine(site: 2, versions: 1...3)
        guard case .established(let identity)? = Self.run(&a, &b).a else {
            Issue.record("expected established")
            return
        }
        #expect(identity.version == 2)
    }

    /// Peers sync at version 2 (manifests); an admin client may still speak version 1.
    @Test func aVersionOnePeerIsRefusedButAVersionOneAdminIsServed() {
        var a = Self.machine(site: 1), old = Self.machine(site: 2, versions: 1...1)
        let (endA, endOld) = Self.run(&a, &old)
        #expect(Self.failure(endA)?.code == .unsupportedVersion)
        #expect(
            Self.failure(endA)?.message
                == "peers sync at protocol version 2 or later (transaction manifests); the peer speaks 1–1")
        #expect(Self.failure(endOld) != nil, "the old side is told, and never reaches a session")
        var node = Self.machine(site: 1), admin = Self.machine(site: 0, mesh: "", role: .admin, versions: 1...1)
        guard case .established(let client)? = Self.run(&node, &admin).a else {
            Issue.record("expected the admin client to be served")
            return
        }
        #expect(client.role == .admin && client.version == 1)
    }

    @Test func differentMeshesAreRefused() {
        var a = Self.machine(site: 1, mesh: "red"), b = Self.machine(site: 2, mesh: "blue")
        let error = Self.failure(Self.run(&a, &b).a)
        #expect(error?.code == .meshMismatch)
        #expect(error?.message == "mesh name mismatch: the peer is in mesh 'blue', this node is in mesh 'red'")
        #expect(error?.peer == SiteID(2), "a refusal after the Hello names the peer, for the log")
    }

    @Test func anAdminClientNeedsNoMeshNameButDoesNeedTheKey() {
        var node = Self.machine(site: 1, mesh: "red", key: Self.key)
        var cli = Self.machine(site: 0, mesh: "", key: Self.key, role: .admin)
        let ends = Self.run(&node, &cli)
        guard case .established(let identity)? = ends.a else {
            Issue.record("expected established, got \(String(describing: ends.a))")
            return
        }
        #expect(identity.role == .admin)
        var node2 = Self.machine(site: 1, mesh: "red", key: Self.key)
        var keyless = Self.machine(site: 0, mesh: "", key: nil, role: .admin)
        #expect(Self.failure(Self.run(&node2, &keyless).a)?.code == .meshKeyMismatch)
    }

    static let adminKey = Array("an admin key, not the mesh one".utf8)

    static func node(meshKey: [UInt8]? = nil, adminKey: [UInt8]? = nil, loopback: Bool) -> HandshakeStateMachine {
        HandshakeStateMachine(
            configuration: .init(
                siteID: SiteID(1), nodeName: "n1", meshName: "default", meshKey: meshKey, adminKey: adminKey,
                acceptsKeylessAdmin: loopback))
    }

    /// PROTOCOL.md §10: with no key at all, admin clients are served from loopback only.
    @Test func aKeylessNodeServesAdminClientsFromLoopbackOnly() {
        var local = Self.node(loopback: true), cli = Self.machine(site: 0, mesh: "", role: .admin)
        guard case .established? = Self.run(&local, &cli).a else {
            Issue.record("a loopback admin client of a keyless node is served")
            return
        }
        var remote = Self.node(loopback: false), remoteCLI = Self.machine(site: 0, mesh: "", role: .admin)
        let ends = Self.run(&remote, &remoteCLI)
        #expect(Self.failure(ends.a)?.code == .meshKeyMismatch)
        #expect(Self.failure(ends.a)?.message.contains("--admin-key-file or --mesh-key-file") == true)
        #expect(Self.failure(ends.b)?.fromPeer == true, "the client is told why")
        // Peers are not admin clients: a keyless node still syncs with peers from anywhere.
        var open = Self.node(loopback: false), peer = Self.machine(site: 2)
        guard case .established? = Self.run(&open, &peer).a else {
            Issue.record("a peer beyond loopback syncs with a keyless node")
            return
        }
    }

    /// With a key, every admin client proves it, from loopback too.
    @Test(arguments: [true, false])
    func aNodeWithAKeyServesAdminClientsThatProveIt(loopback: Bool) {
        var node = Self.node(meshKey: Self.key, loopback: loopback), cli = Self.machine(site: 0, mesh: "", key: Self.key, role: .admin)
        guard case .established? = Self.run(&node, &cli).a else {
            Issue.record("an admin client proving the mesh key is served")
            return
        }
        var node2 = Self.node(meshKey: Self.key, loopback: loopback), keyless = Self.machine(site: 0, mesh: "", role: .admin)
        #expect(Self.failure(Self.run(&node2, &keyless).a)?.code == .meshKeyMismatch)
    }

    /// An admin key replaces the mesh key for admin clients, both ways; peers still prove the mesh key.
    @Test func anAdminKeyIsWhatAdminClientsProve() {
        var node = Self.node(meshKey: Self.key, adminKey: Self.adminKey, loopback: false)
        var cli = Self.machine(site: 0, mesh: "", key: Self.adminKey, role: .admin)
        let ends = Self.run(&node, &cli)
        guard case .established? = ends.a, case .established? = ends.b else {
            Issue.record("the admin key is accepted, and the node proves it back: \(String(describing: ends))")
            return
        }
        var node2 = Self.node(meshKey: Self.key, adminKey: Self.adminKey, loopback: true)
        var meshCLI = Self.machine(site: 0, mesh: "", key: Self.key, role: .admin)
        #expect(Self.failure(Self.run(&node2, &meshCLI).a)?.code == .meshKeyMismatch, "the mesh key is not the admin key")
        var node3 = Self.node(meshKey: Self.key, adminKey: Self.adminKey, loopback: false)
        var peer = Self.machine(site: 2, key: Self.key)
        guard case .established? = Self.run(&node3, &peer).a else {
            Issue.record("peers prove the mesh key")
            return
        }
        // An admin key alone: admin clients beyond loopback prove it, and need nothing else.
        var adminOnly = Self.node(adminKey: Self.adminKey, loopback: false)
        var adminCLI = Self.machine(site: 0, mesh: "", key: Self.adminKey, role: .admin)
        guard case .established? = Self.run(&adminOnly, &adminCLI).a else {
            Issue.record("an admin key alone serves admin clients that prove it")
            return
        }
    }

    @Test func aNodeRefusesItself() {
        var a = Self.machine(site: 7), b = Self.machine(site: 7)
        #expect(Self.failure(Self.run(&a, &b).a)?.code == .duplicateSession)
    }

    @Test func framesOutOfOrderAreProtocolViolations() {
        var a = Self.machine(site: 1)
        _ = a.start()
        let actions = a.receive(.ack(Shoal_V1_Ack()))
        #expect(actions == [.fail(SyncError(.protocolViolation, "unexpected Ack frame during the handshake"))])
        var b = Self.machine(site: 1)
        _ = b.start()
        #expect(Self.failure(b.receive(.proof(Shoal_V1_Proof())).first)?.code == .protocolViolation, "Proof before Hello")
    }

    @Test func aReplayedProofFromAnotherConnectionFails() {
        // The proof binds both nonces: one computed for another connection's nonce is useless here.
        var a = Self.machine(site: 1, key: Self.key)
        guard case .send(.hello)? = a.start().first else {
            Issue.record("expected a Hello")
            return
        }
        var hello = Shoal_V1_Hello()
        hello.minVersion = 1
        hello.maxVersion = 2
        hello.siteID = 2
        hello.meshName = "default"
        hello.nonce = .init(repeating: 9, count: 32)
        _ = a.receive(.hello(hello))
        var proof = Shoal_V1_Proof()
        proof.mac = .init(
            HandshakeStateMachine.mac(
                key: Self.key, receiverNonce: [UInt8](repeating: 1, count: 32), senderNonce: [UInt8](repeating: 9, count: 32),
                sender: SiteID(2)))
        #expect(Self.failure(a.receive(.proof(proof)).first)?.code == .meshKeyMismatch)
    }

    /// PROTOCOL.md §15.3, worked out: the MAC a sender computes.
    @Test func theWorkedProofExampleMatchesTheSpec() {
        let mac = HandshakeStateMachine.mac(
            key: Self.key, receiverNonce: [UInt8](repeating: 1, count: 32), senderNonce: [UInt8](repeating: 9, count: 32),
            sender: SiteID(2))
        #expect(mac == [
            0x52, 0xee, 0x5f, 0xb2, 0xb5, 0x78, 0xd9, 0x01, 0x2d, 0xd0, 0x48, 0xef, 0x65, 0xb7, 0x68, 0x9d,
            0x0c, 0xf4, 0x56, 0x73, 0x4f, 0x46, 0x66, 0x81, 0x0f, 0x74, 0x1e, 0x1f, 0xbd, 0x62, 0xe5, 0x5b,
        ])
    }
}

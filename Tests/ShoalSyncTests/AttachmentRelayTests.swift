import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
@testable import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// Attachment bytes fetched through peers that do not hold them (PROTOCOL.md §8.7,
/// "Relaying"): the route rule on its own, then nodes in one process.
@Suite struct AttachmentRelayTests {
    static let (a, b, c, d) = (SiteID(0xA), SiteID(0xB), SiteID(0xC), SiteID(0xD))

    struct RouteCase: Sendable, CustomTestStringConvertible {
        var via: [UInt64]
        var asker: SiteID
        var connected: [SiteID]
        var expected: AttachmentRoute.Decision
        var testDescription: String { "via \(via.map { String($0, radix: 16) }) from \(asker)" }
    }

    /// B decides, with A, C and D connected.
    @Test(arguments: [
        // A node that predates `via` names nothing: its own site is the path.
        RouteCase(via: [], asker: c, connected: [a, c], expected: .relay(via: [c, b], peers: [a])),
        RouteCase(via: [0xC], asker: c, connected: [a, c, d], expected: .relay(via: [c, b], peers: [a, d])),
        // Peers on the path are not asked again.
        RouteCase(via: [0xC, 0xD], asker: d, connected: [a, c, d], expected: .relay(via: [c, d, b], peers: [a])),
        // A path of four is long enough.
        RouteCase(via: [0x1, 0x2, 0x3, 0xC], asker: c, connected: [a, c], expected: .stop),
        RouteCase(via: [0x1, 0x2, 0xC], asker: c, connected: [a, c], expected: .relay(via: [SiteID(1), SiteID(2), c, b], peers: [a])),
        // Nobody off the path.
        RouteCase(via: [0xA, 0xC], asker: c, connected: [a, c], expected: .stop),
        // Back at a node it passed: a cycle.
        RouteCase(via: [0xB, 0xA], asker: a, connected: [a, c], expected: .cycle),
    ])
    func aRequestGoesOnlyWhereItHasNotBeen(_ route: RouteCase) {
        let decision = AttachmentRoute(via: route.via.map(SiteID.init), asker: route.asker)
            .decide(local: Self.b, connected: route.connected, maximumPath: SyncEngine.attachmentRelayPath)
        #expect(decision == route.expected)
    }

    /// Waits long enough that a busy machine (the whole suite on two cores has kept a
    /// task from its turn for more than 15 s) never makes a relay give up: a fetch that
    /// ends early ended for its own reasons.
    static func patient(_ configuration: inout SyncConfiguration) {
        configuration.attachmentChunkWait = .seconds(120)
        configuration.attachmentRelayWait = .seconds(100)
    }

    static func photos(_ node: TestNode) async throws -> Int {
        try await node.store.execute("SELECT * FROM photos").items.count
    }

    /// A – B – C, where only A holds the bytes and B subscribes to boats only: the
    /// document naming the attachment reaches C through B, and so do the bytes, in
    /// chunks of 1 MiB as from a direct peer. B keeps what it carried.
    @Test func aNodeFetchesAnAttachmentThroughAPeerThatNeverHeldIt() async throws {
        let a = try TestNode(name: "a", configure: Self.patient)
        let b = try TestNode(name: "b", subscriptions: ["SELECT * FROM boats"], configure: Self.patient)
        let c = try TestNode(name: "c", subscriptions: ["SELECT * FROM photos"], configure: Self.patient)
        defer { [a, b, c].forEach { $0.remove() } }
        let bytes = (0..<2_500_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 9) }
        let token = try await a.store.putAttachment(bytes, metadata: ["name": "far.bin"])
        _ = try await a.store.execute(
            "INSERT INTO COLLECTION photos (file ATTACHMENT) DOCUMENTS ({'_id': 'p', 'file': :t})", arguments: ["t": token.value])
        try await InProcessMesh.withLink(b.sync, a.sync) { () async throws in
            try await InProcessMesh.withLink(c.sync, b.sync) { () async throws in
                #expect(try await InProcessMesh.eventually { try await Self.photos(c) == 1 })
                #expect(try await b.store.attachmentLength(hash: token.hash) == nil, "B never fetched the bytes")
                let steps = Locked<[Int]>([])
                let length = try await c.sync.fetchAttachment(hash: token.hash) { done, _ in steps.withLock { $0.append(done) } }
                #expect(length == bytes.count)
                #expect(steps.withLock { $0 } == [1 << 20, 2 << 20, bytes.count], "three chunks, each passed on as B stored it")
                #expect(try await c.store.attachmentChunk(hash: token.hash, offset: 0, maximum: .max)?.bytes == bytes)
                #expect(
                    try await InProcessMesh.eventually { try await b.store.attachmentLength(hash: token.hash) == bytes.count },
                    "the relay holds what it carried")
            }
        }
    }

    /// A triangle A – B – C with D behind A. Bytes only D holds reach C across the
    /// triangle; bytes nobody holds fail at once (milliseconds; 60 s are allowed for a busy
    /// machine), although every node would wait 100 s for a relayed answer: no request
    /// goes round the cycle or waits on itself.
    @Test func inACycleAFetchEndsAtOnceWhenNobodyHoldsTheBytes() async throws {
        let nodes = try ["a", "b", "c", "d"].map { try TestNode(name: $0, configure: Self.patient) }
        let (a, b, c, d) = (nodes[0], nodes[1], nodes[2], nodes[3])
        defer { nodes.forEach { $0.remove() } }
        let token = try await d.store.putAttachment(Array("held beyond the cycle".utf8))
        try await MeshLineTests.withLinks([(a, b), (b, c), (c, a), (d, a)][...]) { () async throws in
            #expect(await InProcessMesh.eventually { c.sync.peers().filter { $0.state == "connected" }.count == 2 })
            #expect(await InProcessMesh.eventually { a.sync.peers().filter { $0.state == "connected" }.count == 3 })
            let nobody = String(repeating: "5", count: 64)
            let started = ContinuousClock.now
            await #expect {
                try await c.sync.fetchAttachment(hash: nobody)
            } throws: { error in
                (error as? ShoalError)?.message.contains("none of the connected peers") == true
            }
            let took = ContinuousClock.now - started
            print("a fetch nobody can serve ended after \(took) in a triangle")
            #expect(took < .seconds(60), "\(took)")
            #expect(try await c.sync.fetchAttachment(hash: token.hash) == token.length)
            for node in [a, b, c] {
                #expect(try await node.store.attachmentLength(hash: nobody) == nil)
            }
        }
    }

    /// B's only upstream peer takes AttachmentRequests and never answers. C and D ask
    /// B for the same bytes at once: B asks upstream once, and answers both "not found"
    /// within its relay wait (1 s), long before their own wait (120 s) would end.
    @Test func aRelayAsksUpstreamOnceAndAnswersWithinItsWait() async throws {
        let b = try TestNode(name: "b") { $0.attachmentRelayWait = .seconds(1) }
        let c = try TestNode(name: "c", configure: Self.patient), d = try TestNode(name: "d", configure: Self.patient)
        defer { [b, c, d].forEach { $0.remove() } }
        let silent = SiteID(0x5111e7)
        let hash = String(repeating: "7", count: 64)
        let received = Locked<[Shoal_V1_AttachmentRequest]>([])
        try await Self.withSilentPeer(silent, of: b, received: received) { () async throws in
            try await MeshLineTests.withLinks([(c, b), (d, b)][...]) { () async throws in
                #expect(await InProcessMesh.eventually { b.sync.peers().filter { $0.state == "connected" }.count == 3 })
                let started = ContinuousClock.now
                let outcomes = await withTaskGroup(of: Bool.self) { group in
                    for node in [c, d] {
                        group.addTask { (try? await node.sync.fetchAttachment(hash: hash)) == nil }
                    }
                    return await group.reduce(into: [Bool]()) { $0.append($1) }
                }
                let took = ContinuousClock.now - started
                print("two fetches through a relay whose upstream never answers ended after \(took)")
                #expect(outcomes == [true, true], "both fail")
                #expect(took < .seconds(60), "\(took)")
                // B answers at the end of its wait whether or not its own request has
                // left yet: on a busy machine it may reach the silent peer afterwards.
                #expect(await InProcessMesh.eventually { received.withLock { !$0.isEmpty } })
                let asked = received.withLock { $0 }
                #expect(asked.count == 1, "one upstream request for two askers: \(asked)")
                #expect(asked.first?.hash == hash)
                #expect(asked.first.map { Array($0.via.suffix(1)) } == [b.sync.siteID.rawValue], "B names itself last")
                #expect(asked.first.map { $0.via.count } == 2)
            }
        }
    }

    /// Runs `body` while a peer with site `site` is connected to `node`: it completes
    /// a real handshake, then keeps every AttachmentRequest it receives in `received`
    /// and answers nothing but Pings (without the Pongs, `node` closed it as silent
    /// after its idle timeout, and on a loaded machine that came before the fetches).
    static func withSilentPeer(
        _ site: SiteID, of node: TestNode, received: Locked<[Shoal_V1_AttachmentRequest]>, _ body: @Sendable () async throws -> Void
    ) async throws {
        let connection = InMemoryConnection()
        let codec = MessageCodec()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                _ = try? await node.sync.serve(
                    inbound: connection.b.inbound, transport: connection.b.transport, direction: .inbound, remoteAddress: "memory:silent")
            }
            group.addTask {
                var handshake = HandshakeStateMachine(
                    configuration: .init(siteID: site, nodeName: "silent", meshName: "default", meshKey: nil))
                var inbound = connection.a.inbound.makeAsyncIterator()
                for case .send(let m) in handshake.start() { try await connection.a.transport.write(codec.encode(m)) }
                while !handshake.isEstablished, let frame = await inbound.next() {
                    for case .send(let m) in handshake.receive(try codec.decode(frame)) {
                        try await connection.a.transport.write(codec.encode(m))
                    }
                }
                while let frame = await inbound.next() {
                    switch try? codec.decode(frame) {
                    case .attachmentRequest(let request)?: received.withLock { $0.append(request) }
                    case .ping(let ping)?: try await connection.a.transport.write(codec.encode(.pong(ping)))
                    default: break
                    }
                }
            }
            defer { group.cancelAll() }
            try await body()
            await connection.a.transport.close()
        }
    }
}

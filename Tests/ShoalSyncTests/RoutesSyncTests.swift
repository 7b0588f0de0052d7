import NIOCore
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import ShoalWire
import Testing

/// Routes between nodes in one process (PROTOCOL.md §8.11, docs/ROUTES.md): in a mesh
/// with cycles each change reaches each node about once, a node that joins takes its
/// history about once, and when the link that carried an origin closes, the others take
/// over with nothing lost. `ProcessRoutesTests` does the same with `shoal` processes,
/// and a link that stays open but carries nothing.
@Suite struct RoutesSyncTests {
    static let query = MeshLineTests.query

    /// New deltas and all deltas received by `node` over every peer it met.
    static func counts(_ node: TestNode) -> (received: UInt64, duplicate: UInt64) {
        let traffic = node.sync.traffic()
        return (traffic.values.reduce(0) { $0 + $1.deltasIn }, traffic.values.reduce(0) { $0 + $1.deltasDuplicate })
    }

    static func insert(_ node: TestNode, _ keys: Range<Int>, prefix: String) async throws {
        for k in keys {
            _ = try await node.store.execute(
                "INSERT INTO items DOCUMENTS ({'_id': :k, 'v': :v, 'w': 'x'})",
                arguments: ["k": .string("\(prefix)\(k)"), "v": .int(Int64(k))])
        }
    }

    static func holds(_ node: TestNode, _ count: Int) async throws -> Bool {
        try await node.store.execute("SELECT * FROM items").items.count == count
    }

    /// A, B and C all linked; C's link to A carries A's writes. When it closes, B, which
    /// only offered them, is asked for what it offers and carries A from then on.
    @Test func whenTheLinkThatCarriedAnOriginClosesAnotherTakesOver() async throws {
        // Pings every second: a link's own origin moves to it once the first link vouched C caught up.
        let nodes = try ["a", "b", "c"].map {
            try TestNode(name: $0, subscriptions: [Self.query]) { $0.keepaliveInterval = .seconds(1) }
        }
        defer { nodes.forEach { $0.remove() } }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        try await MeshLineTests.withLinks([(b, a), (c, b)][...]) {
            try await InProcessMesh.withLink(c.sync, a.sync) {
                // Once the first link to connect vouched C caught up, A comes from A's link alone.
                @Sendable func carries(_ link: TestNode, _ origin: TestNode) -> Bool {
                    c.sync.peers().first { $0.siteID == link.sync.siteID }?.routesAsked
                        .flatMap(RouteTable.Routes.init)?.isEager(origin.sync.siteID) == true
                }
                #expect(await InProcessMesh.eventually { carries(a, a) && !carries(b, a) },
                    "\(c.sync.peers().map { "\($0.name): \($0.routesAsked ?? "-")" })")
                try await Self.insert(a, 0..<20, prefix: "k")
                #expect(try await InProcessMesh.eventually { try await Self.holds(c, 20) })
            }
            // C – A is gone: A's next writes reach C through B, asked after B's offers.
            try await Self.insert(a, 20..<40, prefix: "k")
            #expect(try await InProcessMesh.eventually { try await Self.holds(c, 40) })
            let fromB = try #require(c.sync.peers().first { $0.siteID == b.sync.siteID })
            #expect(fromB.routesAsked.flatMap(RouteTable.Routes.init)?.isEager(a.sync.siteID) == true,
                "A is eager on B now: \(fromB.routesAsked ?? "none")")
            let (received, duplicate) = Self.counts(c)
            #expect(received - duplicate == 40 * 3, "each delta new once at C: \(received) received, \(duplicate) held already")
        }
    }

    /// A, B and C all linked; C's link to A carries A's writes. A writes one transaction
    /// of 600 documents over many batches, and C – A breaks before the third batch of it:
    /// C takes the transaction through B (which offered it), and a reader on C never
    /// sees it in part. `ProcessRoutesTests` cuts a TCP link the same way.
    @Test func aLinkCutPartWayThroughALargeTransactionLeavesItWhole() async throws {
        // A page of one log row (a hundred documents): the transaction spans six batches.
        let nodes = try ["a", "b", "c"].map {
            try TestNode(name: $0, subscriptions: [Self.query]) { $0.keepaliveInterval = .seconds(1); $0.batchSize = 1 }
        }
        defer { nodes.forEach { $0.remove() } }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        let armed = Locked<Int?>(nil)
        let connection = InMemoryConnection(cutBeforeFromB: { frame in
            guard frame.type == MessageType.deltaBatch.rawValue else { return false }
            return armed.withLock { sent in
                guard let count = sent else { return false }
                sent = count + 1
                return count + 1 == 3
            }
        })
        try await MeshLineTests.withLinks([(b, a), (c, b)][...]) {
            try await InProcessMesh.withLink(c.sync, a.sync, connection: connection) {
                #expect(await InProcessMesh.eventually {
                    c.sync.peers().first { $0.siteID == a.sync.siteID }?.routesAsked
                        .flatMap(RouteTable.Routes.init)?.isEager(a.sync.siteID) == true
                        && c.sync.peers().first { $0.siteID == b.sync.siteID }?.routesAsked
                            .flatMap(RouteTable.Routes.init)?.isEager(a.sync.siteID) == false
                })
                let seen = Locked<Set<Int>>([])
                let reading = Task {
                    while !Task.isCancelled {
                        let count = try await c.store.execute("SELECT * FROM items").items.count
                        seen.withLock { _ = $0.insert(count) }
                        try await Task.sleep(for: .milliseconds(5))
                    }
                }
                armed.withLock { $0 = 0 }
                let docs = (0..<600).map { i -> Value in ["_id": .string("big-\(i)"), "v": .int(Int64(i))] }
                _ = try await a.store.execute("INSERT INTO items DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
                #expect(try await InProcessMesh.eventually { try await Self.holds(c, 600) })
                reading.cancel()
                _ = await reading.result
                #expect(armed.withLock { $0 ?? 0 } >= 3, "the link was cut part way through")
                #expect(seen.withLock { $0 }.isSubset(of: [0, 600]), "seen on C: \(seen.withLock { $0 }.sorted())")
                #expect(!c.sync.isConnected(to: a.sync.siteID))
            }
        }
    }

    /// A, B and C with pages of one log row, whose coverage wait never ends within a
    /// test: only an offer, or the rest of the pieces, can make a transaction whole.
    static func nodesThatNeverApplyInPart() throws -> [TestNode] {
        try ["a", "b", "c"].map {
            try TestNode(name: $0, subscriptions: [Self.query]) {
                $0.keepaliveInterval = .seconds(1)
                $0.batchSize = 1
                $0.inbound.coverage.maximumWait = .seconds(600)
            }
        }
    }

    /// A link whose accepting side, once `armed` is set to 0, waits at its third
    /// DeltaBatch until `offered` is above 0, then breaks there.
    static func cutOnceOffered(armed: Locked<Int?>, offered: Locked<Int>) -> InMemoryConnection {
        InMemoryConnection(cutBeforeFromB: { frame in
            guard frame.type == MessageType.deltaBatch.rawValue else { return false }
            let third = armed.withLock { sent -> Bool in
                guard let count = sent else { return false }
                sent = count + 1
                return count + 1 == 3
            }
            guard third else { return false }
            _ = await InProcessMesh.eventually { offered.withLock { $0 } > 0 }
            return true
        })
    }

    /// As above, but B offers C the transaction before the link is cut: C, part way
    /// through its pieces, is waiting for the rest when the offer comes. The offer is
    /// noted all the same, and asked of B once A's link closes; before, a waiting
    /// transaction's offer was taken as held, so C's cursor on B went past it and only
    /// the coverage wait ended the wait, applying 256 of 600 documents for good (seen
    /// once in the whole suite, where B can be faster than A's link to C).
    @Test func aTransactionOfferedWhileItsPiecesStreamIsAskedOfTheOfferWhenTheirLinkCloses() async throws {
        let nodes = try Self.nodesThatNeverApplyInPart()
        defer { nodes.forEach { $0.remove() } }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        let aSite = a.sync.siteID
        // What B offered C of A's, seen on the wire.
        let offeredToC = Locked(0)
        let codec = MessageCodec(limits: .default)
        let fromB = InMemoryConnection(cutBeforeFromB: { frame in
            guard frame.type == MessageType.deltaBatch.rawValue, let (_, payload) = try? codec.payload(frame),
                let batch = try? DeltaBatchReader(payload: Array(payload.readableBytesView))
            else { return false }
            let offers = batch.header.offered.count { $0.id.origin == aSite }
            offeredToC.withLock { $0 += offers }
            return false
        })
        // A's third batch to C waits until B has offered C the transaction, then the link breaks.
        let armed = Locked<Int?>(nil)
        let fromA = Self.cutOnceOffered(armed: armed, offered: offeredToC)
        try await InProcessMesh.withLink(b.sync, a.sync) {
            try await InProcessMesh.withLink(c.sync, b.sync, connection: fromB) {
                try await InProcessMesh.withLink(c.sync, a.sync, connection: fromA) {
                    #expect(await InProcessMesh.eventually {
                        c.sync.peers().first { $0.siteID == aSite }?.routesAsked
                            .flatMap(RouteTable.Routes.init)?.isEager(aSite) == true
                            && c.sync.peers().first { $0.siteID == b.sync.siteID }?.routesAsked
                                .flatMap(RouteTable.Routes.init)?.isEager(aSite) == false
                    })
                    armed.withLock { $0 = 0 }
                    let docs = (0..<600).map { i -> Value in ["_id": .string("big-\(i)"), "v": .int(Int64(i))] }
                    _ = try await a.store.execute("INSERT INTO items DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
                    #expect(try await InProcessMesh.eventually { try await Self.holds(c, 600) })
                    #expect(offeredToC.withLock { $0 } > 0, "B offered it while C was taking its pieces from A")
                    #expect(armed.withLock { $0 ?? 0 } >= 3, "the link was cut part way through")
                    #expect(!c.sync.isConnected(to: aSite))
                }
            }
        }
    }

    /// As above, but B answers C's ask with nothing, as a publisher whose log went
    /// back since its offer would: the offer is resolved by that answer, not asked
    /// again every `graftAfter` for as long as the link stays open (nor C's cursor on B
    /// held before it).
    @Test func anOfferWhoseLinkAnswersThatItHoldsNothingIsNotAskedAgain() async throws {
        let nodes = try Self.nodesThatNeverApplyInPart()
        defer { nodes.forEach { $0.remove() } }
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        let aSite = a.sync.siteID
        let codec = MessageCodec(limits: .default)
        let offeredToC = Locked(0)
        let asked = Locked(0)
        // When B's first answer went to C, and the asks that came more than one
        // `graftAfter` (2 s) after it: an ask in flight, or one a loaded machine's slow
        // delivery of the answer let the timer make, is not what this tests.
        let answeredAt = Locked<ContinuousClock.Instant?>(nil)
        let askedLater = Locked(0)
        let fromB = InMemoryConnection(
            observeFromA: { frame in
                guard frame.type == MessageType.transactionRequest.rawValue,
                    case .transactionRequest(let request)? = try? codec.decode(frame), request.originSite == aSite.rawValue
                else { return }
                asked.withLock { $0 += 1 }
                if let answered = answeredAt.withLock({ $0 }), ContinuousClock.now - answered > .seconds(2) {
                    askedLater.withLock { $0 += 1 }
                }
            },
            cutBeforeFromB: { frame in
                guard frame.type == MessageType.deltaBatch.rawValue, let (_, payload) = try? codec.payload(frame),
                    let batch = try? DeltaBatchReader(payload: Array(payload.readableBytesView))
                else { return false }
                offeredToC.withLock { $0 += batch.header.offered.count { $0.id.origin == aSite } }
                return false
            },
            rewriteFromB: { frame in
                guard frame.type == MessageType.transactionPieces.rawValue, case .transactionPieces(let answer)? = try? codec.decode(frame)
                else { return frame }
                var nothing = Shoal_V1_TransactionPieces()
                nothing.requestID = answer.requestID
                nothing.found = false
                answeredAt.withLock { $0 = $0 ?? .now }
                return codec.encode(.transactionPieces(nothing))
            })
        let armed = Locked<Int?>(nil)
        let fromA = Self.cutOnceOffered(armed: armed, offered: offeredToC)
        try await InProcessMesh.withLink(b.sync, a.sync) {
            try await InProcessMesh.withLink(c.sync, b.sync, connection: fromB) {
                try await InProcessMesh.withLink(c.sync, a.sync, connection: fromA) {
                    #expect(await InProcessMesh.eventually {
                        c.sync.peers().first { $0.siteID == b.sync.siteID }?.routesAsked
                            .flatMap(RouteTable.Routes.init)?.isEager(aSite) == false
                    })
                    armed.withLock { $0 = 0 }
                    let docs = (0..<600).map { i -> Value in ["_id": .string("big-\(i)"), "v": .int(Int64(i))] }
                    _ = try await a.store.execute("INSERT INTO items DOCUMENTS (:docs)", arguments: ["docs": .array(docs)])
                    #expect(await InProcessMesh.eventually { !c.sync.isConnected(to: aSite) && asked.withLock { $0 } >= 1 })
                }
                // Three times graftAfter: each would have asked again.
                try await Task.sleep(for: .seconds(6))
                #expect(answeredAt.withLock { $0 } != nil, "B answered")
                #expect(askedLater.withLock { $0 } == 0, "asked of B \(asked.withLock { $0 }) times, \(askedLater.withLock { $0 }) of them after its answer")
            }
        }
    }

    /// Three nodes that wrote their own documents; a fourth joins linked to all three
    /// and takes the history about once, not once per neighbour.
    @Test func aNodeThatJoinsTakesTheHistoryAboutOnce() async throws {
        let nodes = try ["a", "b", "c", "d"].map { try TestNode(name: $0, subscriptions: [Self.query]) }
        defer { nodes.forEach { $0.remove() } }
        let (a, b, c, d) = (nodes[0], nodes[1], nodes[2], nodes[3])
        try await MeshLineTests.withLinks([(b, a), (c, a), (c, b)][...]) {
            for (i, node) in [a, b, c].enumerated() { try await Self.insert(node, 0..<30, prefix: "n\(i)-") }
            #expect(try await InProcessMesh.eventually {
                for node in [a, b, c] where try await !Self.holds(node, 90) { return false }
                return true
            })
            try await MeshLineTests.withLinks([(d, a), (d, b), (d, c)][...]) {
                #expect(try await InProcessMesh.eventually { try await Self.holds(d, 90) })
                try await Task.sleep(for: .milliseconds(500))
                let (received, duplicate) = Self.counts(d)
                let minimum = UInt64(90 * 3)
                print("a node joining three: received \(received) deltas, \(duplicate) held already, minimum \(minimum)")
                #expect(received - duplicate == minimum)
                // Without routes each neighbour streams the whole history: 3 times the
                // minimum. With them, A's pages sent before B's and C's links told it to
                // leave their origins out may repeat those: at most 2 times.
                #expect(received <= minimum * 2, "\(received) deltas received for \(minimum) new")
            }
        }
    }
}

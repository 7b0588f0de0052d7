import ShoalCRDT
import ShoalSync
import ShoalStorage
import ShoalStore
import ShoalTesting
import Testing

/// A node that widens its subscriptions gets the parts of a transaction it applied
/// without them, also when the only link eager for the transaction's origin leads to a
/// node that lacks them too and will never get them, and the parts are on a link lazy
/// for that origin (PROTOCOL.md §8.11, "Offers"; docs/RELIABILITY.md).
@Suite struct WideningSyncTests {
    static let cars = "SELECT * FROM cars"
    static let boats = "SELECT * FROM boats"

    static func count(_ node: TestNode, _ query: String) async throws -> Int {
        try await node.store.execute(query).items.count
    }

    /// Whether `node` asks its connected peer `link` to carry `origin`'s transactions in
    /// full; nil when no session with `link` is connected (or it has no routes).
    static func eager(_ node: TestNode, on link: TestNode, for origin: TestNode) -> Bool? {
        let peer = node.sync.peers().first { $0.siteID == link.sync.siteID && $0.state == "connected" }
        return peer?.routesAsked.flatMap(RouteTable.Routes.init)?.isEager(origin.sync.siteID)
    }

    /// `node`'s routes, offers noted and grafts, per peer: what a failure shows.
    static func describe(_ node: TestNode) -> String {
        node.sync.peers().map { peer in
            "\(peer.name) (\(peer.state)): asks \(peer.routesAsked ?? "-"), offers \(peer.offersReceived), grafts \(peer.grafts)"
        }.joined(separator: "; ")
    }

    /// A writes one transaction T: a car and a boat. Nobody subscribes to boats.
    ///
    /// 1. X (cars) meets A alone and applies T without its boat (rest: boats not covered
    ///    by {cars}); the link closes.
    /// 2. E (cars) and X link: each is the other's first link, so each asks the other
    ///    for every origin (eager by default). E applies T from X, without its boat.
    /// 3. N (cars) links to A (its first link: A eager there), then to X and to E: on both
    ///    N is lazy by default but for N's own origin. N offers T; both applied it, so
    ///    neither notes the offer. For A: X is eager on E only, E is eager on X only.
    /// 4. X subscribes to boats. N carries X's interest, so A streams T to N again for
    ///    the wider set and N logs the boat (a late piece of a transaction it applied),
    ///    and offers that new run to X and E: applied, so not noted. E lacks the boat, and
    ///    its only link eager for A is X; X's only link eager for A is E. Nothing asks N.
    ///
    /// X must end with the boat (the only node that holds it beside A, which X is not
    /// linked to, is N, lazy for A on X).
    @Test func aWidenedNodeGetsThePartsWhenOnlyALazyLinkHoldsThem() async throws {
        let a = try TestNode(name: "a")
        let x = try TestNode(name: "x", subscriptions: [Self.cars])
        let e = try TestNode(name: "e", subscriptions: [Self.cars])
        let n = try TestNode(name: "n", subscriptions: [Self.cars])
        defer { [a, x, e, n].forEach { $0.remove() } }
        let written = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1'}); INSERT INTO boats DOCUMENTS ({'_id': 'b1'})")
        let t = try #require(written.transactionID)

        // 1. X applies T from A, without its boat.
        try await InProcessMesh.withLink(x.sync, a.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.count(x, Self.cars) == 1 })
        }
        #expect(try await Self.count(x, Self.boats) == 0)

        // 2. E – X, the first link of each: eager for everything both ways.
        try await InProcessMesh.withLink(e.sync, x.sync) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.count(e, Self.cars) == 1 })
            #expect(try await Self.count(e, Self.boats) == 0)

            // 3. N – A (N's first link), then X – N and E – N: lazy for A on both.
            try await InProcessMesh.withLink(n.sync, a.sync) { () async throws in
                try await InProcessMesh.withLink(x.sync, n.sync) { () async throws in
                    try await InProcessMesh.withLink(e.sync, n.sync) { () async throws in
                        let settled = try await InProcessMesh.eventually {
                            guard try await Self.count(n, Self.cars) == 1 else { return false }
                            return Self.eager(x, on: e, for: a) == true && Self.eager(x, on: n, for: a) == false
                                && Self.eager(e, on: x, for: a) == true && Self.eager(e, on: n, for: a) == false
                        }
                        #expect(settled, "x: \(Self.describe(x)); e: \(Self.describe(e))")

                        // 4. X widens. N carries X's interest and takes the boat from A.
                        try x.sync.subscribe(Self.boats)
                        #expect(
                            try await InProcessMesh.eventually { try await Self.count(n, Self.boats) == 1 },
                            "n relays for x, so a streams T to it again with its boat: \(Self.describe(n))")

                        // The boat is on N, lazy for A on X, and nowhere else X can reach:
                        // X must ask N for it (graftAfter is 2 s; 20 s leaves ample room).
                        let widened = try await InProcessMesh.eventually(timeout: .seconds(20)) {
                            try await Self.count(x, Self.boats) == 1
                        }
                        #expect(widened, "x never got T's boat. x: \(Self.describe(x)); e: \(Self.describe(e))")
                        // What x recorded T left out is settled: a later offer of T is not asked again.
                        let leftOut = try await InProcessMesh.eventually {
                            let rest = try await x.store.storedTransactions([t])[t]?.rest ?? []
                            return !rest.contains { $0.collection == "boats" }
                        }
                        #expect(leftOut, "x still records T's boats as left out")
                    }
                }
            }
        }
    }
}

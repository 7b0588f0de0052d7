import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
@testable import ShoalSync
import ShoalTesting
import Testing

/// Rules enforced where data moves, over an in-memory link: what a peer may not read
/// never leaves, also through a relay, and a transaction written where its sender may
/// not write is refused whole.
@Suite struct AccessSyncTests {
    static let menuOnly = AccessRules(rules: [
        .init(pattern: "till-*", rights: PeerRights(read: .collections(["menu": nil]), write: .collections(["orders"]), admin: .none)),
        .init(pattern: "*", rights: .everything),
    ])

    static func count(_ node: TestNode, _ query: String) async throws -> Int {
        try await node.store.execute(query).items.count
    }

    /// The hub lets tills read the menu only: a till that asks for orders too gets the
    /// menu, and a till behind another till, asking through it, gets no order either.
    @Test func aPeerThatMayReadTheMenuOnlyNeverReceivesAnOrderAlsoThroughARelay() async throws {
        let hub = try TestNode(name: "hub", configure: { $0.accessRules = Self.menuOnly })
        let till = try TestNode(name: "till-1", subscriptions: ["SELECT * FROM menu", "SELECT * FROM orders"])
        let far = try TestNode(name: "till-2", subscriptions: ["SELECT * FROM menu", "SELECT * FROM orders"])
        defer { hub.remove(); till.remove(); far.remove() }
        _ = try await hub.store.execute(
            "INSERT INTO menu DOCUMENTS ({'_id': 'soup'}); INSERT INTO orders DOCUMENTS ({'_id': 'o1', 'dish': 'secret-recipe'})")
        try await InProcessMesh.withLink(till.sync, hub.sync, names: (a: "till-1", b: "hub")) { () async throws in
            try await InProcessMesh.withLink(far.sync, till.sync, names: (a: "till-2", b: "till-1")) { () async throws in
                #expect(try await InProcessMesh.eventually { try await Self.count(far, "SELECT * FROM menu") == 1 })
                _ = try await hub.store.execute(
                    "INSERT INTO menu DOCUMENTS ({'_id': 'bread'}); INSERT INTO orders DOCUMENTS ({'_id': 'o2', 'dish': 'secret-recipe'})")
                #expect(try await InProcessMesh.eventually { try await Self.count(far, "SELECT * FROM menu") == 2 })
                #expect(try await Self.count(till, "SELECT * FROM menu") == 2)
                #expect(try await Self.count(till, "SELECT * FROM orders") == 0)
                #expect(try await Self.count(far, "SELECT * FROM orders") == 0)
                // The hub holds the till to the cut set: status shows what it is sent.
                let seen = hub.sync.registry.snapshots().flatMap { $0.subscriptions.map(\.query) }
                #expect(!seen.isEmpty && seen.allSatisfy { !$0.contains("orders") })
            }
        }
    }

    /// A till may write orders only: its transaction touching staff too is refused
    /// whole by the hub, while its order-only transaction is applied.
    @Test func aTransactionTouchingACollectionItsSenderMayNotWriteIsRefusedWhole() async throws {
        let hub = try TestNode(
            name: "hub", subscriptions: ["SELECT * FROM orders", "SELECT * FROM staff"], configure: { $0.accessRules = Self.menuOnly })
        let till = try TestNode(name: "till-1")
        defer { hub.remove(); till.remove() }
        try await InProcessMesh.withLink(till.sync, hub.sync, names: (a: "till-1", b: "hub")) { () async throws in
            _ = try await till.store.transaction { tx in
                _ = try await tx.execute("INSERT INTO orders DOCUMENTS ({'_id': 'o1'})")
                _ = try await tx.execute("INSERT INTO staff DOCUMENTS ({'_id': 'me', 'pay': 1000000})")
                return .commit
            }
            _ = try await till.store.execute("INSERT INTO orders DOCUMENTS ({'_id': 'o2'})")
            #expect(try await InProcessMesh.eventually { try await Self.count(hub, "SELECT * FROM orders WHERE _id = 'o2'") == 1 })
            #expect(try await Self.count(hub, "SELECT * FROM orders WHERE _id = 'o1'") == 0, "never applied in part")
            #expect(try await Self.count(hub, "SELECT * FROM staff") == 0)
            let refusals = hub.sync.pipeline.status.recentRefusals
            #expect(refusals.count == 1 && refusals.first?.reason.contains("may not write staff") == true)
            // The till is told, in the hub's Ack: its status for the hub says so.
            let told = try await InProcessMesh.eventually {
                till.sync.peers().first { $0.siteID == hub.store.siteID }?.lastError?.contains("may not write staff") == true
            }
            #expect(told, "\(till.sync.peers().map { $0.lastError ?? "none" })")
            let error = till.sync.peers().first { $0.siteID == hub.store.siteID }?.lastError ?? ""
            #expect(error.hasPrefix("it refused this node's piece of transaction \(refusals.first!.id): ") && error.hasSuffix("(PERMISSION_DENIED)"), "\(error)")
        }
    }

    /// New rules take effect for live sessions: the sessions of a peer they change are
    /// closed and start again under them, and a peer that may now read more gets what
    /// was written before as well as what is written after.
    @Test func rulesChangedAtRunTimeTakeEffectAndAWiderReadBringsWhatWasWrittenBefore() async throws {
        let hub = try TestNode(name: "hub", configure: { $0.accessRules = Self.menuOnly })
        let till = try TestNode(name: "till-1", subscriptions: ["SELECT * FROM menu", "SELECT * FROM orders"])
        defer { hub.remove(); till.remove() }
        _ = try await hub.store.execute("INSERT INTO menu DOCUMENTS ({'_id': 'soup'}); INSERT INTO orders DOCUMENTS ({'_id': 'o1'})")
        try await InProcessMesh.withLink(till.sync, hub.sync, redial: true, names: (a: "till-1", b: "hub")) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.count(till, "SELECT * FROM menu") == 1 })
            #expect(try await Self.count(till, "SELECT * FROM orders") == 0)
            let closed = await hub.sync.setAccessRules(AccessRules(rules: [.init(pattern: "*", rights: .everything)]))
            #expect(closed == 1, "the till's session, whose rights changed")
            #expect(try await InProcessMesh.eventually { try await Self.count(till, "SELECT * FROM orders") == 1 })
            _ = try await hub.store.execute("INSERT INTO orders DOCUMENTS ({'_id': 'o2'})")
            #expect(try await InProcessMesh.eventually { try await Self.count(till, "SELECT * FROM orders") == 2 })
            // Rules that change nothing for a peer leave its session alone.
            #expect(await hub.sync.setAccessRules(AccessRules(rules: [.init(pattern: "till-*", rights: .everything)])) == 0)
        }
    }

    /// Rules widened while the hub was stopped: the hub kept what the till was served
    /// under (`ServedReads`, in its directory), so the restarted hub sees the change and
    /// sends the till what it may newly read from the log's start, orders written
    /// before included. Without the file the till resumed from its cursor and never got
    /// them.
    @Test func rulesWidenedWhileTheHubWasStoppedBringWhatWasWrittenBefore() async throws {
        let directory = TemporaryDirectory(prefix: "shoal-hub")
        let file = directory.path + "/served-reads.json"
        let till = try TestNode(name: "till-1", subscriptions: ["SELECT * FROM menu", "SELECT * FROM orders"])
        defer { till.remove(); directory.remove() }
        do {
            let hub = try TestNode(
                name: "hub", directory: directory, configure: { $0.accessRules = Self.menuOnly; $0.servedReadsFile = file })
            _ = try await hub.store.execute("INSERT INTO menu DOCUMENTS ({'_id': 'soup'}); INSERT INTO orders DOCUMENTS ({'_id': 'o1'})")
            try await InProcessMesh.withLink(till.sync, hub.sync, names: (a: "till-1", b: "hub")) { () async throws in
                #expect(try await InProcessMesh.eventually { try await Self.count(till, "SELECT * FROM menu") == 1 })
                _ = try await hub.store.execute("INSERT INTO menu DOCUMENTS ({'_id': 'bread'})")
                #expect(try await InProcessMesh.eventually { try await Self.count(till, "SELECT * FROM menu") == 2 })
            }
            #expect(try await Self.count(till, "SELECT * FROM orders") == 0)
            hub.stop()
        }
        #expect(FileManager.default.fileExists(atPath: file))
        let hub = try TestNode(
            name: "hub", directory: directory,
            configure: { $0.accessRules = AccessRules(rules: [.init(pattern: "*", rights: .everything)]); $0.servedReadsFile = file })
        defer { hub.stop() }
        try await InProcessMesh.withLink(till.sync, hub.sync, names: (a: "till-1", b: "hub")) { () async throws in
            #expect(try await InProcessMesh.eventually { try await Self.count(till, "SELECT * FROM orders") == 1 })
        }
        // Served once under the wider rules: a third start resumes from the cursor again.
        #expect(ServedReads(file: file).changed("till-1", .everything) == false)
        #expect(ServedReads(file: file).changed("till-1", Self.menuOnly.rights(of: "till-1").read))
    }
}

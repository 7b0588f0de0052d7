import ShoalCRDT
import Logging
import ShoalWire

/// The node's `RouteTable` and the sessions it speaks through: it feeds the table what
/// the inbound pipeline learnt (pieces received, offers, what is held now) and carries
/// out the table's actions (new routes to a session, a transaction asked of a peer).
///
/// The table is shared by every session (its decisions span links), so it sits behind
/// a lock; a session registers when it opens with a version 4 peer and gets its routes
/// changes as events of its own (`SessionStateMachine.Event.routesChanged`).
final class Routing: Sendable {
    /// A session's way in: its token (to tell a replaced session from the one now
    /// open) and the function that hands it an event.
    struct Inbox: Sendable {
        var token: Int
        var deliver: @Sendable (SessionStateMachine.Event) -> Void
    }

    /// What a commit reads of the table before it starts.
    struct Snapshot: Sendable {
        /// Per peer, the sequence of its log a cursor may not pass (`RouteTable.resumeLimit`).
        var resumeLimits: [SiteID: UInt64] = [:]
        /// The offers noted, to look up whether they are held now.
        var noted: [TransactionID] = []
    }

    /// What a commit tells the table.
    struct Commit: Sendable {
        struct Receipt: Sendable {
            var id: TransactionID
            var from: SiteID
            var duplicate: Bool
        }
        var receipts: [Receipt] = []
        /// Transactions whose last piece came, and from whom (`RouteTable.allSent`).
        var lastPieces: [(id: TransactionID, from: SiteID)] = []
        /// Offers of transactions this node has not applied (whole or in part) nor
        /// refused, per peer: one still waiting for its other pieces among them.
        var offers: [SiteID: [RouteTable.Offer]] = [:]
        /// Noted offers whose transaction is applied (whole or in part) or refused here now.
        var held: Set<TransactionID> = []
        /// Offered transactions applied here leaving out documents this node takes now:
        /// no eager link will bring those, so progress on their origin does not hold the ask back.
        var leftOut: Set<TransactionID> = []
    }

    private struct State {
        var table: RouteTable
        var inboxes: [SiteID: Inbox] = [:]
        var nextToken = 0
        /// Offers received and transactions asked after an offer, per peer, for status.
        var offersReceived: [SiteID: UInt64] = [:]
        var grafts: [SiteID: UInt64] = [:]
    }

    /// Whether this node asks its peers for routes (`--no-routes` turns it off: every
    /// link then carries every origin, as version 3 does).
    let enabled: Bool
    private let state: Locked<State>
    private let start = ContinuousClock.now

    init(enabled: Bool, configuration: RouteTable.Configuration = .init()) {
        self.enabled = enabled
        self.state = Locked(State(table: RouteTable(configuration: configuration)))
    }

    /// Milliseconds on this node's monotonic clock: the table's time.
    var now: UInt64 {
        let elapsed = ContinuousClock.now - start
        return UInt64(elapsed.components.seconds) * 1000 + UInt64(elapsed.components.attoseconds / 1_000_000_000_000_000)
    }

    /// A session with a version 4 peer opened: its first routes, and a token to close it
    /// with. The other sessions get their new routes at once.
    func open(_ peer: SiteID, deliver: @escaping @Sendable (SessionStateMachine.Event) -> Void) -> (RouteTable.Routes, token: Int)? {
        guard enabled else { return nil }
        let now = self.now
        let (opened, inboxes) = state.withLock { s in
            s.nextToken += 1
            s.inboxes[peer] = Inbox(token: s.nextToken, deliver: deliver)
            let (routes, actions) = s.table.open(peer, now: now)
            var sends: [(Inbox, RouteTable.Routes)] = []
            for case .send(let routes, let other) in actions {
                if let inbox = s.inboxes[other] { sends.append((inbox, routes)) }
            }
            return ((routes, s.nextToken), sends)
        }
        for (inbox, routes) in inboxes { inbox.deliver(.routesChanged(routes)) }
        return opened
    }

    /// The session of `token` ended: what only its link carried moves to others.
    func close(_ peer: SiteID, token: Int, engine: SyncEngine) async {
        let now = self.now
        let actions = state.withLock { s -> [RouteTable.Action] in
            guard s.inboxes[peer]?.token == token else { return [] }
            s.inboxes[peer] = nil
            return s.table.close(peer, now: now)
        }
        await perform(actions, engine: engine)
    }

    /// `peer` sent all it holds of `id` (`RouteTable.allSent`), here: it answered that
    /// it holds none.
    func allSent(_ id: TransactionID, by peer: SiteID) {
        guard enabled else { return }
        state.withLock { $0.table.allSent(id, by: peer) }
    }

    /// `peer`'s publisher vouched that this node holds all it asked of it.
    func caughtUp(_ peer: SiteID) {
        guard enabled else { return }
        state.withLock { $0.table.caughtUp(peer) }
    }

    func snapshot() -> Snapshot {
        guard enabled else { return Snapshot() }
        return state.withLock { s in
            var limits: [SiteID: UInt64] = [:]
            for peer in s.inboxes.keys {
                if let limit = s.table.resumeLimit(for: peer) { limits[peer] = limit }
            }
            return Snapshot(resumeLimits: limits, noted: s.table.notedIDs)
        }
    }

    /// The highest sequence of `peer`'s log this node may say it holds through.
    func resumeLimit(for peer: SiteID) -> UInt64? {
        guard enabled else { return nil }
        return state.withLock { $0.table.resumeLimit(for: peer) }
    }

    /// After a commit: receipts prune, offers are noted, and the tick grafts what no
    /// eager link delivered in time.
    func committed(_ commit: Commit, engine: SyncEngine) async {
        guard enabled else { return }
        let now = self.now
        let actions = state.withLock { s -> [RouteTable.Action] in
            var actions: [RouteTable.Action] = []
            for receipt in commit.receipts {
                actions += s.table.received(receipt.id, from: receipt.from, duplicate: receipt.duplicate, now: now)
            }
            for (peer, offers) in commit.offers.sorted(by: { $0.key < $1.key }) {
                s.offersReceived[peer, default: 0] += UInt64(offers.count)
                actions += s.table.offered(offers, by: peer, now: now, leftOut: commit.leftOut) { _ in false }
            }
            for last in commit.lastPieces { s.table.allSent(last.id, by: last.from) }
            actions += s.table.tick(now: now) { commit.held.contains($0) }
            for case .ask(_, let peer) in actions { s.grafts[peer, default: 0] += 1 }
            return actions
        }
        await perform(actions, engine: engine)
    }

    /// What this node asks each peer for, and what came of it, for status.
    func status(of peer: SiteID) -> (routes: RouteTable.Routes?, offers: UInt64, grafts: UInt64) {
        state.withLock { s in (s.table.routes(for: peer), s.offersReceived[peer] ?? 0, s.grafts[peer] ?? 0) }
    }

    private func perform(_ actions: [RouteTable.Action], engine: SyncEngine) async {
        guard !actions.isEmpty else { return }
        let inboxes = state.withLock { $0.inboxes }
        for action in actions {
            switch action {
            case .send(let routes, let peer):
                inboxes[peer]?.deliver(.routesChanged(routes))
            case .resubscribe(let peer, _):
                inboxes[peer]?.deliver(.routesChanged(.everything))
                inboxes[peer]?.deliver(.resubscribe)
            case .ask(let id, let peer):
                engine.logger.debug(
                    "asking a peer for a transaction it offered", metadata: ["shoal.peer.site": "\(peer)", "shoal.txn": "\(id)"])
                _ = await engine.ask(InboundPipeline.Question(id: id, collections: [], only: [peer]))
            }
        }
    }
}

public import ShoalCRDT
public import ShoalStorage
import ShoalWire

/// What status shows of one connection or dial target.
public struct PeerSnapshot: Sendable, Hashable {
    public var siteID: SiteID?
    public var name: String
    public var address: String
    /// "connecting", "handshaking", "connected" or "disconnected".
    public var state: String
    public var direction: ConnectionDirection
    /// Found by LAN discovery, rather than a `--peer` address or an inbound connection.
    public var discovered: Bool = false
    public var rttMillis: Double?
    public var bytesIn: UInt64
    public var bytesOut: UInt64
    /// Deltas received from and sent to this peer's site since this node started,
    /// over every session with it (filled in by `snapshots()`).
    public var deltasIn: UInt64 = 0
    public var deltasOut: UInt64 = 0
    /// Of `deltasIn`, those this node held already when they came: received and dropped.
    public var deltasDuplicate: UInt64 = 0
    /// Rows of this node's change log after the last one the peer acknowledged.
    public var lagDeltas: UInt64?
    /// When the last frame from the peer arrived.
    public var lastHeard: ContinuousClock.Instant?
    /// Where the peer accepts connections, as far as this node can tell.
    public var listenAddress: String?
    public var lastError: String?
    /// The subject common name of the certificate the peer presented on a TLS link; nil on a plaintext one.
    public var tlsIdentity: String?
    /// The queries this peer subscribed to on this node.
    public var subscriptions: [SubscriptionSet.Entry]
    /// The routes the peer asked this node for ("eager", "lazy but 12,34", …), nil
    /// when it asked for none (every origin in full; a version 3 peer).
    public var routesGiven: String?
    /// The routes this node asks the peer for, nil when none (`--no-routes`, version 3).
    public var routesAsked: String?
    /// Transactions the peer offered that this node did not hold, and those it then
    /// asked the peer for (grafts), since this node started.
    public var offersReceived: UInt64 = 0
    public var grafts: UInt64 = 0
}

/// What this node exchanged with one peer site since it started, over every
/// session with it (closed ones included): counters for metrics.
public struct PeerTraffic: Sendable, Hashable {
    public var bytesIn: UInt64 = 0
    public var bytesOut: UInt64 = 0
    public var deltasIn: UInt64 = 0
    public var deltasOut: UInt64 = 0
    /// Of `deltasIn`, those this node held already when they came.
    public var deltasDuplicate: UInt64 = 0

    public init(
        bytesIn: UInt64 = 0, bytesOut: UInt64 = 0, deltasIn: UInt64 = 0, deltasOut: UInt64 = 0, deltasDuplicate: UInt64 = 0
    ) {
        self.bytesIn = bytesIn
        self.bytesOut = bytesOut
        self.deltasIn = deltasIn
        self.deltasOut = deltasOut
        self.deltasDuplicate = deltasDuplicate
    }
}

/// Every live session and dial target of a node, for status and for
/// choosing one session per peer pair.
final class PeerRegistry: Sendable {
    struct Record {
        var snapshot: PeerSnapshot
        var close: (@Sendable () async -> Void)?
        /// Sends on an established sync session (for requests such as attachment fetches).
        var send: (@Sendable (SessionMessage) async throws -> Void)?
    }

    private struct State {
        var records: [Int: Record] = [:]
        /// Per peer site since this node started: deltas of every session, bytes of
        /// the closed ones (a live session's bytes are in its record).
        var totals: [SiteID: PeerTraffic] = [:]
        var dialTargets: [String: PeerSnapshot] = [:]
        /// Per peer site, the transactions of its that this node refused and has not yet
        /// told it of (`SessionMessage.Ack.batch`'s `refused`).
        var untold: [SiteID: [SessionMessage.Refusal]] = [:]
        var nextID = 0
    }

    private let state = Locked(State())

    func open(
        direction: ConnectionDirection, address: String, discovered: Bool = false, tlsIdentity: String? = nil,
        close: @escaping @Sendable () async -> Void
    ) -> Int {
        state.withLock { s in
            let id = s.nextID
            s.nextID += 1
            s.records[id] = Record(
                snapshot: PeerSnapshot(
                    siteID: nil, name: "", address: address, state: "handshaking", direction: direction,
                    discovered: discovered, rttMillis: nil, bytesIn: 0, bytesOut: 0, lastError: nil, tlsIdentity: tlsIdentity,
                    subscriptions: []),
                close: close)
            return id
        }
    }

    func setSender(_ id: Int, _ send: @escaping @Sendable (SessionMessage) async throws -> Void) {
        state.withLock { $0.records[id]?.send = send }
    }

    /// The senders of every connected sync session, with the peer's site.
    func connectedSenders() -> [(site: SiteID, send: @Sendable (SessionMessage) async throws -> Void)] {
        state.withLock { s in
            s.records.values.compactMap { r in
                guard r.snapshot.state == "connected", let site = r.snapshot.siteID, let send = r.send else { return nil }
                return (site, send)
            }
        }
    }

    /// The close of every session, admin ones included, whose peer's certificate name
    /// (nil: none) `matching` picks.
    func closers(matching: (String?) -> Bool) -> [@Sendable () async -> Void] {
        state.withLock { s in s.records.values.compactMap { matching($0.snapshot.tlsIdentity) ? $0.close : nil } }
    }

    /// The close of every established sync session (not admin ones, nor those still
    /// in their handshake).
    func syncSessionClosers() -> [@Sendable () async -> Void] {
        state.withLock { s in
            s.records.values.compactMap { r in r.snapshot.state == "connected" ? r.close : nil }
        }
    }

    func remove(_ id: Int) {
        state.withLock { s in
            guard let closed = s.records.removeValue(forKey: id)?.snapshot, let site = closed.siteID, closed.state != "admin"
            else { return }
            s.totals[site, default: PeerTraffic()].bytesIn += closed.bytesIn
            s.totals[site, default: PeerTraffic()].bytesOut += closed.bytesOut
            // Refusals are told only to a site with a session: none left, none kept.
            if !s.records.values.contains(where: { $0.snapshot.siteID == site && $0.snapshot.state != "admin" }) {
                s.untold[site] = nil
            }
        }
    }

    /// Session `id`'s peer closed the connection: from now on it is no rival to a new
    /// session with that site (`establish`), though its loop may still be finishing a step.
    func inboundEnded(_ id: Int) {
        state.withLock { s in
            if s.records[id]?.snapshot.state == "connected" { s.records[id]!.snapshot.state = "disconnected" }
        }
    }

    func update(_ id: Int, _ body: (inout PeerSnapshot) -> Void) {
        state.withLock { s in
            if s.records[id] != nil { body(&s.records[id]!.snapshot) }
        }
    }

    /// Marks `id` established with `site`. When another session with the same
    /// site is connected, the one dialed by the smaller site ID stays, and of two the
    /// same site dialed, the older (PROTOCOL.md section 1): returns whether `id` is that
    /// one, and the closer of the session that must go, if it is not `id`.
    ///
    /// The older, since one site may be several processes (hubs), each dialing on its
    /// own: preferring the newer, they would close each other's sessions for ever. A
    /// session whose peer closed the connection is not connected from then on
    /// (`inboundEnded`), even while its loop is still busy in a step, so a peer that gave
    /// up on it and dials again is let in at once.
    func establish(_ id: Int, site: SiteID, localSite: SiteID) -> (keep: Bool, evict: (@Sendable () async -> Void)?) {
        state.withLock { s in
            guard var record = s.records[id] else { return (false, nil) }
            func dialer(_ r: PeerSnapshot) -> SiteID { r.direction == .outbound ? localSite : site }
            let rival = s.records.first { $0.key != id && $0.value.snapshot.siteID == site && $0.value.snapshot.state == "connected" }
            if let rival {
                let mine = dialer(record.snapshot), theirs = dialer(rival.value.snapshot)
                let thisWins = mine < theirs || (mine == theirs && id < rival.key)
                if !thisWins { return (false, nil) }
                s.records[rival.key]?.snapshot.state = "disconnected"
            }
            record.snapshot.siteID = site
            record.snapshot.state = "connected"
            s.records[id] = record
            return (true, rival?.value.close)
        }
    }

    /// Counts deltas received (`in`) or sent on session `id`, for its peer's site.
    func countDeltas(_ id: Int, in received: UInt64 = 0, out sent: UInt64 = 0) {
        state.withLock { s in
            guard let site = s.records[id]?.snapshot.siteID else { return }
            s.totals[site, default: PeerTraffic()].deltasIn += received
            s.totals[site, default: PeerTraffic()].deltasOut += sent
        }
    }

    /// Counts deltas received from each site that this node held already (the
    /// inbound pipeline finds them as it commits).
    func countDuplicates(_ duplicates: [SiteID: UInt64]) {
        guard !duplicates.isEmpty else { return }
        state.withLock { s in
            for (site, count) in duplicates { s.totals[site, default: PeerTraffic()].deltasDuplicate += count }
        }
    }

    /// Notes a failure on the link with `site` that does not end its session (a
    /// transaction of it refused, say): status shows it as the peer's last error.
    func noteError(site: SiteID, _ error: String) {
        state.withLock { s in
            for (id, record) in s.records where record.snapshot.siteID == site && record.snapshot.state != "admin" {
                s.records[id]!.snapshot.lastError = error
            }
        }
    }

    /// Notes that `site` is to be told of `refusal` with its next Ack: at most
    /// `Refusal.perAck` wait per site, and only for a site with a session now (this
    /// node logs every refusal; a site with no session is not told of it).
    func noteRefusal(_ refusal: SessionMessage.Refusal, to site: SiteID) {
        let refusal = refusal.fitted
        state.withLock { s in
            guard s.records.values.contains(where: { $0.snapshot.siteID == site && $0.snapshot.state != "admin" }) else { return }
            var waiting = s.untold[site, default: []]
            guard waiting.count < SessionMessage.Refusal.perAck, !waiting.contains(refusal) else { return }
            waiting.append(refusal)
            s.untold[site] = waiting
        }
    }

    /// The refusals `site` is to be told of, taken, oldest first, as many as fit in
    /// `bytes` (each counted as its reason and 32 bytes): they go with the Ack being
    /// sent, which must fit the peer's frame limit. The rest wait for the next Ack.
    func takeRefusals(for site: SiteID, fitting bytes: Int) -> [SessionMessage.Refusal] {
        state.withLock { s in
            guard var waiting = s.untold[site] else { return [] }
            var used = 0
            let count = waiting.prefix { refusal in
                used += refusal.reason.utf8.count + 32
                return used <= bytes
            }.count
            let taken = Array(waiting.prefix(count))
            waiting.removeFirst(count)
            s.untold[site] = waiting.isEmpty ? nil : waiting
            return taken
        }
    }

    func isConnected(site: SiteID) -> Bool {
        state.withLock { s in s.records.values.contains { $0.snapshot.siteID == site && $0.snapshot.state == "connected" } }
    }

    func setDialTarget(_ address: String, state newState: String, error: String? = nil, discovered: Bool = false) {
        state.withLock { s in
            var snapshot = s.dialTargets[address] ?? PeerSnapshot(
                siteID: nil, name: "", address: address, state: newState, direction: .outbound, discovered: discovered,
                rttMillis: nil, bytesIn: 0, bytesOut: 0, lastError: nil, subscriptions: [])
            snapshot.state = newState
            snapshot.discovered = discovered
            if let error { snapshot.lastError = error }
            s.dialTargets[address] = snapshot
        }
    }

    func removeDialTarget(_ address: String) {
        _ = state.withLock { $0.dialTargets.removeValue(forKey: address) }
    }

    /// Bytes and deltas per peer site since this node started: the closed sessions'
    /// totals plus the live sessions' own counts. Admin (CLI) sessions, and sessions
    /// whose handshake never named a site, are not counted.
    func traffic() -> [SiteID: PeerTraffic] {
        state.withLock { s in
            var traffic = s.totals
            for record in s.records.values {
                guard let site = record.snapshot.siteID, record.snapshot.state != "admin" else { continue }
                traffic[site, default: PeerTraffic()].bytesIn += record.snapshot.bytesIn
                traffic[site, default: PeerTraffic()].bytesOut += record.snapshot.bytesOut
            }
            return traffic
        }
    }

    /// Live sessions, then dial targets with no live outbound session.
    func snapshots() -> [PeerSnapshot] {
        state.withLock { s in
            let live = s.records.sorted { $0.key < $1.key }.map { record in
                var snapshot = record.value.snapshot
                if let site = snapshot.siteID, let totals = s.totals[site] {
                    snapshot.deltasIn = totals.deltasIn
                    snapshot.deltasOut = totals.deltasOut
                    snapshot.deltasDuplicate = totals.deltasDuplicate
                }
                return snapshot
            }
            let liveAddresses = Set(live.filter { $0.direction == .outbound }.map(\.address))
            let idle = s.dialTargets.values.filter { !liveAddresses.contains($0.address) }.sorted { $0.address < $1.address }
            return live + idle
        }
    }
}

public import ShoalCRDT
public import ShoalStorage

/// Which links carry each origin's transactions in full (eager) and which only offer
/// their IDs (lazy), decided by this node as a subscriber (docs/ROUTES.md).
///
/// ```
///   link opens ──► eager for everything if no other link is, else lazy but for its own origin
///   a transaction of origin O by two eager links ──► O lazy on all but one (prune)
///   an offer of T, T not held, no progress on O from an eager link for graftAfter
///        ──► ask the offering link for T, O eager there (graft)
///   a link closes ──► what only it carried is grafted onto a link that offered it
/// ```
///
/// The table is a value: no I/O, no clock. The sync engine feeds it events and the time
/// (milliseconds, any monotonic origin), carries out the actions it returns (send a
/// peer its new routes, ask a peer for a transaction), and tests drive it directly.
public struct RouteTable: Sendable {
    public struct Configuration: Sendable, Hashable {
        /// How long an origin may go without a piece from a link eager for it, after
        /// another link offered one of its transactions, before that one is asked for.
        public var graftAfterMillis: UInt64
        /// Offers noted at most; past it the link with the most turns eager for
        /// everything and streams again from its first offer not resolved.
        public var maximumNoted: Int
        /// Transactions remembered with the links that delivered them, to recognize a
        /// second eager path.
        public var maximumRemembered: Int

        public init(graftAfterMillis: UInt64 = 2_000, maximumNoted: Int = 100_000, maximumRemembered: Int = 10_000) {
            self.graftAfterMillis = graftAfterMillis
            self.maximumNoted = maximumNoted
            self.maximumRemembered = maximumRemembered
        }
    }

    /// What a subscriber asks one publisher for: a default and the origins that are the
    /// exception to it (PROTOCOL.md version 4, `Routes`).
    public struct Routes: Sendable, Hashable, CustomStringConvertible {
        public var lazyByDefault: Bool
        public var exceptions: Set<SiteID>

        public init(lazyByDefault: Bool, exceptions: Set<SiteID> = []) {
            self.lazyByDefault = lazyByDefault
            self.exceptions = exceptions
        }

        /// Every origin eager: what a link without routes (version 3) carries.
        public static let everything = Routes(lazyByDefault: false)

        public func isEager(_ origin: SiteID) -> Bool {
            lazyByDefault ? exceptions.contains(origin) : !exceptions.contains(origin)
        }

        mutating func set(_ origin: SiteID, eager: Bool) {
            if eager == lazyByDefault { exceptions.insert(origin) } else { exceptions.remove(origin) }
        }

        /// Reads routes as `description` writes them ("eager", "lazy but 00000000000000a1,…").
        public init?(_ description: String) {
            let words = description.split(separator: " ")
            guard let mode = words.first, mode == "eager" || mode == "lazy" else { return nil }
            var exceptions: Set<SiteID> = []
            if words.count == 3, words[1] == "but" {
                for site in words[2].split(separator: ",") {
                    guard let value = UInt64(site, radix: 16) else { return nil }
                    exceptions.insert(SiteID(value))
                }
            } else if words.count != 1 {
                return nil
            }
            self.init(lazyByDefault: mode == "lazy", exceptions: exceptions)
        }

        public var description: String {
            let listed = exceptions.sorted().map(\.description).joined(separator: ",")
            return lazyByDefault
                ? (listed.isEmpty ? "lazy" : "lazy but \(listed)")
                : (listed.isEmpty ? "eager" : "eager but \(listed)")
        }
    }

    public enum Action: Sendable, Hashable {
        /// Send this peer these routes (`RouteUpdate`).
        case send(Routes, to: SiteID)
        /// Ask this peer for the pieces of a transaction it offered (`TransactionRequest`).
        case ask(TransactionID, of: SiteID)
        /// Subscribe to this peer again, eager for everything, from after this sequence
        /// of its log (before the first offer of it not resolved).
        case resubscribe(SiteID, after: UInt64)
    }

    /// A transaction a lazy link offered, and where its rows begin in that peer's log.
    public typealias Offer = ChangeLogPage.Offer

    private struct Link: Sendable {
        var routes: Routes
        /// When it opened, to choose the oldest.
        var opened: UInt64
        /// Its publisher said this node holds everything it asked of it (a Ping that
        /// vouched freshness, PROTOCOL.md §8.10): its history is here.
        var caughtUp = false
    }

    private struct Noted: Sendable {
        /// The links that offered it, first first, with where it begins in their logs.
        var offers: [(peer: SiteID, logSequence: UInt64)]
        var at: UInt64
        /// The link it was asked of and when: an ask can go unanswered (the link closes
        /// before it answers), so the offer stays noted until the transaction is held,
        /// and is asked again, of the next link that offered it, after `graftAfter`.
        var asked: (peer: SiteID, at: UInt64)?
        /// Applied here, leaving out documents this node takes now: the links eager for
        /// its origin have sent all they will, so their progress does not hold the ask back.
        var leftOut = false
        var first: SiteID { offers[0].peer }

        /// The link to ask next: the first, or after an ask of one, the one after it.
        var next: SiteID {
            guard let asked, let i = offers.firstIndex(where: { $0.peer == asked.peer }) else { return first }
            return offers[(i + 1) % offers.count].peer
        }
    }

    /// The links eager for its origin that delivered a transaction, in order.
    private struct Delivery: Sendable {
        var eager: [SiteID]
    }

    public let configuration: Configuration
    private var links: [SiteID: Link] = [:]
    private var noted: [TransactionID: Noted] = [:]
    /// When a piece of each origin last came from a link eager for it.
    private var progress: [SiteID: UInt64] = [:]
    private var deliveries: [TransactionID: Delivery] = [:]
    private var deliveryOrder: [TransactionID] = []
    private var deliveryStart = 0

    public init(configuration: Configuration = .init()) {
        self.configuration = configuration
    }

    /// The routes this node asks `peer` for, nil when no link to it is open.
    public func routes(for peer: SiteID) -> Routes? { links[peer]?.routes }

    /// How many offers wait to be delivered by an eager link or asked for.
    public var notedCount: Int { noted.count }

    /// The transactions of the offers noted.
    public var notedIDs: [TransactionID] { Array(noted.keys) }

    /// Whether any open link carries `origin` in full.
    public func isCarried(_ origin: SiteID) -> Bool {
        links.values.contains { $0.routes.isEager(origin) }
    }

    // MARK: events

    /// A link opened: the routes to ask it for first (its Subscribe carries them), and
    /// the other links' new routes. The neighbour's own origin comes from it alone from
    /// now on: the links eager for it turn lazy for it, so that its live writes do not
    /// come twice while a duplicate would be needed to prune them. (Pages the first
    /// link sent before its RouteUpdate arrives may repeat the neighbour's history, at
    /// most a window of them: docs/ROUTES.md, "Joining".)
    public mutating func open(_ peer: SiteID, now: UInt64) -> (routes: Routes, actions: [Action]) {
        guard links.values.contains(where: { !$0.routes.lazyByDefault }) else {
            links[peer] = Link(routes: .everything, opened: now)
            return (.everything, [])
        }
        let routes = Routes(lazyByDefault: true, exceptions: [peer])
        var actions: [Action] = []
        for (other, link) in links.sorted(by: { $0.key < $1.key }) where link.routes.isEager(peer) {
            links[other]!.routes.set(peer, eager: false)
            actions.append(.send(links[other]!.routes, to: other))
        }
        links[peer] = Link(routes: routes, opened: now)
        return (routes, actions)
    }

    /// `peer`'s publisher vouched that this node holds all it asked of it. Until the
    /// link eager by default has, this node is joining: see `tick`.
    public mutating func caughtUp(_ peer: SiteID) {
        links[peer]?.caughtUp = true
    }

    /// A link closed. What only it carried moves to another link: the eager default to
    /// the oldest link left (or, when the closed link was not the default, its own
    /// origin to the link eager by default), and each offer noted of an origin no
    /// other link carried is asked of the link that offered it first, whose origin
    /// turns eager there.
    public mutating func close(_ peer: SiteID, now: UInt64) -> [Action] {
        guard let closed = links.removeValue(forKey: peer) else { return [] }
        var lost: Set<TransactionID> = []
        for (id, var entry) in noted {
            entry.offers.removeAll { $0.peer == peer }
            if entry.asked?.peer == peer {
                entry.asked = nil
                lost.insert(id)
            }
            noted[id] = entry.offers.isEmpty ? nil : entry
        }
        // Offers of origins no link left carries, and those asked of the closed link, are
        // asked now: the link that takes the default over will not stream again what it
        // offered already.
        let orphans = noted.filter { id, entry in
            lost.contains(id) || (entry.asked == nil && closed.routes.isEager(id.origin) && !isCarried(id.origin))
        }.keys
        var changed: Set<SiteID> = []
        if !closed.routes.lazyByDefault, !links.values.contains(where: { !$0.routes.lazyByDefault }),
            let heir = links.min(by: { ($0.value.opened, $0.key) < ($1.value.opened, $1.key) })?.key
        {
            // Everything but the origins whose own links are open, which they carry.
            links[heir]!.routes = Routes(
                lazyByDefault: false, exceptions: Set(links.filter { $0.key != heir && $0.value.routes.isEager($0.key) }.keys))
            changed.insert(heir)
        } else if !isCarried(peer), let heir = links.filter({ !$0.value.routes.lazyByDefault }).min(by: { $0.key < $1.key })?.key {
            // Its own origin came from it alone: the default link carries it again.
            links[heir]!.routes.set(peer, eager: true)
            changed.insert(heir)
        }
        var actions: [Action] = []
        for id in orphans.sorted() { ask(id, now: now, changed: &changed, actions: &actions) }
        return changed.sorted().map { .send(links[$0]!.routes, to: $0) } + actions
    }

    /// Asks the next link that offered `id` for it, its origin eager there; the offer
    /// stays noted until the transaction is held.
    private mutating func ask(_ id: TransactionID, now: UInt64, changed: inout Set<SiteID>, actions: inout [Action]) {
        let by = noted[id]!.next
        if !links[by]!.routes.isEager(id.origin) {
            links[by]!.routes.set(id.origin, eager: true)
            changed.insert(by)
        }
        actions.append(.ask(id, of: by))
        noted[id]!.asked = (by, now)
    }

    /// A piece of `id` arrived from `peer`; `duplicate` when every delta of it was held
    /// already. A transaction two open links eager for its origin delivered stays eager
    /// on one of them: its origin's own link if it was one, else the one that delivered
    /// first of those open and eager for the origin now; the others turn lazy for that
    /// origin. A link that has closed since it delivered, or turned lazy for the origin,
    /// keeps nothing: kept, it left the origin with no open eager link, and the one that
    /// had just delivered lazy for it (a node that took a collection back then got only
    /// offers of what it had applied without it).
    ///
    /// A piece does not resolve an offer of `id`: the transaction may wait for its other
    /// pieces, and the link that streams them close before the last. The offer stays
    /// noted until `tick` finds the transaction applied or refused, or the offering link
    /// sends its last piece (`allSent`), while this piece counts as progress on its origin.
    public mutating func received(_ id: TransactionID, from peer: SiteID, duplicate: Bool, now: UInt64) -> [Action] {
        guard let link = links[peer] else { return [] }
        let origin = id.origin
        guard link.routes.isEager(origin) else { return [] }
        progress[origin] = now
        guard var delivery = deliveries[id] else {
            remember(id, Delivery(eager: [peer]))
            return []
        }
        guard duplicate, !delivery.eager.contains(peer) else { return [] }
        delivery.eager.append(peer)
        deliveries[id] = delivery
        // Open and eager for the origin still (`peer` is): a link that closed and opened
        // again since it delivered may be lazy for it now.
        let open = delivery.eager.filter { links[$0]?.routes.isEager(origin) == true }
        let keep = open.contains(origin) ? origin : open[0]
        var actions: [Action] = []
        for other in delivery.eager.sorted() where other != keep {
            guard var routes = links[other]?.routes, routes.isEager(origin) else { continue }
            routes.set(origin, eager: false)
            links[other]!.routes = routes
            actions.append(.send(routes, to: other))
        }
        return actions
    }

    /// `peer` sent all it holds of `id`: its last piece (streamed, or its answer to an
    /// ask), or an answer that it holds none. Its offer of `id` is resolved, whether or not
    /// the transaction is whole now: what is still missing is the coverage assembler's
    /// to ask the other peers for, or to apply in part after its wait, and asked of
    /// `peer` again it would only send the same again (a transaction waiting behind an
    /// earlier one of its origin, or for a collection `peer` does not have, was asked
    /// of it every `graftAfter` until its wait ran out). Another link's offer of it stays.
    public mutating func allSent(_ id: TransactionID, by peer: SiteID) {
        guard var entry = noted[id], entry.offers.contains(where: { $0.peer == peer }) else { return }
        entry.offers.removeAll { $0.peer == peer }
        if entry.asked?.peer == peer { entry.asked = nil }
        noted[id] = entry.offers.isEmpty ? nil : entry
    }

    /// `peer` offered these transactions (their IDs on a lazy link). Those not held
    /// here (`isHeld`: applied, whole or in part, or refused; not one still waiting for
    /// its other pieces) are noted, to be asked for if no eager link delivers them.
    public mutating func offered(
        _ offers: [Offer], by peer: SiteID, now: UInt64, leftOut: Set<TransactionID> = [], isHeld: (TransactionID) -> Bool
    ) -> [Action] {
        guard links[peer] != nil else { return [] }
        for offer in offers where !isHeld(offer.id) {
            if var entry = noted[offer.id] {
                if !entry.offers.contains(where: { $0.peer == peer }) { entry.offers.append((peer, offer.logSequence)) }
                entry.leftOut = entry.leftOut || leftOut.contains(offer.id)
                noted[offer.id] = entry
            } else {
                noted[offer.id] = Noted(offers: [(peer, offer.logSequence)], at: now, leftOut: leftOut.contains(offer.id))
            }
        }
        return noted.count > configuration.maximumNoted ? overflow() : []
    }

    /// The highest sequence of `peer`'s log this node may resume after: before the
    /// first row of each offer of it not resolved, so that a restart, which forgets
    /// the offers, has them made again. Nil: no limit.
    public func resumeLimit(for peer: SiteID) -> UInt64? {
        var limit: UInt64?
        for entry in noted.values {
            for offer in entry.offers where offer.peer == peer {
                let before = offer.logSequence &- 1
                limit = min(limit ?? before, before)
            }
        }
        return limit
    }

    /// The tick: noted offers `isHeld` says are held (applied or refused) are resolved;
    /// each other noted offer that no eager link delivered in time is asked of the
    /// link that offered it first, and its origin turns eager there; one asked and still
    /// not held after `graftAfter` is asked again, of the next link that offered it. An offer of an
    /// origin no eager link ever delivered a piece of is asked at once (the origin lies
    /// beyond that link, as in a line or a tree: waiting would only add latency); while
    /// this node is joining, after a quarter of `graftAfter`, since its first link may be
    /// streaming that origin's history, and then it would have delivered some.
    public mutating func tick(now: UInt64, isHeld: (TransactionID) -> Bool) -> [Action] {
        var changed: Set<SiteID> = []
        var actions: [Action] = []
        let joining = links.values.contains { !$0.routes.lazyByDefault && !$0.caughtUp }
        for (id, entry) in noted.sorted(by: { $0.key < $1.key }) {
            if isHeld(id) {
                noted[id] = nil
                continue
            }
            if let asked = entry.asked {
                // Asked and not here yet: again, of the next link that offered it, once an
                // answer had time to come.
                if now >= asked.at + configuration.graftAfterMillis { ask(id, now: now, changed: &changed, actions: &actions) }
                continue
            }
            let origin = id.origin
            if entry.leftOut {
                // Its eager links sent all they will: asked `graftAfter` after the offer,
                // however busy its origin (a late piece meanwhile settles it, and it is held).
                guard now >= entry.at + configuration.graftAfterMillis else { continue }
                ask(id, now: now, changed: &changed, actions: &actions)
                continue
            }
            let since = max(entry.at, progress[origin] ?? 0)
            let wait = progress[origin] != nil ? configuration.graftAfterMillis : joining ? configuration.graftAfterMillis / 4 : 0
            guard !isCarried(origin) || now >= since + wait else { continue }
            ask(id, now: now, changed: &changed, actions: &actions)
        }
        return changed.sorted().map { .send(links[$0]!.routes, to: $0) } + actions
    }

    // MARK: bounds

    private mutating func remember(_ id: TransactionID, _ delivery: Delivery) {
        deliveries[id] = delivery
        deliveryOrder.append(id)
        while deliveryOrder.count - deliveryStart > configuration.maximumRemembered {
            deliveries[deliveryOrder[deliveryStart]] = nil
            deliveryStart += 1
        }
        if deliveryStart > 4_096, deliveryStart * 2 > deliveryOrder.count {
            deliveryOrder.removeFirst(deliveryStart)
            deliveryStart = 0
        }
    }

    /// Too many offers noted: the link that made the most carries everything from now
    /// on, streamed again from before its first offer not resolved, and its offers are
    /// forgotten (the stream brings what they named).
    private mutating func overflow() -> [Action] {
        var counts: [SiteID: Int] = [:]
        for entry in noted.values {
            for offer in entry.offers { counts[offer.peer, default: 0] += 1 }
        }
        guard let most = counts.max(by: { ($0.value, $1.key) < ($1.value, $0.key) })?.key,
            let after = resumeLimit(for: most)
        else { return [] }
        for (id, var entry) in noted {
            entry.offers.removeAll { $0.peer == most }
            noted[id] = entry.offers.isEmpty ? nil : entry
        }
        links[most]!.routes = .everything
        return [.resubscribe(most, after: after)]
    }
}

public import ShoalCRDT
public import ShoalStorage
import ShoalQuery

/// What the nodes this node relays for subscribe to, by the node that stated it.
///
/// A relay asks each peer for its own subscriptions and for those of every node it
/// carries changes for (ARCHITECTURE.md, "Relaying for neighbours"). Interest that came
/// only as a neighbour's whole Subscribe could grow but never be told apart: in a mesh
/// with cycles a query dropped by the node that asked it comes back round from the
/// others, who still pass it on, for ever. So each node states its own subscriptions
/// with a generation (its hybrid logical clock when it stated them) and passes on those
/// of the others as they came, with theirs (`Subscribe.interests`, PROTOCOL.md §8.2):
///
/// ```
///   origin O's set, generation g, from neighbour N:
///       g above what is kept of O   ──► O's set replaced; heard from N only
///       g equal                     ──► heard from N too
///       g below                     ──► ignored: a newer statement replaced it
///   O not heard of for longer than the compaction horizon ──► forgotten (`forget`)
/// ```
///
/// A Subscribe to a peer lists this node's own statement and those the peer has not
/// told it of at their generation (the peer holds those already), so in a complete mesh
/// each statement crosses each link about once; and one is sent only when it would tell
/// the peer something new (`SessionStateMachine.Subscriber`, which remembers per session
/// what it listed of each origin). A statement a neighbour leaves
/// out is therefore not a sign that it stopped carrying it: what it carried is kept
/// until a newer statement, or the horizon, replaces it.
///
/// A newer statement replaces an older one wherever it arrives, so a narrower set
/// reaches every node whatever the cycles, and nothing passes a stale one back over it.
/// A neighbour that states nothing (version 3, or a version 4 node before interests) is
/// kept as before: its whole Subscribe is its interest, generation 0, replaced by each
/// Subscribe it sends.
///
/// Plain values: `SyncEngine` keeps one, under its lock, and saves what changes.
public struct InterestTable: Sendable, Hashable {
    /// What a Subscribe to one peer asks for: the set, and the statements it lists.
    public struct Upstream: Sendable, Hashable {
        public var subscriptions: SubscriptionSet
        public var interests: [Stated]

        public init(subscriptions: SubscriptionSet, interests: [Stated]) {
            self.subscriptions = subscriptions
            self.interests = interests
        }
    }

    /// One node's stated interest, as a Subscribe carries it.
    public struct Stated: Sendable, Hashable {
        public var origin: SiteID
        /// The origin's clock when it stated `subscriptions`; 0: not stated (a neighbour's whole Subscribe).
        public var generation: UInt64
        public var subscriptions: SubscriptionSet

        public init(origin: SiteID, generation: UInt64, subscriptions: SubscriptionSet) {
            self.origin = origin
            self.generation = generation
            self.subscriptions = subscriptions
        }
    }

    /// What is kept of one origin.
    public struct Entry: Sendable, Hashable {
        public var subscriptions: SubscriptionSet
        public var generation: UInt64
        /// The neighbours that listed this generation (or, with generation 0, the
        /// neighbour itself): they carry it, and hold it.
        public var heardFrom: Set<SiteID>

        public init(subscriptions: SubscriptionSet, generation: UInt64, heardFrom: Set<SiteID>) {
            self.subscriptions = subscriptions
            self.generation = generation
            self.heardFrom = heardFrom
        }
    }

    /// Origins kept at most; past it a neighbour's Subscribe adds none.
    public static let maximumOrigins = 4_096

    /// This node: never kept as an origin of the table.
    public let local: SiteID
    public private(set) var entries: [SiteID: Entry]

    public init(local: SiteID, entries: [SiteID: Entry] = [:]) {
        self.local = local
        self.entries = entries.filter { $0.key != local }
    }

    /// What peers can see of the table: each origin's set and who passed it on, not
    /// its generation. A change of generation alone sends no Subscribe.
    private struct View: Hashable {
        var key: String
        var heardFrom: Set<SiteID>
    }

    private var view: [SiteID: View] { entries.mapValues { View(key: $0.subscriptions.key, heardFrom: $0.heardFrom) } }

    /// A Subscribe from `neighbour`: `interests` as it lists them, or nil when it states
    /// none (its `subscriptions` are then its interest). `isStale` says whether an origin's
    /// statement of that generation is one this node forgot as too old (not asked for
    /// the neighbour's own). Returns the origins whose entry changed in any way (to save),
    /// and whether a change shows to peers (sessions resubscribe).
    public mutating func learn(
        from neighbour: SiteID, subscriptions: SubscriptionSet, interests: [Stated]?,
        isStale: (SiteID, UInt64) -> Bool = { _, _ in false }
    ) -> (changed: Set<SiteID>, shows: Bool) {
        let before = view
        var changed = Set<SiteID>()
        guard let interests else {
            let entry = Entry(subscriptions: subscriptions, generation: 0, heardFrom: [neighbour])
            if entries[neighbour] != entry {
                entries[neighbour] = entry
                changed.insert(neighbour)
            }
            return (changed, view != before)
        }
        for stated in interests where stated.origin != local && stated.origin.rawValue != 0 {
            if var entry = entries[stated.origin] {
                if stated.generation > entry.generation {
                    entry = Entry(subscriptions: stated.subscriptions, generation: stated.generation, heardFrom: [neighbour])
                } else if stated.generation == entry.generation {
                    entry.heardFrom.insert(neighbour)
                    // A node that states nothing has no order to its sets: the latest passed on wins.
                    if stated.generation == 0 { entry.subscriptions = stated.subscriptions }
                } else {
                    continue
                }
                if entries[stated.origin] != entry {
                    entries[stated.origin] = entry
                    changed.insert(stated.origin)
                }
            } else {
                guard entries.count < Self.maximumOrigins else { continue }
                guard stated.origin == neighbour || !isStale(stated.origin, stated.generation) else { continue }
                entries[stated.origin] = Entry(
                    subscriptions: stated.subscriptions, generation: stated.generation, heardFrom: [neighbour])
                changed.insert(stated.origin)
            }
        }
        return (changed, view != before)
    }

    /// Whether `origin`'s set is one to ask `peer` for: not the peer's own, and not
    /// heard of from the peer alone (that would only send the peer's side its own
    /// interest back). An origin heard from nobody now (away) is still asked for.
    private func asked(_ origin: SiteID, _ entry: Entry, of peer: SiteID) -> Bool {
        origin != peer && entry.heardFrom != [peer]
    }

    /// `own` with the sets of the origins to relay for from `peer`, in at most `limit`
    /// subscriptions (what a peer serves, `--max-subscriptions-per-peer`, taken to be
    /// this node's own: a Subscribe over it is refused, and the relay would be cut off
    /// from that peer at every session). Past it, the relayed queries of a collection
    /// give way to the whole collection, those that save the most first, until the set
    /// fits: a relay that carries more than its neighbours asked for costs traffic, not
    /// data. Were the collections themselves more than that, the relayed ones past it in
    /// name order are left out: a neighbour that has no other path does not get them.
    /// The same table gives the same set, so a session does not resubscribe for nothing.
    public func upstream(own: SubscriptionSet, for peer: SiteID, limit: Int = 256) -> SubscriptionSet {
        var set = own
        var relayed: [String: [String: SubscriptionSet.Entry]] = [:]
        let owned = Set(own.entries.map(\.id))
        for (origin, entry) in entries.sorted(by: { $0.key < $1.key }) where asked(origin, entry, of: peer) {
            for item in entry.subscriptions.entries where !owned.contains(item.id) {
                relayed[item.statement.collection, default: [:]][item.id] = item
            }
        }
        let count = own.entries.count + relayed.values.reduce(0) { $0 + $1.count }
        var whole: Set<String> = []
        if count > limit {
            // What taking a collection whole saves: its relayed queries, less the one that
            // takes it whole unless the node's own already does.
            let savings = relayed.map { collection, items in
                (collection, items.count - (own.takesWholeCollection(collection) ? 0 : 1))
            }
            var left = count
            for (collection, saving) in savings.sorted(by: { $0.1 != $1.1 ? $0.1 > $1.1 : $0.0 < $1.0 }) {
                guard left > limit, saving > 0 else { break }
                whole.insert(collection)
                left -= saving
            }
        }
        for collection in relayed.keys.sorted() {
            if whole.contains(collection) {
                guard !own.takesWholeCollection(collection) else { continue }
                guard set.entries.count < limit else { break }
                _ = try? set.add(query: "SELECT * FROM \(PeerRights.quoted(collection))")
            } else {
                for item in relayed[collection]!.values.sorted(by: { $0.id < $1.id }) {
                    guard set.entries.count < limit else { break }
                    _ = try? set.add(query: item.query, arguments: item.arguments)
                }
            }
        }
        return set
    }

    /// What a Subscribe to `peer` lists: this node's own statement first, then every
    /// origin it relays for but the peer's own and those the peer told it of (it holds
    /// them), by origin. Origins that state nothing are listed with generation 0.
    public func stated(own: Stated, for peer: SiteID) -> [Stated] {
        [own]
            + entries.sorted(by: { $0.key < $1.key }).filter { $0.key != peer && !$0.value.heardFrom.contains(peer) }.map {
                Stated(origin: $0.key, generation: $0.value.generation, subscriptions: $0.value.subscriptions)
            }
    }

    /// Every set kept, for what this node carries (PROTOCOL.md §8.8).
    public var carried: [SubscriptionSet] { entries.sorted(by: { $0.key < $1.key }).map(\.value.subscriptions) }

    /// Forgets the origins `body` picks; returns them.
    public mutating func forget(where body: (SiteID, Entry) -> Bool) -> [SiteID] {
        let gone = entries.filter { body($0.key, $0.value) }.keys.sorted()
        for origin in gone { entries[origin] = nil }
        return gone
    }
}

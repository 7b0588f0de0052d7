public import ShoalCRDT
public import ShoalSync

/// What a node has heard on the LAN, and whom it should dial: the decisions of LAN
/// discovery as a value, with no socket (PROTOCOL.md §16).
///
/// ```
///  announcement ──► not from an allowed network, from itself,
///                   speaks no common version ──► ignored
///               ──► new site ──► dialTarget(site, address)  (the dialer starts)
///               ──► known site ──► refreshed (address kept unless it moved)
///  time passes  ──► not heard for `expiry` ──► forgotten (its dialer stops once
///                   no session with it is up)
///  should I dial site S now?  my site < S: yes, at once
///                             my site > S: only when S has not dialed me
///                             within `grace` of first hearing it
/// ```
///
/// Both ends hear each other, so letting the smaller site dial first means two
/// nodes normally make one connection, not two that the duplicate check then
/// closes (PROTOCOL.md §1); the larger one dials too when the smaller cannot reach it.
public struct DiscoveryTable: Sendable {
    public struct Entry: Sendable, Hashable {
        public var announcement: Announcement
        /// The address to dial, `host:port`, on the network the announcement came from.
        public var address: String
        public var firstHeard: ContinuousClock.Instant
        public var lastHeard: ContinuousClock.Instant
    }

    public let ownSite: SiteID
    /// How long a site stays without being heard again.
    public let expiry: Duration
    /// How long the larger site waits for the smaller to dial it.
    public let grace: Duration
    public private(set) var entries: [SiteID: Entry] = [:]

    public init(ownSite: SiteID, expiry: Duration, grace: Duration) {
        self.ownSite = ownSite
        self.expiry = expiry
        self.grace = grace
    }

    public enum Outcome: Sendable, Hashable {
        /// A site not known before: start dialing it.
        case new(SiteID, address: String)
        /// Heard again.
        case refreshed
        /// Its own announcement, echoed back by multicast loopback.
        case itself
        /// It speaks no protocol version a peer session can use.
        case incompatible
    }

    /// Records an announcement received from `source` (the datagram's IP address).
    public mutating func heard(_ announcement: Announcement, from source: String, at now: ContinuousClock.Instant) -> Outcome {
        if announcement.siteID == ownSite { return .itself }
        guard announcement.versions.contains(where: { HandshakeStateMachine.supportedVersions.contains($0) && $0 >= 2 }) else {
            return .incompatible
        }
        let address = Self.address(in: announcement, from: source)
        if var entry = entries[announcement.siteID] {
            entry.announcement = announcement
            entry.address = address
            entry.lastHeard = now
            entries[announcement.siteID] = entry
            return .refreshed
        }
        entries[announcement.siteID] = Entry(announcement: announcement, address: address, firstHeard: now, lastHeard: now)
        return .new(announcement.siteID, address: address)
    }

    /// The announced address on the host the datagram came from; otherwise that host
    /// with the first announced port. So a node dials only the host it heard.
    static func address(in announcement: Announcement, from source: String) -> String {
        var port: Int?
        for text in announcement.listenAddresses {
            guard let colon = text.lastIndex(of: ":"), let p = Int(text[text.index(after: colon)...]), p > 0 else { continue }
            var host = String(text[..<colon])
            if host.hasPrefix("[") { host = String(host.dropFirst().dropLast()) }
            if host == source { return text }
            port = port ?? p
        }
        return "\(source):\(port ?? HostAndPort.defaultPort)"
    }

    /// Whether `site` is still heard from.
    public func isFresh(_ site: SiteID, at now: ContinuousClock.Instant) -> Bool {
        guard let entry = entries[site] else { return false }
        return now - entry.lastHeard <= expiry
    }

    /// Forgets the sites not heard for `expiry`; returns them.
    public mutating func expire(at now: ContinuousClock.Instant) -> [SiteID] {
        let stale = entries.filter { now - $0.value.lastHeard > expiry }.map(\.key)
        for site in stale { entries.removeValue(forKey: site) }
        return stale.sorted()
    }

    /// Whether this node should dial `site` now, when no session with it is up.
    public func shouldDial(_ site: SiteID, at now: ContinuousClock.Instant) -> Bool {
        guard let entry = entries[site], now - entry.lastHeard <= expiry else { return false }
        return ownSite < site || now - entry.firstHeard >= grace
    }
}

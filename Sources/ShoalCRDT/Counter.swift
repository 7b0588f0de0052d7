/// The PN counter as Shoal stores it: a base register plus one contribution
/// register per store opening that incremented it.
///
/// ```
///   field "n"               base: a number, last-writer-wins (RESTART, SET)
///   field "n\u{1F}<id>"     {"e": epoch timestamp, "m": total subtracted, "p": total added, "s": epoch site}
/// ```
///
/// The id is drawn at random each time a store opens (`DocumentStore.counterSite`),
/// so a store restored from a copy never writes over a contribution peers hold
/// (DATA_MODEL.md §7). One opening only ever raises its own `p` and `m`, so its latest
/// contribution (last-writer-wins on its own register) carries all its increments. The
/// value is the base plus the `p - m` of every contribution made against the
/// current base, its *epoch* (`e` and `s` equal to the base's version): a RESTART, or
/// a SET, wins over increments made concurrently with it, even one at the same
/// timestamp, and increments made after a site saw the restart count again from zero.
/// Without a base the counter starts at 0.
public enum Counter {
    public static let separator: Character = "\u{1F}"
    /// `separator` as its one UTF-8 byte.
    public static let separatorByte: UInt8 = 0x1F

    public static func contributionField(_ field: String, site: SiteID) -> String {
        "\(field)\(separator)\(site)"
    }

    public static func counterName(ofContribution name: String) -> String? {
        // By byte (see `RegisterName.isPath`); the index is a character boundary.
        guard let index = name.utf8.firstIndex(of: separatorByte) else { return nil }
        return String(name[..<index])
    }

    /// Whether `name` is `site`'s own contribution to some counter.
    public static func isContribution(_ name: String, of site: SiteID) -> Bool {
        guard let index = name.utf8.firstIndex(of: separatorByte) else { return false }
        return name[name.index(after: index)...] == site.description
    }

    /// What increments count against: the version of the counter's base register, or
    /// of the tombstone that hides it, or time zero.
    ///
    /// At time zero the epoch has no site. Nothing there is a RESTART: either no base
    /// exists, or the base is an INITIAL DOCUMENTS default, which every peer may write
    /// with its own site ID; increments against any of them are one epoch.
    public struct Epoch: Sendable, Hashable {
        public var timestamp: UInt64
        /// The site of the base's version; nil at time zero, and in contributions
        /// written before epochs named their site.
        public var site: SiteID?

        public static let zero = Epoch(timestamp: 0, site: nil)

        public init(timestamp: UInt64, site: SiteID?) {
            self.timestamp = timestamp
            self.site = site
        }

        /// The epoch of a base (or tombstone) with this version; time zero without one.
        public init(_ version: RegisterVersion?) {
            guard let version, version.timestamp != .zero else {
                self = .zero
                return
            }
            self.init(timestamp: version.timestamp.rawValue, site: version.site)
        }

        /// Whether a contribution made in this epoch counts in `current`: the same
        /// timestamp and site. A contribution that names no site (time zero, or
        /// written before epochs named their site) matches on the timestamp alone.
        public func counts(in current: Epoch) -> Bool {
            timestamp == current.timestamp && (site == nil || site == current.site)
        }
    }

    public struct Contribution: Sendable, Equatable {
        public var epoch: Epoch
        public var up: Value
        public var down: Value

        public init(epoch: Epoch, up: Value, down: Value) {
            self.epoch = epoch
            self.up = up
            self.down = down
        }

        /// Reads `{"e": …, "m": …, "p": …}` with an optional `"s"`; nil for anything else.
        public init?(_ value: Value) {
            guard case .int(let e)? = value["e"], let up = value["p"], let down = value["m"],
                up.numberValue != nil, down.numberValue != nil
            else { return nil }
            var site: SiteID?
            switch value["s"] {
            case nil: site = nil
            case .int(let s)?: site = SiteID(UInt64(bitPattern: s))
            default: return nil
            }
            self.init(epoch: Epoch(timestamp: UInt64(bitPattern: e), site: site), up: up, down: down)
        }

        /// `e` and `s` are the epoch's timestamp and site as the signed 64-bit integers
        /// with the same bits; `s` is left out at time zero.
        public var value: Value {
            var members: [String: Value] = ["e": .int(Int64(bitPattern: epoch.timestamp)), "p": up, "m": down]
            if let site = epoch.site { members["s"] = .int(Int64(bitPattern: site.rawValue)) }
            return .object(members)
        }

        public mutating func add(_ amount: Value) {
            if (amount.numberValue ?? 0) >= 0 {
                up = Counter.sum(up, amount)
            } else {
                down = Counter.sum(down, Counter.negate(amount))
            }
        }
    }

    /// The base plus every contribution of the current epoch.
    public static func value(base: Value?, epoch: Epoch, contributions: [Contribution]) -> Value {
        var total = base ?? .int(0)
        // A base that is not a number (a register was SET to text) shows as it is.
        guard total.numberValue != nil else { return total }
        for c in contributions where c.epoch.counts(in: epoch) {
            total = sum(sum(total, c.up), negate(c.down))
        }
        return total
    }

    /// Integer addition while it fits, floating point otherwise.
    public static func sum(_ a: Value, _ b: Value) -> Value {
        if case .int(let x) = a, case .int(let y) = b {
            let (s, overflow) = x.addingReportingOverflow(y)
            if !overflow { return .int(s) }
        }
        return .double((a.numberValue ?? 0) + (b.numberValue ?? 0))
    }

    public static func negate(_ a: Value) -> Value {
        if case .int(let x) = a, x != .min { return .int(-x) }
        return .double(-(a.numberValue ?? 0))
    }
}

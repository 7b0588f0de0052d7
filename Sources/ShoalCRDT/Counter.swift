/// The PN counter as Shoal stores it: a base register plus one contribution
/// register per site.
///
/// ```
///   field "n"               base: a number, last-writer-wins (RESTART, SET)
///   field "n\u{1F}<site>"   {"e": base timestamp, "p": total added, "m": total subtracted}
/// ```
///
/// A site only ever raises its own `p` and `m`, so its latest contribution
/// (last-writer-wins on that site's own register) carries all its increments. The
/// value is the base plus the `p - m` of every contribution made against the
/// current base (`e` equal to the base's timestamp): a RESTART, or a SET, wins
/// over increments made concurrently with it, and increments made after a site
/// saw the restart count again from zero. Without a base the counter starts at 0.
public enum Counter {
    public static let separator: Character = "\u{1F}"

    public static func contributionField(_ field: String, site: SiteID) -> String {
        "\(field)\(separator)\(site)"
    }

    public static func counterName(ofContribution name: String) -> String? {
        guard let index = name.firstIndex(of: separator) else { return nil }
        return String(name[..<index])
    }

    public struct Contribution: Sendable, Equatable {
        public var epoch: UInt64
        public var up: Value
        public var down: Value

        public init(epoch: UInt64, up: Value, down: Value) {
            self.epoch = epoch
            self.up = up
            self.down = down
        }

        public init?(_ value: Value) {
            guard case .int(let e)? = value["e"], let up = value["p"], let down = value["m"],
                up.numberValue != nil, down.numberValue != nil
            else { return nil }
            self.init(epoch: UInt64(bitPattern: e), up: up, down: down)
        }

        public var value: Value { .object(["e": .int(Int64(bitPattern: epoch)), "p": up, "m": down]) }

        public mutating func add(_ amount: Value) {
            if (amount.numberValue ?? 0) >= 0 {
                up = Counter.sum(up, amount)
            } else {
                down = Counter.sum(down, Counter.negate(amount))
            }
        }
    }

    public static func value(base: Value?, baseTimestamp: UInt64, contributions: [Contribution]) -> Value {
        var total = base ?? .int(0)
        // A base that is not a number (a register was SET to text) shows as it is.
        guard total.numberValue != nil else { return total }
        for c in contributions where c.epoch == baseTimestamp {
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

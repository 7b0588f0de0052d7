/// What a statement declares a field to be (`COLLECTION c (f MAP, …)`), as far as
/// the write rules care.
public enum FieldKind: Sendable, Hashable {
    case register, map, counter, attachment
}

/// A change a counter operation makes (`APPLY f INCREMENT BY n`, `RESTART WITH v`).
public enum CounterChange: Sendable, Hashable {
    case increment(Value)
    case restart(Value)
}

/// A local write the rules refuse.
public struct EditError: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// The local write rules of one document: turns what statements ask (insert these
/// fields, set this path, unset that one, increment a counter, delete) into register
/// writes, each stamped by the clock, against the document's registers.
///
/// Pure apart from the clock: the store loads the registers, runs an edit, saves the
/// registers in `written` and the body the registers now materialize to.
public struct DocumentEditor {
    public let site: SiteID
    /// The name this replica's counter contributions go under (`n\u{1F}<counterSite>`):
    /// the store's incarnation, a new one each time it opens (DATA_MODEL.md §7).
    public let counterSite: SiteID
    public let clock: HybridLogicalClock
    public let transaction: TransactionID
    public private(set) var registers: DocumentRegisters
    /// Registers this replica held once and EVICT removed (`DocumentRegisters.counters(of:)`):
    /// the write rules read them where the document's own are absent or older; they
    /// are never written, and the body never shows them.
    public let remembered: DocumentRegisters
    /// Every register write, in order: the transaction's deltas for this document.
    public private(set) var written: [(name: String, state: RegisterState)] = []

    public init(
        registers: DocumentRegisters, remembered: DocumentRegisters = DocumentRegisters(), site: SiteID,
        counterSite: SiteID? = nil, clock: HybridLogicalClock, transaction: TransactionID
    ) {
        self.registers = registers
        self.remembered = remembered
        self.site = site
        self.counterSite = counterSite ?? site
        self.clock = clock
        self.transaction = transaction
    }

    /// The newer of the register the document holds and the one remembered of it.
    func known(_ name: String) -> RegisterState? {
        guard let old = remembered[name] else { return registers[name] }
        var both = DocumentRegisters([name: old])
        if let held = registers[name] { both.merge(name, held) }
        return both[name]
    }

    /// INSERT: writes `names` of `fields` (the caller chose which, by conflict policy).
    /// INITIAL DOCUMENTS write plain registers at time zero, and only names the
    /// document holds no register of, so they never override any write.
    public mutating func insert(_ fields: [String: Value], names: [String], initial: Bool, kinds: [String: FieldKind]) throws(EditError) {
        for name in names {
            guard let value = fields[name] else { continue }
            if initial {
                guard registers[name] == nil else { continue }
                try writeField(name, value: value, initial: true)
            } else if registers.isMap(name, declared: kinds[name] == .map) {
                try writeMap([name], value: value)
            } else {
                try writeField(name, value: value, initial: false)
            }
        }
    }

    /// UPDATE of one document: counter operations, then assignments and UNSETs, as the
    /// statement lists them, with values already evaluated against `original`.
    ///
    /// A dot path into a map, or into a field the document does not have, writes map
    /// entries; a whole object on a map replaces its entries; a plain value replaces
    /// the map with the register. A register holding an object stays one: `SET a.b`
    /// and `UNSET a.b` rewrite the whole of `a`.
    public mutating func update(
        counters: [(field: String, change: CounterChange)], assignments: [(path: [String], value: Value)],
        unsets: [[String]], kinds: [String: FieldKind], original: [String: Value]
    ) throws(EditError) {
        for (field, change) in counters {
            switch change {
            case .restart(let value): try writeField(field, value: value, initial: false)
            case .increment(let amount): try increment(field, by: amount)
            }
        }
        var body = original
        var changed: [String] = []
        for (path, value) in assignments {
            let top = path[0]
            if registers.isMap(top, declared: kinds[top] == .map) || (path.count > 1 && body[top] == nil) {
                if path.count == 1 && value.objectValue == nil {
                    try writeMap(path, value: nil)
                } else {
                    try writeMap(path, value: value)
                    continue
                }
            }
            body[top] = DocumentRegisters.setting(body[top], path: path.dropFirst(), to: value)
            if !changed.contains(top) { changed.append(top) }
        }
        for path in unsets {
            let top = path[0]
            if registers.isMap(top, declared: false) {
                try writeMap(path, value: nil)
                if path.count > 1 { continue }
            }
            if path.count == 1 {
                body[top] = nil
            } else if let current = body[top] {
                body[top] = DocumentRegisters.removing(current, path: path.dropFirst())
            }
            if !changed.contains(top) { changed.append(top) }
        }
        for top in changed {
            if let value = body[top] {
                try writeField(top, value: value, initial: false)
            } else {
                try writeField(top, json: RegisterName.removedValue, parsed: nil, initial: false)
            }
        }
    }

    /// DELETE: the tombstone, which hides every register written at or before it.
    ///
    /// Its timestamp is above every register the document holds, so it hides them all
    /// even when one came from a peer whose clock runs far ahead of this one, which
    /// this clock declined to adopt.
    public mutating func delete() throws(EditError) {
        let newest = registers.registers.max { $0.value.version.timestamp < $1.value.version.timestamp }
        try writeField(
            RegisterName.tombstone, json: Value.bool(true).canonicalJSON, parsed: .bool(true), initial: false,
            above: newest.map { ($0.key, $0.value.version.timestamp) })
    }

    /// INCREMENT adds to this site's contribution under the counter's current base
    /// (its epoch): the version of the base, or else of the tombstone, or else time
    /// zero. A contribution under another epoch, or buried by a DELETE, starts again
    /// from zero.
    ///
    /// After EVICT, until peers send the document back, the base, the tombstone and
    /// this site's contribution are the ones remembered, so the new contribution (a
    /// later version, which supersedes the old one everywhere) carries the old
    /// increments and the new ones, under the epoch the old ones were counted in.
    mutating func increment(_ field: String, by amount: Value) throws(EditError) {
        let tombstone = known(RegisterName.tombstone)?.version
        let tombstoneTime = tombstone?.timestamp ?? .zero
        let base = known(field)?.version
        let epoch = Counter.Epoch(base.flatMap { $0.timestamp > tombstoneTime ? $0 : nil } ?? tombstone)
        let name = Counter.contributionField(field, site: counterSite)
        let mine = known(name).flatMap { state -> Counter.Contribution? in
            guard state.version.timestamp > tombstoneTime else { return nil }
            return (try? state.value()).flatMap(Counter.Contribution.init)
        }
        var contribution = Counter.Contribution(epoch: epoch, up: .int(0), down: .int(0))
        if let mine, mine.epoch.counts(in: epoch) {
            // Carried on under the full epoch (one written before epochs named their site gains it).
            contribution.up = mine.up
            contribution.down = mine.down
        }
        contribution.add(amount)
        try writeField(name, value: contribution.value, initial: false)
    }

    /// Replaces the map subtree at `path` with `value` (nil: removes it). Entries the
    /// new value does not rewrite get observed removals, so entries added concurrently
    /// elsewhere survive (add-wins); values at the ancestors of `path` (a scalar entry
    /// `m.a` under a new `m.a.b`) are replaced too, so they cannot reappear when the
    /// new entry goes. An empty object at an ancestor is a map already and stays.
    ///
    /// Writing entries gives the field its base, the register `m = {}`, if it has none
    /// (replacing a value there): the field stays a map, however many entries go.
    /// A plain value or `{}` at the field itself is the register; nothing at all (UNSET
    /// m, or before a plain value) leaves the register to the caller.
    public mutating func writeMap(_ path: [String], value: Value?) throws(EditError) {
        let field = path[0]
        let prefix = RegisterName.entry(path)
        var leaves: [String: Value] = [:]
        func flatten(_ v: Value, _ name: String) {
            if case .object(let members) = v, !members.isEmpty {
                for (k, child) in members { flatten(child, name + String(RegisterName.pathSeparator) + k) }
            } else {
                leaves[name] = v
            }
        }
        if let value { flatten(value, prefix) }
        for name in leaves.keys {
            for component in name.split(separator: RegisterName.pathSeparator, omittingEmptySubsequences: false)
            where component.contains(Counter.separator) || component.contains(RegisterName.pathSeparator) {
                throw EditError("map keys may not contain U+001E or U+001F")
            }
        }
        let writesEntries = path.count > 1 || (value != nil && leaves[field] == nil)
        if writesEntries, !registers.hasMapBase(field) {
            try writeField(field, json: RegisterName.emptyObject, parsed: .object([:]), initial: false)
        }
        var existing = registers.liveEntries(under: prefix)
        for depth in 2..<max(2, path.count) {
            let ancestor = RegisterName.entry(Array(path[0..<depth]))
            if !registers.hasMapBase(ancestor), let version = registers.liveVersion(ancestor) { existing.append((ancestor, version)) }
        }
        for entry in existing where leaves[entry.name] == nil {
            // An empty nested map that the new leaves go into stays.
            let below = entry.name + String(RegisterName.pathSeparator)
            if registers.hasMapBase(entry.name), leaves.keys.contains(where: { $0.hasPrefix(below) }) { continue }
            store(
                entry.name,
                RegisterState(
                    json: RegisterName.observedRemovalPrefix + entry.version.site.description, version: entry.version,
                    transaction: transaction))
        }
        for (name, leaf) in leaves.sorted(by: { $0.key < $1.key }) {
            try writeField(name, value: leaf, initial: false)
        }
    }

    mutating func writeField(_ name: String, value: Value, initial: Bool) throws(EditError) {
        try writeField(name, json: value.canonicalJSON, parsed: value, initial: initial)
    }

    /// A register write with a fresh timestamp: one that supersedes the value it
    /// overwrites, and shows above the document's tombstone, even when either came
    /// from a clock running far ahead, which this clock declined to adopt. INITIAL
    /// DOCUMENTS write at time zero.
    ///
    /// - Parameter above: the register whose timestamp the write must exceed; by
    ///   default the newer of the register written and the tombstone.
    mutating func writeField(
        _ name: String, json: String, parsed: Value?, initial: Bool, above: (name: String, timestamp: HybridTimestamp)? = nil
    ) throws(EditError) {
        var ts = HybridTimestamp.zero
        if !initial {
            ts = clock.tick()
            let floor = above ?? [name, RegisterName.tombstone].compactMap { n in known(n).map { (n, $0.version.timestamp) } }
                .max { $0.1 < $1.1 }
            if let (register, current) = floor, current >= ts {
                guard current.rawValue < UInt64.max else {
                    throw EditError(
                        "field \(register) carries the largest possible timestamp (a peer's clock is broken); it cannot be overwritten")
                }
                ts = HybridTimestamp(rawValue: current.rawValue + 1)
            }
        }
        store(name, RegisterState(json: json, version: RegisterVersion(timestamp: ts, site: site), transaction: transaction, parsed: parsed))
    }

    private mutating func store(_ name: String, _ state: RegisterState) {
        registers.set(name, state)
        written.append((name, state))
    }
}

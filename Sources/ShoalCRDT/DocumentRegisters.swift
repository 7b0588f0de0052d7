/// How register names and values encode the field kinds (see DATA_MODEL.md).
///
/// ```
///   f            a top-level field: a REGISTER, an ATTACHMENT token, or a counter's base
///   f␞k␞k2       a MAP entry at path f.k.k2           (␞ = U+001E)
///   f␟<site>     a counter contribution of that site  (␟ = U+001F)
///   _deleted     the tombstone DELETE writes
/// ```
/// A value is canonical JSON, or `""` for a register removed by UNSET, or `~SITE` for
/// an observed removal of a map entry (its version is the removed value's).
public enum RegisterName {
    public static let tombstone = "_deleted"
    public static let pathSeparator: Character = "\u{1E}"
    /// `pathSeparator` as its one UTF-8 byte.
    public static let pathSeparatorByte: UInt8 = 0x1E

    /// Whether `name` names a MAP entry (it has a path separator). Checked by byte: an
    /// ASCII control is in no other character's UTF-8, and `String.contains` of a
    /// `Character` walks grapheme clusters.
    public static func isPath(_ name: String) -> Bool { name.utf8.contains(pathSeparatorByte) }

    /// The register of a document's `_id`.
    public static let idField = "_id"
    public static let removedValue = ""
    public static let observedRemovalPrefix = "~"
    /// The canonical JSON of an empty object, the value of a map's base register.
    public static let emptyObject = "{}"

    /// Whether a stored value is a removal (UNSET's empty value or an observed removal).
    public static func isRemoval(_ json: String) -> Bool {
        json.isEmpty || json.hasPrefix(observedRemovalPrefix)
    }

    /// The top-level field a register belongs to.
    public static func field(of name: String) -> Substring {
        name.prefix { $0 != pathSeparator && $0 != Counter.separator }
    }

    /// The name of the map entry at `path` (its first component is the field).
    public static func entry(_ path: [String]) -> String { path.joined(separator: String(pathSeparator)) }
}

/// One register as stored: its value, its version, and the transaction that wrote it.
public struct RegisterState: Sendable, Hashable {
    /// Canonical JSON, or a removal (`RegisterName.isRemoval`).
    public var json: String
    /// What wins LWW: (timestamp, site); an observed removal carries the version it removed.
    public var version: RegisterVersion
    public var transaction: TransactionID
    /// The value `json` holds, when known already (nil for removals and until parsed).
    public var parsed: Value?

    public init(json: String, version: RegisterVersion, transaction: TransactionID, parsed: Value? = nil) {
        self.json = json
        self.version = version
        self.transaction = transaction
        self.parsed = parsed
    }

    public var isRemoval: Bool { RegisterName.isRemoval(json) }

    /// Whether the value is exactly `{}`: at a field, the base of a MAP; at a map
    /// entry, a nested map that lays over what is below it rather than hiding it.
    public var isEmptyObject: Bool { json == RegisterName.emptyObject }

    /// Equal when what is stored is equal: `parsed` is a cache of `json`.
    public static func == (a: RegisterState, b: RegisterState) -> Bool {
        a.json == b.json && a.version == b.version && a.transaction == b.transaction
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(json)
        hasher.combine(version)
        hasher.combine(transaction)
    }

    /// The state a received delta would give its register: its version is (timestamp,
    /// origin site), or for an observed removal (timestamp, the removed value's site).
    public init(delta: Delta, parsed: Value? = nil) {
        var site = delta.site
        if delta.valueJSON.hasPrefix(RegisterName.observedRemovalPrefix),
            let removed = SiteID(hex: delta.valueJSON.dropFirst())
        {
            site = removed
        }
        self.init(
            json: delta.valueJSON, version: RegisterVersion(timestamp: delta.timestamp, site: site),
            transaction: delta.transaction, parsed: parsed)
    }

    /// The value, parsing `json` if it was not known yet.
    func value() throws(JSON.ParseError) -> Value {
        if let parsed { return parsed }
        return try JSON.parse(json)
    }
}

/// The registers of one document and the rules that merge them and build its body.
///
/// Pure: no I/O. The store loads a document's registers, lets this type merge received
/// deltas or plan local writes (`DocumentEditor`), saves what changed, and saves the
/// body `materialize` returns.
public struct DocumentRegisters: Sendable, Hashable {
    public private(set) var registers: [String: RegisterState]
    /// How many names are map entries (hold `RegisterName.pathSeparator`): a document
    /// without any has no entries to look through when a write asks whether a field is a MAP.
    private var entryNames: Int

    public init(_ registers: [String: RegisterState] = [:]) {
        self.registers = registers
        entryNames = registers.keys.count(where: Self.isEntryName)
    }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.registers == rhs.registers }
    public func hash(into hasher: inout Hasher) { hasher.combine(registers) }

    private static func isEntryName(_ name: String) -> Bool { RegisterName.isPath(name) }

    public subscript(name: String) -> RegisterState? { registers[name] }
    public var isEmpty: Bool { registers.isEmpty }

    /// Sets a register as a local write does: unconditionally.
    public mutating func set(_ name: String, _ state: RegisterState) {
        if registers.updateValue(state, forKey: name) == nil, Self.isEntryName(name) { entryNames += 1 }
    }

    /// Forgets every register (EVICT).
    public mutating func removeAll() {
        registers = [:]
        entryNames = 0
    }

    /// Merges a received register last-writer-wins; true when it replaced the stored one.
    ///
    /// Higher version wins; at equal versions a removal beats a value (an observed
    /// removal of exactly the value stored), two different values (INITIAL
    /// DOCUMENTS rewritten after EVICT, at time zero), or two different removals,
    /// converge on the larger bytes, and equal ones on the later transaction ID.
    @discardableResult
    public mutating func merge(_ name: String, _ incoming: RegisterState) -> Bool {
        // One lookup: the name is hashed once whether it is new or replaces a register.
        guard let slot = registers.index(forKey: name) else {
            registers[name] = incoming
            if Self.isEntryName(name) { entryNames += 1 }
            return true
        }
        let current = registers.values[slot]
        var wins = Register.incomingWins(
            incoming.version, removes: incoming.isRemoval, over: current.version, removed: current.isRemoval)
        // Two values (or two removals) at one version: the larger bytes, so that the
        // state is ordered by (version, is a removal, bytes) and merging keeps the maximum.
        if !wins, incoming.version == current.version, incoming.isRemoval == current.isRemoval {
            if incoming.json != current.json {
                wins = !Array(incoming.json.utf8).lexicographicallyPrecedes(Array(current.json.utf8))
            } else {
                // Two replicas removing the same value write equal removals from
                // different transactions: keep the later ID, so that every replica
                // records the same writer.
                wins = incoming.transaction > current.transaction
            }
        }
        if wins { registers.values[slot] = incoming }
        return wins
    }

    /// Makes room for `count` registers in all, so that merging that many rehashes nothing.
    public mutating func reserveCapacity(_ count: Int) {
        registers.reserveCapacity(count)
    }

    // MARK: Reading

    /// The timestamp of a register, removals included.
    public func timestamp(_ name: String) -> HybridTimestamp? { registers[name]?.version.timestamp }

    /// The newest timestamp of any register, removals and the tombstone included.
    public var latestTimestamp: HybridTimestamp? { registers.values.map(\.version.timestamp).max() }

    /// The version of a register that holds a value (not a removal).
    public func liveVersion(_ name: String) -> RegisterVersion? {
        guard let r = registers[name], !r.isRemoval else { return nil }
        return r.version
    }

    /// The live map entries at `prefix` and below. The entry at `prefix` itself counts
    /// only below the top level: at the top level it is the field's register.
    public func liveEntries(under prefix: String) -> [(name: String, version: RegisterVersion)] {
        // Every name this returns is an entry name (`exact` holds the separator too).
        guard entryNames > 0 else { return [] }
        let below = prefix + String(RegisterName.pathSeparator)
        let exact = RegisterName.isPath(prefix) ? prefix : nil
        return registers.compactMap { name, state in
            guard !state.isRemoval, name == exact || name.hasPrefix(below) else { return nil }
            return (name, state.version)
        }.sorted { $0.name < $1.name }
    }

    /// Whether `field` is a MAP in this document: declared so, holding the map's base
    /// (its register is exactly `{}`), or holding live entries newer than any live
    /// register value (the side that won a type conflict).
    public func isMap(_ field: String, declared: Bool) -> Bool {
        if declared || hasMapBase(field) { return true }
        guard let newest = liveEntries(under: field).map(\.version).max() else { return false }
        guard let register = liveVersion(field) else { return true }
        return newest > register
    }

    /// Whether the register `name` holds exactly `{}` (a map's base, or an empty nested map).
    public func hasMapBase(_ name: String) -> Bool { registers[name]?.isEmptyObject ?? false }

    /// What `site`'s increments read of this document: its own contributions, the
    /// base of every counter anyone incremented, and the tombstone. EVICT keeps these,
    /// since an increment made before peers send the document back must carry on from
    /// them (`DocumentEditor.init(registers:remembered:…)`).
    ///
    /// The base of a counter `site` has not incremented yet is kept too: without it, an
    /// increment on the document sent back in part (another field before the base)
    /// would count in epoch zero, which the base, once back, would not count: an
    /// acknowledged increment lost (found by shoal-check: a node restarted, so under a
    /// new contribution, evicted a collection and decremented a counter of it).
    ///
    /// The tombstone is kept whenever the document has a counter, for the same reason:
    /// a counter with no base (a document deleted and written again without it) counts
    /// in the tombstone's epoch.
    public func counters(of site: SiteID) -> DocumentRegisters {
        var kept: [String: RegisterState] = [:]
        var hasCounter = false
        for (name, state) in registers {
            guard let counter = Counter.counterName(ofContribution: name) else { continue }
            hasCounter = true
            if Counter.isContribution(name, of: site) { kept[name] = state }
            if let base = registers[counter] { kept[counter] = base }
        }
        if hasCounter, let tombstone = registers[RegisterName.tombstone] { kept[RegisterName.tombstone] = tombstone }
        return DocumentRegisters(kept)
    }

    /// Whether this document holds `name` at `state`'s version or a later one, which
    /// makes a remembered `state` of it useless.
    public func covers(_ name: String, _ state: RegisterState) -> Bool {
        guard let held = registers[name] else { return false }
        return held.version >= state.version
    }

    // MARK: The body

    public enum Body: Sendable, Hashable {
        /// The document, as queries see it.
        case live(Value)
        /// A tombstone hides every value: the document is deleted.
        case deleted
        /// No live register and no tombstone.
        case absent

        /// A body as its canonical JSON (`materializedJSON`).
        public enum Text: Sendable, Hashable {
            case live(String)
            case deleted
            case absent
        }
    }

    /// The body `materialize` builds, as the canonical JSON the store saves: `.live`
    /// holds the text.
    ///
    /// A document whose registers are all plain top-level fields (no tombstone, no
    /// removal, no map, no counter contribution) is the common case; its text is
    /// written straight from the registers' own canonical JSON, with no value built
    /// and none encoded again.
    public func materializedJSON(key: String) throws(JSON.ParseError) -> Body.Text {
        if let text = plainBodyJSON() { return .live(text) }
        switch try materialize(key: key) {
        case .live(let value): return .live(value.canonicalJSON)
        case .deleted: return .deleted
        case .absent: return .absent
        }
    }

    /// `{"name":json,...}` in key order, or nil when any register needs `materialize`.
    private func plainBodyJSON() -> String? {
        guard registers[RegisterName.idField] != nil else { return nil }
        var fields: [(name: String, json: String)] = []
        fields.reserveCapacity(registers.count)
        // `{`, `}`, and for each field `"name":json` and a comma (one too many).
        var length = 2
        var escaping = false
        for (name, state) in registers {
            let json = state.json
            guard !RegisterName.isRemoval(json), json != RegisterName.emptyObject, name != RegisterName.tombstone else { return nil }
            // One look at the name: the separators of map entries and counter
            // contributions (both control bytes), and whether it needs escaping.
            for byte in name.utf8 where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                if byte == RegisterName.pathSeparatorByte || byte == Counter.separatorByte { return nil }
                escaping = true
            }
            fields.append((name, json))
            length += name.utf8.count + json.utf8.count + 4
        }
        fields.sort { $0.name < $1.name }
        guard !escaping else {
            var out = "{"
            for (index, field) in fields.enumerated() {
                if index > 0 { out += "," }
                JSON.writeString(field.name, to: &out)
                out += ":"
                out += field.json
            }
            out += "}"
            return out
        }
        // Nothing to escape: the bytes are copied straight into the body.
        return String(unsafeUninitializedCapacity: length) { buffer in
            var at = 0
            func put(_ byte: UInt8) {
                buffer[at] = byte
                at += 1
            }
            func put(_ text: String) {
                let copied = text.utf8.withContiguousStorageIfAvailable { bytes in
                    _ = UnsafeMutableBufferPointer(rebasing: buffer[at...]).initialize(fromContentsOf: bytes)
                    return bytes.count
                }
                if let copied {
                    at += copied
                } else {
                    for byte in text.utf8 { put(byte) }
                }
            }
            put(UInt8(ascii: "{"))
            for (index, field) in fields.enumerated() {
                if index > 0 { put(UInt8(ascii: ",")) }
                put(UInt8(ascii: "\""))
                put(field.name)
                put(UInt8(ascii: "\""))
                put(UInt8(ascii: ":"))
                put(field.json)
            }
            put(UInt8(ascii: "}"))
            return at
        }
    }

    /// Builds the document's body from its registers.
    ///
    /// Every register written at or before the tombstone is hidden; removals show
    /// nothing (and do not revive a deleted document); map entries are laid onto `{}`
    /// in version order, an entry `{}` keeping the members of an object already at
    /// its path; a field whose register is `{}` (the map's base) shows all its
    /// entries, whatever their versions (those a writer saw it remove are removed
    /// already: the rest are concurrent adds, and adds win); any other field that is
    /// both a register and a map shows whichever was written last; a counter shows its base plus the contributions of its epoch
    /// (the version of the base, or of the tombstone, or time zero);
    /// `_id`, when no live `_id` register is visible, is the document key parsed back.
    public func materialize(key: String) throws(JSON.ParseError) -> Body {
        let tombstoneVersion = registers[RegisterName.tombstone]?.version
        let tombstone = tombstoneVersion?.timestamp.rawValue
        var body: [String: Value] = [:]
        var bases: [String: RegisterVersion] = [:]
        var registerVersions: [String: RegisterVersion] = [:]
        var contributions: [String: [Counter.Contribution]] = [:]
        var entries: [String: [(path: [String], value: Value, version: RegisterVersion, empty: Bool)]] = [:]
        var mapBases: Set<String> = []
        var anyLive = false
        for (name, state) in registers {
            guard name != RegisterName.tombstone else { continue }
            let ts = state.version.timestamp.rawValue
            if let tombstone, ts <= tombstone { continue }
            // Only a write revives a deleted document; a removal does not.
            if !state.isRemoval { anyLive = true }
            if let counter = Counter.counterName(ofContribution: name) {
                if !state.isRemoval, let c = Counter.Contribution(try state.value()) { contributions[counter, default: []].append(c) }
                continue
            }
            if RegisterName.isPath(name) {
                guard !state.isRemoval else { continue }
                let path = name.split(separator: RegisterName.pathSeparator, omittingEmptySubsequences: false).map(String.init)
                entries[path[0], default: []].append((Array(path.dropFirst()), try state.value(), state.version, state.isEmptyObject))
                continue
            }
            bases[name] = state.version
            if !state.isRemoval {
                body[name] = try state.value()
                registerVersions[name] = state.version
                if state.isEmptyObject { mapBases.insert(name) }
            }
        }
        for (name, list) in entries {
            if !mapBases.contains(name), let register = registerVersions[name], register > list.map(\.version).max()! { continue }
            var map: Value? = .object([:])
            for entry in list.sorted(by: { $0.version < $1.version }) {
                Self.lay(&map, path: entry.path[...], to: entry.value, empty: entry.empty)
            }
            body[name] = map
        }
        for (name, parts) in contributions {
            // Without a visible base the counter counts from the tombstone (or from time zero).
            let epoch = Counter.Epoch(bases[name] ?? tombstoneVersion)
            guard body[name] != nil || parts.contains(where: { $0.epoch.counts(in: epoch) }) else { continue }
            body[name] = Counter.value(base: body[name], epoch: epoch, contributions: parts)
        }
        guard anyLive else { return tombstone != nil ? .deleted : .absent }
        // A field written after a delete revives the document; its identity comes from the key.
        if body[RegisterName.idField] == nil { body[RegisterName.idField] = try JSON.parse(key) }
        return .live(.object(body))
    }

    /// `base` with the value at `path` replaced, creating objects along the way.
    public static func setting(_ base: Value?, path: ArraySlice<String>, to value: Value) -> Value {
        guard let first = path.first else { return value }
        var object = base?.objectValue ?? [:]
        object[first] = setting(object[first], path: path.dropFirst(), to: value)
        return .object(object)
    }

    /// Lays a map entry onto what the entries before it built: like `setting`, except
    /// that an empty object (`empty`) keeps the members of an object already there.
    ///
    /// In place: each object on the path is taken out of `target` and changed while
    /// nothing else holds it, so laying a map's n entries walks n paths, where
    /// building a new object for each would copy the map n times.
    static func lay(_ target: inout Value?, path: ArraySlice<String>, to value: Value, empty: Bool) {
        guard let first = path.first else {
            if empty, target?.objectValue != nil { return }
            target = value
            return
        }
        var object: [String: Value] = [:]
        if case .object(let members)? = target { object = members }
        target = nil
        lay(&object[first], path: path.dropFirst(), to: value, empty: empty)
        target = .object(object)
    }

    /// `base` without the member at `path` (unchanged when the path is absent).
    public static func removing(_ base: Value, path: ArraySlice<String>) -> Value {
        guard let first = path.first, var object = base.objectValue, let child = object[first] else { return base }
        if path.count == 1 {
            object.removeValue(forKey: first)
        } else {
            object[first] = removing(child, path: path.dropFirst())
        }
        return .object(object)
    }
}

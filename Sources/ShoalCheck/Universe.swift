public import ShoalCRDT

/// The documents and fields a run writes, and how a document's body shows each slot.
///
/// | collection | documents | slots | value |
/// |---|---|---|---|
/// | `reg` | `r0`… | `f0`, `f1`, `f2` | a register holding a token |
/// | `mp` | `p0`… | `m.k0`…`m.k3` | entries of the MAP `m`, each a token |
/// | `ct` | `c0`… | `n` (a counter), `w` | the counter's value; the token of the last increment |
/// | `att` | `a0`… | `a` | an ATTACHMENT token whose metadata `w` is the writer's token |
/// | `big` | `b0`… | `v` | `{"t": token, "pad": "…"}`, tens to hundreds of KiB |
public struct Universe: Sendable {
    public struct Collection: Sendable {
        public var name: String
        public var prefix: String
        public var documents: [String]
        /// Token slots' fields.
        public var fields: [String]
        /// Counter fields.
        public var counters: [String]
    }

    public var collections: [Collection]

    /// The standard layout with `documents` documents in each collection
    /// (`reg` gets twice as many, `big` half as many).
    public init(documents: Int) {
        func ids(_ prefix: String, _ count: Int) -> [String] { (0..<max(1, count)).map { "\(prefix)\($0)" } }
        collections = [
            Collection(name: "reg", prefix: "r", documents: ids("r", documents * 2), fields: ["f0", "f1", "f2"], counters: []),
            Collection(name: "mp", prefix: "p", documents: ids("p", documents), fields: Self.mapKeys.map { "m.\($0)" }, counters: []),
            Collection(name: "ct", prefix: "c", documents: ids("c", documents), fields: ["w"], counters: ["n"]),
            Collection(name: "att", prefix: "a", documents: ids("a", documents), fields: ["a"], counters: []),
            Collection(name: "big", prefix: "b", documents: ids("b", documents / 2), fields: ["v"], counters: []),
        ]
    }

    public static let mapKeys = ["k0", "k1", "k2", "k3"]

    public var names: [String] { collections.map(\.name) }

    public func collection(named name: String) -> Collection? { collections.first { $0.name == name } }

    /// The collection a document is in.
    public func collection(of document: String) -> String {
        collections.first { $0.documents.contains(document) }?.name ?? "?"
    }

    /// Every token slot of `collections` (all of them when nil).
    public func slots(in names: Set<String>? = nil) -> [Slot] {
        collections.filter { names?.contains($0.name) ?? true }.flatMap { c in
            c.documents.flatMap { d in c.fields.map { Slot(d, $0) } }
        }
    }

    /// Every counter slot of `collections` (all of them when nil).
    public func counterSlots(in names: Set<String>? = nil) -> [Slot] {
        collections.filter { names?.contains($0.name) ?? true }.flatMap { c in
            c.documents.flatMap { d in c.counters.map { Slot(d, $0) } }
        }
    }

    public static func isMapEntry(_ slot: Slot) -> Bool { slot.field.hasPrefix("m.") }

    /// What the live documents `items` (bodies of `collections`) show in each slot of
    /// those collections: a document not among them shows every slot absent.
    public func read(_ items: [Value], collections names: Set<String>) -> (values: [Slot: SlotValue], counters: [Slot: Double?]) {
        var bodies: [String: [String: Value]] = [:]
        for item in items {
            guard case .object(let body) = item, case .string(let id)? = body["_id"] else { continue }
            bodies[id] = body
        }
        var values: [Slot: SlotValue] = [:]
        for slot in slots(in: names) {
            values[slot] = Self.value(of: slot, in: bodies[slot.document])
        }
        var counters: [Slot: Double?] = [:]
        for slot in counterSlots(in: names) {
            switch bodies[slot.document]?[slot.field] {
            case .int(let n)?: counters[slot] = Double(n)
            case .double(let n)?: counters[slot] = n
            default: counters[slot] = .some(nil)
            }
        }
        return (values, counters)
    }

    /// The token a body shows in a slot. A value that holds no token (a deep path's
    /// object, a number) shows as the token `?` and its JSON, which no operation wrote.
    static func value(of slot: Slot, in body: [String: Value]?) -> SlotValue {
        guard let body else { return .absent }
        let path = slot.field.split(separator: ".").map(String.init)
        var current: Value? = .object(body)
        for key in path {
            guard case .object(let object)? = current else { return .absent }
            current = object[key]
        }
        switch current {
        case nil: return .absent
        case .string(let token)?: return .token(token)
        case .object(let object)?:
            // An attachment token names its writer in its metadata; a big value in `t`.
            if case .object(let metadata)? = object["metadata"], case .string(let token)? = metadata["w"] { return .token(token) }
            if case .string(let token)? = object["t"] { return .token(token) }
            return .token("?" + current!.canonicalJSON)
        case let other?: return .token("?" + other.canonicalJSON)
        }
    }
}

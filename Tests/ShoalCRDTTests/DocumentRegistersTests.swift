import Foundation
import ShoalCRDT
import ShoalTesting
import Testing

/// The merge rules and materialization alone: no store, no SQL. Random local edits on
/// 3-5 replicas of one document, every replica's register writes delivered to every
/// other in random order with duplicates; all must end with the same registers and
/// the same body. `SHOAL_REGISTERS_SEED` replays a run.
@Suite struct DocumentRegistersTests {
    static func randomValue(_ rng: inout SplitMix) -> Value {
        switch Int.random(in: 0..<6, using: &rng) {
        case 0: return .int(Int64.random(in: -3...3, using: &rng))
        case 1: return .string(["a", "b", "c"].randomElement(using: &rng)!)
        case 2: return .bool(Bool.random(using: &rng))
        case 3: return .null
        case 4: return .array([.int(Int64.random(in: 0...2, using: &rng))])
        default: return .object(["k": .int(Int64.random(in: 0...2, using: &rng))])
        }
    }

    /// One replica: its registers, its clock (a wall clock that moves only when told,
    /// sometimes far ahead of the others), and what it wrote.
    struct Replica {
        var registers = DocumentRegisters()
        let site: SiteID
        let clock: HybridLogicalClock
        var sequence: UInt64 = 0
        var written: [(name: String, state: RegisterState)] = []
    }

    static func edit(_ replica: inout Replica, _ rng: inout SplitMix) {
        replica.sequence += 1
        var editor = DocumentEditor(
            registers: replica.registers, site: replica.site, clock: replica.clock,
            transaction: TransactionID(origin: replica.site, sequence: replica.sequence))
        let field = "f\(Int.random(in: 0..<3, using: &rng))"
        let key = "k\(Int.random(in: 0..<2, using: &rng))"
        var original: [String: Value] = [:]
        if case .live(.object(let body))? = try? replica.registers.materialize(key: "\"d\"") { original = body }
        do {
            switch Int.random(in: 0..<14, using: &rng) {
            case 0, 1:
                let fields: [String: Value] = ["_id": "d", field: randomValue(&rng)]
                try editor.insert(fields, names: fields.keys.sorted(), initial: false, kinds: [:])
                if case .live(let body) = try editor.registers.materialize(key: "\"d\"") {
                    #expect(body[field] == fields[field], "a write shows, whatever it overwrote or was deleted by")
                } else {
                    Issue.record("an INSERT left the document hidden")
                }
            case 2:
                try editor.update(counters: [], assignments: [([field], randomValue(&rng))], unsets: [], kinds: [:], original: original)
            case 3:
                try editor.update(counters: [], assignments: [], unsets: [[field]], kinds: [:], original: original)
            case 4:
                try editor.delete()
                #expect(try editor.registers.materialize(key: "\"d\"") == .deleted, "a DELETE hides everything its replica holds")
            case 5:
                try editor.update(
                    counters: [("n", .increment(.int(Int64.random(in: -2...3, using: &rng))))], assignments: [], unsets: [],
                    kinds: [:], original: original)
            case 6:
                try editor.update(counters: [], assignments: [(["m", key], randomValue(&rng))], unsets: [], kinds: [:], original: original)
            case 7:
                try editor.update(counters: [], assignments: [], unsets: [["m", key]], kinds: [:], original: original)
            case 8:
                try editor.update(counters: [("n", .restart(.int(Int64.random(in: 0...5, using: &rng))))], assignments: [], unsets: [], kinds: [:], original: original)
            case 10:
                // A map emptied, or started, through its `{}` base.
                try editor.update(counters: [], assignments: [(["m"], [:])], unsets: [], kinds: [:], original: original)
            case 11:
                try editor.update(counters: [], assignments: [(["m", key], [:])], unsets: [], kinds: [:], original: original)
            case 12:
                let inner = "k\(Int.random(in: 0..<2, using: &rng))"
                try editor.update(counters: [], assignments: [(["m", key, inner], randomValue(&rng))], unsets: [], kinds: [:], original: original)
            case 13:
                try editor.update(counters: [], assignments: [], unsets: [["m"]], kinds: [:], original: original)
            default:
                let fields: [String: Value] = ["_id": "d", "init": randomValue(&rng)]
                try editor.insert(fields, names: fields.keys.sorted(), initial: true, kinds: [:])
            }
        } catch {
            Issue.record("a random edit failed: \(error)")
        }
        replica.registers = editor.registers
        replica.written += editor.written
    }

    @Test func randomHistoriesConvergeWithoutAStore() {
        let seed = UInt64(ProcessInfo.processInfo.environment["SHOAL_REGISTERS_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max)
        var rng = SplitMix(state: seed)
        var failures = 0
        for n in 0..<3_000 where failures == 0 {
            let count = Int.random(in: 3...5, using: &rng)
            var replicas = (0..<count).map { i -> Replica in
                // Wall clocks differ, some by hours; each clock only moves when an edit ticks it.
                let skew = UInt64.random(in: 0...3, using: &rng) == 0 ? UInt64.random(in: 0...7_200_000, using: &rng) : 0
                let wall = 1_700_000_000_000 + skew + UInt64(i)
                return Replica(site: SiteID(UInt64(i + 1) << 8 | UInt64(n % 256)), clock: HybridLogicalClock(wallClock: { wall }))
            }
            for _ in 0..<Int.random(in: 2...8, using: &rng) {
                let i = Int.random(in: 0..<count, using: &rng)
                Self.edit(&replicas[i], &rng)
                // Sometimes a replica hears another's writes before writing again.
                if Bool.random(using: &rng) {
                    let j = Int.random(in: 0..<count, using: &rng)
                    for (name, state) in replicas[j].written { replicas[i].registers.merge(name, state) }
                }
            }
            let everything = replicas.flatMap(\.written)
            var bodies: [String] = []
            for i in replicas.indices {
                var incoming = everything + everything.filter { _ in Bool.random(using: &rng) }
                incoming.shuffle(using: &rng)
                for (name, state) in incoming { replicas[i].registers.merge(name, state) }
                let body = try? replicas[i].registers.materialize(key: "\"d\"")
                bodies.append("\(String(describing: body.map(Self.describe)))")
                let text = try? replicas[i].registers.materializedJSON(key: "\"d\"")
                if text.map(Self.describe) != body.map(Self.describe) {
                    failures += 1
                    Issue.record("case \(n) (seed \(seed)): the body's text \(String(describing: text)) is not \(String(describing: body))")
                }
            }
            if Set(bodies).count != 1 || Set(replicas.map(\.registers)).count != 1 {
                failures += 1
                Issue.record("case \(n) (seed \(seed)) diverged:\n\(bodies.joined(separator: "\n"))")
            }
        }
        #expect(failures == 0, "seed \(seed)")
    }

    static func describe(_ body: DocumentRegisters.Body.Text) -> String {
        switch body {
        case .live(let json): return json
        case .deleted: return "deleted"
        case .absent: return "absent"
        }
    }

    /// A document of plain fields has its text written from its registers' JSON: the
    /// same text, byte for byte, as the body `materialize` builds and encodes.
    @Test(arguments: [
        ["_id": "d"] as [String: Value],
        ["_id": "d", "title": "x", "n": 3, "ok": true, "none": .null],
        ["_id": .int(7), "b": ["z": 1, "a": [1, "two", ["k": false]]], "a": 1.5],
        ["_id": "d", "qu\"ote": "back\\slash\n", "\u{e9}t\u{e9}": "\u{1F600}", "z": "", "Z": -0.25, "é": 1],
        ["_id": "d", "m": ["k": 1] as Value],
        ["_id": "a-rather-long-document-identifier", "a field with a long name": "a value long enough to live on the heap"],
    ])
    func aPlainDocumentsTextIsItsBodyEncoded(fields: [String: Value]) throws {
        var editor = DocumentEditor(
            registers: DocumentRegisters(), site: SiteID(1), clock: HybridLogicalClock(wallClock: { 1_700_000_000_000 }),
            transaction: TransactionID(origin: SiteID(1), sequence: 1))
        try editor.insert(fields, names: fields.keys.sorted(), initial: false, kinds: [:])
        let body = try editor.registers.materialize(key: "\"d\"")
        guard case .live(let value) = body else {
            Issue.record("an INSERT left the document hidden")
            return
        }
        #expect(try editor.registers.materializedJSON(key: "\"d\"") == .live(value.canonicalJSON))
    }

    static func describe(_ body: DocumentRegisters.Body) -> String {
        switch body {
        case .live(let value): return value.canonicalJSON
        case .deleted: return "deleted"
        case .absent: return "absent"
        }
    }

    /// Merge is a join: commutative, associative, idempotent, for every pair of the
    /// interesting register states (values, removals, observed removals, equal versions).
    @Test func mergeIsAJoin() {
        let a = SiteID(1), b = SiteID(2)
        func state(_ json: String, _ ts: UInt64, _ site: SiteID) -> RegisterState {
            RegisterState(
                json: json, version: RegisterVersion(timestamp: HybridTimestamp(rawValue: ts), site: site),
                transaction: TransactionID(origin: site, sequence: ts))
        }
        let states = [
            state("1", 5, a), state("2", 5, a), state("1", 5, b), state("", 5, a), state("~0000000000000001", 5, a),
            state("3", 6, a), state("", 6, b), state("\"x\"", 0, a), state("\"y\"", 0, a),
        ]
        for x in states {
            for y in states {
                var xy = DocumentRegisters(), yx = DocumentRegisters()
                xy.merge("f", x)
                xy.merge("f", y)
                yx.merge("f", y)
                yx.merge("f", x)
                #expect(xy == yx, "\(x.json)@\(x.version.timestamp) and \(y.json)@\(y.version.timestamp)")
                var twice = xy
                twice.merge("f", y)
                #expect(twice == xy)
                for z in states {
                    var left = xy, right = DocumentRegisters()
                    left.merge("f", z)
                    right.merge("f", y)
                    right.merge("f", z)
                    right.merge("f", x)
                    #expect(left == right)
                }
            }
        }
    }

    @Test func materializeShowsMapsCountersAndTombstones() throws {
        let site = SiteID(7)
        var editor = DocumentEditor(
            registers: DocumentRegisters(), site: site, clock: HybridLogicalClock(wallClock: { 1_000 }),
            transaction: TransactionID(origin: site, sequence: 1))
        try editor.insert(["_id": "d", "title": "x", "m": ["a": 1, "b": ["c": 2]]], names: ["_id", "m", "title"], initial: false, kinds: ["m": .map])
        try editor.update(counters: [("n", .increment(5)), ("n", .increment(-2))], assignments: [], unsets: [], kinds: [:], original: [:])
        #expect(try editor.registers.materialize(key: "\"d\"") == .live(["_id": "d", "title": "x", "m": ["a": 1, "b": ["c": 2]], "n": 3]))
        #expect(editor.registers["m\u{1E}b\u{1E}c"]?.json == "2", "a map is one register per leaf")
        try editor.update(counters: [], assignments: [], unsets: [["m", "a"]], kinds: [:], original: [:])
        #expect(editor.registers["m\u{1E}a"]?.json == "~0000000000000007", "an observed removal names the value's site")
        try editor.delete()
        #expect(try editor.registers.materialize(key: "\"d\"") == .deleted)
        try editor.insert(["_id": "d", "after": true], names: ["_id", "after"], initial: false, kinds: [:])
        #expect(try editor.registers.materialize(key: "\"d\"") == .live(["_id": "d", "after": true]), "only what came after the delete")
    }

    /// Two RESTARTs at one timestamp on two sites: the base of the higher site wins,
    /// and only increments made against it count, on both replicas.
    @Test func incrementsAgainstABaseThatLostATieDoNotCount() throws {
        let a = SiteID(1), b = SiteID(2)
        let clock = { HybridLogicalClock(wallClock: { 1_000 }) }
        var one = DocumentEditor(registers: DocumentRegisters(), site: a, clock: clock(), transaction: TransactionID(origin: a, sequence: 1))
        var two = DocumentEditor(registers: DocumentRegisters(), site: b, clock: clock(), transaction: TransactionID(origin: b, sequence: 1))
        try one.update(counters: [("n", .restart(10)), ("n", .increment(1))], assignments: [], unsets: [], kinds: [:], original: [:])
        try two.update(counters: [("n", .restart(20)), ("n", .increment(2))], assignments: [], unsets: [], kinds: [:], original: [:])
        #expect(one.registers["n"]?.version.timestamp == two.registers["n"]?.version.timestamp, "the clocks tie")
        var left = one.registers, right = two.registers
        for (name, state) in two.written { left.merge(name, state) }
        for (name, state) in one.written { right.merge(name, state) }
        #expect(left == right)
        #expect(try left.materialize(key: "\"d\"") == .live(["_id": "d", "n": 22]), "b's base won the tie; a's increment was against a's")
        #expect(two.registers["n\u{1F}0000000000000002"]?.json == #"{"e":65536000,"m":0,"p":2,"s":2}"#)
    }

    /// A contribution written before epochs named their site counts on its timestamp alone.
    @Test func contributionsWithoutASiteMatchOnTheTimestamp() throws {
        let a = SiteID(1), b = SiteID(2)
        let t = HybridTimestamp(milliseconds: 1_000, counter: 0)
        func state(_ json: String, _ ts: HybridTimestamp, _ site: SiteID) -> RegisterState {
            RegisterState(json: json, version: RegisterVersion(timestamp: ts, site: site), transaction: TransactionID(origin: site, sequence: 1))
        }
        var registers = DocumentRegisters([
            "n": state("10", t, a),
            "n\u{1F}0000000000000002": state(#"{"e":65536000,"m":1,"p":5}"#, HybridTimestamp(rawValue: t.rawValue + 1), b),
        ])
        #expect(try registers.materialize(key: "\"d\"") == .live(["_id": "d", "n": 14]))
        // Site b increments again: its contribution carries on, now naming the base's site.
        var editor = DocumentEditor(
            registers: registers, site: b, clock: HybridLogicalClock(wallClock: { 2_000 }), transaction: TransactionID(origin: b, sequence: 2))
        try editor.update(counters: [("n", .increment(3))], assignments: [], unsets: [], kinds: [:], original: [:])
        registers = editor.registers
        #expect(registers["n\u{1F}0000000000000002"]?.json == #"{"e":65536000,"m":1,"p":8,"s":1}"#)
        #expect(try registers.materialize(key: "\"d\"") == .live(["_id": "d", "n": 17]))
    }

    /// A DELETE hides a field from a clock far ahead of the deleting replica's; a write
    /// after it shows again; a register at the largest timestamp refuses the DELETE.
    @Test func aDeleteHidesFieldsFromAClockFarAhead() throws {
        let a = SiteID(1), b = SiteID(2)
        var ahead = DocumentEditor(
            registers: DocumentRegisters(), site: b, clock: HybridLogicalClock(wallClock: { 1_000 + 7_200_000 }),
            transaction: TransactionID(origin: b, sequence: 1))
        try ahead.insert(["_id": "d", "f": 1], names: ["_id", "f"], initial: false, kinds: [:])
        var editor = DocumentEditor(
            registers: ahead.registers, site: a, clock: HybridLogicalClock(wallClock: { 1_000 }), transaction: TransactionID(origin: a, sequence: 1))
        try editor.delete()
        #expect(try editor.registers.materialize(key: "\"d\"") == .deleted)
        #expect(editor.registers["_deleted"]!.version.timestamp > ahead.registers["f"]!.version.timestamp)
        try editor.insert(["_id": "d", "g": 2], names: ["_id", "g"], initial: false, kinds: [:])
        #expect(try editor.registers.materialize(key: "\"d\"") == .live(["_id": "d", "g": 2]), "a write after the DELETE shows")

        var broken = editor.registers
        broken.set("f", RegisterState(json: "1", version: RegisterVersion(timestamp: HybridTimestamp(rawValue: .max), site: b), transaction: TransactionID(origin: b, sequence: 2)))
        var refused = DocumentEditor(registers: broken, site: a, clock: HybridLogicalClock(wallClock: { 1_000 }), transaction: TransactionID(origin: a, sequence: 2))
        #expect(throws: EditError.self) { try refused.delete() }
    }

    /// After EVICT, an increment carries on from the contribution and base remembered
    /// of the document; its contribution supersedes the old one and holds both.
    @Test func anIncrementCarriesOnFromWhatEvictRemembered() throws {
        let a = SiteID(1)
        var before = DocumentEditor(
            registers: DocumentRegisters(), site: a, clock: HybridLogicalClock(wallClock: { 1_000 }), transaction: TransactionID(origin: a, sequence: 1))
        try before.insert(["_id": "d", "n": 10], names: ["_id", "n"], initial: false, kinds: [:])
        try before.update(counters: [("n", .increment(5))], assignments: [], unsets: [], kinds: [:], original: [:])
        let elsewhere = before.registers
        let kept = elsewhere.counters(of: a)
        #expect(Set(kept.registers.keys) == ["n", "n\u{1F}0000000000000001"])
        // Evicted: nothing held but a fresh _id; the kept registers are remembered.
        var after = DocumentEditor(
            registers: DocumentRegisters(), remembered: kept, site: a, clock: HybridLogicalClock(wallClock: { 2_000 }),
            transaction: TransactionID(origin: a, sequence: 2))
        try after.insert(["_id": "d"], names: ["_id"], initial: false, kinds: [:])
        try after.update(counters: [("n", .increment(2))], assignments: [], unsets: [], kinds: [:], original: [:])
        #expect(after.registers["n"] == nil, "remembered registers are read, never written")
        var refilled = after.registers
        for (name, state) in elsewhere.registers { refilled.merge(name, state) }
        #expect(try refilled.materialize(key: "\"d\"") == .live(["_id": "d", "n": 17]))
        #expect(refilled.covers("n\u{1F}0000000000000001", kept["n\u{1F}0000000000000001"]!))
    }

    /// EVICT keeps the base of a counter this site never incremented too: an increment
    /// after EVICT, on the document sent back in part (another field, not the base),
    /// counts in the epoch the site knew, and is not lost when the base comes back.
    @Test func anIncrementAfterEvictCountsInTheKnownEpochWithoutAContributionOfItsOwn() throws {
        let a = SiteID(1), b = SiteID(2)
        var creator = DocumentEditor(
            registers: DocumentRegisters(), site: b, clock: HybridLogicalClock(wallClock: { 1_000 }), transaction: TransactionID(origin: b, sequence: 1))
        try creator.insert(["_id": "d", "n": 10], names: ["_id", "n"], initial: false, kinds: [:])
        try creator.update(counters: [("n", .increment(5))], assignments: [], unsets: [], kinds: [:], original: [:])
        let held = creator.registers
        let kept = held.counters(of: a)
        #expect(kept["n"] == held["n"], "the base is kept though a has no contribution to n")
        #expect(kept.registers.keys.allSatisfy { !Counter.isContribution($0, of: b) }, "another site's contributions are not")
        let refilled = try Self.decrementedAfterEvict(held, kept: kept, site: a, writer: b, w: "1")
        #expect(try refilled.materialize(key: "\"d\"") == .live(["_id": "d", "n": 13, "w": 1]))
    }

    /// `site` decrements `n` by 2 after EVICT (remembering `kept`), on the document sent
    /// back in part (a later write of `w` by `writer`, without the counter's base); then
    /// everything `held` comes back. Returns the registers then.
    static func decrementedAfterEvict(
        _ held: DocumentRegisters, kept: DocumentRegisters, site: SiteID, writer: SiteID, w: String
    ) throws -> DocumentRegisters {
        var partial = DocumentRegisters()
        partial.set(
            "w", RegisterState(json: w, version: RegisterVersion(timestamp: HybridTimestamp(rawValue: 1_500 << 16), site: writer),
                transaction: TransactionID(origin: writer, sequence: 2)))
        var after = DocumentEditor(
            registers: partial, remembered: kept, site: site, clock: HybridLogicalClock(wallClock: { 2_000 }),
            transaction: TransactionID(origin: site, sequence: 1))
        try after.update(counters: [("n", .increment(-2))], assignments: [], unsets: [], kinds: [:], original: [:])
        var refilled = after.registers
        for (name, state) in held.registers { refilled.merge(name, state) }
        return refilled
    }

    /// A counter with no base counts in the tombstone's epoch: EVICT keeps the
    /// tombstone of a document with a counter even when it keeps nothing else of it, so
    /// an increment after EVICT counts in that epoch, not in epoch zero.
    @Test func anIncrementAfterEvictCountsInTheTombstonesEpochWhenTheCounterHasNoBase() throws {
        let a = SiteID(1), b = SiteID(2)
        var writer = DocumentEditor(
            registers: DocumentRegisters(), site: b, clock: HybridLogicalClock(wallClock: { 1_000 }), transaction: TransactionID(origin: b, sequence: 1))
        try writer.insert(["_id": "d", "w": 1], names: ["_id", "w"], initial: false, kinds: [:])
        try writer.delete()
        try writer.insert(["_id": "d", "w": 2], names: ["_id", "w"], initial: false, kinds: [:])
        try writer.update(counters: [("n", .increment(5))], assignments: [], unsets: [], kinds: [:], original: [:])
        let held = writer.registers
        #expect(held["n"] == nil && held[RegisterName.tombstone] != nil, "no base, a tombstone")
        let kept = held.counters(of: a)
        #expect(kept[RegisterName.tombstone] == held[RegisterName.tombstone])
        let refilled = try Self.decrementedAfterEvict(held, kept: kept, site: a, writer: b, w: "3")
        #expect(try refilled.materialize(key: "\"d\"") == .live(["_id": "d", "n": 3, "w": 3]))
    }

    // MARK: Maps and their `{}` base

    static func editor(_ registers: DocumentRegisters, site: UInt64, wall: UInt64, sequence: UInt64 = 1) -> DocumentEditor {
        DocumentEditor(
            registers: registers, site: SiteID(site), clock: HybridLogicalClock(wallClock: { wall }),
            transaction: TransactionID(origin: SiteID(site), sequence: sequence))
    }

    static func set(_ editor: inout DocumentEditor, _ path: [String], _ value: Value) throws {
        var original: [String: Value] = [:]
        if case .live(.object(let body)) = try editor.registers.materialize(key: "\"d\"") { original = body }
        try editor.update(counters: [], assignments: [(path, value)], unsets: [], kinds: [:], original: original)
    }

    static func unset(_ editor: inout DocumentEditor, _ path: [String]) throws {
        var original: [String: Value] = [:]
        if case .live(.object(let body)) = try editor.registers.materialize(key: "\"d\"") { original = body }
        try editor.update(counters: [], assignments: [], unsets: [path], kinds: [:], original: original)
    }

    static func field(_ registers: DocumentRegisters, _ name: String = "m") throws -> Value? {
        guard case .live(let body) = try registers.materialize(key: "\"d\"") else { return nil }
        return body[name]
    }

    /// Both replicas' registers after each hears the other's writes.
    static func exchange(_ x: DocumentEditor, _ y: DocumentEditor) -> DocumentRegisters {
        var left = x.registers, right = y.registers
        for (name, state) in y.written { left.merge(name, state) }
        for (name, state) in x.written { right.merge(name, state) }
        #expect(left == right)
        return left
    }

    /// Entries are found however they came in: loaded, set by a write, merged from a
    /// peer; and none after EVICT forgets everything.
    @Test func entriesAreFoundWhetherLoadedSetOrMergedAndNoneAfterRemoveAll() throws {
        let version = { (t: UInt64) in RegisterVersion(timestamp: HybridTimestamp(rawValue: t << 16), site: SiteID(1)) }
        let state = { (json: String, t: UInt64) in
            RegisterState(json: json, version: version(t), transaction: TransactionID(origin: SiteID(1), sequence: t))
        }
        let loaded = DocumentRegisters(["m": state("1", 1), "m\u{1E}x": state("2", 2)])
        #expect(loaded.liveEntries(under: "m").map(\.name) == ["m\u{1E}x"])
        #expect(loaded.isMap("m", declared: false), "an entry newer than the register")

        var set = DocumentRegisters(["a": state("1", 1)])
        #expect(set.liveEntries(under: "m").isEmpty && !set.isMap("m", declared: false))
        set.set("m\u{1E}y", state("3", 3))
        set.set("m\u{1E}y", state("4", 4))
        #expect(set.liveEntries(under: "m").map(\.name) == ["m\u{1E}y"] && set.isMap("m", declared: false))

        var merged = DocumentRegisters()
        merged.merge("m\u{1E}z", state("5", 5))
        #expect(merged.liveEntries(under: "m").map(\.name) == ["m\u{1E}z"])
        #expect(merged == DocumentRegisters(["m\u{1E}z": state("5", 5)]), "equal to the same registers loaded")
        merged.removeAll()
        #expect(merged.liveEntries(under: "m").isEmpty && !merged.isMap("m", declared: false))
    }

    @Test func anEmptyObjectMakesAFieldAMap() throws {
        var e = Self.editor(DocumentRegisters(), site: 1, wall: 1_000)
        try Self.set(&e, ["m"], [:])
        #expect(e.registers.isMap("m", declared: false))
        try Self.set(&e, ["m", "x"], 1)
        #expect(e.registers["m\u{1E}x"]?.json == "1", "SET m.x after SET m = {} writes an entry")
        #expect(e.registers["m"]?.json == "{}", "the base stays")
        #expect(try Self.field(e.registers) == ["x": 1])
    }

    @Test func aMapStaysAMapWhenItsLastKeyGoes() throws {
        var e = Self.editor(DocumentRegisters(), site: 1, wall: 1_000)
        try Self.set(&e, ["m", "x"], 1)
        #expect(e.registers["m"]?.json == "{}", "the first entry writes the base")
        try Self.unset(&e, ["m", "x"])
        #expect(try Self.field(e.registers) == [:])
        #expect(e.registers.isMap("m", declared: false))
        try Self.set(&e, ["m", "y"], 2)
        #expect(e.registers["m\u{1E}y"]?.json == "2")
        // UNSET m still removes the whole field.
        try Self.unset(&e, ["m"])
        #expect(try Self.field(e.registers) == nil)
        #expect(!e.registers.isMap("m", declared: false))
    }

    /// `SET m = {}` on one replica removes what it saw; an entry added concurrently on
    /// another, at an earlier time, survives: the base does not hide it.
    @Test func emptyingAMapKeepsConcurrentAdds() throws {
        var start = Self.editor(DocumentRegisters(), site: 1, wall: 1_000)
        try Self.set(&start, ["m", "a"], 1)
        var emptying = Self.editor(start.registers, site: 1, wall: 3_000, sequence: 2)
        var adding = Self.editor(start.registers, site: 2, wall: 2_000)
        try Self.set(&emptying, ["m"], [:])
        try Self.set(&adding, ["m", "b"], 2)
        #expect(emptying.registers["m"]!.version > adding.registers["m\u{1E}b"]!.version, "the base is the newer write")
        #expect(try Self.field(Self.exchange(emptying, adding)) == ["b": 2])
    }

    /// A `{}` written at `m.a` later than an entry below it, by a replica that never
    /// saw it, keeps it; a write below a `{}` entry does not remove it.
    @Test func anEmptyEntryKeepsWhatIsBelowIt() throws {
        var start = Self.editor(DocumentRegisters(), site: 1, wall: 1_000)
        try Self.set(&start, ["m", "z"], 0)
        var deep = Self.editor(start.registers, site: 1, wall: 2_000, sequence: 2)
        var empty = Self.editor(start.registers, site: 2, wall: 3_000)
        try Self.set(&deep, ["m", "a", "b"], 1)
        try Self.set(&empty, ["m", "a"], [:])
        let both = Self.exchange(deep, empty)
        #expect(try Self.field(both) == ["a": ["b": 1], "z": 0])
        var e = Self.editor(both, site: 2, wall: 4_000, sequence: 2)
        try Self.set(&e, ["m", "a", "c"], 2)
        #expect(e.registers["m\u{1E}a"]?.json == "{}", "no observed removal for an ancestor that is {}")
        try Self.unset(&e, ["m", "a", "b"])
        try Self.unset(&e, ["m", "a", "c"])
        #expect(try Self.field(e.registers) == ["a": [:], "z": 0])
        // Nor does a whole object written at it: like the field's base, it stays.
        try Self.set(&e, ["m", "a"], ["x": 1])
        #expect(e.registers["m\u{1E}a"]?.json == "{}")
        try Self.unset(&e, ["m", "a", "x"])
        #expect(try Self.field(e.registers) == ["a": [:], "z": 0])
    }

    /// A plain register written after every entry still wins (type conflicts, §12),
    /// whether it holds a non-empty object or a scalar.
    @Test func aNewerRegisterStillWinsOverAMap() throws {
        var map = Self.editor(DocumentRegisters(), site: 1, wall: 1_000)
        try Self.set(&map, ["m", "x"], 1)
        for value: Value in [["p": 1], 5] {
            var register = Self.editor(DocumentRegisters(), site: 2, wall: 2_000)
            try register.insert(["_id": "d", "m": value], names: ["_id", "m"], initial: false, kinds: [:])
            #expect(try Self.field(Self.exchange(map, register)) == value)
        }
    }
}

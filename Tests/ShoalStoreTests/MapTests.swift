import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// MAP fields: entries merge independently, nested to any depth; a removal takes
/// only what the remover saw (add-wins).
@Suite struct MapTests {
    static func pair(_ body: (DocumentStore, DocumentStore) async throws -> Void) async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let one = try DocumentStore(directory: a.path), two = try DocumentStore(directory: b.path)
        defer { one.close(); two.close() }
        try await body(one, two)
    }

    static func exchange(_ x: DocumentStore, _ y: DocumentStore) async throws {
        try await CounterTests.sync(x, y)
        try await CounterTests.sync(y, x)
    }

    static func props(_ store: DocumentStore) async throws -> Value? {
        try await store.execute("SELECT * FROM c WHERE _id = 'k'").items.first?["m"]
    }

    @Test func concurrentEntriesAreKeptSideBySide() async throws {
        try await Self.pair { one, two in
            _ = try await one.execute("INSERT INTO COLLECTION c (m MAP) DOCUMENTS ({'_id': 'k', 'm': {'a': 1}})")
            try await Self.exchange(one, two)
            _ = try await one.execute("UPDATE c SET m.x = 1, m.deep.er.still = true WHERE _id = 'k'")
            _ = try await two.execute("UPDATE c SET m.y = 2 WHERE _id = 'k'")
            try await Self.exchange(one, two)
            let expected: Value = ["a": 1, "x": 1, "y": 2, "deep": ["er": ["still": true]]]
            #expect(try await Self.props(one) == expected)
            #expect(try await Self.props(two) == expected)
        }
    }

    @Test func anEditConcurrentWithRemovingTheMapSurvives() async throws {
        try await Self.pair { one, two in
            _ = try await one.execute("INSERT INTO c DOCUMENTS ({'_id': 'k'}); UPDATE c SET m.a = 1, m.b = 1 WHERE _id = 'k'")
            try await Self.exchange(one, two)
            // two removes the map after one's edit is made but before it arrives.
            _ = try await one.execute("UPDATE c SET m.a = 5, m.c = 7 WHERE _id = 'k'")
            _ = try await two.execute("UPDATE c UNSET m WHERE _id = 'k'")
            try await Self.exchange(one, two)
            #expect(try await Self.props(one) == ["a": 5, "c": 7], "b, which two saw, is gone; a and c, which it did not, stay")
            #expect(try await Self.props(two) == ["a": 5, "c": 7])
            // A removal that has seen everything removes everything.
            _ = try await two.execute("UPDATE c UNSET m WHERE _id = 'k'")
            try await Self.exchange(one, two)
            #expect(try await Self.props(one) == nil)
            #expect(try await Self.props(two) == nil)
        }
    }

    /// `SET m = {}` empties the map of what it saw; an entry added concurrently
    /// elsewhere survives, and the field stays a map for the next entry.
    @Test func anEmptiedMapKeepsConcurrentEntries() async throws {
        try await Self.pair { one, two in
            _ = try await one.execute("INSERT INTO c DOCUMENTS ({'_id': 'k'}); UPDATE c SET m.a = 1 WHERE _id = 'k'")
            try await Self.exchange(one, two)
            _ = try await two.execute("UPDATE c SET m.b = 2 WHERE _id = 'k'")
            _ = try await one.execute("UPDATE c SET m = {} WHERE _id = 'k'")  // later, without seeing b
            try await Self.exchange(one, two)
            #expect(try await Self.props(one) == ["b": 2])
            #expect(try await Self.props(two) == ["b": 2])
            _ = try await one.execute("UPDATE c UNSET m.b WHERE _id = 'k'")
            _ = try await two.execute("UPDATE c SET m.c = 3 WHERE _id = 'k'")
            try await Self.exchange(one, two)
            #expect(try await Self.props(one) == ["c": 3])
            #expect(try await Self.props(two) == ["c": 3])
        }
    }

    @Test func typeConflictsConvergeToTheLatestWrite() async throws {
        try await Self.pair { one, two in
            _ = try await one.execute("INSERT INTO c DOCUMENTS ({'_id': 'k'})")
            try await Self.exchange(one, two)
            _ = try await one.execute("UPDATE c SET m.a = 1 WHERE _id = 'k'")  // a map
            _ = try await two.execute("UPDATE c SET m = [1, 2] WHERE _id = 'k'")  // an array, written later
            try await Self.exchange(one, two)
            let x = try await Self.props(one), y = try await Self.props(two)
            #expect(x == y && x == [1, 2])
            try await Self.exchange(one, two)
            #expect(try await Self.props(one) == [1, 2], "no ping-pong on a second exchange")
        }
    }

    @Test func registersHoldingObjectsStayRegisters() async throws {
        try await Self.pair { one, _ in
            _ = try await one.execute("INSERT INTO c DOCUMENTS ({'_id': 'k', 'm': {'a': 1, 'b': 2}})")
            _ = try await one.execute("UPDATE c SET m.a = 3 WHERE _id = 'k'")
            #expect(try await Self.props(one) == ["a": 3, "b": 2])
        }
    }

    @Test func replacedAncestorsDoNotComeBack() async throws {
        try await Self.pair { one, two in
            _ = try await one.execute("INSERT INTO c DOCUMENTS ({'_id': 'k'}); UPDATE c SET m.a = 5 WHERE _id = 'k'")
            _ = try await one.execute("UPDATE c SET m.a.b = 1 WHERE _id = 'k'")
            _ = try await one.execute("UPDATE c UNSET m.a.b WHERE _id = 'k'")
            #expect(try await Self.props(one) == [:], "m.a = 5 was replaced by m.a.b, and m.a.b is gone: an empty map")
            _ = try await one.execute("UPDATE c SET r = 5 WHERE _id = 'k'")
            _ = try await one.execute("UPDATE COLLECTION c (r MAP) SET r.x = 1 WHERE _id = 'k'")
            _ = try await one.execute("UPDATE c UNSET r.x WHERE _id = 'k'")
            try await Self.exchange(one, two)
            for store in [one, two] {
                #expect(try await store.execute("SELECT * FROM c WHERE _id = 'k'").items == [["_id": "k", "m": [:], "r": [:]]])
            }
        }
    }

    @Test func writingIntoAFieldThatLostATypeConflictStartsFromTheWinner() async throws {
        try await Self.pair { one, two in
            _ = try await one.execute("INSERT INTO c DOCUMENTS ({'_id': 'k'}); UPDATE c SET m.a = 1 WHERE _id = 'k'")
            try await Self.exchange(one, two)
            _ = try await two.execute("UPDATE c SET m = [1, 2] WHERE _id = 'k'")
            try await Self.exchange(one, two)
            _ = try await one.execute("UPDATE c SET m.x = 1 WHERE _id = 'k'")
            try await Self.exchange(one, two)
            #expect(try await Self.props(one) == ["x": 1], "the array won; the old entry a does not reappear")
            #expect(try await Self.props(two) == ["x": 1])
        }
    }
}

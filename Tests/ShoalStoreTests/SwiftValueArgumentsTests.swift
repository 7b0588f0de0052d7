import Foundation
import ShoalCRDT
import ShoalStore
import ShoalStorage
import Testing

/// Swift variables as query arguments, and results read into the app's structs.
@Suite struct SwiftValueArgumentsTests {
    struct Car: Codable, Equatable {
        var _id: String
        var doors: Int
        var electric: Bool
        var price: Double
        var nickname: String?
        var made: Date
    }

    @Test func variablesAreArgumentsAndResultsDecodeIntoStructs() async throws {
        try await StatementTests.withStore { store in try await Self.variablesAreArguments(store) }
    }

    static func variablesAreArguments(_ store: DocumentStore) async throws {
        let id = "a", doors = 4, electric = true, nickname: String? = nil
        let made = Date(timeIntervalSince1970: 1_714_564_800.5)
        let inserted = try await store.execute(
            "INSERT INTO cars DOCUMENTS ({'_id': :id, 'doors': :doors, 'electric': :electric, 'price': 20000.0, 'nickname': :nickname, 'made': :made})",
            arguments: ["id": id, "doors": doors, "electric": electric, "nickname": nickname, "made": made])
        #expect(inserted.mutatedDocumentIDs == ["a"])

        // A struct is a document: Value(encoding:) as an argument, beside a literal one.
        let second = Car(_id: "b", doors: 2, electric: false, price: 15_000.5, nickname: "Zippy", made: made)
        _ = try await store.execute(
            "INSERT INTO cars DOCUMENTS (:car), (:literal)",
            arguments: ["car": try Value(encoding: second), "literal": ["_id": "c", "doors": 5, "electric": false]])

        let minimum = 3
        let result = try await store.execute(
            "SELECT * FROM cars WHERE doors >= :minimum AND electric = :electric AND _id = :id",
            arguments: ["minimum": minimum, "electric": electric, "id": id])
        let cars = try result.items.decode(as: Car.self)
        #expect(cars == [Car(_id: "a", doors: 4, electric: true, price: 20_000, nickname: nil, made: made)])
        #expect(result.items.first?["doors"]?.intValue == doors)
        #expect("\(result.items)" == #"[{"_id":"a","doors":4,"electric":true,"made":"2024-05-01T12:00:00.500Z","nickname":null,"price":20000.0}]"#)

        // The same in a transaction, and for an observation.
        let ids = ["b", "c"]
        let read = try await store.transaction(isReadOnly: true) { tx in
            try await tx.execute("SELECT _id, doors FROM cars WHERE _id IN :ids ORDER BY _id", arguments: ["ids": ids]).items
        }
        #expect(read.map { $0["doors"]?.intValue } == [2, 5])
        var observations = try store.observe("SELECT * FROM cars WHERE _id = :id", arguments: ["id": second._id]).makeAsyncIterator()
        #expect(try await observations.next()?.items.decode(as: Car.self) == [second])
    }

    /// The README's example, as written there (`store` for `node.store`).
    static func readmeExample(_ store: DocumentStore) async throws -> [(String, Int, String?)] {
        struct Car: Codable {
            var _id: String
            var doors: Int
            var color: String?
        }
        let doors = 4
        _ = try await store.execute(
            "INSERT INTO cars DOCUMENTS (:car)", arguments: ["car": try Value(encoding: Car(_id: "b", doors: doors))])
        let cars = try await store.execute(
            "SELECT * FROM cars WHERE doors >= :doors", arguments: ["doors": doors]).items.decode(as: Car.self)
        return cars.map { ($0._id, $0.doors, $0.color) }
    }

    @Test func theReadmeExampleWritesAndReadsAStruct() async throws {
        try await StatementTests.withStore { store in
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'doors': 2, 'color': 'red'})")
            let cars = try await Self.readmeExample(store)
            #expect(cars.count == 1 && cars[0] == ("b", 4, nil))
            #expect(try await store.execute("SELECT * FROM cars WHERE _id = 'b'").items == [["_id": "b", "doors": 4]])
        }
    }
}

import Foundation
import ShoalCRDT
import Testing

/// `Value(encoding:)` and `decode(as:)`: an app's structs in and out of documents.
@Suite struct ValueCodableTests {
    struct Owner: Codable, Equatable {
        var name: String
        var age: Int8?
    }

    struct Car: Codable, Equatable {
        var _id: String
        var doors: Int
        var price: Double
        var electric: Bool
        var nickname: String?
        var tags: [String]
        var owner: Owner?
        var previousOwners: [Owner]
        var ratings: [String: Int]
        var made: Date
        var extra: Value?
    }

    static let car = Car(
        _id: "a", doors: 4, price: 20_000, electric: false, nickname: nil, tags: ["red", "fast"],
        owner: Owner(name: "Ada", age: nil), previousOwners: [Owner(name: "Bo", age: 40)], ratings: ["speed": 5],
        made: Date(timeIntervalSince1970: 1_714_564_800.123), extra: ["whole": 1.0, "list": [1, nil, "x"]])

    /// The document a struct encodes to: ints stay ints, a whole `Double` stays a double,
    /// a nil optional is left out, a date is ISO-8601 text.
    static let document: Value = [
        "_id": "a", "doors": 4, "price": 20_000.0, "electric": false, "tags": ["red", "fast"],
        "owner": ["name": "Ada"], "previousOwners": [["name": "Bo", "age": 40]], "ratings": ["speed": 5],
        "made": "2024-05-01T12:00:00.123Z", "extra": ["whole": 1.0, "list": [1, nil, "x"]],
    ]

    @Test func aStructEncodesToTheDocumentAndBack() throws {
        let value = try Value(encoding: Self.car)
        #expect(value == Self.document)
        #expect(value["price"] == .double(20_000) && value["doors"] == .int(4))
        #expect(value["nickname"] == nil)
        #expect(try value.decode(as: Car.self) == Self.car)
    }

    /// Through the canonical JSON the store keeps, every number comes back as it went.
    @Test func aStructSurvivesCanonicalJSON() throws {
        let text = try Value(encoding: Self.car).canonicalJSON
        let back = try JSON.parse(text).decode(as: Car.self)
        #expect(back == Self.car)
        #expect(back.extra?["whole"] == .double(1.0))
    }

    @Test func optionalsPresentAndNull() throws {
        var car = Self.car
        car.nickname = "Zippy"
        car.owner = nil
        #expect(try Value(encoding: car).decode(as: Car.self) == car)
        var document = Self.document.objectValue!
        document["owner"] = nil
        document["nickname"] = .null
        document["unknown"] = "ignored"
        let decoded = try Value.object(document).decode(as: Car.self)
        #expect(decoded.owner == nil && decoded.nickname == nil)
    }

    @Test func arraysOfDocumentsAndScalars() throws {
        let items: [Value] = [Self.document, Self.document]
        #expect(try items.decode(as: Car.self) == [Self.car, Self.car])
        #expect(try Value(encoding: [1, 2]) == [1, 2])
        #expect(try Value(encoding: [1.0, 2.5]) == [1.0, 2.5])
        #expect(try Value(encoding: "x") == "x")
        #expect(try Value(encoding: Int?.none) == .null)
        #expect(try Value.array([1, 2.0]).decode(as: [Int].self) == [1, 2])
        #expect(try Value.array([1, 2.5]).decode(as: [Double].self) == [1, 2.5])
        #expect(try Value(encoding: [Float(0.1)]) == [0.1])
        #expect(try Value.int(-7).decode(as: Int8.self) == -7)
        #expect(try Value.int(Int64.max).decode(as: UInt64.self) == UInt64(Int64.max))
    }

    /// A `Value` is plain JSON to Foundation's coders; only a whole double loses its
    /// `.0` there (JSONEncoder writes 1.0 as 1), as `Value.encode(to:)` documents.
    @Test func valueIsPlainJSONToFoundation() throws {
        let value: Value = ["a": [1, 2.5, "x", true, nil], "b": ["c": -3]]
        let text = String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
        #expect(try JSON.parse(text) == value)
        #expect(try JSONDecoder().decode(Value.self, from: Data(value.canonicalJSON.utf8)) == value)
        #expect(try JSONDecoder().decode(Value.self, from: Data("[1.0]".utf8)) == [1])
        #expect(try JSONDecoder().decode(Value.self, from: Data("{\"n\":null}".utf8)) == ["n": nil])
    }

    // MARK: Errors

    /// An error's coding path as a DQL path reads: `[1].owner.name`.
    static func path(_ keys: [any CodingKey]) -> String {
        keys.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined().trimmingPrefix(".").description
    }

    static func decodingFailure(_ body: () throws -> Void) -> (path: String, message: String)? {
        do {
            try body()
            return nil
        } catch let error as DecodingError {
            switch error {
            case .typeMismatch(_, let c), .valueNotFound(_, let c), .keyNotFound(_, let c), .dataCorrupted(let c):
                return (path(c.codingPath), c.debugDescription)
            @unknown default: return nil
            }
        } catch {
            return nil
        }
    }

    static func with(_ path: String, _ value: Value) -> Value {
        var document = document.objectValue!
        document[path] = value
        return .object(document)
    }

    @Test(arguments: [
        (with("doors", "four"), "doors", #"expected an integer (Int), found the string "four""#),
        (with("doors", 4.5), "doors", "expected an integer (Int), found the number 4.5"),
        (with("doors", nil), "doors", "expected an integer (Int), found null"),
        (with("price", true), "price", "expected a number (Double), found the boolean true"),
        (with("electric", 0), "electric", "expected a boolean (Bool), found the number 0"),
        (with("tags", ["a", 3]), "tags[1]", "expected a string (String), found the number 3"),
        (with("owner", "Ada"), "owner", #"expected an object, found the string "Ada""#),
        (with("previousOwners", [["name": "Bo", "age": 300]]), "previousOwners[0].age",
         "expected an integer from -128 to 127 (Int8), found the number 300"),
        (with("made", "yesterday"), "made",
         #"expected an ISO-8601 date such as 2024-05-01T12:00:00.000Z (Date), found the string "yesterday""#),
        (with("ratings", ["speed": "fast"]), "ratings.speed", #"expected an integer (Int), found the string "fast""#),
        (["_id": "a"], "", "no field 'doors': the object has '_id'"),
        ("a car", "", #"expected an object, found the string "a car""#),
        (with("tags", .string(String(repeating: "x", count: 50))), "tags",
         "expected an array, found the string \"" + String(repeating: "x", count: 36) + "…"),
    ] as [(Value, String, String)])
    func decodingErrorsSayWhereAndWhat(value: Value, path: String, message: String) throws {
        let failure = try #require(Self.decodingFailure { _ = try value.decode(as: Car.self) })
        #expect(failure.path == path)
        #expect(failure.message == message)
    }

    @Test func anErrorInAListOfDocumentsNamesItsIndex() throws {
        let items: [Value] = [Self.document, Self.with("owner", ["name": 7])]
        let failure = try #require(Self.decodingFailure { _ = try items.decode(as: Car.self) })
        #expect(failure.path == "[1].owner.name")
        #expect(failure.message == "expected a string (String), found the number 7")
    }

    struct Unstorable: Encodable {
        var big: UInt64 = .max
        var ratio = Double.nan
        var fine = 1
    }

    @Test func encodingErrorsSayWhereAndWhat() throws {
        func failure(_ value: some Encodable) -> (String, String)? {
            do {
                _ = try Value(encoding: value)
                return nil
            } catch let EncodingError.invalidValue(_, context) {
                return (Self.path(context.codingPath), context.debugDescription)
            } catch {
                return nil
            }
        }
        #expect(failure(Unstorable()) ?? ("", "") == ("big", "18446744073709551615 does not fit in an Int64, which Shoal keeps integers in: encode it as a string"))
        #expect(failure([Unstorable(big: 0)]) ?? ("", "") == ("[0].ratio", "nan is not a number JSON can hold"))
        #expect(failure(["k": -Double.infinity]) ?? ("", "") == ("k", "-inf is not a number JSON can hold"))
    }

    // MARK: Dates

    @Test(arguments: [
        (0, "1970-01-01T00:00:00.000Z"), (1_714_564_800.123, "2024-05-01T12:00:00.123Z"),
        (-0.5, "1969-12-31T23:59:59.500Z"), (951_782_400, "2000-02-29T00:00:00.000Z"),
        (253_402_300_799.999, "9999-12-31T23:59:59.999Z"), (253_402_300_800, "+10000-01-01T00:00:00.000Z"),
        (-62_135_596_800, "0001-01-01T00:00:00.000Z"), (-62_167_219_200, "0000-01-01T00:00:00.000Z"),
        (-62_167_305_600, "-0001-12-31T00:00:00.000Z"),
    ] as [(TimeInterval, String)])
    func datesAreISO8601ToTheMillisecond(seconds: TimeInterval, text: String) throws {
        let date = Date(timeIntervalSince1970: seconds)
        #expect(try Value(encoding: date) == .string(text))
        #expect(try Value.string(text).decode(as: Date.self) == date)
    }

    @Test(arguments: [
        ("2024-05-01T12:00:00Z", 1_714_564_800), ("2024-05-01T14:30:00+02:30", 1_714_564_800),
        ("2024-05-01T09:00:00-03:00", 1_714_564_800), ("2024-05-01T12:00:00.5Z", 1_714_564_800.5),
        ("2024-05-01T12:00:00.123456Z", 1_714_564_800.123456),
    ] as [(String, TimeInterval)])
    func datesReadInOtherForms(text: String, seconds: TimeInterval) throws {
        #expect(try Value.string(text).decode(as: Date.self) == Date(timeIntervalSince1970: seconds))
    }

    @Test(arguments: [
        "2024-02-30T00:00:00Z", "2023-02-29T00:00:00Z", "2024-05-01 12:00:00Z", "2024-05-01T12:00:00",
        "24-05-01T12:00:00Z", "2024-05-01T24:00:00Z", "2024-05-01T12:60:00Z", "2024-05-01T12:00:00.Z",
        "2024-5-01T12:00:00Z", "2024-05-01T12:00:00+0200", "12024-05-01T12:00:00Z", "",
    ])
    func malformedDatesAreRefused(text: String) {
        #expect(throws: DecodingError.self) { try Value.string(text).decode(as: Date.self) }
    }

    @Test func dataAndURLAreText() throws {
        struct Blob: Codable, Equatable {
            var bytes: Data
            var link: URL
        }
        let blob = Blob(bytes: Data([0, 1, 254, 255]), link: URL(string: "https://example.com/a?b=1")!)
        let value = try Value(encoding: blob)
        #expect(value == ["bytes": "AAH+/w==", "link": "https://example.com/a?b=1"])
        #expect(try value.decode(as: Blob.self) == blob)
    }
}

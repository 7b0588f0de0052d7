import Foundation
import ShoalCRDT
import Testing

/// The accessors an app reads a result with, `description`, and the Swift values a
/// `Value` is made of.
@Suite struct ValueTests {
    static let car: Value = ["_id": "a", "doors": 4, "price": 19_999.5, "tags": ["red", "fast"], "owner": nil]

    @Test(arguments: [
        (Value.int(4), 4), (.double(4.0), 4), (.double(-0.0), 0), (.int(Int64.min), Int(Int64.min)),
        (.double(4.5), nil), (.double(1e19), nil), (.double(.nan), nil), (.double(.infinity), nil),
        (.string("4"), nil), (.bool(true), nil), (.null, nil), (.array([4]), nil),
    ] as [(Value, Int?)])
    func intValue(value: Value, expected: Int?) {
        #expect(value.intValue == expected)
    }

    @Test(arguments: [
        (Value.double(2.5), 2.5), (.int(3), 3.0), (.int(1 << 53), 9_007_199_254_740_992.0),
        (.int((1 << 53) + 1), nil), (.string("1.5"), nil), (.bool(false), nil), (.null, nil),
    ] as [(Value, Double?)])
    func doubleValue(value: Value, expected: Double?) {
        #expect(value.doubleValue == expected)
    }

    /// `numberValue` keeps its meaning: the nearest double of any number.
    @Test func numberValueRoundsWhereDoubleValueRefuses() {
        #expect(Value.int((1 << 53) + 1).numberValue == 9_007_199_254_740_992.0)
        #expect(Value.int(7).numberValue == 7.0)
        #expect(Value.string("7").numberValue == nil)
    }

    @Test func boolArrayNullAndSubscripts() {
        let car = Self.car
        #expect(Value.bool(false).boolValue == false)
        #expect(Value.int(1).boolValue == nil && Value.string("true").boolValue == nil)
        #expect(car["tags"]?.arrayValue == ["red", "fast"])
        #expect(car.arrayValue == nil)
        #expect(car["tags"]?[1]?.stringValue == "fast")
        #expect(car["tags"]?[2] == nil && car["tags"]?[-1] == nil && car[0] == nil)
        #expect(car["owner"]?.isNull == true)
        #expect(car["missing"] == nil)
        #expect(car["doors"]?.isNull == false && car["doors"]?.intValue == 4)
        #expect(car["price"]?.doubleValue == 19_999.5 && car["price"]?.intValue == nil)
    }

    /// `print(value)` and `print(items)` show JSON, not `ShoalCRDT.Value.object([...])`.
    @Test func descriptionIsCanonicalJSON() {
        let expected = #"{"_id":"a","doors":4,"owner":null,"price":19999.5,"tags":["red","fast"]}"#
        #expect("\(Self.car)" == expected)
        #expect(String(reflecting: Self.car) == expected)
        #expect("\([Self.car, 1.0, "x"] as [Value])" == "[\(expected), 1.0, \"x\"]")
    }

    @Test(arguments: [
        (4, .int(4)), (Int8(-3), .int(-3)), (Int16.min, .int(-32768)), (Int32.max, .int(2_147_483_647)),
        (Int64.min, .int(Int64.min)), (UInt8.max, .int(255)), (UInt16.max, .int(65535)), (UInt32.max, .int(4_294_967_295)),
        (2.5, .double(2.5)), (true, .bool(true)), ("s", .string("s")), (String?.none, .null), (Int?.some(1), .int(1)),
        (["a", "b"], ["a", "b"]), ([1, nil] as [Int?], [1, nil] as Value), (["k": [1.5]], ["k": [1.5]]),
        (Date(timeIntervalSince1970: 0), "1970-01-01T00:00:00.000Z"), (Value.double(1.0), .double(1.0)),
    ] as [(any ValueConvertible, Value)])
    func swiftValues(convertible: any ValueConvertible, expected: Value) {
        #expect(convertible.shoalValue == expected)
        #expect(Value(convertible) == expected)
    }

    /// What a variable of each type looks like where arguments are taken.
    @Test func argumentsFromVariables() {
        let doors = 4, name = "Ada", electric = false, nickname: String? = nil, tags = ["a"]
        let arguments: [String: any ValueConvertible] = [
            "doors": doors, "name": name, "electric": electric, "nickname": nickname, "tags": tags, "literal": 1.5,
        ]
        #expect(Value.object(arguments.mapValues(\.shoalValue))
            == ["doors": 4, "name": "Ada", "electric": false, "nickname": nil, "tags": ["a"], "literal": 1.5])
    }

    @Test func integersThatMayNotFit() {
        #expect(Value(exactly: UInt64(5)) == .int(5))
        #expect(Value(exactly: UInt64(Int64.max)) == .int(Int64.max))
        #expect(Value(exactly: UInt64.max) == nil)
        #expect(Value(exactly: UInt(1) << 63) == nil)
    }
}

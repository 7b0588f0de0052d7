/// `Value` as plain JSON to any coder: `{"doors":4}`, not a tagged enum.
///
/// Through Foundation's `JSONEncoder` and `JSONDecoder` the text is the JSON that
/// `JSON.encode` writes, except that neither keeps a whole double apart from an
/// int (`1.0` comes back as `1`); `JSON.encode` and `JSON.parse` keep it. Within
/// `Value(encoding:)` and `decode(as:)` a `Value` field is taken as it stands.
extension Value: Codable {
    public init(from decoder: any Decoder) throws {
        if let decoder = decoder as? ValueDecoder {
            self = decoder.value
            return
        }
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let b = try? container.decode(Bool.self) {
            self = .bool(b)
        } else if let i = try? container.decode(Int64.self) {
            self = .int(i)
        } else if let d = try? container.decode(Double.self) {
            self = .double(d)
        } else if let s = try? container.decode(String.self) {
            self = .string(s)
        } else if let items = try? container.decode([Value].self) {
            self = .array(items)
        } else {
            self = .object(try container.decode([String: Value].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        if let encoder = encoder as? ValueEncoder {
            encoder.node.set(self)
            return
        }
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let b): try container.encode(b)
        case .int(let i): try container.encode(i)
        // As `JSON.encode` writes them: JSON has no NaN or infinity.
        case .double(let d): if d.isFinite { try container.encode(d) } else { try container.encodeNil() }
        case .string(let s): try container.encode(s)
        case .array(let items): try container.encode(items)
        case .object(let fields): try container.encode(fields)
        }
    }
}

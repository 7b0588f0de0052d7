/// What a store can hold of one document: one definition, checked on every path
/// that writes a body (a local statement, a received transaction, an import, which
/// is local statements) against the body it would write.
///
/// A body is what queries, sync and export read back, so a body that could not be
/// read back must never be written: it is refused where it is written, with the
/// limit named. A local statement that would write one fails and writes nothing; a
/// received transaction that would is refused whole (PROTOCOL.md §8.8).
///
/// - Nesting: `JSON.maximumDepth` (128) levels, the most the JSON reader takes, the
///   document's own object counted. A field path of 128 names, or a value 127
///   levels deep in a top-level field, is the most a document can hold.
/// - Size: the body's canonical JSON over the hard limit is refused; over the soft
///   limit it is written and reported.
public struct DocumentLimits: Sendable, Hashable {
    /// Bytes of a body over which a write is reported (`document_size_soft_limit_bytes`).
    public var softBytes: Int
    /// Bytes of a body over which a write is refused (`document_size_hard_limit_bytes`).
    public var hardBytes: Int
    /// Bytes of a document's key over which a write is refused: its collection's name,
    /// its stored `_id` and the name of a field it writes, together. Nil, no bound: a
    /// SQLite node has none; a hub on PostgreSQL does, since its indexes hold these
    /// names and a btree entry holds 2,704 bytes at most.
    public var keyBytes: Int?
    /// Whether a collection's name may hold U+0000. A SQLite node's may; a hub's may not,
    /// since PostgreSQL's `TEXT`, which holds the names, cannot hold that character.
    public var collectionNamesHoldNul: Bool

    public init(softBytes: Int = 256 << 10, hardBytes: Int = 4 << 20, keyBytes: Int? = nil, collectionNamesHoldNul: Bool = true) {
        self.softBytes = softBytes
        self.hardBytes = hardBytes
        self.keyBytes = keyBytes
        self.collectionNamesHoldNul = collectionNamesHoldNul
    }

    /// The deepest nesting a body may have: the JSON reader's limit.
    public static let maximumDepth = JSON.maximumDepth

    /// Why a body cannot be held.
    public enum Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        /// The body would be `bytes` long, over `limit`.
        case tooLarge(bytes: Int, limit: Int)
        /// The body would nest deeper than `limit` levels.
        case tooDeep(limit: Int)
        /// Its collection's name, `_id` and a field's name would be `bytes` together, over `limit`.
        case keyTooLong(bytes: Int, limit: Int)
        /// Its collection's name holds U+0000, which this node cannot store.
        case nulInCollectionName

        public var description: String {
            switch self {
            case .tooLarge(let bytes, let limit):
                "it would be \(bytes) bytes, over the hard limit of \(limit) bytes (document_size_hard_limit_bytes)"
            case .tooDeep(let limit):
                "it would nest deeper than \(limit) levels, the most a document can hold (fields and values nested inside one another, the document itself counted)"
            case .keyTooLong(let bytes, let limit):
                "its collection's name, _id and a field's name are \(bytes) bytes together, over the \(limit) this node can index (a hub on PostgreSQL)"
            case .nulInCollectionName:
                "its collection's name holds U+0000, which this node cannot store (a hub on PostgreSQL, whose text holds no U+0000)"
            }
        }
    }

    /// What the limits say of a body.
    public enum Verdict: Sendable, Hashable {
        case fits
        /// Written, and reported: over the soft limit.
        case overSoft(bytes: Int)
        case refused(Refusal)
    }

    /// Checks the canonical JSON of a body against every limit.
    public func check(body json: String) -> Verdict {
        if let deep = Self.depthRefusal(body: json) { return .refused(deep) }
        return check(bytes: json.utf8.count)
    }

    /// Why a document of `collection` stored as `id` cannot be written with `fields`
    /// (nil when it can): its collection's name holding U+0000 where names cannot
    /// (`collectionNamesHoldNul`), or its key and its longest field name together over
    /// `keyBytes`. The stored `_id` is canonical JSON and a field's name is stored as
    /// bytes, so U+0000 in either is escaped or held as it is.
    public func keyRefusal(collection: String, id: String, fields: some Sequence<String>) -> Refusal? {
        if !collectionNamesHoldNul, collection.utf8.contains(0) { return .nulInCollectionName }
        guard let keyBytes else { return nil }
        let bytes = collection.utf8.count + id.utf8.count + fields.reduce(0) { max($0, $1.utf8.count) }
        return bytes > keyBytes ? .keyTooLong(bytes: bytes, limit: keyBytes) : nil
    }

    /// Whether `keyRefusal` can refuse anything: a key bound, or names that cannot hold U+0000.
    public var boundsKeys: Bool { keyBytes != nil || !collectionNamesHoldNul }

    /// Checks a body's size alone.
    public func check(bytes: Int) -> Verdict {
        if bytes > hardBytes { return .refused(.tooLarge(bytes: bytes, limit: hardBytes)) }
        return bytes > min(softBytes, hardBytes) ? .overSoft(bytes: bytes) : .fits
    }

    /// Whether a body nests too deeply to be read back, which no setting changes.
    public static func depthRefusal(body json: String) -> Refusal? {
        // A text shorter than twice a depth cannot reach it (each level takes an opening
        // and a closing bracket), so the usual body costs one comparison here.
        guard json.utf8.count >= 2 * (maximumDepth + 1), JSON.nestingDepth(of: json) > maximumDepth else { return nil }
        return .tooDeep(limit: maximumDepth)
    }
}

extension JSON {
    /// How deeply the arrays and objects of a JSON text nest (0 for a scalar), read
    /// from its bytes without parsing (the text is taken to be valid JSON).
    public static func nestingDepth(of text: String) -> Int {
        var text = text
        return text.withUTF8 { bytes in
            var depth = 0, deepest = 0
            var inString = false, escaped = false
            for byte in bytes {
                if inString {
                    if escaped {
                        escaped = false
                    } else if byte == UInt8(ascii: "\\") {
                        escaped = true
                    } else if byte == UInt8(ascii: "\"") {
                        inString = false
                    }
                    continue
                }
                switch byte {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                    deepest = max(deepest, depth)
                case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1
                default: break
                }
            }
            return deepest
        }
    }
}

/// A document of a received transaction that this node cannot hold, and why: the
/// transaction is refused whole.
public struct DocumentRefusal: Error, Sendable, Hashable, CustomStringConvertible {
    public var document: DocumentRef
    public var reason: DocumentLimits.Refusal

    public init(document: DocumentRef, reason: DocumentLimits.Refusal) {
        self.document = document
        self.reason = reason
    }

    /// The collection's name with U+0000 written `\u0000`: a refusal is recorded and
    /// reported as text, which on a hub cannot hold that character.
    public var description: String { "document \(document.id) in \(document.collection.escapingNul): \(reason)" }
}

extension String {
    /// The text with each U+0000 written `\u0000`: for text a store keeps as PostgreSQL
    /// `TEXT`, which holds no U+0000, such as a refusal's reason naming a collection.
    package var escapingNul: String {
        guard utf8.contains(0) else { return self }
        return unicodeScalars.map { $0 == "\u{0}" ? "\\u0000" : String($0) }.joined()
    }
}

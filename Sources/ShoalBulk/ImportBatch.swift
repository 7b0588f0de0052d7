/// Documents that go to the node in one `exec`, as one transaction:
/// `INSERT INTO `c` DOCUMENTS (:d0), (:d1), ... ON ID CONFLICT DO UPDATE`, with each
/// document an argument, so the statement stays short whatever the documents hold.
public struct ImportBatch: Sendable, Hashable {
    public struct Entry: Sendable, Hashable {
        public var line: Int
        /// The document's canonical JSON.
        public var json: String
    }

    public private(set) var entries: [Entry] = []
    /// The length of the arguments object's JSON text.
    public private(set) var argumentBytes = 2
    /// The length of the statement's `(:dN), ` list.
    public private(set) var listLength = 0

    public init() {}

    public var count: Int { entries.count }
    public var isEmpty: Bool { entries.isEmpty }
    public var firstLine: Int? { entries.first?.line }
    public var lastLine: Int? { entries.last?.line }

    /// What one more document of `json` would add to the arguments and to the statement.
    func cost(of json: String) -> (arguments: Int, statement: Int) {
        let name = "d\(entries.count)"
        return (json.utf8.count + name.utf8.count + 4, name.utf8.count + 5)
    }

    mutating func append(line: Int, json: String) {
        let cost = cost(of: json)
        entries.append(Entry(line: line, json: json))
        argumentBytes += cost.arguments
        listLength += cost.statement
    }

    /// The INSERT statement for this batch into `collection`.
    public func statement(collection: String) -> String {
        let list = entries.indices.map { "(:d\($0))" }.joined(separator: ", ")
        return "INSERT INTO \(ImportBatch.quoted(collection)) DOCUMENTS \(list) ON ID CONFLICT DO UPDATE"
    }

    /// The arguments: `{"d0": <document>, "d1": <document>, ...}`.
    public var argumentsJSON: String {
        var out = "{"
        out.reserveCapacity(argumentBytes)
        for (index, entry) in entries.enumerated() {
            if index > 0 { out += "," }
            out += "\"d\(index)\":"
            out += entry.json
        }
        return out + "}"
    }

    /// The collection name as a DQL identifier: in backticks, so that any name but one
    /// holding a backtick can be used.
    static func quoted(_ collection: String) -> String { "`\(collection)`" }
}

/// Groups documents into batches no larger than the node takes in one request.
///
/// A batch ends at `maximumDocuments`, or before a document that would take its
/// arguments past `maximumArgumentBytes` (8 MiB, half the default 16 MiB frame, leaving
/// room for the frame's other fields and a node with a smaller limit) or its statement
/// past `maximumStatementLength` (48 KiB, under the node's default 64 KiB
/// `--max-query-length`).
public struct ImportBatcher: Sendable {
    public static let maximumArgumentBytes = 8 << 20
    public static let maximumStatementLength = 48 << 10

    public var maximumDocuments: Int
    public var maximumArgumentBytes: Int
    public var maximumStatementLength: Int
    public private(set) var current = ImportBatch()

    public init(
        maximumDocuments: Int, maximumArgumentBytes: Int = ImportBatcher.maximumArgumentBytes,
        maximumStatementLength: Int = ImportBatcher.maximumStatementLength
    ) {
        self.maximumDocuments = maximumDocuments
        self.maximumArgumentBytes = maximumArgumentBytes
        self.maximumStatementLength = maximumStatementLength
    }

    /// Adds a document; returns the batches that are ready to send: the one before it
    /// when it does not fit there, and the one it fills.
    public mutating func add(line: Int, json: String) -> [ImportBatch] {
        var ready: [ImportBatch] = []
        let cost = current.cost(of: json)
        if !current.isEmpty,
            current.argumentBytes + cost.arguments > maximumArgumentBytes
                || current.listLength + cost.statement > maximumStatementLength
        {
            ready.append(current)
            current = ImportBatch()
        }
        current.append(line: line, json: json)
        if current.count >= maximumDocuments {
            ready.append(current)
            current = ImportBatch()
        }
        return ready
    }

    /// What is left: the last, partial batch.
    public mutating func flush() -> ImportBatch? {
        guard !current.isEmpty else { return nil }
        defer { current = ImportBatch() }
        return current
    }
}

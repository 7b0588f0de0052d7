public import ShoalCRDT
package import ShoalQuery

/// The store's run-time parameters: what `ALTER SYSTEM SET` changes and `SHOW` reads.
///
/// They live in memory, one set per `DocumentStore`: a change lasts until the store
/// closes and is not saved in the database, so every opening starts from the values
/// given to `DocumentStore.init` (the defaults below unless an embedding app chose
/// others). `ALTER SYSTEM SET` takes effect at once, inside a transaction too, and a
/// rollback does not undo it.
public struct SystemParameters: Sendable, Hashable {
    /// How long a transaction may stay open before it is logged (`notice`), in
    /// milliseconds: `transaction_duration_before_logging_ms`, default 10 000.
    public var transactionDurationBeforeLoggingMilliseconds: Int64
    /// How often a transaction still open is logged again after that (`warning` the
    /// second time, `error` from the third), in milliseconds:
    /// `transaction_trace_interval_ms`, default 5 000.
    public var transactionTraceIntervalMilliseconds: Int64
    /// A document body larger than this many bytes (its canonical JSON) is written, and
    /// a warning logged: `document_size_soft_limit_bytes`, default 262 144 (256 KiB).
    public var documentSizeSoftLimitBytes: Int64
    /// A local write that would leave a document body larger than this many bytes is
    /// refused, and so is a received transaction that writes more than this to one
    /// document: `document_size_hard_limit_bytes`, default 4 194 304 (4 MiB).
    public var documentSizeHardLimitBytes: Int64

    public init(
        transactionDurationBeforeLoggingMilliseconds: Int64 = 10_000, transactionTraceIntervalMilliseconds: Int64 = 5_000,
        documentSizeSoftLimitBytes: Int64 = 256 << 10, documentSizeHardLimitBytes: Int64 = 4 << 20
    ) {
        self.transactionDurationBeforeLoggingMilliseconds = transactionDurationBeforeLoggingMilliseconds
        self.transactionTraceIntervalMilliseconds = transactionTraceIntervalMilliseconds
        self.documentSizeSoftLimitBytes = documentSizeSoftLimitBytes
        self.documentSizeHardLimitBytes = documentSizeHardLimitBytes
    }

    /// The document limits as every writer checks them (`DocumentLimits`).
    public var documentLimits: DocumentLimits {
        DocumentLimits(
            softBytes: Int(clamping: documentSizeSoftLimitBytes), hardBytes: Int(clamping: documentSizeHardLimitBytes))
    }

    /// Why a soft and a hard document size limit cannot go together, or nil when they
    /// can: a body over the soft limit is written and logged, one over the hard limit
    /// refused, so a soft limit above the hard one could never apply.
    public static func sizeLimitsProblem(soft: Int64, hard: Int64) -> String? {
        guard soft > hard else { return nil }
        return "the soft document size limit (\(soft) bytes) would be above the hard one (\(hard) bytes); "
            + "the soft limit, at which a write is only logged, must be at most the hard limit, at which it is refused"
    }

    /// One parameter: its DQL name, what it takes, and where it lives in the struct.
    package struct Definition: Sendable {
        package let name: String
        /// What the value must be, for error messages.
        package let takes: String
        package let keyPath: any WritableKeyPath<SystemParameters, Int64> & Sendable
    }

    /// Every parameter, in name order (the order `SHOW ALL` lists them in).
    package static let definitions: [Definition] = [
        Definition(
            name: "document_size_hard_limit_bytes", takes: "a whole number of bytes, at least 1",
            keyPath: \.documentSizeHardLimitBytes),
        Definition(
            name: "document_size_soft_limit_bytes", takes: "a whole number of bytes, at least 1",
            keyPath: \.documentSizeSoftLimitBytes),
        Definition(
            name: "transaction_duration_before_logging_ms", takes: "a whole number of milliseconds, at least 1",
            keyPath: \.transactionDurationBeforeLoggingMilliseconds),
        Definition(
            name: "transaction_trace_interval_ms", takes: "a whole number of milliseconds, at least 1",
            keyPath: \.transactionTraceIntervalMilliseconds),
    ]

    /// "a (what it takes) and b (what it takes)", for messages.
    package static var known: String {
        let items = definitions.map { "\($0.name) (\($0.takes))" }
        return items.dropLast().joined(separator: ", ") + (items.count > 1 ? " and " : "") + (items.last ?? "")
    }

    package static func definition(named name: String, at position: SourcePosition) throws(QueryError) -> Definition {
        guard let definition = definitions.first(where: { $0.name == name.lowercased() }) else {
            throw QueryError("unknown system parameter '\(name)': the parameters are \(known)", position: position)
        }
        return definition
    }

    /// `[{"name": ..., "value": ...}]` for one parameter.
    package func row(_ definition: Definition) -> Value {
        ["name": .string(definition.name), "value": .int(self[keyPath: definition.keyPath])]
    }

    /// Runs `ALTER SYSTEM SET` or `SHOW` on these parameters and returns the result rows.
    package mutating func apply(_ statement: SystemStatement, arguments: [String: Value]) throws(QueryError) -> [Value] {
        switch statement {
        case .showAll:
            return Self.definitions.map(row)
        case .show(let name, let position):
            return [row(try Self.definition(named: name, at: position))]
        case .set(let setting):
            let definition = try Self.definition(named: setting.name, at: setting.namePosition)
            let value = try Evaluator.evaluate(setting.value, document: .object([:]), arguments: arguments)
            guard case .int(let number)? = value, number >= 1 else {
                let shown = value.map { "\($0.typeName) \($0.canonicalJSON)" } ?? "nothing"
                throw QueryError(
                    "\(definition.name) takes \(definition.takes), got \(shown); the parameters are \(Self.known)",
                    position: setting.valuePosition)
            }
            var changed = self
            changed[keyPath: definition.keyPath] = number
            if let problem = Self.sizeLimitsProblem(soft: changed.documentSizeSoftLimitBytes, hard: changed.documentSizeHardLimitBytes) {
                throw QueryError("\(definition.name) = \(number) refused: \(problem)", position: setting.valuePosition)
            }
            self = changed
            return [row(definition)]
        }
    }
}

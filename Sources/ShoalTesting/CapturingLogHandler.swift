public import Logging
import ShoalCRDT

/// Log records kept in memory by `CapturingLogHandler`.
public final class LogRecords: Sendable {
    public struct Record: Sendable {
        public var level: Logger.Level
        public var message: String
        public var metadata: [String: String]
    }

    private let records = Locked<[Record]>([])

    public init() {}

    public func append(_ record: Record) { records.withLock { $0.append(record) } }

    public var all: [Record] { records.withLock { $0 } }

    /// The long-transaction reports about the transaction with this ID, in order.
    public func reports(about id: String) -> [Record] {
        records.withLock { $0.filter { $0.metadata["shoal.txn.id"] == id } }
    }
}

/// A log handler that keeps every record in `records`, for tests that check what was logged.
public struct CapturingLogHandler: LogHandler {
    public let records: LogRecords
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .trace
    public var metadataProvider: Logger.MetadataProvider?

    public init(records: LogRecords) { self.records = records }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        records.append(
            LogRecords.Record(
                level: event.level, message: event.message.description, metadata: merged.mapValues { "\($0)" }))
    }
}


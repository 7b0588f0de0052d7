import Logging
import ShoalCRDT

/// Log records held back until what they tell of has happened: those of one attempt at
/// an inbound commit, logged once the commit is kept. A store may run a commit's body
/// more than once (beside other hubs, then again as their one writer), and each attempt
/// would otherwise log its warnings again.
final class DeferredLog: Sendable {
    private let records = Locked<[LogEvent]>([])

    /// A logger for one attempt: its records replace those of the attempts before.
    func attempt(of logger: Logger) -> Logger {
        records.withLock { $0 = [] }
        var deferred = Logger(label: logger.label) { _ in Handler(log: self) }
        deferred.logLevel = logger.logLevel
        return deferred
    }

    /// Logs the last attempt's records through `logger`, once.
    func flush(to logger: Logger) {
        let kept = records.withLock { records -> [LogEvent] in
            defer { records = [] }
            return records
        }
        for event in kept {
            logger.log(
                level: event.level, event.message, metadata: event.metadata, source: event.source, file: event.file,
                function: event.function, line: event.line)
        }
    }

    private struct Handler: LogHandler {
        let log: DeferredLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            var event = event
            if !metadata.isEmpty { event.metadata = metadata.merging(event.metadata ?? [:]) { $1 } }
            log.records.withLock { $0.append(event) }
        }
    }
}

public import Logging
import ShoalCRDT
public import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A `LogHandler` that writes one JSON object per line, for log shippers
/// (`shoal run --log-format json`).
///
/// ```
/// {"timestamp":"2026-05-01T09:30:00.125Z","level":"info","label":"shoal","message":"ready ...","shoal.site":"5f3a..."}
/// ```
///
/// The four fixed fields come first; then every metadata key (the handler's, the
/// provider's and the call's, the call's winning) as a field of its own, sorted.
/// A metadata key named like a fixed field is dropped rather than hide it.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    let label: String
    let write: @Sendable (String) -> Void
    let now: @Sendable () -> Date

    static let fixedFields: Set<String> = ["timestamp", "level", "label", "message"]
    static let timestampFormat = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// A handler that hands each line (with its newline) to `write`; `now` dates it.
    public init(
        label: String, metadataProvider: Logger.MetadataProvider? = nil,
        now: @escaping @Sendable () -> Date = { Date() }, write: @escaping @Sendable (String) -> Void
    ) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.now = now
        self.write = write
    }

    /// A handler writing to standard error, each line in one `write(2)`.
    public static func standardError(label: String, metadataProvider: Logger.MetadataProvider? = nil) -> JSONLogHandler {
        JSONLogHandler(label: label, metadataProvider: metadataProvider) { line in
            var bytes = Array(line.utf8)
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress! + offset, $0.count - offset) }
                if n <= 0 { return }
                offset += n
            }
        }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields = metadata
        if let provided = metadataProvider?.get() { fields.merge(provided) { _, new in new } }
        if let given = event.metadata { fields.merge(given) { _, new in new } }
        if let error = event.error, fields["error"] == nil { fields["error"] = .string("\(error)") }
        write(Self.line(
            timestamp: now(), level: event.level, label: label, message: "\(event.message)", metadata: fields))
    }

    /// One log line: the JSON object and a newline.
    static func line(timestamp: Date, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata) -> String {
        var out = "{\"timestamp\":" + JSON.encode(.string(timestamp.formatted(timestampFormat)))
        out += ",\"level\":" + JSON.encode(.string(level.rawValue))
        out += ",\"label\":" + JSON.encode(.string(label))
        out += ",\"message\":" + JSON.encode(.string(message))
        for key in metadata.keys.sorted() where !fixedFields.contains(key) {
            out += "," + JSON.encode(.string(key)) + ":" + JSON.encode(value(metadata[key]!))
        }
        return out + "}\n"
    }

    /// A metadata value as JSON: strings as strings, lists as arrays, dictionaries as objects.
    static func value(_ metadata: Logger.Metadata.Value) -> Value {
        switch metadata {
        case .string(let s): .string(s)
        case .stringConvertible(let c): .string(c.description)
        case .array(let items): .array(items.map(value))
        case .dictionary(let fields): .object(fields.mapValues(value))
        }
    }
}

import ArgumentParser
import ShoalStorage
import Foundation
import ShoalBulk
import ShoalCRDT
import ShoalNode
import ShoalSync

struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Load documents from NDJSON, a JSON array or CSV into a collection.",
        discussion: """
            The format is --format, else the file's extension (.ndjson and .jsonl are \
            NDJSON, .csv is CSV), else the first character that is not white space: '[' a \
            JSON array of objects, '{' NDJSON (one object per line), anything else CSV. CSV \
            has a header row naming the fields; an unquoted cell that is a JSON number is a \
            number, true and false are booleans, an empty one leaves its field out, and any \
            other cell, and every quoted one, is a string. A number is kept as written or \
            refused: an integer beyond 64 bits, or one a double would change \
            (0.30000000000000001, 1e400), makes its record bad; quote it, or write it as a \
            JSON string, to keep it as text.
            Documents are upserted (INSERT ... ON ID CONFLICT DO UPDATE: a document whose \
            _id exists has the fields it names overwritten, the others kept), --batch at a \
            time in one transaction each, over one connection; a batch also ends before 8 \
            MiB of documents. A document without _id gets one from the node.
            A record that is not a document (bad JSON, not an object, a CSV row with the \
            wrong number of fields) stops the import with its line number and exit status \
            1, once every document before it is committed; with --skip-bad it is reported \
            and left out, as are documents the node refuses. Progress goes to stderr when \
            it is a terminal, or with --progress. Examples:
              shoal import cars.ndjson
              shoal import --collection cars --json cars.csv
              gunzip -c cars.json.gz | shoal import --collection cars -
            """
    )

    @OptionGroup var client: ClientOptions

    @Option(name: .long, help: "The collection to write into (default: the file's name without its extension).")
    var collection: String?

    @Option(name: .long, help: "Documents per transaction.")
    var batch = 1000

    @Option(name: .long, help: "ndjson, json (an array of objects) or csv (default: by extension, else by content).")
    var format: String?

    @Flag(name: .long, help: "Report records that are not documents, and documents the node refuses, and go on.")
    var skipBad = false

    @Flag(name: .long, help: "Print progress on stderr even when it is not a terminal.")
    var progress = false

    @Flag(name: .long, help: "Print one JSON object at the end: documents, records, batches, skipped, seconds (and failed).")
    var json = false

    @Argument(help: "The file to read, or - for standard input.")
    var file: String

    func validate() throws {
        if batch <= 0 { throw ValidationError("--batch must be a positive number of documents") }
        if let format, ImportFormat(rawValue: format) == nil {
            throw ValidationError("--format must be ndjson, json or csv")
        }
        if file == "-", collection == nil {
            throw ValidationError("--collection is needed when reading standard input")
        }
        let name = targetCollection
        if name.isEmpty || name.contains("`") {
            throw ValidationError("'\(name)' cannot be a collection name: give --collection a name without backticks")
        }
    }

    /// `--collection`, or the file's name without its extension.
    var targetCollection: String {
        collection ?? URL(fileURLWithPath: file).deletingPathExtension().lastPathComponent
    }

    func run() async throws {
        let input: FileHandle
        var totalBytes: Int?
        if file == "-" {
            input = .standardInput
        } else {
            guard let handle = FileHandle(forReadingAtPath: file) else { throw fail("cannot read \(file)") }
            input = handle
            if let attributes = try? FileManager.default.attributesOfItem(atPath: file),
                attributes[.type] as? FileAttributeType == .typeRegular
            {
                totalBytes = attributes[.size] as? Int ?? (attributes[.size] as? UInt64).map(Int.init)
            }
        }
        let importer = Importer(
            collection: targetCollection, batchSize: batch, skipBad: skipBad,
            format: format.flatMap(ImportFormat.init(rawValue:)) ?? (file == "-" ? nil : ImportFormat.fromExtension(file)),
            totalBytes: totalBytes)
        let meter = ProgressMeter(enabled: progress || isatty(STDERR_FILENO) != 0, terminal: isatty(STDERR_FILENO) != 0)
        let report: ImportReport
        do {
            report = try await client.client().withSession { session in
                await importer.run(
                    read: {
                        guard let data = try input.read(upToCount: 1 << 16), !data.isEmpty else { return nil }
                        return [UInt8](data)
                    },
                    exec: { (statement: String, arguments: String) async throws(ShoalError) -> Int in
                        try await session.exec(statement, argumentsJSON: arguments, hint: "shoal import").mutatedDocumentIDs.count
                    },
                    progress: meter.show)
            }
        } catch {
            throw fail(connectionMessage(error, node: client.node))
        }
        meter.end()
        if json { print(report.json.canonicalJSON) }
        for skipped in report.skipped { printError("shoal: line \(skipped.line) skipped: \(skipped.error)") }
        if let failure = report.failure {
            printError("shoal: line \(failure.line): \(failure.error)")
            throw fail(
                "import stopped: \(report.documents) document(s) committed in \(report.batches) batch(es), "
                    + "every one before line \(failure.line); nothing from line \(failure.line) on")
        }
        if !json {
            let skipped = report.skipped.isEmpty ? "" : ", \(report.skipped.count) record(s) skipped"
            let records = report.records == report.documents ? "" : " from \(report.records) record(s)"
            print(
                "imported \(report.documents) document(s)\(records) into \(targetCollection) in \(report.batches) batch(es)\(skipped), "
                    + String(format: "%.1f s", report.seconds))
        }
    }
}

/// What to say when a session with the node could not be opened or broke.
func connectionMessage(_ error: any Error, node: String) -> String {
    switch error {
    case let error as ShoalError: error.message
    default: "cannot reach a Shoal node at \(node): \(error)"
    }
}

/// Progress lines on stderr, at most one a second: redrawn in place on a terminal.
final class ProgressMeter {
    private let enabled: Bool
    private let terminal: Bool
    private var lastShown = -1.0
    private var drawn = false

    init(enabled: Bool, terminal: Bool) {
        self.enabled = enabled
        self.terminal = terminal
    }

    func show(_ progress: ImportProgress) {
        guard enabled, progress.seconds - lastShown >= 1 || lastShown < 0 else { return }
        lastShown = progress.seconds
        let rate = progress.seconds > 0 ? Double(progress.documents) / progress.seconds : 0
        var text = "\(progress.documents) documents, \(Int(rate))/s"
        if let total = progress.totalBytes, total > 0, progress.bytesRead > 0 {
            let fraction = min(1, Double(progress.bytesRead) / Double(total))
            let remaining = progress.seconds * (1 - fraction) / fraction
            text += ", \(Int(fraction * 100))%, ETA \(Int(remaining.rounded())) s"
        }
        if terminal {
            FileHandle.standardError.write(Data(("\r\u{1B}[K" + text).utf8))
            drawn = true
        } else {
            printError(text)
        }
    }

    /// Ends the line a terminal redraws.
    func end() {
        if drawn { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

public import ShoalCRDT
public import ShoalStorage
import ShoalNode

/// What an import did: `shoal import --json` prints it.
public struct ImportReport: Sendable, Hashable {
    /// A record left out (`--skip-bad`), or the one the import stopped at.
    public struct Problem: Sendable, Hashable {
        public var line: Int
        public var error: String

        public init(line: Int, error: String) {
            self.line = line
            self.error = error
        }
    }

    /// Documents the node wrote, as each batch's answer counts them: records of one
    /// batch that name one `_id` make one document (the later ones update it), and a
    /// document a later batch writes again counts again.
    public var documents = 0
    /// Records sent to the node (read, and not skipped) in the batches that committed.
    public var records = 0
    /// Transactions (one `exec` each) that committed them.
    public var batches = 0
    public var skipped: [Problem] = []
    public var seconds = 0.0
    /// Why the import stopped before the end of its input; every document before
    /// `failure.line` is committed, none after it is sent.
    public var failure: Problem?

    public init() {}

    /// `{"documents": N, "records": R, "batches": B, "skipped": [{"line": L, "error": "..."}], "seconds": S}`,
    /// and `"failed": {"line": L, "error": "..."}` when the import stopped early.
    public var json: Value {
        func object(_ problem: Problem) -> Value { .object(["line": .int(Int64(problem.line)), "error": .string(problem.error)]) }
        var fields: [String: Value] = [
            "documents": .int(Int64(documents)), "records": .int(Int64(records)), "batches": .int(Int64(batches)),
            "skipped": .array(skipped.map(object)), "seconds": .double((seconds * 1000).rounded() / 1000),
        ]
        if let failure { fields["failed"] = object(failure) }
        return .object(fields)
    }
}

/// How far an import has come, after each batch.
public struct ImportProgress: Sendable, Hashable {
    public var documents: Int
    public var bytesRead: Int
    /// The input's size, when it is a file.
    public var totalBytes: Int?
    public var seconds: Double
}

/// Reads documents from an input and upserts them into a collection, in batches of
/// one transaction each.
///
/// It knows nothing of files or connections: `read` gives the next chunk of input
/// (nil at its end) and `exec` runs one statement with its arguments' JSON on the
/// node and returns how many documents it wrote (`AdminSession.exec`'s
/// `mutatedDocumentIDs` in `shoal import`), so tests can drive it alone.
public struct Importer: Sendable {
    public var collection: String
    public var batchSize: Int
    public var skipBad: Bool
    public var format: ImportFormat?
    public var totalBytes: Int?

    public init(collection: String, batchSize: Int = 1000, skipBad: Bool = false, format: ImportFormat? = nil, totalBytes: Int? = nil) {
        self.collection = collection
        self.batchSize = batchSize
        self.skipBad = skipBad
        self.format = format
        self.totalBytes = totalBytes
    }

    /// Runs the import to the end of the input, or to the first record it cannot take
    /// (unless `skipBad`): the documents before that record are sent first.
    public func run(
        read: () throws -> [UInt8]?,
        exec: @escaping (_ statement: String, _ argumentsJSON: String) async throws(ShoalError) -> Int,
        progress: @escaping (ImportProgress) -> Void = { _ in }
    ) async -> ImportReport {
        var run = Run(importer: self, exec: exec, progress: progress)
        await run.go(read: read)
        return run.report
    }

    private struct Run {
        let importer: Importer
        let exec: (String, String) async throws(ShoalError) -> Int
        let progress: (ImportProgress) -> Void
        let clock = ContinuousClock()
        let start: ContinuousClock.Instant
        var report = ImportReport()
        var batcher: ImportBatcher
        var bytesRead = 0

        init(importer: Importer, exec: @escaping (String, String) async throws(ShoalError) -> Int, progress: @escaping (ImportProgress) -> Void) {
            self.importer = importer
            self.exec = exec
            self.progress = progress
            self.start = clock.now
            self.batcher = ImportBatcher(maximumDocuments: importer.batchSize)
        }

        var seconds: Double {
            let elapsed = clock.now - start
            return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        }

        mutating func go(read: () throws -> [UInt8]?) async {
            defer { report.seconds = seconds }
            var reader = RecordReader(format: importer.format)
            while true {
                let chunk: [UInt8]?
                do {
                    chunk = try read()
                } catch {
                    _ = await flush()
                    report.failure = .init(line: (batcher.current.lastLine ?? 0) + 1, error: "cannot read the input: \(error)")
                    return
                }
                let records: [ImportRecord]
                if let chunk {
                    bytesRead += chunk.count
                    records = reader.read(chunk)
                } else {
                    records = reader.finish()
                }
                for record in records {
                    guard await take(record) else { return }
                }
                if chunk == nil {
                    _ = await flush()
                    return
                }
            }
        }

        /// Takes one record; false when the import must stop.
        mutating func take(_ record: ImportRecord) async -> Bool {
            switch record {
            case .document(let line, let document):
                let json = document.canonicalJSON
                guard json.utf8.count + 8 <= batcher.maximumArgumentBytes else {
                    let message = "the document is \(json.utf8.count) bytes, more than the "
                        + "\(batcher.maximumArgumentBytes >> 20) MiB one request to the node may carry"
                    return await take(.bad(line: line, message: message))
                }
                for batch in batcher.add(line: line, json: json) {
                    guard await send(batch) else { return false }
                }
                return true
            case .bad(let line, let message):
                if importer.skipBad {
                    report.skipped.append(.init(line: line, error: message))
                    return true
                }
                guard await flush() else { return false }
                report.failure = .init(line: line, error: message)
                return false
            case .fatal(let line, let message):
                guard await flush() else { return false }
                report.failure = .init(line: line, error: message)
                return false
            }
        }

        /// Sends what the batcher holds; false when that failed.
        mutating func flush() async -> Bool {
            guard let batch = batcher.flush() else { return true }
            return await send(batch)
        }

        /// Sends one batch; false when the import must stop. With `skipBad`, a batch the
        /// node refuses is sent again one document at a time, and the documents it
        /// refuses alone are skipped with its message.
        mutating func send(_ batch: ImportBatch) async -> Bool {
            let lines = batch.firstLine == batch.lastLine ? "line \(batch.firstLine ?? 0)" : "lines \(batch.firstLine ?? 0)–\(batch.lastLine ?? 0)"
            let written: Int
            do throws(ShoalError) {
                written = try await exec(batch.statement(collection: importer.collection), batch.argumentsJSON)
            } catch where error.code == .requestFailed && importer.skipBad {
                if batch.count == 1 {
                    report.skipped.append(.init(line: batch.firstLine ?? 0, error: error.message))
                    return true
                }
                for entry in batch.entries {
                    var single = ImportBatch()
                    single.append(line: entry.line, json: entry.json)
                    guard await send(single) else { return false }
                }
                return true
            } catch where error.code == .requestFailed {
                report.failure = .init(line: batch.firstLine ?? 0, error: "the node refused the batch of \(lines): \(error.message)")
                return false
            } catch {
                report.failure = .init(
                    line: batch.firstLine ?? 0,
                    error: "the batch of \(lines) may or may not have been committed: \(error.message)")
                return false
            }
            report.documents += written
            report.records += batch.count
            report.batches += 1
            progress(ImportProgress(documents: report.documents, bytesRead: bytesRead, totalBytes: importer.totalBytes, seconds: seconds))
            return true
        }
    }
}

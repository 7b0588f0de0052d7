import Logging
import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// The document size limits on local writes, at their edge.
@Suite struct DocumentSizeTests {
    /// The body of `{_id: id, v: a string of n x}` in bytes.
    static func size(_ id: String, _ n: Int) -> Int {
        Value.object(["_id": .string(id), "v": .string(String(repeating: "x", count: n))]).canonicalJSON.utf8.count
    }

    @Test func aDocumentAtTheHardLimitIsWrittenAndOneByteMoreIsRefused() async throws {
        let limit = Self.size("a", 100)
        let records = LogRecords()
        try await TransactionTests.withStore(logger: Logger(label: "t") { _ in CapturingLogHandler(records: records) }) { store in
            _ = try await store.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = \(limit)")
            _ = try await store.execute("ALTER SYSTEM SET document_size_hard_limit_bytes = \(limit)")
            let x100 = String(repeating: "x", count: 100), x101 = x100 + "x"
            #expect(try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': :v})", arguments: ["v": .string(x100)]).transactionID != nil)
            let error = try await #require(throws: ShoalError.self) {
                try await store.execute("UPDATE c SET v = :v WHERE _id = 'a'", arguments: ["v": .string(x101)])
            }
            #expect(error.code == .tooLarge)
            #expect(
                error.message.contains(
                    "document \"a\" in c would be \(limit + 1) bytes, over the hard limit of \(limit) bytes (document_size_hard_limit_bytes); nothing of the statement was written"))
            #expect(try await store.execute("SELECT v FROM c").items == [["v": .string(x100)]], "the refused update left nothing")
            // An insert too: refused whole.
            await #expect(throws: ShoalError.self) {
                try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'b', 'v': :v})", arguments: ["v": .string(x101)])
            }
            // Inside a transaction, the refused statement is undone and the rest commits.
            let result = try await store.transaction { tx in
                _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'c', 'v': 'small'})")
                do {
                    _ = try await tx.execute("UPDATE c SET v = :v WHERE _id = 'c'", arguments: ["v": .string(x101 + x101)])
                    Issue.record("an oversized update went through")
                } catch let error as ShoalError {
                    #expect(error.code == .tooLarge)
                }
                return .commit
            }
            #expect(result.transactionID != nil)
            #expect(try await store.execute("SELECT v FROM c WHERE _id = 'c'").items == [["v": "small"]])
            #expect(try await store.execute("SELECT _id FROM c ORDER BY _id").items == [["_id": "a"], ["_id": "c"]])
        }
    }

    @Test func aDocumentOverTheSoftLimitIsWrittenAndLogged() async throws {
        let limit = Self.size("a", 50)
        let records = LogRecords()
        try await TransactionTests.withStore(logger: Logger(label: "t") { _ in CapturingLogHandler(records: records) }) { store in
            _ = try await store.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = \(limit)")
            let x50 = String(repeating: "x", count: 50)
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': :v})", arguments: ["v": .string(x50)])
            #expect(records.warnings.isEmpty, "at the soft limit, nothing is logged")
            let written = try await store.execute("UPDATE c SET v = :v WHERE _id = 'a'", arguments: ["v": .string(x50 + "x")])
            #expect(written.transactionID != nil, "over the soft limit, the write stands")
            #expect(
                records.warnings == [
                    "document \"a\" in c is \(limit + 1) bytes, over the soft limit of \(limit) bytes (document_size_soft_limit_bytes)"
                ])
        }
    }

    /// ALTER SYSTEM refuses a soft limit above the hard one, whichever it sets, and
    /// leaves both as they were.
    @Test func aSoftLimitAboveTheHardOneIsRefused() async throws {
        try await TransactionTests.withStore { store in
            for statement in [
                "ALTER SYSTEM SET document_size_soft_limit_bytes = 4194305", "ALTER SYSTEM SET document_size_hard_limit_bytes = 1000",
            ] {
                let error = try await #require(throws: ShoalError.self) { try await store.execute(statement) }
                #expect(error.code == .invalidQuery)
                #expect(error.message.contains("refused: the soft document size limit ("), "\(error.message)")
                #expect(error.message.contains("must be at most the hard limit"), "\(error.message)")
            }
            let rows = try await store.execute("SHOW ALL").items
            #expect(rows.prefix(2) == [
                ["name": "document_size_hard_limit_bytes", "value": 4_194_304], ["name": "document_size_soft_limit_bytes", "value": 262_144],
            ])
            _ = try await store.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = 1000")
            _ = try await store.execute("ALTER SYSTEM SET document_size_hard_limit_bytes = 1000")
        }
    }

    @Test func theLimitsAreSystemParametersWithTheirDefaults() async throws {
        try await TransactionTests.withStore { store in
            let rows = try await store.execute("SHOW ALL").items
            #expect(rows.first == ["name": "document_size_hard_limit_bytes", "value": 4_194_304])
            #expect(rows.dropFirst().first == ["name": "document_size_soft_limit_bytes", "value": 262_144])
        }
    }
}

extension LogRecords {
    /// The messages of the warnings logged so far.
    var warnings: [String] { all.filter { $0.level == .warning }.map(\.message) }
}

import Foundation
import Logging
import ShoalCRDT
import ShoalPostgres
import ShoalStorage
import ShoalStore
import ShoalTesting
import Testing

/// What an app gets of a store on every engine, through `DocumentDatabase` alone: DQL,
/// implicit and explicit transactions, observers. Each test runs once per engine, as
/// `StoreConformanceTests` does for sync.
@Suite struct DocumentDatabaseConformanceTests {
    typealias Engine = StoreConformanceTests.Engine

    static func withDatabase(_ engine: Engine, _ body: @Sendable (any DocumentDatabase) async throws -> Void) async throws {
        try await engine.withStore { try await body($0) }
    }

    static func ids(_ result: QueryResult) -> [String] { result.items.compactMap { $0["_id"]?.stringValue } }

    /// `ALTER SYSTEM SET` and `SHOW` on every engine (a hub's parameters are its own
    /// process's, as a node's are its own), the writes held to the limits set, and the
    /// long-transaction log reporting a transaction open too long at rising levels.
    @Test(arguments: Engine.allCases)
    func parametersChangeAtOnceAndLongTransactionsAreLogged(engine: Engine) async throws {
        let records = LogRecords()
        try await engine.withStore(logger: Logger(label: "shoal.test") { _ in CapturingLogHandler(records: records) }) { store in
            let set = try await store.execute(
                "ALTER SYSTEM SET transaction_duration_before_logging_ms = 40; ALTER SYSTEM SET transaction_trace_interval_ms = 40")
            #expect(set.items == [["name": "transaction_trace_interval_ms", "value": 40]])
            #expect(set.transactionID == nil, "ALTER SYSTEM writes no document")
            #expect(store.systemParameters.transactionDurationBeforeLoggingMilliseconds == 40)
            // Inside a read-write transaction too, which a rollback does not undo.
            _ = try await store.transaction { tx in
                _ = try await tx.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = 1000; ALTER SYSTEM SET document_size_hard_limit_bytes = 2000")
                return .rollback
            }
            #expect(
                try await store.execute("SHOW document_size_hard_limit_bytes").items == [["name": "document_size_hard_limit_bytes", "value": 2000]])
            let error = await #expect(throws: ShoalError.self) {
                try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'big', 'text': :t})", arguments: ["t": .string(String(repeating: "x", count: 3000))])
            }
            #expect(error?.message.contains("over the hard limit of 2000 bytes") == true, "\(error?.message ?? "")")
            let error2 = await #expect(throws: ShoalError.self) { try await store.execute("ALTER SYSTEM SET document_size_soft_limit_bytes = 3000") }
            #expect(error2?.message.contains("hard limit") == true, "\(error2?.message ?? "")")

            let (quick, slow) = try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await store.monitorTransactions() }
                defer { group.cancelAll() }
                // Under the monitor with a threshold no quick transaction reaches even on a
                // loaded machine; then the threshold lowered, for one that stays open.
                _ = try await store.execute("ALTER SYSTEM SET transaction_duration_before_logging_ms = 5000")
                let quick = try await store.transaction(hint: "quick") { tx in
                    _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'q'})")
                    return tx.info.id
                }
                try await Task.sleep(for: .milliseconds(100))
                _ = try await store.execute("ALTER SYSTEM SET transaction_duration_before_logging_ms = 40")
                return (quick, try await store.transaction(hint: "slow import") { tx in
                    _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'a'})")
                    #expect(store.runningTransactions.map(\.id) == [tx.info.id])
                    // Open until its third report.
                    #expect(await InProcessMesh.eventually { records.reports(about: tx.info.id).count >= 3 })
                    return tx.info.id
                })
            }
            let reports = records.reports(about: slow)
            #expect(reports.prefix(3).map(\.level) == [.notice, .warning, .error])
            for report in reports {
                #expect(report.message.hasPrefix("read-write transaction \(slow) (hint 'slow import') has been open for "))
                #expect(report.metadata["shoal.txn.hint"] == "slow import")
                #expect(report.metadata["shoal.txn.read_only"] == "false")
            }
            #expect(reports.map(\.metadata["shoal.txn.report"]).prefix(3) == ["1", "2", "3"])
            #expect(records.reports(about: quick).isEmpty, "a transaction that ended in time is never logged")
            #expect(store.runningTransactions.isEmpty)
        }
    }

    @Test(arguments: Engine.allCases)
    func statementsReadAndWriteDocuments(engine: Engine) async throws {
        try await Self.withDatabase(engine) { db in
            let insert = try await db.execute(
                "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue', 'n': 3}), ({'_id': 'b', 'color': 'red', 'n': 1}), ({'_id': 'c', 'color': 'blue', 'n': 2})")
            #expect(insert.mutatedDocumentIDs == ["a", "b", "c"])
            let first = try #require(insert.transactionID)
            #expect(first.origin == db.siteID)
            #expect(Self.ids(try await db.execute("SELECT * FROM cars WHERE color = 'blue' ORDER BY n")) == ["c", "a"])
            #expect(Self.ids(try await db.execute("SELECT * FROM cars ORDER BY n DESC LIMIT 2 OFFSET 1")) == ["c", "b"])
            #expect(try await db.execute("SELECT COUNT(*) AS k FROM cars WHERE n > 1").items == [["k": 2]])
            #expect(try await db.execute("SELECT color FROM cars WHERE _id = 'b'").items == [["color": "red"]])

            let update = try await db.execute("UPDATE cars SET n = n + 10 WHERE color = 'blue'")
            #expect(Set(update.mutatedDocumentIDs) == ["a", "c"])
            #expect(update.transactionID == TransactionID(origin: db.siteID, sequence: first.sequence + 1))
            #expect(try await db.execute("SELECT n FROM cars ORDER BY n").items == [["n": 1], ["n": 12], ["n": 13]])

            _ = try await db.execute("DELETE FROM cars WHERE _id = 'a'")
            #expect(Self.ids(try await db.execute("SELECT * FROM cars")) == ["b", "c"])
            // A deleted document may be inserted again; a live one only with ON ID CONFLICT.
            _ = try await db.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'green'})")
            await #expect(throws: ShoalError.self) { try await db.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})") }
            _ = try await db.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'n': 7}) ON ID CONFLICT DO UPDATE")
            #expect(try await db.execute("SELECT * FROM cars WHERE _id = 'a'").items == [["_id": "a", "color": "green", "n": 7]])
            // A statement that writes nothing commits no transaction.
            #expect(try await db.execute("UPDATE cars SET n = 0 WHERE color = 'purple'").transactionID == nil)
        }
    }

    /// Reads over more documents than one query of an engine returns (a hub reads 128
    /// bodies a query): every match found, in order, counted once, and pages that cross
    /// the steps read each document once.
    @Test(arguments: Engine.allCases)
    func readsAcrossManyDocumentsFindEveryMatchOnce(engine: Engine) async throws {
        try await engine.withStore { db in
            let documents = (0..<300).map { Value.object(["_id": .string(String(format: "d%03d", $0)), "n": .int(Int64($0))]) }
            _ = try await db.execute("INSERT INTO many DOCUMENTS (:docs)", arguments: ["docs": .array(documents)])
            #expect(try await db.execute("SELECT COUNT(*) AS k FROM many").items == [["k": 300]])
            #expect(try await db.execute("SELECT COUNT(*) AS k FROM many WHERE n >= 250").items == [["k": 50]])
            #expect(Self.ids(try await db.execute("SELECT * FROM many ORDER BY n DESC LIMIT 2")) == ["d299", "d298"])
            #expect(Self.ids(try await db.execute("SELECT * FROM many WHERE n > 200 LIMIT 3")) == ["d201", "d202", "d203"])
            #expect(Self.ids(try await db.execute("SELECT * FROM many LIMIT 2 OFFSET 200")) == ["d200", "d201"])
            var seen: [String] = []
            var after = ""
            while true {
                let page = try await db.page("SELECT * FROM many WHERE n % 3 = 0", arguments: [:], after: after, limit: 70)
                seen += page.items.compactMap { $0["_id"]?.stringValue }
                guard let last = page.lastKey else { break }
                after = last
            }
            #expect(seen == (0..<300).filter { $0 % 3 == 0 }.map { String(format: "d%03d", $0) })
            await #expect(throws: ShoalError.self) { try await db.page("SELECT * FROM many", arguments: [:], after: "", limit: 0) }
            await #expect(throws: ShoalError.self) { try await db.page("SELECT * FROM many ORDER BY n", arguments: [:], after: "", limit: 5) }
        }
    }

    @Test(arguments: Engine.allCases)
    func aFailedStatementUndoesOnlyItselfAndARollbackEverything(engine: Engine) async throws {
        try await Self.withDatabase(engine) { db in
            let result = try await db.transaction(hint: "two inserts") { tx -> TransactionCompletion in
                _ = try await tx.execute("INSERT INTO t DOCUMENTS ({'_id': 'a'})")
                await #expect(throws: ShoalError.self) {
                    try await tx.execute("INSERT INTO t DOCUMENTS ({'_id': 'x'}); INSERT INTO t DOCUMENTS ({'_id': 'a'})")
                }
                // The transaction sees its own writes, and not those of the failed call.
                #expect(Self.ids(try await tx.execute("SELECT * FROM t")) == ["a"])
                _ = try await tx.execute("INSERT INTO t DOCUMENTS ({'_id': 'b'})")
                return .commit
            }
            #expect(result.transactionID != nil)
            #expect(Self.ids(try await db.execute("SELECT * FROM t")) == ["a", "b"])

            let rolledBack = try await db.transaction(hint: "rolled back") { tx -> TransactionCompletion in
                _ = try await tx.execute("INSERT INTO t DOCUMENTS ({'_id': 'c'})")
                _ = try await tx.execute("DELETE FROM t WHERE _id = 'a'")
                return .rollback
            }
            #expect(rolledBack.transactionID == nil)
            #expect(Self.ids(try await db.execute("SELECT * FROM t")) == ["a", "b"])

            struct Refused: Error {}
            await #expect(throws: ShoalError.self) {
                try await db.transaction { tx -> TransactionCompletion in
                    _ = try await tx.execute("INSERT INTO t DOCUMENTS ({'_id': 'd'})")
                    throw Refused()
                }
            }
            #expect(Self.ids(try await db.execute("SELECT * FROM t")) == ["a", "b"])
        }
    }

    @Test(arguments: Engine.allCases)
    func aReadOnlyTransactionRefusesWrites(engine: Engine) async throws {
        try await Self.withDatabase(engine) { db in
            _ = try await db.execute("INSERT INTO t DOCUMENTS ({'_id': 'a'})")
            await #expect(throws: ShoalError.self) {
                try await db.execute("INSERT INTO t DOCUMENTS ({'_id': 'b'})", isReadOnly: true)
            }
            let items = try await db.transaction(isReadOnly: true) { tx -> [Value] in
                await #expect(throws: ShoalError.self) { try await tx.execute("DELETE FROM t") }
                return try await tx.execute("SELECT * FROM t").items
            }
            #expect(items == [["_id": "a"]])
        }
    }

    @Test(arguments: Engine.allCases)
    func anObserverSeesEachCommitThatChangesItsQuery(engine: Engine) async throws {
        try await Self.withDatabase(engine) { db in
            var updates = try db.observe("SELECT * FROM t WHERE n > 1").makeAsyncIterator()
            #expect(try await updates.next()?.items == [])
            let written = try await db.execute("INSERT INTO t DOCUMENTS ({'_id': 'a', 'n': 2}), ({'_id': 'b', 'n': 0})")
            let next = try #require(try await updates.next())
            #expect(next.items == [["_id": "a", "n": 2]])
            #expect(next.transactions == [try #require(written.transactionID)])
            _ = try await db.execute("INSERT INTO u DOCUMENTS ({'_id': 'z'})")
            let counted = try await db.execute("UPDATE t SET n = 5")
            let after = try #require(try await updates.next())
            #expect(after.items == [["_id": "a", "n": 5], ["_id": "b", "n": 5]])
            #expect(after.transactions == [try #require(counted.transactionID)])
        }
    }

    @Test(arguments: Engine.allCases)
    func countersAndMapsKeepTheirMergeRules(engine: Engine) async throws {
        try await Self.withDatabase(engine) { db in
            _ = try await db.execute(
                "INSERT INTO COLLECTION t (hits COUNTER, tags MAP) DOCUMENTS ({'_id': 'a', 'hits': 1, 'tags': {'x': 1}})")
            _ = try await db.execute("UPDATE COLLECTION t (hits COUNTER) APPLY hits INCREMENT BY 4 WHERE _id = 'a'")
            _ = try await db.execute("UPDATE COLLECTION t (tags MAP) SET tags.y = 2 WHERE _id = 'a'")
            #expect(try await db.execute("SELECT * FROM t").items == [["_id": "a", "hits": 5, "tags": ["x": 1, "y": 2]]])
        }
    }

    @Test(arguments: Engine.allCases)
    func aTransactionPastItsCommitDeadlineRollsBack(engine: Engine) async throws {
        try await Self.withDatabase(engine) { db in
            await #expect(throws: ShoalError.self) {
                try await db.transaction { tx -> TransactionCompletion in
                    tx.mustCommit(before: Deadline(budget: .zero))
                    _ = try await tx.execute("INSERT INTO t DOCUMENTS ({'_id': 'late'})")
                    return .commit
                }
            }
            #expect(try await db.execute("SELECT * FROM t").items == [])
            // Its number was not used.
            let next = try await db.execute("INSERT INTO t DOCUMENTS ({'_id': 'a'})")
            #expect(next.transactionID?.sequence == 1)
        }
    }

    /// A body may run statements from several tasks at once: each is kept.
    @Test(arguments: Engine.allCases)
    func statementsRunAtOnceInOneTransactionAreAllKept(engine: Engine) async throws {
        try await Self.withDatabase(engine) { db in
            let result = try await db.transaction { tx -> TransactionCompletion in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for i in 0..<20 {
                        group.addTask { _ = try await tx.execute("INSERT INTO t DOCUMENTS ({'_id': :id})", arguments: ["id": .int(Int64(i))]) }
                    }
                    try await group.waitForAll()
                }
                return .commit
            }
            #expect(result.transactionID != nil)
            #expect(try await db.execute("SELECT COUNT(*) AS n FROM t").items == [["n": 20]])
        }
    }

    /// `_id = 'é'` names one document by its key's bytes, whatever the transaction read
    /// before: "é" composed and decomposed are two documents.
    @Test(arguments: Engine.allCases)
    func anIDComparisonNamesOneDocumentByItsBytes(engine: Engine) async throws {
        try await Self.withDatabase(engine) { db in
            let composed = "\u{E9}", decomposed = "e\u{301}"
            _ = try await db.execute(
                "INSERT INTO t DOCUMENTS ({'_id': :a, 'x': 0}), ({'_id': :b, 'x': 0})",
                arguments: ["a": .string(composed), "b": .string(decomposed)])
            try await db.transaction { tx -> TransactionCompletion in
                #expect(try await tx.execute("SELECT * FROM t").items.count == 2)
                let updated = try await tx.execute("UPDATE t SET x = 1 WHERE _id = :id", arguments: ["id": .string(composed)])
                #expect(updated.mutatedDocumentIDs.count == 1)
                return .commit
            }
            let xs = try await db.execute("SELECT x FROM t").items.compactMap { $0["x"]?.intValue }.sorted()
            #expect(xs == [0, 1])
        }
    }

    @Test(arguments: Engine.allCases)
    func showTellsAParameter(engine: Engine) async throws {
        try await Self.withDatabase(engine) { db in
            let rows = try await db.execute("SHOW document_size_hard_limit_bytes").items
            #expect(rows.count == 1 && rows[0]["name"] == "document_size_hard_limit_bytes" && rows[0]["value"]?.intValue != nil, "\(rows)")
        }
    }
}

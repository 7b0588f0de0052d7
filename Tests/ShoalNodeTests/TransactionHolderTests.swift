import Foundation
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// Transactions held by admin sessions, on a node in this process: what the session
/// sees, what others see and wait for, and what the end of a connection undoes.
@Suite struct TransactionHolderTests {
    static func withNode(_ body: (ShoalNode, AdminClient) async throws -> Void) async throws {
        let dir = TemporaryDirectory(prefix: "shoal-held")
        defer { dir.remove() }
        let node = try ShoalNode(
            configuration: NodeConfiguration(
                dataDirectory: dir.path, listen: HostAndPort(host: "127.0.0.1", port: 0), discovery: false))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await node.run() }
            let address = try await node.ready()
            try await body(node, AdminClient(node: address))
            group.cancelAll()
        }
    }

    static func count(_ client: AdminClient) async throws -> Int {
        try await client.exec("SELECT * FROM cars").itemsJSON.count
    }

    @Test func theSessionSeesItsOwnWritesAndOthersOnlyAfterCommit() async throws {
        try await Self.withNode { node, client in
            try await client.withSession { session in
                let open = try await session.begin(hint: "by hand")
                #expect(open.state == .open && open.hint == "by hand" && !open.isReadOnly)
                let inserted = try await session.exec("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
                #expect(inserted.mutatedDocumentIDs == ["\"a\""] && inserted.transactionID == nil)
                #expect(try await session.exec("SELECT * FROM cars").itemsJSON.count == 1)
                #expect(try await Self.count(client) == 0)
                let held = try await client.status().transactions.sessions
                #expect(held.map(\.id) == [open.id] && held.first?.hint == "by hand")
                #expect(node.storage.runningTransactions.contains { $0.id == open.id && $0.hint == "by hand" })
                let committed = try await session.commit()
                #expect(committed.state == .committed && committed.id == open.id && committed.transactionID != nil)
            }
            #expect(try await Self.count(client) == 1)
            #expect(try await client.status().transactions.sessions.isEmpty)
        }
    }

    /// The answer to COMMIT and to ROLLBACK says how long the transaction lived, as
    /// `status` does while it is open (PROTOCOL.md §10.1), not 0.
    @Test func theEndOfATransactionReportsItsAge() async throws {
        try await Self.withNode { _, client in
            try await client.withSession { session in
                let open = try await session.begin(hint: "slow")
                #expect(open.ageSeconds == 0)
                _ = try await session.exec("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
                try await Task.sleep(for: .milliseconds(400))
                let listed = try #require(try await client.status().transactions.sessions.first)
                let committed = try await session.commit()
                #expect(committed.state == .committed)
                #expect(committed.ageSeconds >= 0.4, "\(committed.ageSeconds)")
                #expect(committed.ageSeconds >= listed.ageSeconds, "status said \(listed.ageSeconds)")
                _ = try await session.begin()
                try await Task.sleep(for: .milliseconds(200))
                let rolledBack = try await session.rollback()
                #expect(rolledBack.state == .rolledBack && rolledBack.ageSeconds >= 0.2, "\(rolledBack.ageSeconds)")
            }
        }
    }

    @Test func aWriterWaitsForTheSessionsTransactionUntilItCommits() async throws {
        try await Self.withNode { _, client in
            let done = Shared(false)
            try await client.withSession { session in
                _ = try await session.begin()
                _ = try await session.exec("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        _ = try await client.exec("INSERT INTO cars DOCUMENTS ({'_id': 'b'})")
                        done.withLock { $0 = true }
                    }
                    try await Task.sleep(for: .milliseconds(500))
                    #expect(!done.withLock { $0 }, "the other writer went ahead of the open transaction")
                    _ = try await session.commit()
                    try await group.waitForAll()
                }
            }
            #expect(done.withLock { $0 })
            #expect(try await Self.count(client) == 2)
        }
    }

    /// A client's timeout is the request's budget on the node (PROTOCOL.md §10.2): a
    /// write that cannot have the writer in time is refused before the client gives up,
    /// saying nothing was written, and it does not run once the writer is free.
    @Test func aWriteThatCannotHaveTheWriterWithinTheClientsTimeoutIsRefusedAndNeverRuns() async throws {
        try await Self.withNode { _, client in
            var impatient = AdminClient(node: client.node, timeout: .seconds(4))
            // The node's refusal, not the client giving up, is what this tests: on a
            // loaded machine the answer can take longer than the default grace to come.
            impatient.grace = .seconds(60)
            try await client.withSession { session in
                _ = try await session.begin(hint: "holds the writer")
                // The client must connect and shake hands within the same 4 s, or it
                // sends nothing: on a loaded machine that can fail too, and is not what
                // this tests, so such a try is made again (the node was sent nothing).
                var started = ContinuousClock.now
                var error: ShoalError?
                for _ in 1...3 {
                    started = .now
                    error = await #expect(throws: ShoalError.self) {
                        try await impatient.exec("INSERT INTO cars DOCUMENTS ({'_id': 'late'})")
                    }
                    guard error?.code == .connectionFailed, error?.message.contains("the request was not sent") == true else { break }
                }
                let elapsed = ContinuousClock.now - started
                #expect(error?.code == .requestFailed, "\(String(describing: error))")
                // The node's answer, not the client giving up.
                #expect(error?.message.contains("the request's budget of 4000 ms ran out") == true)
                #expect(error?.message.contains("nothing was written") == true)
                #expect(elapsed >= .seconds(4), "\(elapsed)")
                _ = try await session.commit()
            }
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await Self.count(client) == 0, "the refused insert ran once the writer was free")
            let retried = try await client.exec("INSERT INTO cars DOCUMENTS ({'_id': 'late'})")
            #expect(retried.transactionID != nil)
            #expect(try await Self.count(client) == 1)
        }
    }

    @Test func aClosedConnectionRollsBackAndFreesTheWriter() async throws {
        try await Self.withNode { node, client in
            try await client.withSession { session in
                _ = try await session.begin(hint: "abandoned")
                _ = try await session.exec("INSERT INTO cars DOCUMENTS ({'_id': 'a'})")
            }
            _ = try await client.exec("INSERT INTO cars DOCUMENTS ({'_id': 'b'})")
            #expect(try await client.exec("SELECT _id FROM cars").itemsJSON == ["{\"_id\":\"b\"}"])
            #expect(try await InProcessMesh.eventually(timeout: .seconds(5)) {
                try await client.status().transactions.sessions.isEmpty
            })
            #expect(!node.storage.runningTransactions.contains { $0.hint == "abandoned" })
        }
    }

    @Test func misplacedTransactionCommandsAreErrorsAndTheConnectionGoesOn() async throws {
        try await Self.withNode { _, client in
            try await client.withSession { session in
                await #expect { try await session.commit() } throws: {
                    ($0 as? ShoalError)?.message.contains("COMMIT without a transaction") == true
                }
                await #expect { try await session.rollback() } throws: {
                    ($0 as? ShoalError)?.message.contains("ROLLBACK without a transaction") == true
                }
                let open = try await session.begin(readOnly: true)
                await #expect { try await session.begin() } throws: {
                    ($0 as? ShoalError)?.message.contains("BEGIN inside a transaction") == true
                }
                await #expect { try await session.exec("INSERT INTO cars DOCUMENTS ({'_id': 'a'})") } throws: {
                    ($0 as? ShoalError)?.message.contains("read-only") == true
                }
                let ended = try await session.rollback()
                #expect(ended.id == open.id && ended.state == .rolledBack)
                #expect(try await session.exec("INSERT INTO cars DOCUMENTS ({'_id': 'a'})").transactionID != nil)
            }
        }
    }
}

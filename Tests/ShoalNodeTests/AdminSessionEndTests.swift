import Foundation
import NIOCore
@testable import ShoalNode
import ShoalStorage
import ShoalWire
import Testing

/// An admin session the node ends with an Error frame is over: the request that meets
/// the Error fails with the node's words, and every request after it fails at once
/// saying the node ended the session, rather than as one more refused statement.
@Suite struct AdminSessionEndTests {
    @Test func aSessionTheNodeEndedSaysSoForEveryRequestAfter() async throws {
        try await TransactionHolderTests.withNode { _, client in
            try await client.withSession { session in
                _ = try await session.begin(hint: "held when the node ends the session")
                // A frame an admin client may not send: the node answers with an Error frame
                // and closes the connection.
                try await session.outbound.write(session.codec.encode(.pong(Shoal_V1_Ping())))
                let first = await #expect(throws: ShoalError.self) { _ = try await session.exec("SELECT * FROM cars") }
                #expect(first?.message.contains("unexpected") == true, "\(String(describing: first))")
                #expect(session.endedByNode?.contains("unexpected") == true)
                let next = await #expect(throws: ShoalError.self) { _ = try await session.exec("SELECT * FROM cars") }
                #expect(next?.code == .connectionFailed, "\(String(describing: next))")
                #expect(next?.message.contains("ended this session") == true, "\(String(describing: next))")
                await #expect(throws: ShoalError.self) { try await session.ping() }
            }
            // The node serves on, and the session's transaction was rolled back: a write
            // does not wait for it.
            _ = try await client.exec("INSERT INTO cars DOCUMENTS ({'_id': 'after'})")
            #expect(try await TransactionHolderTests.count(client) == 1)
        }
    }
}

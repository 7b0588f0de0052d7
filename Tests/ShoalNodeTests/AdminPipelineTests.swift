import Foundation
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// `AdminSession.execPipelined`: exec requests sent ahead of their answers on one
/// admin connection, to a node in this process over loopback TCP.
@Suite struct AdminPipelineTests {
    /// What the client did, in order: built request `i`, or read the answer to `i`.
    enum Step: Hashable {
        case built(Int)
        case answered(Int)
    }

    static func insert(_ i: Int) -> (statements: String, argumentsJSON: String) {
        ("INSERT INTO cars DOCUMENTS (:car)", "{\"car\":{\"_id\":\"k\(i)\",\"i\":\(i)}}")
    }

    @Test(arguments: [1, 4])
    func everyRequestCommitsAndIsAnsweredInOrder(inFlight: Int) async throws {
        try await TransactionHolderTests.withNode { _, client in
            var steps: [Step] = []
            var mutated: [[String]] = []
            try await client.withSession { session in
                try await session.execPipelined(count: 30, inFlight: inFlight, hint: "bulk") { i in
                    steps.append(.built(i))
                    return Self.insert(i)
                } answered: { i, result in
                    steps.append(.answered(i))
                    mutated.append(result.mutatedDocumentIDs)
                    #expect(result.transactionID != nil, "request \(i) committed no transaction")
                }
                // The connection goes on serving requests afterwards.
                #expect(try await session.exec("SELECT * FROM cars").itemsJSON.count == 30)
            }
            #expect(mutated == (0..<30).map { ["\"k\($0)\""] })
            #expect(steps.compactMap { if case .answered(let i) = $0 { i } else { nil } } == Array(0..<30))
            // The first `inFlight` requests are on their way before any answer is read, and
            // from then on each answer makes room for one more.
            let expectedStart = (0..<inFlight).map(Step.built) + [.answered(0), .built(inFlight)]
            #expect(Array(steps.prefix(inFlight + 2)) == expectedStart)
            for (position, step) in steps.enumerated() {
                guard case .built(let i) = step else { continue }
                let answeredBefore = steps[..<position].filter { if case .answered = $0 { true } else { false } }.count
                #expect(i - answeredBefore < inFlight, "request \(i) was built with \(i - answeredBefore) unanswered")
            }
            #expect(try await TransactionHolderTests.count(client) == 30)
        }
    }

    @Test func aFailedRequestStopsTheSendingAndTheOnesAlreadySentStillRun() async throws {
        try await TransactionHolderTests.withNode { _, client in
            var built: [Int] = []
            var answered: [Int] = []
            try await client.withSession { session in
                let error = await #expect(throws: ShoalError.self) {
                    try await session.execPipelined(count: 10, inFlight: 3) { i in
                        built.append(i)
                        return i == 2 ? ("INSERT INTO cars DOCUMENTS (", "") : Self.insert(i)
                    } answered: { i, _ in
                        answered.append(i)
                    }
                }
                #expect(error?.code == .requestFailed)
                #expect(error?.description.contains("request 2 of 10") == true, "\(String(describing: error))")
                // 0, 1 and 2 went out first; the answers to 0 and 1 made room for 3 and 4;
                // the failure of 2 stopped the rest. 3 and 4 still ran, each on its own.
                #expect(built == [0, 1, 2, 3, 4])
                #expect(answered == [0, 1, 3, 4])
                let ids = try await session.exec("SELECT _id FROM cars ORDER BY _id").itemsJSON
                #expect(ids == ["k0", "k1", "k3", "k4"].map { "{\"_id\":\"\($0)\"}" })
            }
        }
    }

    struct Enough: Error {}

    /// The caller's own error ends the call; the answers still on their way are passed
    /// over by the next request on the connection, which gets its own answer.
    @Test func theCallersErrorEndsTheRunAndTheConnectionGoesOn() async throws {
        try await TransactionHolderTests.withNode { _, client in
            try await client.withSession { session in
                await #expect(throws: Enough.self) {
                    try await session.execPipelined(count: 10, inFlight: 4) { i in
                        Self.insert(i)
                    } answered: { i, _ in
                        if i == 1 { throw Enough() }
                    }
                }
                let after = try await session.exec("INSERT INTO cars DOCUMENTS ({'_id': 'after'})")
                #expect(after.mutatedDocumentIDs == ["\"after\""])
                // 0 to 3 went out before the answer to 1; 4 after the answer to 0.
                let ids = try await session.exec("SELECT _id FROM cars ORDER BY _id").itemsJSON
                #expect(ids == ["after", "k0", "k1", "k2", "k3", "k4"].map { "{\"_id\":\"\($0)\"}" })
            }
        }
    }

    @Test func anEmptyRunSendsNothing() async throws {
        try await TransactionHolderTests.withNode { _, client in
            try await client.withSession { session in
                try await session.execPipelined(count: 0) { i in
                    Issue.record("request \(i) was built for an empty run")
                    return Self.insert(i)
                }
                #expect(try await session.exec("SELECT * FROM cars").itemsJSON.isEmpty)
            }
        }
    }
}

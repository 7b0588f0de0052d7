import ShoalStore
import ShoalStorage
import ShoalSync
import Testing

/// The decisions of one admin connection about the transaction it holds, with no
/// connection and no store.
@Suite struct AdminTransactionStateMachineTests {
    static let exec = AdminRequest.exec(statements: "SELECT * FROM cars", argumentsJSON: "", hint: nil, readOnly: false)

    static func refusal(_ action: AdminTransactionStateMachine.Action) -> String? {
        guard case .refuse(let code, let message) = action else { return nil }
        #expect(code == .executionFailed)
        return message
    }

    @Test func withoutATransactionRequestsAreServedAndCommitOrRollbackAreRefused() {
        var machine = AdminTransactionStateMachine()
        #expect(machine.receive(Self.exec) == .serve)
        #expect(machine.receive(.status(digests: false)) == .serve)
        #expect(machine.receive(.page(query: "SELECT * FROM c", argumentsJSON: "", afterKey: "", limit: 1)) == .serve)
        #expect(machine.receive(.subscribe(query: "SELECT * FROM c", argumentsJSON: "")) == .serve)
        #expect(Self.refusal(machine.receive(.commit))?.contains("COMMIT without a transaction") == true)
        #expect(Self.refusal(machine.receive(.rollback))?.contains("ROLLBACK without a transaction") == true)
        #expect(machine.open == nil)
    }

    @Test func beginOpensExecRunsInItAndCommitEndsIt() {
        var machine = AdminTransactionStateMachine()
        #expect(machine.receive(.begin(hint: "fix", readOnly: false)) == .begin(hint: "fix", readOnly: false))
        machine.began(TransactionInfo(id: "t1", hint: "fix", isReadOnly: false))
        #expect(machine.receive(Self.exec) == .runInTransaction)
        #expect(machine.receive(.status(digests: true)) == .serve)
        #expect(machine.receive(.observe(query: "SELECT * FROM c", argumentsJSON: "")) == .serve)
        #expect(machine.receive(.page(query: "SELECT * FROM c", argumentsJSON: "", afterKey: "", limit: 1)) == .serve)
        #expect(machine.receive(.commit) == .end(.commit))
        machine.ended()
        #expect(machine.open == nil)
        #expect(machine.receive(Self.exec) == .serve)
    }

    @Test func aFailedBeginLeavesNoTransaction() {
        var machine = AdminTransactionStateMachine()
        #expect(machine.receive(.begin(hint: nil, readOnly: true)) == .begin(hint: nil, readOnly: true))
        // Nothing reported: the store refused it.
        #expect(machine.receive(.begin(hint: nil, readOnly: false)) == .begin(hint: nil, readOnly: false))
    }

    @Test func beginInsideATransactionIsRefusedNamingIt() throws {
        var machine = AdminTransactionStateMachine()
        _ = machine.receive(.begin(hint: "fix", readOnly: false))
        machine.began(TransactionInfo(id: "t1", hint: "fix", isReadOnly: false))
        let message = try #require(Self.refusal(machine.receive(.begin(hint: nil, readOnly: false))))
        #expect(message.contains("BEGIN inside a transaction") && message.contains("t1") && message.contains("hint 'fix'"))
        #expect(machine.open?.id == "t1")
        #expect(machine.receive(.rollback) == .end(.rollback))
    }

    @Test func inAReadWriteTransactionWritesBesideItAndExecFlagsAreRefused() {
        var machine = AdminTransactionStateMachine()
        _ = machine.receive(.begin(hint: nil, readOnly: false))
        machine.began(TransactionInfo(id: "t1", hint: nil, isReadOnly: false))
        for request in [
            AdminRequest.subscribe(query: "SELECT * FROM c", argumentsJSON: ""), .unsubscribe(idOrQuery: "x"),
            .attachmentPut(AttachmentPutPart(data: [1])), .attachmentGet(hash: "00"), .compact(vacuum: false),
        ] {
            #expect(Self.refusal(machine.receive(request))?.contains("COMMIT or ROLLBACK first") == true)
        }
        let flagged = AdminRequest.exec(statements: "SELECT * FROM c", argumentsJSON: "", hint: "x", readOnly: false)
        #expect(Self.refusal(machine.receive(flagged))?.contains("no hint or read-only flag") == true)
    }

    @Test func inAReadOnlyTransactionWritesBesideItAreServed() {
        var machine = AdminTransactionStateMachine()
        _ = machine.receive(.begin(hint: nil, readOnly: true))
        machine.began(TransactionInfo(id: "t1", hint: nil, isReadOnly: true))
        #expect(machine.receive(.subscribe(query: "SELECT * FROM c", argumentsJSON: "")) == .serve)
        #expect(machine.receive(Self.exec) == .runInTransaction)
    }
}

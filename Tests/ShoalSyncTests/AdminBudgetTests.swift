import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalWire
import Testing

/// An admin request's budget on the wire (PROTOCOL.md §10.2): whole milliseconds out,
/// a deadline counted from the moment the node reads it back.
@Suite struct AdminBudgetTests {
    static let exec = AdminRequest.exec(statements: "SELECT * FROM cars", argumentsJSON: "", hint: nil, readOnly: false)

    @Test(arguments: [
        (budget: Duration?.none, millis: UInt32(0)), (.seconds(30), 30_000), (.milliseconds(1_500), 1_500),
        (.microseconds(10), 1), (.seconds(10_000_000), UInt32.max),
    ])
    func aBudgetIsSentInWholeMillisecondsAndAtLeastOne(budget: Duration?, millis: UInt32) {
        #expect(Self.exec.wire(requestID: 3, budget: budget).budgetMillis == millis)
    }

    @Test func theDeadlineCountsFromWhenTheRequestIsRead() throws {
        let read = ContinuousClock.now
        let deadline = try #require(Deadline(budgetOf: Self.exec.wire(budget: .seconds(2)), from: read))
        #expect(deadline.instant == read + .seconds(2) && deadline.budget == .seconds(2))
        #expect(Deadline(budgetOf: Self.exec.wire(), from: read) == nil, "a request without a budget (an older client) has none")
    }
}

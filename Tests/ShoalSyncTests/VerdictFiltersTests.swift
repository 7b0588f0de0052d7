import ShoalCRDT
import ShoalStorage
@testable import ShoalSync
import Testing

@Suite struct VerdictFiltersTests {
    /// Filters come from peers, each one a different text if a peer likes: a node keeps
    /// a bounded number parsed, and judges a filter past the bound as it did before.
    @Test func theFiltersKeptParsedAreBounded() {
        var filters = VerdictFilters()
        let all = CoverageAssemblerTests.all
        for n in 0..<(VerdictFilters.mostKept * 2 + 3) {
            let filter = SubscriptionFilter([.init(query: "SELECT * FROM accounts WHERE n = \(n)", argumentsJSON: "")])
            let narrower = filters.isNarrower(all, than: filter, on: "accounts")
            #expect(!narrower)
            #expect(filters.count <= VerdictFilters.mostKept)
        }
        let narrower = filters.isNarrower(CoverageAssemblerTests.eu, than: all.filter, on: "accounts")
        #expect(narrower)
        #expect(filters.count >= 1)
    }
}

import ShoalCRDT
import ShoalStorage
@testable import ShoalSync
import Testing

@Suite struct VerdictFiltersTests {
    static func filter(_ n: Int) -> SubscriptionFilter {
        SubscriptionFilter([.init(query: "SELECT * FROM accounts WHERE n = \(n)", argumentsJSON: "")])
    }

    /// Filters come from peers, each one a different text if a peer likes: a node keeps
    /// a bounded number parsed, judges a filter past the bound as it did before, and
    /// keeps parsed the one it uses all along while a flood of others passes.
    @Test func theFiltersKeptParsedAreBoundedAndTheOnesInUseStay() {
        var filters = VerdictFilters()
        let all = CoverageAssemblerTests.all
        let inUse = CoverageAssemblerTests.eu.filter, once = Self.filter(-1)
        func narrower(_ set: SubscriptionSet, _ filter: SubscriptionFilter) -> Bool {
            filters.isNarrower(set, than: filter, on: "accounts")
        }
        #expect(!narrower(all, once))
        for n in 0..<(VerdictFilters.mostKept * 3) {
            #expect(!narrower(all, Self.filter(n)))
            #expect(filters.count <= VerdictFilters.mostKept)
            if n % 100 == 0 { #expect(!narrower(all, inUse)) }
        }
        #expect(filters.keeps(inUse), "used all along")
        #expect(!filters.keeps(once), "used once, long ago")
        #expect(narrower(CoverageAssemblerTests.eu, inUse))
        #expect(narrower(CoverageAssemblerTests.eu, all.filter))
    }
}

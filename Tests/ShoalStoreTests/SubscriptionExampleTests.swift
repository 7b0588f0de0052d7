import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

/// The `dql-subscriptions` and `dql-narrower` examples of `Protocol/DQL.md`, run
/// against `SubscriptionSet`: what a subscription may be, and when one set of
/// subscriptions is provably narrower than another (PROTOCOL.md §8.8).
@Suite struct SubscriptionExampleTests {
    static let examples = DQLExamples.all

    @Test func theExamplesAreAllRead() {
        #expect(Self.examples.problems.isEmpty, "\(Self.examples.problems)")
        #expect(Self.examples.subscriptions.contains { $0.accepted } && Self.examples.subscriptions.contains { !$0.accepted })
        #expect(Self.examples.narrower.contains { $0.narrower } && Self.examples.narrower.contains { !$0.narrower })
    }

    @Test(arguments: examples.subscriptions)
    func subscription(_ example: DQLExamples.Parse) {
        var set = SubscriptionSet()
        do throws(ShoalError) {
            try set.add(query: example.text)
            #expect(example.accepted, "accepted, though DQL.md says it is refused")
        } catch {
            #expect(!example.accepted, "refused: \(error)")
            if let says = example.says {
                #expect(error.message.contains(says), "the message is: \(error.message)")
            }
        }
    }

    static func set(_ queries: [DQLExamples.Narrower.Query]) throws -> SubscriptionSet {
        var set = SubscriptionSet()
        for query in queries {
            try set.add(query: query.text, arguments: try ArgumentsJSON.parse(query.arguments))
        }
        return set
    }

    @Test(arguments: examples.narrower)
    func narrower(_ example: DQLExamples.Narrower) throws {
        let r = try Self.set(example.r)
        let s = try Self.set(example.s)
        #expect(r.isProvablyNarrower(than: s, on: example.collection) == example.narrower)
    }
}

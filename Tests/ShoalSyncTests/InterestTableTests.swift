import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import Testing

/// The rules of `InterestTable`, driven statement by statement with no sockets.
@Suite struct InterestTableTests {
    static let (me, n1, n2, o) = (SiteID(1), SiteID(2), SiteID(3), SiteID(9))

    static func set(_ queries: String...) -> SubscriptionSet {
        var set = SubscriptionSet()
        for query in queries { _ = try? set.add(query: query) }
        return set
    }

    static func stated(_ origin: SiteID, _ generation: UInt64, _ queries: String...) -> InterestTable.Stated {
        var set = SubscriptionSet()
        for query in queries { _ = try? set.add(query: query) }
        return InterestTable.Stated(origin: origin, generation: generation, subscriptions: set)
    }

    static func queries(_ set: SubscriptionSet) -> Set<String> { Set(set.entries.map(\.query)) }

    static let cars = "SELECT * FROM cars", boats = "SELECT * FROM boats"

    /// What a relay asks for stays within what a peer serves (256 subscriptions by
    /// default): its neighbours' queries of the collection with the most give way to the
    /// whole collection, so the relay is not refused, and every document any of them
    /// matches still matches. Found by an audit: two neighbours with 200 queries each
    /// cut their relay off from its upstream at every session.
    @Test func whatARelayAsksForFitsWhatAPeerServes() throws {
        var table = InterestTable(local: Self.me)
        let own = Self.set(Self.boats)
        func queries(_ collection: String, _ range: Range<Int>) -> SubscriptionSet {
            var set = SubscriptionSet()
            for n in range { _ = try? set.add(query: "SELECT * FROM \(collection) WHERE n = \(n)") }
            return set
        }
        var few = queries("planes", 0..<3)
        for entry in queries("cars", 0..<200).entries { _ = try few.add(query: entry.query) }
        _ = table.learn(from: Self.n1, subscriptions: few, interests: nil)
        _ = table.learn(from: Self.n2, subscriptions: queries("cars", 200..<400), interests: nil)
        let exact = table.upstream(own: own, for: Self.o, limit: 1_000)
        #expect(exact.entries.count == 404, "within the limit, the exact union")
        let fitted = table.upstream(own: own, for: Self.o, limit: 256)
        #expect(fitted.entries.count == 5, "\(Self.queries(fitted))")
        #expect(Self.queries(fitted).isSuperset(of: [Self.boats, "SELECT * FROM `cars`", "SELECT * FROM planes WHERE n = 1"]))
        for n in [0, 199, 200, 399, 5_000] {
            #expect(fitted.matches(collection: "cars", document: ["_id": "x", "n": .int(Int64(n))]))
        }
        #expect(!fitted.matches(collection: "planes", document: ["_id": "x", "n": 7]), "planes stays exact")
        // More collections than the limit: the node's own first, then what fits.
        var many = SubscriptionSet()
        for n in 0..<300 { _ = try many.add(query: "SELECT * FROM c\(n)") }
        _ = table.learn(from: Self.n1, subscriptions: many, interests: nil)
        let cut = table.upstream(own: own, for: Self.o, limit: 256)
        #expect(cut.entries.count == 256 && Self.queries(cut).contains(Self.boats))
        #expect(cut == table.upstream(own: own, for: Self.o, limit: 256), "the same table, the same set")
        // The node's own are all kept, however they sort against the relayed ones.
        let large = queries("own", 0..<255)
        let kept = table.upstream(own: large, for: Self.o, limit: 256)
        #expect(kept.entries.count == 256 && Self.queries(kept).isSuperset(of: Self.queries(large)))
        // A collection the node takes whole already costs nothing to give way.
        var wholeCars = own
        _ = try wholeCars.add(query: Self.cars)
        _ = table.learn(from: Self.n1, subscriptions: queries("cars", 0..<300), interests: nil)
        let folded = table.upstream(own: wholeCars, for: Self.o, limit: 256)
        #expect(Self.queries(folded) == [Self.boats, Self.cars], "\(Self.queries(folded))")
    }

    @Test func aNewerStatementReplacesAnOlderOneWhicheverWayEachCame() {
        var table = InterestTable(local: Self.me)
        let own = Self.stated(Self.me, 1, Self.boats)
        // O's first set comes through n1, then through n2 too.
        #expect(table.learn(from: Self.n1, subscriptions: Self.set(), interests: [Self.stated(Self.o, 10, Self.cars)]).shows)
        #expect(table.learn(from: Self.n2, subscriptions: Self.set(), interests: [Self.stated(Self.o, 10, Self.cars)]).shows)
        #expect(table.entries[Self.o]?.heardFrom == [Self.n1, Self.n2])
        #expect(Self.queries(table.upstream(own: own.subscriptions, for: Self.n1)) == [Self.boats, Self.cars])
        // O narrows; n1 passes it on first. n2 still lists the old statement: ignored.
        #expect(table.learn(from: Self.n1, subscriptions: Self.set(), interests: [Self.stated(Self.o, 11)]).shows)
        let stale = table.learn(from: Self.n2, subscriptions: Self.set(), interests: [Self.stated(Self.o, 10, Self.cars)])
        #expect(stale.changed.isEmpty && !stale.shows, "an older statement is passed over")
        #expect(Self.queries(table.upstream(own: own.subscriptions, for: Self.n1)) == [Self.boats])
        #expect(Self.queries(table.upstream(own: own.subscriptions, for: Self.n2)) == [Self.boats])
        // What this node passes on is the newer one.
        let told = table.stated(own: own, for: Self.n2)
        #expect(told.map(\.origin) == [Self.me, Self.o] && told[1].generation == 11 && told[1].subscriptions.isEmpty)
    }

    @Test func anOriginHeardFromOnePeerAloneIsNotAskedOfItNorToldBack() {
        var table = InterestTable(local: Self.me)
        let own = Self.stated(Self.me, 1, Self.boats)
        _ = table.learn(from: Self.n1, subscriptions: Self.set(), interests: [Self.stated(Self.n1, 5), Self.stated(Self.o, 7, Self.cars)])
        #expect(Self.queries(table.upstream(own: own.subscriptions, for: Self.n1)) == [Self.boats], "n1 carries O itself")
        #expect(Self.queries(table.upstream(own: own.subscriptions, for: Self.n2)) == [Self.boats, Self.cars])
        #expect(table.stated(own: own, for: Self.n1).map(\.origin) == [Self.me])
        #expect(table.stated(own: own, for: Self.n2).map(\.origin) == [Self.me, Self.n1, Self.o])
        // This node's own statement coming back is never kept.
        _ = table.learn(from: Self.n2, subscriptions: Self.set(), interests: [Self.stated(Self.me, 99, Self.cars)])
        #expect(table.entries[Self.me] == nil)
    }

    @Test func aStatementLeftOutIsStillCarriedAndNotToldBackToWhoHoldsIt() {
        var table = InterestTable(local: Self.me)
        _ = table.learn(from: Self.n1, subscriptions: Self.set(), interests: [Self.stated(Self.n1, 5), Self.stated(Self.o, 7, Self.cars)])
        // n1 leaves O out now (it lists only what this node lacks): still carried by n1.
        let result = table.learn(from: Self.n1, subscriptions: Self.set(), interests: [Self.stated(Self.n1, 5)])
        #expect(result.changed.isEmpty && !result.shows)
        #expect(table.entries[Self.o]?.heardFrom == [Self.n1])
        #expect(Self.queries(table.upstream(own: Self.set(), for: Self.n1)).isEmpty, "n1 carries O itself")
        #expect(Self.queries(table.upstream(own: Self.set(), for: Self.n2)) == [Self.cars])
        let own = Self.stated(Self.me, 1)
        #expect(table.stated(own: own, for: Self.n1).map(\.origin) == [Self.me], "n1 holds O's statement: not told back")
        #expect(table.stated(own: own, for: Self.n2).map(\.origin) == [Self.me, Self.n1, Self.o])
        // n2 tells it of O too: n2 is no longer told of O either.
        _ = table.learn(from: Self.n2, subscriptions: Self.set(), interests: [Self.stated(Self.n2, 2), Self.stated(Self.o, 7, Self.cars)])
        #expect(table.stated(own: own, for: Self.n2).map(\.origin) == [Self.me, Self.n1])
        #expect(table.forget { origin, _ in origin == Self.o } == [Self.o])
        #expect(table.upstream(own: Self.set(), for: Self.n2).isEmpty)
    }

    @Test func aGenerationAloneChangesNothingAPeerSees() {
        var table = InterestTable(local: Self.me)
        _ = table.learn(from: Self.n1, subscriptions: Self.set(), interests: [Self.stated(Self.o, 7, Self.cars)])
        let restated = table.learn(from: Self.n1, subscriptions: Self.set(), interests: [Self.stated(Self.o, 8, Self.cars)])
        #expect(restated.changed == [Self.o] && !restated.shows, "saved, but no Subscribe for it")
        #expect(table.entries[Self.o]?.generation == 8)
    }

    @Test func aNeighbourThatStatesNothingIsItsWholeSetReplacedEachTime() {
        var table = InterestTable(local: Self.me)
        #expect(table.learn(from: Self.n1, subscriptions: Self.set(Self.cars, Self.boats), interests: nil).shows)
        #expect(table.entries[Self.n1]?.generation == 0)
        #expect(table.learn(from: Self.n1, subscriptions: Self.set(Self.boats), interests: nil).shows)
        #expect(Self.queries(table.upstream(own: Self.set(), for: Self.n2)) == [Self.boats])
        // Passed on with generation 0; the latest passed on wins among those.
        _ = table.learn(from: Self.n2, subscriptions: Self.set(), interests: [Self.stated(Self.n1, 0, Self.cars)])
        #expect(Self.queries(table.entries[Self.n1]!.subscriptions) == [Self.cars])
        // Once it states its own, that replaces it.
        _ = table.learn(from: Self.n1, subscriptions: Self.set(), interests: [Self.stated(Self.n1, 3)])
        #expect(table.entries[Self.n1]?.generation == 3 && table.entries[Self.n1]?.subscriptions.isEmpty == true)
    }

    @Test func aStatementTooOldIsNotTakenAgainFromAnotherNodeButIsFromItsOrigin() {
        var table = InterestTable(local: Self.me)
        let stale: (SiteID, UInt64) -> Bool = { _, generation in generation < 100 }
        #expect(table.learn(from: Self.n1, subscriptions: Self.set(), interests: [Self.stated(Self.o, 50, Self.cars)], isStale: stale).changed.isEmpty)
        #expect(table.learn(from: Self.o, subscriptions: Self.set(), interests: [Self.stated(Self.o, 50, Self.cars)], isStale: stale).changed == [Self.o])
    }
}

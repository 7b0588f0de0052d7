import ShoalCRDT
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// `registerSubscription` handles are independent: a subscription stays while any
/// handle of it is not cancelled, or while it is configured.
@Suite struct SubscriptionHandleTests {
    static let cars = "SELECT * FROM cars"

    static func queries(_ node: TestNode) -> [String] { node.sync.subscriptions.entries.map(\.query) }

    @Test func twoRegistrationsOfOneQueryAreTwoHandles() throws {
        let node = try TestNode(name: "a")
        defer { node.remove() }
        let first = try node.sync.registerSubscription(Self.cars)
        let second = try node.sync.registerSubscription(Self.cars)
        #expect(first.id == second.id && Self.queries(node) == [Self.cars])
        first.cancel()
        first.cancel()
        #expect(first.isCancelled && !second.isCancelled)
        #expect(Self.queries(node) == [Self.cars], "the second handle still holds it")
        second.cancel()
        #expect(Self.queries(node).isEmpty)
    }

    @Test func cancellingAHandleLeavesAConfiguredSubscription() throws {
        let node = try TestNode(name: "a", subscriptions: [Self.cars])
        defer { node.remove() }
        let handle = try node.sync.registerSubscription(Self.cars)
        handle.cancel()
        #expect(Self.queries(node) == [Self.cars])
        // An operator's unsubscribe removes it, whatever holds it; a later cancel changes nothing.
        let again = try node.sync.registerSubscription(Self.cars)
        #expect(try node.sync.unsubscribe(Self.cars).query == Self.cars)
        #expect(Self.queries(node).isEmpty)
        _ = try node.sync.registerSubscription(Self.cars)
        again.cancel()
        #expect(Self.queries(node) == [Self.cars], "the newer registration holds it")
    }

    /// Unsubscribing what is not there is an error, not a nil to miss.
    @Test func unsubscribingWhatIsNotThereThrows() throws {
        let node = try TestNode(name: "a")
        defer { node.remove() }
        let error = #expect(throws: ShoalError.self) { try node.sync.unsubscribe(Self.cars) }
        #expect(error?.code == .invalidQuery)
        #expect(error?.message.contains("no subscription has the ID or query 'SELECT * FROM cars'") == true)
    }
}

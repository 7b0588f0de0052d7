package import ShoalCRDT

/// A subscription saved in the store, re-added every time the node starts.
package struct SavedSubscription: Sendable, Equatable {
    package var id: String
    package var query: String
    package var arguments: [String: Value]

    package init(id: String, query: String, arguments: [String: Value]) {
        self.id = id
        self.query = query
        self.arguments = arguments
    }
}

package import ShoalCRDT

/// One page of a SELECT's documents in key order (`NodeStore.page`).
package struct DocumentPage: Sendable, Equatable {
    /// The documents, each whole or as the SELECT list says.
    package var items: [Value]
    /// The key of the last document: where the next page starts; nil when there is none.
    package var lastKey: String?

    package init(items: [Value], lastKey: String?) {
        self.items = items
        self.lastKey = lastKey
    }
}

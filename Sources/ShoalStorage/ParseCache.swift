package import ShoalQuery

/// Recently parsed DQL texts and their statements, a bounded number of short ones:
/// when full it starts again empty (texts that recur are parsed again once).
package struct ParseCache: Sendable {
    package static let capacity = 256
    /// Longer texts (bulk inserts with inline documents) are not kept.
    package static let maximumTextLength = 4096
    private var entries: [String: [ShoalQuery.Statement]] = [:]

    package init() {}

    package func statements(of text: String) -> [ShoalQuery.Statement]? {
        text.utf8.count > Self.maximumTextLength ? nil : entries[text]
    }

    package mutating func remember(_ statements: [ShoalQuery.Statement], of text: String) {
        guard text.utf8.count <= Self.maximumTextLength else { return }
        if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
        entries[text] = statements
    }
}

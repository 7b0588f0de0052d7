package import ShoalCRDT
package import ShoalQuery

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

extension DocumentPage {
    /// The SELECT a page of `statements` reads, for pages of `limit` documents: one
    /// SELECT that can be paged (`SelectStatement.pagingProblem`), and at least one
    /// document a page. The same on every engine.
    package static func select(of statements: [Statement], limit: Int) throws(ShoalError) -> SelectStatement {
        guard statements.count == 1, case .select(let select) = statements[0] else {
            throw ShoalError(.invalidQuery, "pages are read of one SELECT statement, as in SELECT * FROM cars WHERE color = 'blue'")
        }
        if let problem = select.pagingProblem { throw ShoalError(.invalidQuery, problem) }
        guard limit > 0 else { throw ShoalError(.invalidQuery, "a page holds at least one document; it was asked for \(limit)") }
        return select
    }
}

package import ShoalQuery

extension SelectStatement {
    /// Parses `query`, which must be exactly one SELECT statement: what a subscription,
    /// an observer and a page are made of. `use` names it in the error (as in "a
    /// subscription must be a SELECT statement: ...").
    package static func parseOne(_ query: String, as use: String) throws(ShoalError) -> SelectStatement {
        let statement: Statement
        do {
            statement = try Parser.parseStatement(query)
        } catch {
            throw ShoalError(error)
        }
        guard case .select(let select) = statement else {
            throw ShoalError(.invalidQuery, "\(use) must be a SELECT statement: \(query)")
        }
        return select
    }
}

public import ShoalQuery

/// Everything the store refuses, in words a user can act on.
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        /// The statement does not parse or cannot be evaluated; `queryError` says where.
        case invalidQuery
        /// INSERT met an existing `_id` under `ON ID CONFLICT FAIL`.
        case documentExists
        /// A value is not what the statement needs (a document that is not an object, say).
        case invalidDocument
        /// The database could not be opened, read or written.
        case database
    }

    public var code: Code
    public var message: String
    public var queryError: QueryError?

    public init(_ code: Code, _ message: String, queryError: QueryError? = nil) {
        self.code = code
        self.message = message
        self.queryError = queryError
    }

    init(_ error: QueryError) {
        self.init(.invalidQuery, error.detailedDescription, queryError: error)
    }

    public var description: String { message }
}

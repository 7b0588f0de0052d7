public import ShoalCRDT

/// The store an app queries: DQL, transactions, live queries and attachments, the same
/// whichever engine keeps the documents (`ShoalNode.store`).
///
/// The calls an app makes with default arguments and Swift values (`transaction`,
/// `execute(_:arguments:)` with `ValueConvertible` values, ...) are written once, in the
/// extension below, over these requirements.
public protocol DocumentDatabase: AnyObject, Sendable {
    /// This store's node.
    var siteID: SiteID { get }

    /// Parses and runs one or more `;`-separated DQL statements as one transaction:
    /// statements that only read run on one snapshot, concurrently with other work; as
    /// soon as one writes, all run in one read-write transaction that commits or rolls
    /// back whole. `hint` names the transaction in logs; `isReadOnly` refuses the whole
    /// text, before anything runs, if a statement writes. With a `deadline`, statements
    /// that write wait for the writer until then at most and commit only before it;
    /// past it they fail with `ShoalError.Code.deadlineExceeded` and nothing is written.
    /// `execute(_:arguments:hint:isReadOnly:deadline:)` is the call to use.
    func perform(_ text: String, arguments: [String: Value], hint: String?, isReadOnly: Bool, deadline: Deadline?)
        async throws(ShoalError) -> QueryResult

    /// Runs `body` in a transaction, committing or rolling back as the completion it
    /// returns says, and returns what it returned, the transaction's description and
    /// the ID it committed under. `transaction(hint:isReadOnly:_:)` is the call to use.
    nonisolated(nonsending) func performTransaction<T>(
        hint: String?, isReadOnly: Bool, _ body: (any DocumentTransaction) async throws -> (T, TransactionCompletion)
    ) async throws(ShoalError) -> (value: T, info: TransactionInfo, transactionID: TransactionID?)

    /// The result of a SELECT now, then again after every commit, local or received,
    /// that changes it: once per commit, with its transaction IDs. The sequence does
    /// its work in the task that iterates it and ends when the store closes.
    func observe(_ query: String, arguments: [String: Value]) throws(ShoalError) -> QueryUpdates

    /// Calls `handler` with each new state of the query's result (see `observe`), until
    /// the returned observer is cancelled or the store closes. The store holds the
    /// observer meanwhile (`observers`): dropping the handle does not stop it.
    func registerObserver(
        _ query: String, arguments: [String: Value], handler: @escaping @Sendable (QueryUpdate) -> Void
    ) throws(ShoalError) -> StoreObserver

    /// The observers registered and still running, oldest first.
    var observers: [StoreObserver] { get }

    /// Stores bytes and returns the token to put in an ATTACHMENT field.
    func putAttachment(_ bytes: [UInt8], metadata: [String: Value]) async throws(ShoalError) -> AttachmentToken

    /// The length of the attachment with this hash, nil when this store lacks it.
    func attachmentLength(hash: String) async throws(ShoalError) -> Int?

    /// Up to `maximum` bytes of the attachment with this hash from `offset`, with its
    /// length; nil when this store lacks it.
    func attachmentChunk(hash: String, offset: Int, maximum: Int) async throws(ShoalError) -> (total: Int, bytes: [UInt8])?
}

/// An open transaction, handed to the body of `DocumentDatabase.transaction`.
///
/// A read-write transaction is serializable: it holds the store's writer from before
/// the body runs until it commits or rolls back. A statement that fails undoes only
/// its own `execute` call. A read-only transaction reads one snapshot for its whole
/// life; a statement that writes is refused. `execute` after the transaction ended
/// throws `ShoalError.Code.closed`.
public protocol DocumentTransaction: AnyObject, Sendable {
    var info: TransactionInfo { get }
    /// The ID this transaction committed under; nil until it commits, and nil for a
    /// read-only transaction or one that wrote nothing.
    var transactionID: TransactionID? { get }
    /// Lets this transaction commit only before `deadline`: past it the commit throws
    /// `ShoalError.Code.deadlineExceeded` and the transaction rolls back.
    func mustCommit(before deadline: Deadline)
    /// Parses and runs one or more `;`-separated DQL statements in this transaction;
    /// the result is the last statement's, with no `transactionID` (there is none
    /// before the commit).
    func execute(_ dql: String, arguments: [String: Value]) async throws(ShoalError) -> QueryResult
}

extension DocumentTransaction {
    /// `execute` with no arguments.
    public func execute(_ dql: String) async throws(ShoalError) -> QueryResult {
        try await execute(dql, arguments: [String: Value]())
    }

    /// `execute` with arguments of Swift values, `["doors": doors]` (see `ValueConvertible`).
    public func execute(_ dql: String, arguments: [String: any ValueConvertible]) async throws(ShoalError) -> QueryResult {
        try await execute(dql, arguments: arguments.mapValues(\.shoalValue))
    }
}

extension DocumentDatabase {
    /// Runs `body` in a transaction and commits or rolls back as it returns.
    ///
    /// - A read-write transaction (the default) is serializable: it holds the store's
    ///   writer from before `body` runs until it commits, so its reads and writes see
    ///   no other writer's. Others wait for it, in order of arrival. If it wrote, it
    ///   commits under one `TransactionID`, observers hear of it once, and peers
    ///   receive it; `.rollback` undoes it and tells nobody.
    /// - A read-only transaction (`isReadOnly`) reads one snapshot of the database
    ///   for its whole life, concurrently with the writer and other readers. A
    ///   statement that writes throws `ShoalError.Code.readOnly`.
    ///
    /// If `body` throws, the transaction rolls back and `transaction` throws: a
    /// `ShoalError` as it is (one `tx.execute` threw, say), a `CancellationError` as
    /// `.cancelled`, and any other error as `.aborted` with the error itself in
    /// `underlyingError`. An error thrown by `tx.execute` and caught in `body` undoes
    /// that call only.
    ///
    /// Inside a read-write transaction, write through `tx`: starting another
    /// read-write transaction or a store mutation from the same task or its child
    /// tasks throws `ShoalError.Code.nestedTransaction` at once (it could only wait for
    /// itself). Reading beside it is allowed and sees the last committed state.
    ///
    /// - Parameter hint: free text naming the work, shown in the long-transaction log.
    @discardableResult
    nonisolated(nonsending) public func transaction(
        hint: String? = nil, isReadOnly: Bool = false, _ body: (any DocumentTransaction) async throws -> TransactionCompletion
    ) async throws(ShoalError) -> TransactionResult {
        let ended = try await performTransaction(hint: hint, isReadOnly: isReadOnly) { tx in
            let completion = try await body(tx)
            return (completion, completion)
        }
        return TransactionResult(info: ended.info, completion: ended.value, transactionID: ended.transactionID)
    }

    /// Runs `body` in a transaction (see the other `transaction`) that commits when
    /// `body` returns and rolls back when it throws; returns what `body` returned. The
    /// committed `TransactionID` is `tx.transactionID` once this returns.
    nonisolated(nonsending) public func transaction<T>(
        hint: String? = nil, isReadOnly: Bool = false, _ body: (any DocumentTransaction) async throws -> T
    ) async throws(ShoalError) -> T {
        try await performTransaction(hint: hint, isReadOnly: isReadOnly) { tx in (try await body(tx), .commit) }.value
    }

    /// Parses and runs one or more `;`-separated DQL statements as one transaction (see
    /// `perform`).
    public func execute(
        _ text: String, arguments: [String: Value] = [:], hint: String? = nil, isReadOnly: Bool = false,
        deadline: Deadline? = nil
    ) async throws(ShoalError) -> QueryResult {
        try await perform(text, arguments: arguments, hint: hint, isReadOnly: isReadOnly, deadline: deadline)
    }

    /// `execute` with arguments of Swift values: `["doors": doors, "owner": name]`, with
    /// `doors` an `Int` and `name` a `String?` (see `ValueConvertible`). Literals go to
    /// the other `execute`, where an object literal may mix types (`["_id": "a", "doors": 4]`).
    public func execute(
        _ text: String, arguments: [String: any ValueConvertible], hint: String? = nil, isReadOnly: Bool = false,
        deadline: Deadline? = nil
    ) async throws(ShoalError) -> QueryResult {
        try await execute(
            text, arguments: arguments.mapValues(\.shoalValue), hint: hint, isReadOnly: isReadOnly, deadline: deadline)
    }

    /// `observe` with no arguments.
    public func observe(_ query: String) throws(ShoalError) -> QueryUpdates {
        try observe(query, arguments: [String: Value]())
    }

    /// `observe` with arguments of Swift values, `["color": color]` (see `ValueConvertible`).
    public func observe(_ query: String, arguments: [String: any ValueConvertible]) throws(ShoalError) -> QueryUpdates {
        try observe(query, arguments: arguments.mapValues(\.shoalValue))
    }

    /// `registerObserver` with no arguments.
    public func registerObserver(_ query: String, handler: @escaping @Sendable (QueryUpdate) -> Void) throws(ShoalError)
        -> StoreObserver
    {
        try registerObserver(query, arguments: [String: Value](), handler: handler)
    }

    /// `registerObserver` with arguments of Swift values, `["color": color]` (see `ValueConvertible`).
    public func registerObserver(
        _ query: String, arguments: [String: any ValueConvertible], handler: @escaping @Sendable (QueryUpdate) -> Void
    ) throws(ShoalError) -> StoreObserver {
        try registerObserver(query, arguments: arguments.mapValues(\.shoalValue), handler: handler)
    }

    /// `putAttachment` with no metadata.
    public func putAttachment(_ bytes: [UInt8]) async throws(ShoalError) -> AttachmentToken {
        try await putAttachment(bytes, metadata: [:])
    }
}

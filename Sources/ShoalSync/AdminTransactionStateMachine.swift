package import ShoalStorage

/// What one admin connection may do with the transaction it holds, request by request.
///
/// An admin connection holds at most one transaction (`AdminRequest.begin`): `exec`
/// requests run in it until `commit` or `rollback`, and the connection ending rolls
/// it back. This machine only decides; `AdminService` runs the transaction and
/// reports back with `began` and `ended`.
///
/// ```
///          begin ──► .begin ──(began)──┐
///   idle ◄─────────────────────────────┼──────────────── (ended) ◄── .end ◄── commit / rollback
///    │ exec, status, …: .serve         ▼                                           │
///    │ commit, rollback: .refuse      open ── exec: .runInTransaction ─────────────┘
///                                      │    begin: .refuse
///                                      │    subscribe, unsubscribe, attachment put/get:
///                                      │      .refuse when it holds the writer, else .serve
///                                      └─── status, observe, page: .serve
/// ```
///
/// Requests on one connection are handled one at a time, so `began` or `ended`
/// always comes before the next `receive`.
package struct AdminTransactionStateMachine: Sendable {
    /// How `commit` or `rollback` ends the transaction.
    package enum Ending: Sendable, Hashable {
        case commit
        case rollback
    }

    package enum Action: Sendable, Hashable {
        /// Serve the request as on a connection without a transaction.
        case serve
        /// Open a transaction of this kind, then report `began` (or nothing, if it failed).
        case begin(hint: String?, readOnly: Bool)
        /// Run the exec in the open transaction.
        case runInTransaction
        /// End the open transaction, then report `ended` (whether or not that succeeded).
        case end(Ending)
        /// Answer with this error; nothing runs.
        case refuse(SyncError.Code, String)
    }

    /// The open transaction, as `began` described it.
    package private(set) var open: TransactionInfo?

    package init() {}

    /// What to do with the connection's next request.
    package mutating func receive(_ request: AdminRequest) -> Action {
        switch (request, open) {
        case (.begin(let hint, let readOnly), nil):
            return .begin(hint: hint, readOnly: readOnly)
        case (.begin, let open?):
            return .refuse(
                .executionFailed,
                "BEGIN inside a transaction: this connection already holds \(Self.describe(open)); COMMIT or ROLLBACK it first")
        case (.commit, nil):
            return .refuse(.executionFailed, "COMMIT without a transaction: this connection holds none (BEGIN opens one)")
        case (.rollback, nil):
            return .refuse(.executionFailed, "ROLLBACK without a transaction: this connection holds none (BEGIN opens one)")
        case (.commit, _?):
            return .end(.commit)
        case (.rollback, _?):
            return .end(.rollback)
        case (.exec(_, _, let hint, let readOnly), let open?):
            if hint != nil || readOnly {
                return .refuse(
                    .executionFailed,
                    "this connection holds \(Self.describe(open)): its statements run in it and take no hint or read-only flag of their own")
            }
            return .runInTransaction
        case (.subscribe, let open?), (.unsubscribe, let open?), (.attachmentPut, let open?), (.attachmentGet, let open?),
            (.compact, let open?):
            guard !open.isReadOnly else { return .serve }
            return .refuse(
                .executionFailed,
                "\(request.name) writes outside \(Self.describe(open)), which this connection holds, and would wait for it: COMMIT or ROLLBACK first")
        case (.exec, nil), (.status, _), (.observe, _), (.page, _), (.subscribe, nil), (.unsubscribe, nil), (.attachmentPut, nil),
            (.attachmentGet, nil), (.compact, nil):
            return .serve
        }
    }

    /// The transaction asked for by `.begin` is open.
    package mutating func began(_ open: TransactionInfo) {
        self.open = open
    }

    /// The transaction ended: committed, rolled back, or failed to commit.
    package mutating func ended() {
        open = nil
    }

    /// "transaction 1f… (hint 'x', read-write)", for messages.
    static func describe(_ open: TransactionInfo) -> String {
        "transaction \(open.id) (\(open.hint.map { "hint '\($0)', " } ?? "")\(open.isReadOnly ? "read-only" : "read-write"))"
    }
}

extension AdminRequest {
    /// The request's name in messages ("exec", "BEGIN").
    public var name: String {
        switch self {
        case .exec: "exec"
        case .status: "status"
        case .subscribe: "subscribe"
        case .unsubscribe: "unsubscribe"
        case .observe: "observe"
        case .page: "page"
        case .attachmentPut: "attachment put"
        case .attachmentGet: "attachment get"
        case .begin: "BEGIN"
        case .commit: "COMMIT"
        case .rollback: "ROLLBACK"
        case .compact: "compact"
        }
    }
}

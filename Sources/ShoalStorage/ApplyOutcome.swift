
/// What applying remote transactions did in one commit.
public struct ApplyOutcome: Sendable, Equatable {
    /// Deltas logged for the first time here (winners and losers of LWW alike).
    public var logged: Int = 0
    /// Deltas that won LWW and changed a field.
    public var won: Int = 0
    /// Documents whose body changed.
    public var changedDocuments: Int = 0

    public init() {}
}

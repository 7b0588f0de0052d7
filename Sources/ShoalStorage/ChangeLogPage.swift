public import ShoalCRDT

/// A page of the change log read for one peer: pieces of the transactions in it
/// that the peer's subscriptions want, in log order.
public struct ChangeLogPage: Sendable, Equatable {
    public var pieces: [TransactionPiece]
    /// The last sequence examined, matched or not: the peer may resume after it.
    public var through: UInt64
    /// Transactions of origins lazy for the peer that the page would have sent pieces
    /// of, with the sequence of their first row in it (PROTOCOL.md §8.11).
    public var offered: [Offer] = []
    /// The lazy transactions offered (in this page or earlier ones of the stream) whose
    /// run of rows goes on past the page: later pages neither send nor offer them.
    public var offersOpen: Set<TransactionID> = []

    public init(pieces: [TransactionPiece], through: UInt64, offered: [Offer] = [], offersOpen: Set<TransactionID> = []) {
        self.pieces = pieces
        self.through = through
        self.offered = offered
        self.offersOpen = offersOpen
    }

    /// A transaction a page offers instead of sending it, and where its rows begin.
    public struct Offer: Sendable, Hashable {
        public var id: TransactionID
        public var logSequence: UInt64

        public init(_ id: TransactionID, at logSequence: UInt64) {
            self.id = id
            self.logSequence = logSequence
        }
    }

    /// Every delta of the page, in order.
    public var deltas: [Delta] { pieces.flatMap(\.deltas) }
}

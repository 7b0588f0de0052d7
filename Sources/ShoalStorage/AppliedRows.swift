package import ShoalCRDT

/// What the durable buffer holds of a waiting transaction: its deltas in index order,
/// how many deltas the transaction wrote to each of their documents, and the context
/// fields that came with them (`InboundWriting.buffered(of:)`).
package struct BufferedPieces: Sendable {
    package var deltas: [Delta]
    package var documentDeltaCounts: [DocumentRef: UInt32]
    package var context: [ContextField]

    package init(deltas: [Delta] = [], documentDeltaCounts: [DocumentRef: UInt32] = [:], context: [ContextField] = []) {
        self.deltas = deltas
        self.documentDeltaCounts = documentDeltaCounts
        self.context = context
    }
}

/// The rows one apply of a received transaction writes, as ShoalSync's
/// `InboundApplier` decided them: a store writes them as they are
/// (`InboundWriting.write`), and decides nothing.
///
/// In order: the buffer's rows of the transaction go (`dropBuffer`); the log gains,
/// per document, the deltas `logged` names (those it did not hold), one document
/// after another in the order of `documents`; each document's registers that `won`
/// are upserted and its `body` saved; and, with `state` and `rest`, the transaction's
/// record says it is applied (or partial) and what this node says of the documents it
/// does not hold.
package struct AppliedRows: Sendable {
    /// The transaction: its ID, delta and document counts, collections, reports and
    /// first sighting, for its record.
    package var record: TransactionRecord
    /// Every delta the apply went through, in index order; `Document.logged` points into it.
    package var deltas: [Delta]
    /// The documents the apply touched, in the order it met them.
    package var documents: [Document]
    /// Whether the buffer's rows of the transaction go.
    package var dropBuffer: Bool
    /// The record's new state, and the verdicts it keeps; nil for a late piece of a
    /// transaction applied before, whose record stays as it is.
    package var state: TransactionRecord.State?
    package var rest: [Verdict]?

    package init(
        record: TransactionRecord, deltas: [Delta], documents: [Document], dropBuffer: Bool,
        state: TransactionRecord.State?, rest: [Verdict]?
    ) {
        self.record = record
        self.deltas = deltas
        self.documents = documents
        self.dropBuffer = dropBuffer
        self.state = state
        self.rest = rest
    }

    /// What the apply writes of one document.
    package struct Document: Sendable {
        package var document: DocumentRef
        /// How many deltas the transaction wrote to it in all (a log entry says so).
        package var deltaCount: UInt32
        /// The positions in `AppliedRows.deltas` of the deltas to log, in order.
        package var logged: [Int]
        /// The registers whose merge the apply's delta won, each with its delta's index
        /// in the transaction (0 for a context field).
        package var won: [String: (state: RegisterState, index: UInt32)]
        /// What the registers now materialize to; nil when no register changed.
        package var body: DocumentRegisters.Body.Text?

        package init(
            document: DocumentRef, deltaCount: UInt32, logged: [Int] = [],
            won: [String: (state: RegisterState, index: UInt32)] = [:], body: DocumentRegisters.Body.Text? = nil
        ) {
            self.document = document
            self.deltaCount = deltaCount
            self.logged = logged
            self.won = won
            self.body = body
        }
    }
}

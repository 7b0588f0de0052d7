/// A check that failed, with the documents and nodes it is about.
public struct Finding: Sendable, Hashable, CustomStringConvertible {
    /// The checks, by the names the summary and `--json` use.
    public enum Check: String, Sendable, CaseIterable {
        /// Every node that holds a collection ends with the same digest of it.
        case digests
        /// Every acknowledged write is there, or a write that provably came after it.
        case acknowledgedWrites = "acknowledged-writes"
        /// A counter is the sum of its acknowledged increments (plus any of the unanswered).
        case counters
        /// No read, during the run or at its end, sees part of a transaction.
        case halfTransactions = "half-transactions"
        /// No value appears that no operation wrote, or that a refused one did.
        case unknownValues = "unknown-values"
        /// No transaction is left waiting or applied in part once the nodes are quiet.
        case pendingTransactions = "pending-transactions"
        /// Every attachment a document names can be fetched through every node.
        case attachments
        /// The nodes answered: reads, status and the final wait.
        case nodes
    }

    public var check: Check
    /// The node it was seen on (nil: all of them, or none in particular).
    public var node: Int?
    public var documents: [String]
    public var message: String

    public init(_ check: Check, node: Int? = nil, documents: [String] = [], _ message: String) {
        self.check = check
        self.node = node
        self.documents = documents
        self.message = message
    }

    public var description: String {
        let place = node.map { " on n\($0)" } ?? ""
        let docs = documents.isEmpty ? "" : " [\(documents.joined(separator: ", "))]"
        return "\(check.rawValue)\(place)\(docs): \(message)"
    }
}

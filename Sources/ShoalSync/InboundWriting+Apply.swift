package import Logging
package import ShoalCRDT
package import ShoalStorage

extension InboundWriting {
    /// Applies a transaction (with what the buffer holds of it when `buffered`), or,
    /// when a body it would write breaks `limits`, writes nothing and says why (its
    /// buffer stays, for the caller to `refuse` it whole).
    ///
    /// It reads what the buffer holds, which deltas the log holds already and the
    /// registers of the documents touched; `InboundApplier` decides the rows; the store
    /// writes them. With `state` and `rest` nil (a late piece of a transaction applied
    /// before), the record is left as it is.
    @discardableResult
    package func apply(
        _ record: TransactionRecord, deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32], context: [ContextField],
        buffered: Bool, state: TransactionRecord.State?, rest: [Verdict]?, limits: DocumentLimits, logger: Logger
    ) async throws(ShoalError) -> DocumentRefusal? {
        let held = buffered ? try await self.buffered(of: record.id, deltaCount: record.deltaCount) : nil
        let logged = try await loggedIndexes(of: record.id)
        let applier = InboundApplier(record, deltas: deltas, documentDeltaCounts: documentDeltaCounts, context: context, buffered: held)
        let registers = try await self.registers(of: applier.documents)
        switch try applier.plan(logged: logged, registers: registers, limits: limits, state: state, rest: rest, dropBuffer: buffered) {
        case .refuse(let refusal):
            return refusal
        case .write(let rows, let overSoftLimit):
            for (document, bytes) in overSoftLimit {
                logger.warning(
                    "transaction \(record.id) makes document \(document.id) in \(document.collection) \(bytes) bytes, over the soft document size limit of \(limits.softBytes) bytes (document_size_soft_limit_bytes)",
                    metadata: ["shoal.txn": "\(record.id)", "shoal.collection": "\(document.collection)"])
            }
            try await write(rows)
            return nil
        }
    }
}

extension SyncStore {
    /// Applies pieces received from `peer` at once, each as a whole transaction, in
    /// one commit, and records `through` as that peer's cursor under
    /// `subscriptionKey` (nil: record nothing). This is what the inbound pipeline
    /// does with a transaction once it is whole; tools and tests that hold whole
    /// transactions use it directly.
    @discardableResult
    package func applyRemote(
        _ pieces: [TransactionPiece], from peer: SiteID, subscriptionKey: String? = nil, through: UInt64 = 0,
        logger: Logger = Logger(label: "shoal.sync.apply", factory: { _ in SwiftLogNoOpLogHandler() })
    ) async throws(ShoalError) -> ApplyOutcome {
        for piece in pieces {
            for delta in piece.deltas { clock.observe(delta.timestamp) }
        }
        let now = HybridLogicalClock.systemMilliseconds()
        let limits = systemParameters.documentLimits
        let ((), outcome) = try await writeInbound(short: false) { writer async throws(ShoalError) in
            for piece in pieces {
                let record = TransactionRecord(
                    id: piece.id, deltaCount: piece.deltaCount, documentCount: piece.documentCount,
                    collections: piece.collections, state: .applied, firstSeen: now)
                try await writer.apply(
                    record, deltas: piece.deltas, documentDeltaCounts: piece.documentDeltaCounts, context: piece.context,
                    buffered: false, state: .applied, rest: [], limits: limits, logger: logger)
            }
            if let subscriptionKey {
                try await writer.recordCursor(peer: peer, subscriptionKey: subscriptionKey, through: through, epoch: nil)
            }
        }
        return outcome
    }
}

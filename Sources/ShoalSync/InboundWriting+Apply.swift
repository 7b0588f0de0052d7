import Foundation
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
    ///
    /// `isNew`: the store held no record of the transaction when the commit began, and
    /// the commit applied none of it before. The log then holds none of its deltas (a
    /// transaction is logged only in the write that records it), so that is not read.
    @discardableResult
    package func apply(
        _ record: TransactionRecord, deltas: [Delta], documentDeltaCounts: [DocumentRef: UInt32], context: [ContextField],
        buffered: Bool, isNew: Bool = false, state: TransactionRecord.State?, rest: [Verdict]?, limits: DocumentLimits,
        logger: Logger
    ) async throws(ShoalError) -> DocumentRefusal? {
        let held = buffered ? try await self.buffered(of: record.id, deltaCount: record.deltaCount) : nil
        let logged = isNew ? [:] : try await loggedIndexes(of: record.id)
        let applier = InboundApplier(record, deltas: deltas, documentDeltaCounts: documentDeltaCounts, context: context, buffered: held)
        let registers = try await self.registers(of: applier.documents)
        let plan: InboundApplier.Plan
        if applier.deltas.count > Self.planHere {
            let handed = Handover(registers)
            plan = try await Self.offThePool { () throws(ShoalError) in
                try applier.plan(
                    logged: logged, registers: handed.take(), limits: limits, state: state, rest: rest, dropBuffer: buffered)
            }
        } else {
            plan = try applier.plan(logged: logged, registers: registers, limits: limits, state: state, rest: rest, dropBuffer: buffered)
        }
        switch plan {
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

extension InboundWriting {
    /// The most deltas an apply is planned with on the calling task's thread (as many
    /// as a whole short write); a larger one is planned on a thread of Dispatch's, so
    /// that a merge of many thousands of deltas never holds one of the concurrency
    /// pool's few threads for its length.
    static var planHere: Int { 1024 }

    /// Runs `body` on a thread of Dispatch's, and returns what it returned.
    static func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws(ShoalError) -> T) async throws(ShoalError) -> T {
        let result: Result<T, ShoalError> = await withCheckedContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async {
                continuation.resume(returning: Result { () throws(ShoalError) -> T in try body() })
            }
        }
        return try result.get()
    }
}

/// A value handed to the one closure that takes it, so that the closure holds the only
/// reference and can change it in place (a captured value is shared with the closure's
/// context, and the first change would copy it).
///
/// Unchecked: it is taken once, by one thread, after the thread that made it let it go
/// (a Dispatch hand-over orders the two); nothing else touches it.
private final class Handover<Value>: @unchecked Sendable {
    private var value: Value?

    init(_ value: consuming Value) { self.value = value }

    func take() -> Value {
        guard let value = value.take() else { preconditionFailure("a hand-over is taken once") }
        return value
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
        let ((), outcome) = try await writeInbound(short: false) { writer async throws(ShoalError) in
            let limits = self.documentLimits
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

/// The transactions open in the current task, across stores, innermost last.
///
/// A read-write transaction holds its store's write gate while its body runs; a
/// write of the same store started in the same task (or a child task, which
/// inherits this) would wait for that gate forever. Marking the open transactions
/// here lets the store refuse such a write at once, with a message, instead.
package enum OpenTransactions {
    package struct Mark: Sendable {
        package let store: ObjectIdentifier
        package let info: TransactionInfo

        package init(store: ObjectIdentifier, info: TransactionInfo) {
            self.store = store
            self.info = info
        }
    }

    @TaskLocal package static var marks: [Mark] = []

    /// Throws when a read-write transaction of `store` is open in this task (`marks`): a
    /// write there would wait for the gate that transaction holds.
    package static func refuseWrite(beside marks: [Mark], of store: AnyObject) throws(ShoalError) {
        guard let open = marks.last(where: { $0.store == ObjectIdentifier(store) && !$0.info.isReadOnly }) else { return }
        throw ShoalError(
            .nestedTransaction,
            "a \(open.info.described) is open in this task; write through that transaction (the `tx` its closure was given), or finish it first")
    }
}

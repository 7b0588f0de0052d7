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
}

public import ShoalNode
public import ShoalStorage
import ShoalStore
public import Logging

extension ShoalNode {
    /// Opens the node's store, SQLite in `configuration.dataDirectory`; `run()` starts it.
    ///
    /// - Parameter logger: where the node logs (swift-log). The default logs nothing:
    ///   an app passes its own `Logger` to hear the node, `shoal run` passes one that
    ///   writes to standard error.
    public convenience init(configuration: NodeConfiguration, logger: Logger = ShoalNode.silentLogger) throws(ShoalError) {
        try self.init(configuration: configuration, logger: logger, openStore: ShoalNode.sqliteStore)
    }

    /// Opens the SQLite store in the node's data directory.
    package static let sqliteStore: StoreOpener = { opening throws(ShoalError) in
        try DocumentStore(
            directory: opening.configuration.dataDirectory, logger: opening.logger, parameters: opening.parameters,
            commitDuration: opening.commitDuration, synchronousFull: opening.configuration.synchronousFull)
    }
}

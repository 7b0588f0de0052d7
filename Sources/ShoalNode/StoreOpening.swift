package import ShoalStorage
package import Logging
package import Metrics

/// What a node's store is opened with: the node's configuration (where its data is),
/// the logger, the limits documents are held to, and the timer its commits feed.
package struct StoreOpening: Sendable {
    package var configuration: NodeConfiguration
    package var logger: Logger
    package var parameters: SystemParameters
    package var commitDuration: Metrics.Timer

    package init(configuration: NodeConfiguration, logger: Logger, parameters: SystemParameters, commitDuration: Metrics.Timer) {
        self.configuration = configuration
        self.logger = logger
        self.parameters = parameters
        self.commitDuration = commitDuration
    }
}

/// Opens a node's store (`ShoalNode.init(configuration:logger:openStore:)`).
package typealias StoreOpener = @Sendable (StoreOpening) throws(ShoalError) -> any NodeStore

extension NodeConfiguration {
    /// The parameters a store opens with: the document size limits of `resources`.
    package var storeParameters: SystemParameters {
        SystemParameters(
            documentSizeSoftLimitBytes: Int64(resources.documentSizeSoftLimit),
            documentSizeHardLimitBytes: Int64(resources.documentSizeHardLimit))
    }
}

// `import Shoal` gives an app the whole public API: the node, its store and sync
// engine, and the value types they speak in.
@_exported import ShoalCRDT
@_exported import ShoalNode
@_exported import ShoalStore
@_exported import ShoalSync
// `Logger`, which `ShoalNode(configuration:logger:)` takes, without a second import.
@_exported import struct Logging.Logger

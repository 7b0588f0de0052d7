// `import Shoal` gives an app what it embeds a node with, and nothing else: the node
// and its configuration, the store's queries, transactions and live queries, the sync
// engine's subscriptions and peers, the values documents are made of, and the one error.
// Each name is re-exported on its own (members and extensions come with it); the
// modules behind them (ShoalNode, ShoalStorage, ShoalSync, ShoalCRDT, ShoalWire) hold the
// rest for the `shoal` tools and the tests. docs/ARCHITECTURE.md, "The app's surface",
// lists these with the reason for each; a name added here is added there.

// The node.
@_exported import class ShoalNode.ShoalNode
@_exported import struct ShoalNode.NodeConfiguration
@_exported import struct ShoalNode.HostAndPort
@_exported import struct ShoalNode.ResourceLimits
@_exported import struct ShoalNode.TLSFiles
@_exported import struct ShoalWire.WireLimits

// The store: queries, transactions, live queries.
@_exported import protocol ShoalStorage.DocumentDatabase
@_exported import struct ShoalStorage.QueryResult
@_exported import protocol ShoalStorage.DocumentTransaction
@_exported import enum ShoalStorage.TransactionCompletion
@_exported import struct ShoalStorage.TransactionResult
@_exported import struct ShoalStorage.TransactionInfo
@_exported import struct ShoalStorage.QueryUpdate
@_exported import struct ShoalStorage.QueryUpdates
@_exported import class ShoalStorage.StoreObserver
@_exported import struct ShoalStorage.AttachmentToken
@_exported import struct ShoalStorage.Deadline

// Sync: subscriptions and peers.
@_exported import class ShoalSync.SyncEngine
@_exported import class ShoalSync.SyncSubscription
@_exported import struct ShoalSync.PeerSnapshot

// The one error everything throws.
@_exported import struct ShoalStorage.ShoalError

// Values.
@_exported import enum ShoalCRDT.Value
@_exported import protocol ShoalCRDT.ValueConvertible
@_exported import struct ShoalCRDT.TransactionID
@_exported import struct ShoalCRDT.SiteID

// `Logger`, which `ShoalNode(configuration:logger:)` takes, without a second import.
@_exported import struct Logging.Logger

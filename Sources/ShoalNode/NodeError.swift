/// What a node or an admin client refuses, in words an operator can act on.
public struct NodeError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable {
        case invalidConfiguration
        /// Another node holds the data directory's lock.
        case dataDirectoryInUse
        /// A key file is missing, too short, or open to other users.
        case keyFile
        case connectionFailed
        /// The node answered the request with an error.
        case requestFailed
        /// No answer came in time after the request was sent: whether it was applied is
        /// unknown (the node may have committed it, or may still).
        case timedOut
        case protocolError
        /// A local file the client was given cannot be read or written.
        case file
        /// The node is not running: it stopped, or `run()` ended before it listened.
        case stopped
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

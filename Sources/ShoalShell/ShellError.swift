/// What went wrong in the shell's own work: a BEGIN it cannot read, a terminal or
/// history file it cannot use.
public struct ShellError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String

    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}

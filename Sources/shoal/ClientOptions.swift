import ArgumentParser
import ShoalStorage
import ShoalNode
import Foundation

/// Flags every command that talks to a running node shares.
struct ClientOptions: ParsableArguments {
    @Option(name: .long, help: "The node to talk to, HOST:PORT.")
    var node: String = "127.0.0.1:\(HostAndPort.defaultPort)"

    @Option(name: .long, help: "A file holding the mesh key, when the node has one.")
    var meshKeyFile: String?

    @Option(name: .long, help: "A file holding the node's admin key (its --admin-key-file); used instead of --mesh-key-file.")
    var adminKeyFile: String?

    @Option(
        name: .long,
        help: """
            Seconds the node may spend on the request: it starts and commits no write \
            after them (it answers that nothing was written). shoal waits 2 s more for \
            the answer, then fails saying the outcome is unknown.
            """)
    var timeout: Int = 30

    @OptionGroup(title: "TLS, for a node whose links are TLS") var tls: TLSOptions

    func validate() throws {
        do {
            _ = try HostAndPort(parsing: node)
        } catch {
            throw ValidationError("--node: \(error.message)")
        }
        if timeout <= 0 { throw ValidationError("--timeout must be a positive number of seconds") }
    }

    func client() throws -> AdminClient {
        let address = try HostAndPort(parsing: node)
        let key =
            try adminKeyFile.map { path throws(ShoalError) in try KeyFile.read(path: path, purpose: "admin key") }
            ?? meshKeyFile.map { path throws(ShoalError) in try KeyFile.read(path: path) }
        return AdminClient(node: address, meshKey: key, timeout: .seconds(timeout), tls: try tls.files())
    }

    /// `client()`, or the command's failure with its message (a key file it cannot use).
    func clientOrFail() throws(ExitCode) -> AdminClient {
        do {
            return try client()
        } catch let error as ShoalError {
            throw fail(error.message)
        } catch {
            throw fail("\(error)")
        }
    }
}

/// Prints `message` to standard error and exits with status 1.
func fail(_ message: String) -> ExitCode {
    printError("shoal: \(message)")
    return ExitCode.failure
}

func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}


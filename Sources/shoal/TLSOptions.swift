import ArgumentParser
import ShoalStorage
import ShoalNode

/// The TLS flags of `shoal run` and of every command that reaches a node: the same
/// three files on both (PROTOCOL.md §17). Their help is the config keys' (`NodeSettings`).
struct TLSOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(TLSOptions.summary("tls-cert"), valueName: "file"))
    var tlsCert: String?

    @Option(name: .long, help: ArgumentHelp(TLSOptions.summary("tls-key"), valueName: "file"))
    var tlsKey: String?

    @Option(name: .long, help: ArgumentHelp(TLSOptions.summary("tls-ca"), valueName: "file"))
    var tlsCa: String?

    @Option(name: .long, help: ArgumentHelp(TLSOptions.summary("tls-revoked"), valueName: "file"))
    var tlsRevoked: String?

    static func summary(_ key: String) -> String { NodeSettings.key(key)?.help ?? key }

    /// Adds the files given on the command line to `settings`.
    func add(to settings: inout NodeSettings) {
        settings.setFlag("tls-cert", tlsCert.map { .string($0) })
        settings.setFlag("tls-key", tlsKey.map { .string($0) })
        settings.setFlag("tls-ca", tlsCa.map { .string($0) })
        settings.setFlag("tls-revoked", tlsRevoked.map { .string($0) })
    }

    /// The files, loaded and checked; nil when none is given.
    func files() throws(ShoalError) -> TLSFiles? {
        var settings = NodeSettings()
        add(to: &settings)
        return try settings.tls()
    }
}

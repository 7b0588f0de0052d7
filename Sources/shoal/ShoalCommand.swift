import ArgumentParser

@main
struct ShoalCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shoal",
        abstract: "An offline-first, peer-to-peer sync node.",
        discussion: """
            Start a node with `shoal run --data DIR`, then query it with `shoal exec` \
            and inspect it with `shoal status`. Nodes named with --peer connect and \
            replicate the documents their --subscribe queries match.
            """,
        version: "0.1.0",
        subcommands: [
            RunCommand.self, ExecCommand.self, ShellCommand.self, StatusCommand.self, MeshCommand.self, ObserveCommand.self,
            SubscribeCommand.self, UnsubscribeCommand.self, AttachmentCommand.self, ImportCommand.self, ExportCommand.self,
            CompactCommand.self, KeygenCommand.self, CertCommand.self,
        ]
    )
}

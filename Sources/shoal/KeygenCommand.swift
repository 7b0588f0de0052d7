import ArgumentParser
import ShoalStorage
import ShoalNode

struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Write a fresh random key to a new file that only its owner can read (mode 0600).",
        discussion: """
            The file holds 32 random bytes in base64. Use it as --mesh-key-file on every \
            node of a mesh and on the CLI, or as a node's --admin-key-file. An existing file \
            is never replaced. Example:
              shoal keygen /etc/shoal/mesh.key
            """
    )

    @Argument(help: "The file to create.")
    var file: String

    func run() throws {
        do {
            try KeyFile.generate(path: file)
        } catch {
            throw fail(error.message)
        }
        printError("wrote a new \(KeyFile.generatedSize)-byte key to \(file) (mode 0600)")
    }
}

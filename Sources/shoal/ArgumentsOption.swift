import ArgumentParser
import Foundation
import ShoalCRDT

/// Reads the `--args` of `exec`, `observe` and `subscribe`.
///
/// The value is the JSON object itself, `@FILE` for a file holding it, or `-` for
/// standard input: Linux caps one command-line argument at 128 KiB
/// (`MAX_ARG_STRLEN`), and a document argument can be larger than that.
enum ArgumentsOption {
    static let help: ArgumentHelp = """
        Named arguments as a JSON object, used as :name in the statements; @FILE reads it \
        from a file, - from standard input.
        """

    /// The arguments' JSON text (empty when there are none); exits with a message
    /// when it cannot be read or is not a JSON object.
    static func load(_ option: String?) throws -> String {
        guard let option else { return "" }
        let text: String
        if option == "-" {
            text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        } else if option.hasPrefix("@") {
            let path = String(option.dropFirst())
            guard let data = FileManager.default.contents(atPath: path) else {
                throw fail("cannot read --args file \(path)")
            }
            text = String(decoding: data, as: UTF8.self)
        } else {
            text = option
        }
        guard case .object? = try? JSON.parse(text) else {
            let source = option == "-" ? " (from standard input)" : option.hasPrefix("@") ? " (in \(option.dropFirst()))" : ""
            throw fail("--args must be a JSON object, like '{\"id\": \"a\"}'\(source)")
        }
        return text
    }
}

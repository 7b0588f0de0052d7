import ArgumentParser
import Foundation
import ShoalCRDT

/// Reads the `--args` of `exec`, `observe` and `subscribe`.
///
/// The value is the JSON object itself, `@FILE` for a file holding it, or `-` for
/// standard input: Linux caps one command-line argument at 128 KiB
/// (`MAX_ARG_STRLEN`), and a document argument can be larger than that. Its bytes are
/// read as they are, by `ArgumentsJSON` as the node reads them: text that is not
/// UTF-8 is refused, never turned into U+FFFD (which would make distinct ids one).
enum ArgumentsOption {
    static let help: ArgumentHelp = """
        Named arguments as a JSON object, used as :name in the statements; @FILE reads it \
        from a file, - from standard input.
        """

    /// The arguments' JSON text (empty when there are none); exits with a message
    /// naming the mistake and its byte when it cannot be read or is not a JSON object.
    static func load(_ option: String?) throws -> String {
        guard let option else { return "" }
        let bytes: [UInt8]
        let name: String
        if option == "-" {
            bytes = Array(FileHandle.standardInput.readDataToEndOfFile())
            name = "--args (from standard input)"
        } else if option.hasPrefix("@") {
            let path = String(option.dropFirst())
            guard let data = FileManager.default.contents(atPath: path) else {
                throw fail("cannot read --args file \(path)")
            }
            bytes = Array(data)
            name = "--args (in \(path))"
        } else {
            bytes = commandLineBytes(of: option)
            name = "--args"
        }
        do {
            _ = try ArgumentsJSON.parse(bytes: bytes)
        } catch {
            throw fail(error.message(naming: name))
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The bytes of the command-line argument `option` was read from.
    ///
    /// `CommandLine.arguments` replaces bytes that are not UTF-8 with U+FFFD; an
    /// argument that holds one is looked up among the raw ones (`--args VALUE` or
    /// `--args=VALUE`), so that the parse sees, and refuses, what was typed.
    static func commandLineBytes(of option: String) -> [UInt8] {
        guard option.unicodeScalars.contains("\u{FFFD}") else { return Array(option.utf8) }
        let prefix = Array("--args=".utf8)
        for index in 0..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[index] else { continue }
            var bytes = UnsafeBufferPointer(start: raw, count: strlen(raw)).map { UInt8(bitPattern: $0) }
            if bytes.starts(with: prefix) { bytes.removeFirst(prefix.count) }
            if String(validating: bytes, as: UTF8.self) == nil, String(decoding: bytes, as: UTF8.self).utf8.elementsEqual(option.utf8) {
                return bytes
            }
        }
        return Array(option.utf8)
    }
}

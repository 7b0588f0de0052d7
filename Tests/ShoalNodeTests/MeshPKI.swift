import Foundation
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting

/// A mesh CA and the certificates it issues, made by `shoal cert` in `directory`,
/// for tests of TLS links.
struct MeshPKI {
    let directory: String
    let caDirectory: String

    /// Runs `shoal cert ca` into DIRECTORY/`ca`.
    init(in directory: String, ca: String = "ca", name: String = "test mesh CA") throws {
        self.directory = directory
        caDirectory = (directory as NSString).appendingPathComponent(ca)
        try Self.shoal(["cert", "ca", "--out", caDirectory, "--name", name])
    }

    var authority: String { (caDirectory as NSString).appendingPathComponent("ca.pem") }

    /// Runs `shoal cert issue` for `name` into DIRECTORY/`name`, with the extra flags
    /// given (`--days`, `--valid-from`), and returns the files.
    func issue(_ name: String, _ extra: [String] = []) throws -> TLSFiles {
        let out = (directory as NSString).appendingPathComponent(name)
        try Self.shoal(["cert", "issue", "--ca", caDirectory, "--name", name, "--out", out] + extra)
        return TLSFiles(certificate: out + "/\(name).pem", key: out + "/\(name).key", authority: authority)
    }

    @discardableResult
    static func shoal(_ arguments: [String]) throws -> ShoalBinary.Output {
        let output = try ShoalBinary.run(arguments)
        guard output.status == 0 else {
            throw NodeProcessError(message: "shoal \(arguments.joined(separator: " ")) failed: \(output.stderr)")
        }
        return output
    }
}

extension TLSFiles {
    /// The flags of `shoal run` and of the CLI that name these files.
    var arguments: [String] { ["--tls-cert", certificate, "--tls-key", key, "--tls-ca", authority] }
}

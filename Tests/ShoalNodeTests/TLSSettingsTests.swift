import Foundation
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

extension ProcessSuites {
    /// TLS settings are checked when the node starts: a missing file, a key that is not
    /// the certificate's, a certificate another CA issued, a key others may read.
    @Suite struct TLSSettingsTests {
        static func settings(_ dir: String, _ files: [String: String]) -> NodeSettings {
            var settings = NodeSettings()
            settings.set("data", .string(dir + "/data"), origin: "--data")
            for (key, path) in files { settings.set(key, .string(path), origin: "--\(key)") }
            return settings
        }

        static func problem(_ settings: NodeSettings) -> String? {
            do {
                _ = try settings.configuration()
                return nil
            } catch {
                return error.message
            }
        }

        @Test func theThreeFilesAreCheckedAtStart() throws {
            let dir = TemporaryDirectory(prefix: "shoal-tls-settings")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let node = try pki.issue("node")
            let other = try pki.issue("other")
            let stranger = try MeshPKI(in: dir.path, ca: "ca2", name: "stranger CA")
            let foreign = try stranger.issue("foreign")
            func files(cert: String = node.certificate, key: String = node.key, ca: String = node.authority) -> [String: String] {
                ["tls-cert": cert, "tls-key": key, "tls-ca": ca]
            }

            let good = try Self.settings(dir.path, files()).configuration()
            #expect(good.tls == node)
            #expect(try Self.settings(dir.path, [:]).configuration().tls == nil)

            var missing = files()
            missing["tls-key"] = nil
            #expect(Self.problem(Self.settings(dir.path, missing))?.contains("tls-key is missing") == true)
            let absent = Self.problem(Self.settings(dir.path, files(cert: dir.path + "/nope.pem")))
            #expect(absent?.contains("cannot read the TLS certificate file \(dir.path)/nope.pem: there is no such file") == true, "\(absent ?? "")")
            let mismatch = Self.problem(Self.settings(dir.path, files(key: other.key)))
            #expect(mismatch?.contains("does not match the certificate") == true, "\(mismatch ?? "")")
            let wrongCA = Self.problem(Self.settings(dir.path, files(cert: foreign.certificate, key: foreign.key)))
            #expect(wrongCA?.contains("was not issued by the CA in \(pki.authority)") == true, "\(wrongCA ?? "")")
            let notPEM = Self.problem(Self.settings(dir.path, files(ca: node.key)))
            #expect(notPEM?.contains("holds no PEM certificate") == true, "\(notPEM ?? "")")
            chmod(node.key, 0o644)
            let open = Self.problem(Self.settings(dir.path, files()))
            #expect(open?.contains("open to other users (mode 644)") == true, "\(open ?? "")")
        }

        @Test func aNodeWithBrokenTLSSettingsDoesNotStart() throws {
            let dir = TemporaryDirectory(prefix: "shoal-tls-settings")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let node = try pki.issue("node")
            let output = try ShoalBinary.run([
                "run", "--data", dir.path + "/data", "--listen", "127.0.0.1:0", "--no-discovery", "--tls-cert", node.certificate,
                "--tls-ca", node.authority,
            ])
            #expect(output.status != 0)
            #expect(output.stderr.contains("--tls-cert: TLS needs all three of tls-cert, tls-key and tls-ca; tls-key is missing"), "\(output.stderr)")
            #expect(!output.stderr.contains("ready to accept connections"))
        }
    }
}

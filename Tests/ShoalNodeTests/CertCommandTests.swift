import Foundation
import Shoal
import ShoalCRDT
import ShoalNode
import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing
import SwiftASN1
import X509

extension ProcessSuites {
    /// `shoal cert ca` and `shoal cert issue`: what they write, parsed back.
    @Suite struct CertCommandTests {
        static func mode(_ path: String) -> Int {
            ((try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]) as? Int) ?? -1
        }

        static func certificate(_ path: String) throws -> Certificate {
            try Certificate(pemEncoded: String(contentsOfFile: path, encoding: .utf8))
        }

        @Test func aCAIssuesANodeCertificateWithItsNameAndUsages() throws {
            let dir = TemporaryDirectory(prefix: "shoal-cert")
            defer { dir.remove() }
            let ca = try ShoalBinary.run(["cert", "ca", "--out", dir.path + "/ca", "--name", "kitchen CA", "--json"])
            #expect(ca.status == 0, "\(ca.stderr)")
            let caJSON = try #require(try JSONSerialization.jsonObject(with: Data(ca.stdout.utf8)) as? [String: Any])
            #expect(caJSON["certificate"] as? String == dir.path + "/ca/ca.pem")
            #expect(caJSON["key"] as? String == dir.path + "/ca/ca.key")
            #expect(Self.mode(dir.path + "/ca/ca.key") == 0o600)
            let authority = try Self.certificate(dir.path + "/ca/ca.pem")
            #expect(authority.subject.description == "CN=kitchen CA")
            #expect(try authority.extensions.basicConstraints == .isCertificateAuthority(maxPathLength: 0))
            #expect(try authority.extensions.keyUsage?.keyCertSign == true)
            #expect(authority.notValidAfter.timeIntervalSince(authority.notValidBefore) > 3649 * 86_400)

            let issued = try ShoalBinary.run([
                "cert", "issue", "--ca", dir.path + "/ca", "--name", "till-1", "--out", dir.path + "/till", "--days", "30", "--json",
            ])
            #expect(issued.status == 0, "\(issued.stderr)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(issued.stdout.utf8)) as? [String: Any])
            #expect(json["certificate"] as? String == dir.path + "/till/till-1.pem")
            #expect(json["key"] as? String == dir.path + "/till/till-1.key")
            #expect(json["ca"] as? String == dir.path + "/ca/ca.pem")
            #expect(json["name"] as? String == "till-1")
            #expect(Self.mode(dir.path + "/till/till-1.key") == 0o600)
            #expect(Self.mode(dir.path + "/till/till-1.pem") == 0o644)

            let leaf = try Self.certificate(dir.path + "/till/till-1.pem")
            #expect(leaf.subject.description == "CN=till-1")
            #expect(leaf.issuer == authority.subject)
            #expect(authority.publicKey.isValidSignature(leaf.signature, for: leaf))
            let days = leaf.notValidAfter.timeIntervalSince(leaf.notValidBefore) / 86_400
            #expect(abs(days - 30) < 0.01)
            #expect(leaf.notValidBefore < Date() && leaf.notValidAfter > Date())
            #expect(try leaf.extensions.basicConstraints == .notCertificateAuthority)
            let usage = try #require(try leaf.extensions.keyUsage)
            #expect(usage.digitalSignature && !usage.keyCertSign)
            let extended = try #require(try leaf.extensions.extendedKeyUsage)
            #expect(extended.contains(.serverAuth) && extended.contains(.clientAuth))
            #expect(try leaf.extensions.subjectAlternativeNames?.contains(.dnsName("till-1")) == true)
            let key = try Certificate.PrivateKey(pemEncoded: String(contentsOfFile: dir.path + "/till/till-1.key", encoding: .utf8))
            #expect(key.publicKey == leaf.publicKey)
        }

        @Test func validFromSetsTheStartForExpiredAndFutureCertificates() throws {
            let dir = TemporaryDirectory(prefix: "shoal-cert")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let old = try pki.issue("old", ["--valid-from", "2020-01-01", "--days", "2"])
            let leaf = try Self.certificate(old.certificate)
            #expect(leaf.notValidBefore == (try Date("2020-01-01T00:00:00Z", strategy: .iso8601)))
            #expect(leaf.notValidAfter < Date())
            let future = try Self.certificate(try pki.issue("future", ["--valid-from", "2090-06-01T12:00:00Z"]).certificate)
            #expect(future.notValidBefore > Date())
        }

        @Test(arguments: [
            (["cert", "issue", "--ca", "/nonexistent-ca", "--name", "n", "--out", "OUT"], "cannot read /nonexistent-ca/ca.pem"),
            (["cert", "issue", "--ca", "CA", "--name", "bad name", "--out", "OUT"], "may hold only letters"),
            (["cert", "issue", "--ca", "CA", "--name", "n", "--out", "OUT", "--days", "0"], "--days must be between"),
            (["cert", "issue", "--ca", "CA", "--name", "n", "--out", "OUT", "--valid-from", "soon"], "--valid-from"),
            (["cert", "ca", "--out", "CA"], "exists already; not replacing it"),
        ])
        func mistakesAreRefusedClearly(_ arguments: [String], _ message: String) throws {
            let dir = TemporaryDirectory(prefix: "shoal-cert")
            defer { dir.remove() }
            try MeshPKI.shoal(["cert", "ca", "--out", dir.path + "/ca"])
            let output = try ShoalBinary.run(
                arguments.map { $0 == "CA" ? dir.path + "/ca" : $0 == "OUT" ? dir.path + "/out" : $0 })
            #expect(output.status != 0)
            #expect(output.stderr.contains(message), "\(output.stderr)")
        }
    }
}

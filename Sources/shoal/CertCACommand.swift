import ArgumentParser
import Crypto
import Foundation
import ShoalCRDT
import SwiftASN1
import X509

struct CertCACommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ca",
        abstract: "Create a mesh CA: DIR/ca.pem (its certificate, for every node's --tls-ca) and DIR/ca.key (mode 0600).",
        discussion: "Existing files are never replaced. The key is a P-256 ECDSA key."
    )

    @Option(name: .long, help: "The CA's name, its certificate's subject common name.")
    var name: String = "shoal mesh CA"

    @OptionGroup var options: CertificateOptions

    func validate() throws {
        if let problem = MeshCertificates.nameProblem(name, spaces: true) { throw ValidationError("--name: \(problem)") }
    }

    func run() throws {
        do {
            let (start, end) = try options.interval(defaultDays: 3650)
            let key = P256.Signing.PrivateKey()
            let subject = try DistinguishedName { CommonName(name) }
            let publicKey = Certificate.PublicKey(key.publicKey)
            let certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: publicKey,
                notValidBefore: start, notValidAfter: end, issuer: subject, subject: subject,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                    SubjectKeyIdentifier(hash: publicKey)
                },
                issuerPrivateKey: Certificate.PrivateKey(key))
            let written = try MeshCertificates.write(
                certificate: certificate, key: Certificate.PrivateKey(key), directory: options.out, stem: "ca")
            MeshCertificates.report(written, certificate: certificate, json: options.json, extra: [:])
        } catch {
            throw fail(MeshCertificates.message(error))
        }
    }
}

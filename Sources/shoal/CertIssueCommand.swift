import ArgumentParser
import Crypto
import Foundation
import ShoalCRDT
import SwiftASN1
import X509

struct CertIssueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "issue",
        abstract: "Issue a node's or a client's certificate from a mesh CA: DIR/NAME.pem and DIR/NAME.key (mode 0600).",
        discussion: """
            NAME is the subject common name, and a DNS name in the certificate's subject \
            alternative names: it is how peers and status know the holder (no node checks \
            it against a host name). The certificate serves both to accept and to dial, so \
            the same one does for a node and for the CLI. Existing files are never replaced.
            """
    )

    @Option(name: .long, help: ArgumentHelp("The CA's directory, as shoal cert ca wrote it (ca.pem, ca.key).", valueName: "dir"))
    var ca: String

    @Option(name: .long, help: "The name the holder is known by: letters, digits, '.', '-' and '_', at most 64.")
    var name: String

    @OptionGroup var options: CertificateOptions

    func validate() throws {
        if let problem = MeshCertificates.nameProblem(name, spaces: false) { throw ValidationError("--name: \(problem)") }
    }

    func run() throws {
        do {
            let (start, end) = try options.interval()
            let (authority, authorityKey) = try MeshCertificates.loadAuthority(directory: ca)
            let key = P256.Signing.PrivateKey()
            let publicKey = Certificate.PublicKey(key.publicKey)
            let certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: publicKey,
                notValidBefore: start, notValidAfter: end, issuer: authority.subject,
                subject: try DistinguishedName { CommonName(name) },
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                    try ExtendedKeyUsage([.serverAuth, .clientAuth])
                    SubjectAlternativeNames([.dnsName(name)])
                    SubjectKeyIdentifier(hash: publicKey)
                    AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: authority.publicKey).keyIdentifier)
                },
                issuerPrivateKey: authorityKey)
            let written = try MeshCertificates.write(
                certificate: certificate, key: Certificate.PrivateKey(key), directory: options.out, stem: name)
            MeshCertificates.report(
                written, certificate: certificate, json: options.json,
                extra: ["ca": .string(MeshCertificates.authorityFile(ca)), "issuer": .string(authority.subject.description)])
        } catch {
            throw fail(MeshCertificates.message(error))
        }
    }
}

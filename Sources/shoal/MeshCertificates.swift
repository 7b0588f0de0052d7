import ArgumentParser
import ShoalStorage
import Foundation
import ShoalCRDT
import ShoalNode
import SwiftASN1
import X509

/// The flags `shoal cert ca` and `shoal cert issue` share: where to write, for how
/// long the certificate is valid, and how to report.
struct CertificateOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The directory to write to (created if missing).", valueName: "dir"))
    var out: String

    @Option(name: .long, help: "Days the certificate is valid (default: 3650 for a CA, 825 for a node or client).")
    var days: Int?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "When validity starts, YYYY-MM-DD or an ISO 8601 time (default: now, less five minutes for clocks that lag).",
            valueName: "date"))
    var validFrom: String?

    @Flag(name: .long, help: "Print one JSON object naming the files written.")
    var json = false

    func validate() throws {
        if let days, !(1...36_500).contains(days) { throw ValidationError("--days must be between 1 and 36500") }
        if let validFrom, Self.date(validFrom) == nil {
            throw ValidationError("--valid-from: '\(validFrom)' is neither YYYY-MM-DD nor an ISO 8601 time such as 2030-01-31T12:00:00Z")
        }
    }

    static func date(_ text: String) -> Date? {
        if let time = try? Date(text, strategy: .iso8601) { return time }
        return try? Date(text + "T00:00:00Z", strategy: .iso8601)
    }

    /// When the certificate is valid, the default length depending on what it is for.
    func interval(defaultDays: Int? = nil) throws -> (Date, Date) {
        let start = validFrom.flatMap(Self.date) ?? Date().addingTimeInterval(-300)
        let days = self.days ?? defaultDays ?? 825
        return (start, start.addingTimeInterval(Double(days) * 86_400))
    }
}

/// Writing and reading the files of `shoal cert`.
enum MeshCertificates {
    /// The files one certificate was written to.
    struct Written {
        let certificate: String
        let key: String
    }

    /// Why `name` cannot name a certificate's holder, or nil. A CA's name may hold spaces.
    static func nameProblem(_ name: String, spaces: Bool) -> String? {
        if name.isEmpty || name.utf8.count > 64 { return "a name is 1 to 64 characters" }
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_" + (spaces ? " " : ""))
        if name.unicodeScalars.contains(where: { !allowed.contains($0) }) {
            return "'\(name)' may hold only letters, digits, '.', '-' and '_'\(spaces ? " and spaces" : "")"
        }
        if name.hasPrefix(".") || name.hasPrefix("-") { return "'\(name)' must not start with '.' or '-'" }
        return nil
    }

    static func authorityFile(_ directory: String) -> String { (directory as NSString).appendingPathComponent("ca.pem") }

    /// The CA certificate and key `shoal cert ca` wrote to `directory`.
    static func loadAuthority(directory: String) throws -> (Certificate, Certificate.PrivateKey) {
        let certificatePath = authorityFile(directory)
        let keyPath = (directory as NSString).appendingPathComponent("ca.key")
        func text(_ path: String) throws(ShoalError) -> String {
            guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
                throw ShoalError(.file, "cannot read \(path): is \(directory) a CA directory that shoal cert ca wrote?")
            }
            return text
        }
        let certificate: Certificate
        do {
            certificate = try Certificate(pemEncoded: try text(certificatePath))
        } catch let error as ShoalError {
            throw error
        } catch {
            throw ShoalError(.file, "\(certificatePath) holds no PEM certificate (\(error))")
        }
        guard case .isCertificateAuthority? = try? certificate.extensions.basicConstraints else {
            throw ShoalError(.file, "\(certificatePath) is not a CA certificate (its basic constraints do not say so)")
        }
        let key: Certificate.PrivateKey
        do {
            key = try Certificate.PrivateKey(pemEncoded: try text(keyPath))
        } catch let error as ShoalError {
            throw error
        } catch {
            throw ShoalError(.file, "\(keyPath) holds no PEM private key (\(error))")
        }
        guard key.publicKey == certificate.publicKey else {
            throw ShoalError(.file, "the key in \(keyPath) is not the key of the CA certificate \(certificatePath)")
        }
        return (certificate, key)
    }

    /// Writes DIR/STEM.pem (mode 0644) and DIR/STEM.key (mode 0600), neither replacing a file.
    static func write(certificate: Certificate, key: Certificate.PrivateKey, directory: String, stem: String) throws -> Written {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw ShoalError(.file, "cannot create the directory \(directory): \(error.localizedDescription)")
        }
        let written = Written(
            certificate: (directory as NSString).appendingPathComponent("\(stem).pem"),
            key: (directory as NSString).appendingPathComponent("\(stem).key"))
        for path in [written.certificate, written.key] where FileManager.default.fileExists(atPath: path) {
            throw ShoalError(.file, "\(path) exists already; not replacing it. Remove it first, or choose another --out")
        }
        try KeyFile.create(path: written.key, contents: Array(try key.serializeAsPEM().pemString.utf8 + [0x0A]), mode: 0o600)
        try KeyFile.create(
            path: written.certificate, contents: Array(try certificate.serializeAsPEM().pemString.utf8 + [0x0A]), mode: 0o644)
        return written
    }

    /// Prints what was written: a line for people, or one JSON object.
    static func report(_ written: Written, certificate: Certificate, json: Bool, extra: [String: Value]) {
        let name = LinkTLS.commonName(certificate)
        if json {
            var object: [String: Value] = [
                "certificate": .string(written.certificate), "key": .string(written.key), "name": .string(name),
                "notBefore": .string(certificate.notValidBefore.formatted(.iso8601)),
                "notAfter": .string(certificate.notValidAfter.formatted(.iso8601)),
                "serial": .string(certificate.serialNumber.description),
            ]
            object.merge(extra) { $1 }
            print(Value.object(object).canonicalJSON)
        } else {
            print("wrote \(written.certificate) (certificate of \(name), valid until \(certificate.notValidAfter.formatted(.iso8601)))")
            print("wrote \(written.key) (its private key, mode 0600)")
        }
    }

    static func message(_ error: any Error) -> String {
        (error as? ShoalError)?.message ?? "\(error)"
    }
}

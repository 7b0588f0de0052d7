import Foundation
import ShoalStorage
import NIOCore
import NIOSSL
import NIOTLS
import ShoalCRDT
import SwiftASN1
package import X509

/// TLS for a node's or a client's links (PROTOCOL.md §17): the files loaded and
/// checked once, the contexts for dialing and accepting, and the check of a peer's
/// certificate.
///
/// Every failure to load is a `ShoalError` naming the file, raised when the node or
/// client starts rather than at its first connection. A peer's certificate is
/// checked here rather than by BoringSSL's verifier, so that a refusal says why
/// (another CA, expired, not yet valid); TLS itself still proves that the peer
/// holds the certificate's key.
package struct LinkTLS: Sendable {
    let files: TLSFiles
    let certificate: Certificate
    let authority: Certificate
    /// This side's name: its certificate's subject common name.
    let identity: String
    /// The serial numbers of revoked certificates (`TLSFiles.revoked`), normalized.
    let revoked: Set<String>
    private let serverContext: NIOSSLContext
    private let clientContext: NIOSSLContext

    init(files: TLSFiles) throws(ShoalError) {
        self.files = files
        let certificatePEM = try Self.read(files.certificate, "TLS certificate")
        let keyPEM = try Self.read(files.key, "TLS key")
        let authorityPEM = try Self.read(files.authority, "TLS CA certificate")
        if let mode = KeyFile.modeOpenToOthers(path: files.key) {
            throw ShoalError(
                .keyFile,
                "the TLS key file \(files.key) is open to other users (mode \(String(mode, radix: 8))); anyone who reads it can pass for this node. Make it private: chmod 600 \(files.key)")
        }
        let key: Certificate.PrivateKey
        do {
            certificate = try Certificate(pemEncoded: certificatePEM)
        } catch {
            throw ShoalError(.invalidConfiguration, "the TLS certificate file \(files.certificate) holds no PEM certificate (\(error))")
        }
        do {
            key = try Certificate.PrivateKey(pemEncoded: keyPEM)
        } catch {
            throw ShoalError(.keyFile, "the TLS key file \(files.key) holds no PEM private key (\(error))")
        }
        do {
            authority = try Certificate(pemEncoded: authorityPEM)
        } catch {
            throw ShoalError(.invalidConfiguration, "the TLS CA file \(files.authority) holds no PEM certificate (\(error))")
        }
        guard key.publicKey == certificate.publicKey else {
            throw ShoalError(
                .keyFile,
                "the TLS key in \(files.key) does not match the certificate in \(files.certificate): it is the key of another certificate")
        }
        identity = Self.commonName(certificate)
        revoked = try files.revoked.map { path throws(ShoalError) in try Self.revokedSerials(Self.read(path, "revoked certificates")) } ?? []
        if let problem = Self.issuerProblem(certificate, authority: authority) {
            throw ShoalError(
                .invalidConfiguration,
                "the TLS certificate \(files.certificate) (\(identity)) was not issued by the CA in \(files.authority): \(problem)")
        }
        do {
            let chain = [NIOSSLCertificateSource.certificate(try NIOSSLCertificate(bytes: Array(certificatePEM.utf8), format: .pem))]
            let privateKey = NIOSSLPrivateKeySource.privateKey(try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem))
            let roots = NIOSSLTrustRoots.certificates([try NIOSSLCertificate(bytes: Array(authorityPEM.utf8), format: .pem)])
            var server = TLSConfiguration.makeServerConfigurationWithMTLS(
                certificateChain: chain, privateKey: privateKey, trustRoots: roots)
            var client = TLSConfiguration.makeClientConfiguration()
            client.certificateChain = chain
            client.privateKey = privateKey
            client.trustRoots = roots
            server.minimumTLSVersion = .tlsv13
            client.minimumTLSVersion = .tlsv13
            // Peers are known by their certificates, not by the names they are dialed at.
            server.certificateVerification = .noHostnameVerification
            client.certificateVerification = .noHostnameVerification
            serverContext = try NIOSSLContext(configuration: server)
            clientContext = try NIOSSLContext(configuration: client)
        } catch {
            throw ShoalError(
                .invalidConfiguration,
                "cannot use the TLS files \(files.certificate), \(files.key) and \(files.authority): \(error)")
        }
    }

    private static func read(_ path: String, _ what: String) throws(ShoalError) -> String {
        guard FileManager.default.isReadableFile(atPath: path), let data = FileManager.default.contents(atPath: path),
            let text = String(data: data, encoding: .utf8)
        else {
            let reason = FileManager.default.fileExists(atPath: path) ? "it is not readable" : "there is no such file"
            throw ShoalError(.invalidConfiguration, "cannot read the \(what) file \(path): \(reason)")
        }
        return text
    }

    /// A certificate's subject common name, or its whole subject when it has none.
    package static func commonName(_ certificate: Certificate) -> String {
        for rdn in certificate.subject {
            // 2.5.4.3: the common name.
            for attribute in rdn where attribute.type.description == "2.5.4.3" {
                if let name = String(attribute.value) { return name }
            }
        }
        return certificate.subject.description
    }

    /// Why `certificate` was not issued by `authority`, or nil when it was.
    static func issuerProblem(_ certificate: Certificate, authority: Certificate) -> String? {
        guard certificate.issuer == authority.subject else {
            return "its issuer is \(certificate.issuer), the CA is \(authority.subject)"
        }
        guard authority.publicKey.isValidSignature(certificate.signature, for: certificate) else {
            return "its signature is not the CA's (another CA of the same name?)"
        }
        return nil
    }

    /// Why this side's own certificate would be refused by its peers at `now`, or nil.
    func ownValidityProblem(at now: Date = Date()) -> String? {
        Self.validityProblem(certificate, at: now).map { "this node's certificate (\(identity), \(files.certificate)) \($0)" }
    }

    static func validityProblem(_ certificate: Certificate, at now: Date) -> String? {
        if now < certificate.notValidBefore { return "is not valid before \(certificate.notValidBefore.formatted(.iso8601))" }
        if now > certificate.notValidAfter { return "expired at \(certificate.notValidAfter.formatted(.iso8601))" }
        return nil
    }

    /// Why a peer presenting `leaf` is refused at `now`, or nil when the certificate
    /// was issued by the mesh's CA, is valid now and is not revoked. Only the first
    /// certificate a peer presents counts: the CA must have issued it directly.
    static func refusal(of leaf: Certificate, authority: Certificate, at now: Date, revoked: Set<String> = []) -> String? {
        let name = commonName(leaf)
        if let problem = issuerProblem(leaf, authority: authority) {
            return "its certificate (\(name)) was not issued by this mesh's CA (\(commonName(authority))): \(problem)"
        }
        let serial = serialText(leaf.serialNumber.bytes)
        if revoked.contains(serial) { return "its certificate (\(name), serial \(serial)) is revoked (tls-revoked)" }
        if let problem = validityProblem(leaf, at: now) { return "its certificate (\(name)) \(problem)" }
        return nil
    }

    /// A serial number as lowercase hex without leading zeros ("0" for zero).
    static func serialText(_ bytes: some Collection<UInt8>) -> String {
        let hex = bytes.map { byte in
            let digits = String(byte, radix: 16)
            return digits.count == 1 ? "0" + digits : digits
        }.joined()
        let trimmed = hex.drop { $0 == "0" }
        return trimmed.isEmpty ? "0" : String(trimmed)
    }

    /// The serial numbers a revocation file names: one a line, in hex, with `serial=`
    /// and colons allowed; blank lines and `#` comments skipped. A line that is not
    /// hex is refused, with its number.
    static func revokedSerials(_ text: String) throws(ShoalError) -> Set<String> {
        var serials: Set<String> = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            line = line.trimmingCharacters(in: .whitespaces)
            guard !line.isEmpty else { continue }
            if line.lowercased().hasPrefix("serial=") { line = String(line.dropFirst("serial=".count)) }
            line = line.replacingOccurrences(of: ":", with: "").lowercased()
            guard !line.isEmpty, line.count <= 64, line.unicodeScalars.allSatisfy({ ("0"..."9").contains($0) || ("a"..."f").contains($0) }) else {
                throw ShoalError(
                    .invalidConfiguration,
                    "line \(index + 1) of the revoked certificates file is not a serial number in hex: \(raw.prefix(80))")
            }
            let bytes = stride(from: line.count % 2 == 0 ? 0 : -1, to: line.count, by: 2).map { start -> UInt8 in
                let from = line.index(line.startIndex, offsetBy: max(start, 0))
                let to = line.index(line.startIndex, offsetBy: start + 2)
                return UInt8(line[from..<to], radix: 16)!
            }
            serials.insert(serialText(bytes))
        }
        return serials
    }

    /// Adds TLS to a new connection, before anything else in its pipeline, and
    /// returns a future that succeeds with the peer's identity once the TLS handshake
    /// is over, or fails with a `ShoalError` saying why it was not.
    func secure(_ channel: any Channel, dialing: Bool, timeout: Duration) throws -> EventLoopFuture<Peer> {
        let verdict = Verdict()
        let authority = self.authority
        let revoked = self.revoked
        let check: NIOSSLCustomVerificationCallback = { presented, promise in
            let chain = presented.map { try? Certificate(derEncoded: $0.toDERBytes()) }
            guard let leaf = chain.first ?? nil else {
                verdict.state.withLock { $0.refusal = presented.isEmpty ? "it presented no certificate" : "its certificate does not parse" }
                promise.succeed(.failed)
                return
            }
            if let refusal = Self.refusal(of: leaf, authority: authority, at: Date(), revoked: revoked) {
                verdict.state.withLock { $0.refusal = refusal }
                promise.succeed(.failed)
            } else {
                verdict.state.withLock {
                    $0.identity = Self.commonName(leaf)
                    $0.serial = Self.serialText(leaf.serialNumber.bytes)
                }
                promise.succeed(.certificateVerified)
            }
        }
        let handler: NIOSSLHandler =
            dialing
            ? try NIOSSLClientHandler(context: clientContext, serverHostname: nil, customVerificationCallback: check)
            : NIOSSLServerHandler(context: serverContext, customVerificationCallback: check)
        let promise = channel.eventLoop.makePromise(of: Peer.self)
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.pipeline.syncOperations.addHandler(
            TLSHandshakeHandler(promise: promise, verdict: verdict, timeout: timeout, own: self))
        return promise.futureResult
    }

    /// The other side of a TLS link, as its certificate says.
    struct Peer: Sendable, Hashable {
        /// The subject's common name: who the peer is.
        var name: String
        /// The serial number, as `serialText` writes it (what `tls-revoked` lists).
        var serial: String
    }

    /// What the custom check of a peer's certificate decided, for the handshake's outcome.
    final class Verdict: Sendable {
        let state = Locked<(identity: String?, serial: String?, refusal: String?)>((nil, nil, nil))
    }

    /// What a failure on a TLS link means to an operator, or nil when `error` is not
    /// about TLS. `peer` names the other side.
    func explain(_ error: any Error, peer: String) -> String? {
        Self.explain(error, peer: peer, own: self)
    }

    static func explain(_ error: any Error, peer: String, own: LinkTLS?) -> String? {
        let text = String(describing: error)
        let plaintext = ["WRONG_VERSION_NUMBER", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG", "RECORD_LENGTH_MISMATCH", "DECODE_ERROR"]
        if plaintext.contains(where: text.contains) {
            return "\(peer) does not speak TLS: a plaintext node (no --tls-cert), or not a Shoal node; all nodes of a TLS mesh need --tls-cert, --tls-key and --tls-ca (\(text))"
        }
        if let alert = ["CERTIFICATE_UNKNOWN", "BAD_CERTIFICATE", "UNKNOWN_CA", "CERTIFICATE_EXPIRED", "CERTIFICATE_REQUIRED"]
            .first(where: { text.contains("ALERT_\($0)") })
        {
            let why = own?.ownValidityProblem() ?? "is it issued by the same CA as the peer's, and valid now?"
            return "\(peer) refused this side's certificate (TLS alert \(alert.lowercased())): \(why)"
        }
        if text.contains("PEER_DID_NOT_RETURN_A_CERTIFICATE") {
            return "\(peer) presented no certificate: give it --tls-cert and --tls-key"
        }
        if text.contains("NO_SHARED_CIPHER") || text.contains("UNSUPPORTED_PROTOCOL") || text.contains("ALERT_PROTOCOL_VERSION") {
            return "\(peer) and this side share no TLS version or cipher (Shoal uses TLS 1.3 only): \(text)"
        }
        if error is NIOSSLError || error is BoringSSLError {
            return "TLS with \(peer) failed: \(text)"
        }
        return nil
    }
}

/// Completes the handshake future of `LinkTLS.secure`: with the peer's identity
/// when TLS reports the handshake done, with the reason when it fails, the
/// connection closes first, or `timeout` passes. Passes everything else on.
final class TLSHandshakeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let promise: EventLoopPromise<LinkTLS.Peer>
    private let verdict: LinkTLS.Verdict
    private let timeout: Duration
    private let own: LinkTLS
    private var timer: Scheduled<Void>?
    private var done = false

    init(promise: EventLoopPromise<LinkTLS.Peer>, verdict: LinkTLS.Verdict, timeout: Duration, own: LinkTLS) {
        self.promise = promise
        self.verdict = verdict
        self.timeout = timeout
        self.own = own
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loop = context.eventLoop
        let channel = context.channel
        let seconds = AdminClient.seconds(timeout)
        let (whole, fraction) = timeout.components
        timer = loop.assumeIsolated().scheduleTask(in: .nanoseconds(whole * 1_000_000_000 + fraction / 1_000_000_000)) { [self] in
            finish(.failure(ShoalError(.connectionFailed, "no TLS handshake within \(seconds) s")))
            channel.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish(.failure(ShoalError(.connectionFailed, "the connection closed during the TLS handshake")))
    }

    private func peer(_ context: ChannelHandlerContext) -> String {
        context.channel.remoteAddress.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" } ?? "the peer"
    }

    private func finish(_ result: Result<LinkTLS.Peer, ShoalError>) {
        guard !done else { return }
        done = true
        timer?.cancel()
        promise.completeWith(result.mapError { $0 as any Error })
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted = event {
            let peer = verdict.state.withLock { LinkTLS.Peer(name: $0.identity ?? "?", serial: $0.serial ?? "?") }
            finish(.success(peer))
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !done {
            let peer = peer(context)
            let message =
                verdict.state.withLock { $0.refusal }.map { "refused \(peer): \($0)" }
                ?? own.explain(error, peer: peer) ?? "TLS with \(peer) failed: \(error)"
            finish(.failure(ShoalError(.connectionFailed, message)))
        }
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(
            .failure(
                ShoalError(
                    .connectionFailed,
                    "\(peer(context)) closed the connection during the TLS handshake (a plaintext node, or one that refused this side's certificate?)")))
        context.fireChannelInactive()
    }
}

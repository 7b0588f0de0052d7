/// The files a node, or an admin client, uses for mutual TLS on its links
/// (PROTOCOL.md §17): its certificate, that certificate's private key, and the
/// mesh's CA certificate, all PEM.
///
/// With them, every peer link and admin connection is TLS 1.3; both sides present
/// a certificate issued by the CA and check the other's, and a peer is known by its
/// certificate's subject common name. `shoal cert` makes all three files.
public struct TLSFiles: Sendable, Hashable {
    public var certificate: String
    /// Readable by its owner only (mode 0600); a key others may read is refused.
    public var key: String
    public var authority: String
    /// A file naming revoked certificates, one serial number in hex a line (as
    /// `openssl x509 -noout -serial` prints it, `serial=` and colons allowed; `#`
    /// starts a comment): a peer presenting one is refused. Nil: none is revoked.
    public var revoked: String?

    public init(certificate: String, key: String, authority: String, revoked: String? = nil) {
        self.certificate = certificate
        self.key = key
        self.authority = authority
        self.revoked = revoked
    }
}

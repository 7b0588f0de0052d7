/// Which addresses count as this machine only: admin clients there need no key on a
/// node that has none, and a node listening only there warns of nothing.
extension HostAndPort {
    /// Whether `host` is a loopback address or name: `localhost`, 127.0.0.0/8, `::1`,
    /// or an IPv4-mapped 127.x address.
    public static func isLoopback(host: String) -> Bool {
        var host = host.lowercased()
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1" { return true }
        if host.hasPrefix("::ffff:") { host = String(host.dropFirst("::ffff:".count)) }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// Whether this address is reachable from this machine only.
    public var isLoopback: Bool { Self.isLoopback(host: host) }
}

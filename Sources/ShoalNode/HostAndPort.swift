public import ShoalStorage

/// A `HOST:PORT` pair as the CLI and config take it (`[::1]:7470` for IPv6).
public struct HostAndPort: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT`; the error says what is wrong with the text.
    public init(parsing text: String) throws(ShoalError) {
        var hostPart: Substring
        let portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw ShoalError(.invalidConfiguration, "'\(text)' is not HOST:PORT (IPv6 hosts look like [::1]:7470)")
            }
            hostPart = text[text.index(after: text.startIndex)..<close]
            portPart = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else {
                throw ShoalError(.invalidConfiguration, "'\(text)' is not HOST:PORT (for example 127.0.0.1:7470)")
            }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
        }
        if hostPart.isEmpty { hostPart = "0.0.0.0" }
        guard let port = Int(portPart), (0...65535).contains(port) else {
            throw ShoalError(.invalidConfiguration, "'\(text)': port must be a number from 0 to 65535")
        }
        self.host = String(hostPart)
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    public static let defaultPort = 7470
}

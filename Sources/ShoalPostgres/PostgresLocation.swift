import ShoalCRDT
public import Foundation

/// Where a hub's PostgreSQL database is: `postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE`.
///
/// The password is better not in the URL, which shows in process lists and shell
/// histories: `password(fromFile:)` or the environment variable `SHOAL_STORE_PASSWORD`
/// give it instead. `description` never shows it.
public struct PostgresLocation: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var user: String
    public var database: String
    public var password: String?

    /// Parses `url`; `environment` supplies `SHOAL_STORE_PASSWORD` when the URL has no password.
    public init(parsing url: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(PostgresStoreError) {
        guard let components = URLComponents(string: url), let scheme = components.scheme,
            ["postgresql", "postgres"].contains(scheme.lowercased())
        else {
            throw PostgresStoreError(
                "not a PostgreSQL URL: \(Self.masked(url)) (expected postgresql://USER@HOST:PORT/DATABASE)")
        }
        guard let host = components.host, !host.isEmpty else {
            throw PostgresStoreError("the URL \(Self.masked(url)) names no host")
        }
        guard let user = components.user, !user.isEmpty else {
            throw PostgresStoreError("the URL \(Self.masked(url)) names no user (postgresql://USER@HOST/DATABASE)")
        }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else {
            throw PostgresStoreError("the URL \(Self.masked(url)) names no database (postgresql://USER@HOST/DATABASE)")
        }
        if let port = components.port, !(1...65_535).contains(port) {
            throw PostgresStoreError("the URL \(Self.masked(url)) has port \(port), outside 1-65535")
        }
        self.host = host
        self.port = components.port ?? 5432
        self.user = user
        self.database = database
        self.password = components.password ?? environment["SHOAL_STORE_PASSWORD"]
    }

    /// Reads the password from a file (its first line), which must not be readable by
    /// other users, as a mesh key file must not.
    public mutating func password(fromFile path: String) throws(PostgresStoreError) {
        // stat(2) follows a symbolic link, as a secret mounted by an orchestrator is.
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw PostgresStoreError("cannot read the store password file \(path)")
        }
        let mode = Int(info.st_mode & 0o777)
        guard mode & 0o077 == 0 else {
            throw PostgresStoreError(
                "the store password file \(path) may be read by other users (mode \(String(mode, radix: 8))): chmod 600 it")
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
            let line = text.split(whereSeparator: \.isNewline).first, !line.isEmpty
        else {
            throw PostgresStoreError("the store password file \(path) is empty")
        }
        password = String(line)
    }

    /// The URL without its password, for status and logs.
    public var description: String { "postgresql://\(user)@\(host):\(port)/\(database)" }

    /// `url` with anything between `://` and the last `@` of its authority replaced by
    /// `***`, for error messages: never the text as given, which may hold a password
    /// that does not parse (one with `#`, `/`, `?` or a space).
    static func masked(_ url: String) -> String {
        guard let scheme = url.range(of: "://") else { return "(a URL that is not postgresql://USER@HOST/DATABASE)" }
        let rest = url[scheme.upperBound...]
        guard let at = rest.lastIndex(of: "@") else { return url }
        return String(url[..<scheme.upperBound]) + "***" + String(rest[at...])
    }
}

/// What went wrong with a PostgreSQL store, in words an operator can act on.
public struct PostgresStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

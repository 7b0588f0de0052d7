import Foundation
public import ShoalStorage
public import ShoalSync
import ShoalQuery

/// Reads a node's access rules from a TOML file (`--permissions FILE`): one `[[peer]]`
/// table per rule, in the order they are tried.
///
/// ```toml
/// [[peer]]
/// name = "till-*"                       # certificate name: * any run, ? one character
/// read = ["menu", "orders"]             # collections; "*" for all of them
/// where = { orders = "store = 'north'" }  # only these documents of a collection read
/// write = ["orders"]                    # collections; "*" for all of them
/// admin = "read"                        # none (the default), read, write or operate
/// ```
///
/// What a rule leaves out is not allowed: a rule with no `read` lets a peer read
/// nothing. Every mistake is reported with the file, the rule and the key.
public enum AccessRulesFile {
    /// The keys a `[[peer]]` table may have.
    static let keys = ["name", "read", "where", "write", "admin"]

    /// Reads and checks the rules in `path`.
    public static func load(_ path: String) throws(ShoalError) -> AccessRules {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            let reason = FileManager.default.fileExists(atPath: path) ? "it is not readable UTF-8 text" : "there is no such file"
            throw ShoalError(.invalidConfiguration, "cannot read the permissions file \(path): \(reason)")
        }
        return try parse(text, file: path)
    }

    /// Parses rules; `file` names the text in errors.
    public static func parse(_ text: String, file: String) throws(ShoalError) -> AccessRules {
        let table: TOMLTable
        do {
            table = try TOML.parse(text)
        } catch {
            throw ShoalError(.invalidConfiguration, "\(file):\(error.line):\(error.column): \(error.message)")
        }
        for key in table.keys where key != "peer" {
            throw ShoalError(
                .invalidConfiguration, "\(file): unknown key '\(key)': a permissions file holds [[peer]] tables only")
        }
        guard let raw = table["peer"] else { return AccessRules(rules: []) }
        guard let peers = raw.array else {
            throw ShoalError(.invalidConfiguration, "\(file): 'peer' must be an array of tables: write each rule as [[peer]]")
        }
        var rules: [AccessRules.Rule] = []
        for (index, item) in peers.enumerated() {
            guard let peer = item.table else {
                throw ShoalError(.invalidConfiguration, "\(file): peer \(index + 1) must be a table: write each rule as [[peer]]")
            }
            rules.append(try rule(peer, origin: "\(file): peer \(index + 1)"))
        }
        return AccessRules(rules: rules)
    }

    private static func rule(_ peer: TOMLTable, origin: String) throws(ShoalError) -> AccessRules.Rule {
        func invalid(_ message: String) -> ShoalError { ShoalError(.invalidConfiguration, "\(origin): \(message)") }
        for key in peer.keys where !keys.contains(key) {
            throw invalid("unknown key '\(key)'; a rule has \(keys.joined(separator: ", "))")
        }
        guard let name = peer["name"]?.string else {
            throw invalid("'name' must be given, a string: the certificate name the rule is for (* and ? match any)")
        }
        guard !name.isEmpty, name.utf8.count <= 1024 else { throw invalid("'name' must be 1 to 1024 bytes long") }
        let origin = "\(origin) ('\(name)')"
        func invalidNamed(_ message: String) -> ShoalError { ShoalError(.invalidConfiguration, "\(origin): \(message)") }
        func collections(_ key: String) throws(ShoalError) -> [String]? {
            guard let value = peer[key] else { return [] }
            guard let array = value.array else { throw invalidNamed("'\(key)' must be an array of collection names") }
            var names: [String] = []
            for item in array {
                guard let name = item.string, !name.isEmpty else {
                    throw invalidNamed("'\(key)' must be an array of collection names, each a non-empty string")
                }
                names.append(name)
            }
            return names.contains("*") ? nil : names
        }
        let readable = try collections("read")
        let writable = try collections("write")
        var conditions: [String: String] = [:]
        if let value = peer["where"] {
            guard let table = value.table else {
                throw invalidNamed("'where' must be a table of conditions by collection: where = { orders = \"store = 'north'\" }")
            }
            for collection in table.keys {
                guard let condition = table[collection]?.string else {
                    throw invalidNamed("the condition on \(collection) in 'where' must be a string")
                }
                if let readable, !readable.contains(collection) {
                    throw invalidNamed("'where' has a condition on \(collection), which 'read' does not name")
                }
                try check(condition, on: collection, origin: origin)
                conditions[collection] = condition
            }
        }
        let read: PeerRights.Read
        if let readable {
            read = .collections(Dictionary(readable.map { ($0, conditions[$0]) }, uniquingKeysWith: { a, _ in a }))
        } else if conditions.isEmpty {
            read = .everything
        } else {
            throw invalidNamed("'where' needs the collections it applies to named in 'read', not \"*\"")
        }
        let admin: PeerRights.AdminRole
        if let value = peer["admin"] {
            guard let text = value.string, let role = PeerRights.AdminRole(rawValue: text) else {
                throw invalidNamed("'admin' must be one of \(PeerRights.AdminRole.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            admin = role
        } else {
            admin = .none
        }
        return AccessRules.Rule(
            pattern: name, rights: PeerRights(read: read, write: writable.map { .collections(Set($0)) } ?? .everything, admin: admin))
    }

    /// Refuses a condition that is not a WHERE condition of DQL on its own, or that takes
    /// arguments (a rule has none to give).
    private static func check(_ condition: String, on collection: String, origin: String) throws(ShoalError) {
        let query = "SELECT * FROM " + PeerRights.quoted(collection) + " WHERE " + condition
        do {
            var set = SubscriptionSet()
            try set.add(query: query)
        } catch {
            throw ShoalError(.invalidConfiguration, "\(origin): the condition on \(collection) is not a DQL condition: \(error.message)")
        }
        if let tokens = try? Lexer.tokenize(condition), tokens.contains(where: { if case .parameter = $0.kind { true } else { false } }) {
            throw ShoalError(
                .invalidConfiguration, "\(origin): the condition on \(collection) takes an argument (:name); a rule has none to give")
        }
    }
}

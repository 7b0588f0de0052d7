public import ShoalStorage
import ShoalQuery

/// What the peers of a TLS mesh may do on this node, by the name their certificate
/// gives them (its subject common name): read which collections (each with a WHERE if
/// need be), write which, and with what role use the admin interface.
///
/// The first rule whose pattern matches a peer's name gives its rights; a peer no rule
/// matches may do nothing. A node with no rules (`AccessRules.none`) lets every peer
/// the mesh's CA vouches for do everything, as a mesh key does without TLS.
///
/// Rights are enforced where data moves, per link: a peer's subscriptions are cut
/// down to what it may read before any piece is planned for it (`PeerRights.cut`), and
/// a received piece whose manifest or context names a collection its sender may not
/// write is refused, nothing of its transaction applied from that peer
/// (`InboundCommitPlan`). A relay vouches for what it forwards up to its own rights: it
/// refused what its own senders could not write.
public struct AccessRules: Sendable, Hashable {
    public struct Rule: Sendable, Hashable {
        /// A certificate name, with `*` for any run of characters and `?` for one.
        public var pattern: String
        public var rights: PeerRights

        public init(pattern: String, rights: PeerRights) {
            self.pattern = pattern
            self.rights = rights
        }
    }

    public var rules: [Rule]

    public init(rules: [Rule]) {
        self.rules = rules
    }

    /// No rules: every peer may do everything.
    public static let none = AccessRules(rules: [])

    /// The rights of the peer known as `identity` (nil: a peer with no certificate).
    public func rights(of identity: String?) -> PeerRights {
        guard !rules.isEmpty else { return .everything }
        guard let identity else { return .nothing }
        return rules.first { Self.matches(identity, $0.pattern) }?.rights ?? .nothing
    }

    /// Whether `name` matches `pattern`, whose `*` stands for any run of characters and
    /// `?` for one; everything else stands for itself. Compared by Unicode scalars.
    public static func matches(_ name: String, _ pattern: String) -> Bool {
        let name = Array(name.unicodeScalars)
        let pattern = Array(pattern.unicodeScalars)
        // Iterative glob: on a mismatch, go back to the last `*` and let it take one more.
        var n = 0
        var p = 0
        var star: (pattern: Int, name: Int)?
        while n < name.count {
            if p < pattern.count, pattern[p] == "?" || (pattern[p] != "*" && pattern[p] == name[n]) {
                n += 1
                p += 1
            } else if p < pattern.count, pattern[p] == "*" {
                star = (p, n)
                p += 1
            } else if let s = star {
                p = s.pattern + 1
                n = s.name + 1
                star = (s.pattern, s.name + 1)
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == "*" { p += 1 }
        return p == pattern.count
    }
}

/// What one peer may do on this node.
public struct PeerRights: Sendable, Hashable {
    /// What a peer may read: everything, or some collections, each whole (nil) or only
    /// the documents a WHERE condition matches.
    public enum Read: Sendable, Hashable {
        case everything
        case collections([String: String?])
    }

    /// What a peer may write: everything, or some collections.
    public enum Write: Sendable, Hashable {
        case everything
        case collections(Set<String>)
    }

    /// What a client of the admin interface may do, each role allowing what the ones
    /// before it do: nothing; queries that only read and status; writes; operations
    /// (compaction, subscribing the node, and the rest).
    public enum AdminRole: String, Sendable, Hashable, CaseIterable, Comparable {
        case none
        case read
        case write
        case operate

        public static func < (a: Self, b: Self) -> Bool {
            allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
        }
    }

    public var read: Read
    public var write: Write
    public var admin: AdminRole

    public init(read: Read, write: Write, admin: AdminRole) {
        self.read = read
        self.write = write
        self.admin = admin
    }

    public static let everything = PeerRights(read: .everything, write: .everything, admin: .operate)
    public static let nothing = PeerRights(read: .collections([:]), write: .collections([]), admin: .none)

    /// The collections among `collections` this peer may not write, sorted.
    public func forbiddenWrites(_ collections: some Sequence<String>) -> [String] {
        guard case .collections(let allowed) = write else { return [] }
        return Set(collections.filter { !allowed.contains($0) }).sorted()
    }

    /// `subscriptions` as far as this peer may read: a subscription to a collection it
    /// may not read is left out, and one to a collection it may read only in part gets
    /// the rule's condition too (`... WHERE (its own) AND (the rule's)`).
    ///
    /// In a collection readable in part, a document this node holds no body of (deleted,
    /// evicted) is withheld rather than sent (`withheldUnlessShown`). The peer keeps its
    /// cursor under its own, uncut set: what a change of rules owes it is sent by
    /// `SessionStateMachine.Configuration.resendFromStart`.
    public func cut(_ subscriptions: SubscriptionSet) -> SubscriptionSet {
        guard case .collections(let readable) = read else { return subscriptions }
        var cut = SubscriptionSet()
        for entry in subscriptions.entries {
            let collection = entry.statement.collection
            guard let condition = readable[collection] else { continue }
            let query = condition.map { Self.restrict(entry.query, collection: collection, to: $0) } ?? entry.query
            if condition != nil { cut.withheldUnlessShown.insert(collection) }
            // A condition was parsed when the rules were read, and the peer's query when
            // it subscribed: their conjunction parses. Should it not, the subscription
            // is left out rather than sent whole.
            _ = try? cut.add(query: query, arguments: entry.arguments)
        }
        return cut
    }

    /// `query` (`SELECT * FROM c [WHERE w]`) with `condition` added to its WHERE.
    ///
    /// Each part stands on lines of its own: a `--` comment ending the peer's condition
    /// ends with its line, and cannot swallow the rule's.
    package static func restrict(_ query: String, collection: String, to condition: String) -> String {
        let head = "SELECT * FROM " + Self.quoted(collection) + " WHERE "
        guard let own = Self.whereText(query) else { return head + "(\n" + condition + "\n)" }
        return head + "(\n" + own + "\n) AND (\n" + condition + "\n)"
    }

    /// The text of a SELECT's WHERE condition, from the token after WHERE to the last
    /// token before the end and any final `;` (comments after it left out); nil when it
    /// has none.
    package static func whereText(_ query: String) -> String? {
        guard let tokens = try? Lexer.tokenize(query),
            let keyword = tokens.firstIndex(where: { $0.kind == .keyword(.where) })
        else { return nil }
        let condition = tokens[(keyword + 1)...].filter { $0.kind != .end }
        let last = condition.lastIndex { $0.kind != .symbol(.semicolon) }
        guard let first = condition.first, let last else { return nil }
        let characters = Array(query)
        let end = condition[last].position.offset + condition[last].text.count
        guard first.position.offset < end, end <= characters.count else { return nil }
        return String(characters[first.position.offset..<end])
    }

    /// A collection name as DQL writes any name: in backticks, a backtick doubled.
    package static func quoted(_ name: String) -> String {
        "`" + name.split(separator: "`", omittingEmptySubsequences: false).joined(separator: "``") + "`"
    }
}

extension PeerRights.AdminRole {
    /// The role an admin request needs. An `exec` needs only `.read`: under that role
    /// it runs read-only (`restricting`), so its writes are refused as a read-only
    /// transaction refuses them; `ALTER SYSTEM` needs `.operate` (the node checks it,
    /// as it parses the statements).
    package static func needed(for request: AdminRequest) -> Self {
        switch request {
        case .status, .observe, .page, .attachmentGet, .commit, .rollback, .exec: .read
        case .begin(_, let readOnly): readOnly ? .read : .write
        case .attachmentPut: .write
        case .subscribe, .unsubscribe, .compact: .operate
        }
    }

    /// `request` as a client of this role may run it: under `.read`, an `exec` runs read-only.
    package func restricting(_ request: AdminRequest) -> AdminRequest {
        guard self == .read, case .exec(let statements, let arguments, let hint, _) = request else { return request }
        return .exec(statements: statements, argumentsJSON: arguments, hint: hint, readOnly: true)
    }

    /// Why a client of this role may not make `request`; nil when it may.
    package func refusal(of request: AdminRequest) -> String? {
        let needed = Self.needed(for: request)
        guard self < needed else { return nil }
        return "this client's certificate gives it the admin role '\(rawValue)' on this node (its permissions file), and this request needs '\(needed.rawValue)'"
    }
}

import ShoalCRDT
import ShoalStorage
@testable import ShoalSync
import Testing

/// Who may do what, by certificate name: the matching of names, a subscription cut
/// down to what a peer may read, the collections it may not write, the admin roles.
@Suite struct AccessRulesTests {
    @Test(arguments: [
        ("till-1", "till-*", true), ("till-1", "till-?", true), ("till-10", "till-?", false), ("till-", "till-*", true),
        ("hub", "*", true), ("", "*", true), ("", "?", false), ("kitchen", "till-*", false), ("tillx", "till", false),
        ("till", "tillx", false), ("a-b-c", "a*c", true), ("a-b-d", "a*c", false), ("abcabd", "*abd", true),
        ("é", "?", true), ("e\u{301}", "é", false), ("back office", "back*office", true), ("TILL-1", "till-*", false),
    ])
    func aNameMatchesAPatternOfStarsAndQuestionMarks(name: String, pattern: String, matches: Bool) {
        #expect(AccessRules.matches(name, pattern) == matches)
    }

    static let till = PeerRights(
        read: .collections(["menu": nil, "orders": "store = 'north'"]), write: .collections(["orders"]), admin: .read)
    static let rules = AccessRules(rules: [
        .init(pattern: "till-*", rights: till),
        .init(pattern: "*", rights: PeerRights(read: .collections(["menu": nil]), write: .collections([]), admin: .none)),
    ])

    @Test func theFirstRuleThatMatchesGivesTheRightsAndNoRuleGivesNone() {
        #expect(Self.rules.rights(of: "till-3") == Self.till)
        #expect(Self.rules.rights(of: "kitchen").read == .collections(["menu": nil]))
        #expect(Self.rules.rights(of: nil) == .nothing, "with rules, a peer with no certificate may do nothing")
        #expect(AccessRules(rules: [.init(pattern: "hub", rights: .everything)]).rights(of: "till-1") == .nothing)
        #expect(AccessRules.none.rights(of: nil) == .everything, "no rules: as before, everything")
    }

    static func set(_ queries: String...) throws -> SubscriptionSet {
        var set = SubscriptionSet()
        for query in queries { try set.add(query: query) }
        return set
    }

    static func order(_ store: String, total: Int) -> Value {
        ["_id": .string("\(store)-\(total)"), "store": .string(store), "total": .int(Int64(total))]
    }

    /// A subscription to a collection the peer may not read goes; one to a collection
    /// it may read in part gets the rule's condition beside its own.
    @Test func aSubscriptionIsCutDownToWhatThePeerMayRead() throws {
        let asked = try Self.set("SELECT * FROM menu", "SELECT * FROM orders WHERE total > 5", "SELECT * FROM staff")
        let cut = Self.till.cut(asked)
        #expect(cut.collections == ["menu", "orders"])
        #expect(cut.takesWholeCollection("menu"))
        #expect(cut.matches(collection: "orders", document: Self.order("north", total: 10)))
        #expect(!cut.matches(collection: "orders", document: Self.order("south", total: 10)), "the rule's condition")
        #expect(!cut.matches(collection: "orders", document: Self.order("north", total: 1)), "the peer's own condition")
        #expect(cut.key != asked.key, "a set cut down is another set, with a cursor of its own")
        #expect(PeerRights.everything.cut(asked) == asked)
        #expect(PeerRights.nothing.cut(asked).isEmpty)
        // A whole-collection subscription to a collection readable in part gets the condition alone.
        let whole = Self.till.cut(try Self.set("SELECT * FROM orders"))
        #expect(whole.matches(collection: "orders", document: Self.order("north", total: 1)))
        #expect(!whole.matches(collection: "orders", document: Self.order("south", total: 1)))
    }

    /// A peer's condition that ends in a `--` comment cannot comment out the rule's.
    @Test func aCommentEndingThePeersConditionDoesNotSwallowTheRules() throws {
        let cut = Self.till.cut(try Self.set("SELECT * FROM orders WHERE total > 5 -- every store, please"))
        #expect(cut.entries.count == 1)
        #expect(!cut.matches(collection: "orders", document: Self.order("south", total: 10)))
        #expect(cut.matches(collection: "orders", document: Self.order("north", total: 10)))
    }

    /// Where a rule lets a peer read a collection in part, a document this node holds no
    /// body of (deleted, evicted) cannot be shown to match, and is withheld: elsewhere it
    /// is sent, as it always was.
    @Test func aDocumentWithNoBodyIsWithheldWhereARuleReadsInPart() throws {
        let cut = Self.till.cut(try Self.set("SELECT * FROM menu", "SELECT * FROM orders"))
        #expect(cut.withheldUnlessShown == ["orders"])
        var planner = PiecePlanner(subscriptions: cut, excluded: nil)
        let deleted = DocumentRef(collection: "orders", id: "\"south-1\""), shown = DocumentRef(collection: "orders", id: "\"n\"")
        planner.judge(deleted, body: nil)
        planner.judge(shown, body: #"{"_id":"n","store":"north"}"#)
        #expect(!planner.wants(deleted) && planner.wants(shown))
        #expect(planner.wants(DocumentRef(collection: "menu", id: "\"gone\"")), "a whole collection: sent whatever its body")
    }

    /// The peer's condition is taken token by token: a final `;` and a comment after it
    /// do not break the cut query, which would leave the subscription out.
    @Test func aFinalSemicolonAndCommentAreLeftOutOfThePeersCondition() throws {
        #expect(PeerRights.whereText("SELECT * FROM orders WHERE total > 5; -- note") == "total > 5")
        #expect(PeerRights.whereText("SELECT * FROM orders WHERE name = 'a WHERE b' ;") == "name = 'a WHERE b'")
        #expect(PeerRights.whereText("SELECT * FROM `where` WHERE `é` = 'ü'") == "`é` = 'ü'")
        #expect(PeerRights.whereText("SELECT * FROM orders") == nil)
        let cut = Self.till.cut(try Self.set("SELECT * FROM orders WHERE total > 5; -- note"))
        #expect(cut.entries.count == 1 && cut.matches(collection: "orders", document: Self.order("north", total: 10)))
    }

    @Test func theCollectionsAPeerMayNotWriteAreNamed() {
        #expect(Self.till.forbiddenWrites(["orders", "staff", "menu", "staff"]) == ["menu", "staff"])
        #expect(Self.till.forbiddenWrites(["orders"]).isEmpty)
        #expect(PeerRights.everything.forbiddenWrites(["anything"]).isEmpty)
    }

    @Test func eachAdminRoleAllowsWhatTheOnesBeforeItDo() {
        let read = PeerRights.AdminRole.read
        #expect(read.refusal(of: .status(digests: false)) == nil)
        #expect(read.refusal(of: .begin(hint: nil, readOnly: true)) == nil)
        #expect(read.refusal(of: .begin(hint: nil, readOnly: false))?.contains("needs 'write'") == true)
        #expect(read.refusal(of: .compact(vacuum: false))?.contains("needs 'operate'") == true)
        #expect(PeerRights.AdminRole.write.refusal(of: .subscribe(query: "SELECT * FROM a", argumentsJSON: "")) != nil)
        #expect(PeerRights.AdminRole.operate.refusal(of: .compact(vacuum: true)) == nil)
        #expect(PeerRights.AdminRole.none.refusal(of: .status(digests: false))?.contains("'none'") == true)
        // Under `read`, an exec runs read-only: its writes are refused as a read-only transaction's.
        let exec = AdminRequest.exec(statements: "INSERT INTO a DOCUMENTS ({'_id': 1})", argumentsJSON: "", hint: nil, readOnly: false)
        #expect(read.restricting(exec) == .exec(statements: "INSERT INTO a DOCUMENTS ({'_id': 1})", argumentsJSON: "", hint: nil, readOnly: true))
        #expect(PeerRights.AdminRole.write.restricting(exec) == exec)
    }
}

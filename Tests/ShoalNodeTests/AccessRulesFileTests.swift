@testable import ShoalNode
import ShoalStorage
import ShoalSync
import Testing

/// The permissions file: rules read in order, and every mistake named with the file,
/// the rule and the key.
@Suite struct AccessRulesFileTests {
    @Test func aFileOfRulesReadsInOrder() throws {
        let rules = try AccessRulesFile.parse(
            """
            # tills read the menu and their store's orders, and write orders
            [[peer]]
            name = "till-*"
            read = ["menu", "orders"]
            where = { orders = "store = 'north'" }
            write = ["orders"]
            admin = "read"

            [[peer]]
            name = "hub"
            read = ["*"]
            write = ["*"]
            admin = "operate"

            [[peer]]
            name = "kitchen-?"
            read = ["orders"]
            """, file: "rules.toml")
        #expect(rules.rules.map(\.pattern) == ["till-*", "hub", "kitchen-?"])
        #expect(
            rules.rules[0].rights
                == PeerRights(read: .collections(["menu": nil, "orders": "store = 'north'"]), write: .collections(["orders"]), admin: .read))
        #expect(rules.rules[1].rights == .everything)
        #expect(rules.rules[2].rights == PeerRights(read: .collections(["orders": nil]), write: .collections([]), admin: .none))
        #expect(try AccessRulesFile.parse("", file: "empty.toml") == .none)
    }

    @Test(arguments: [
        ("[[peer]]\nname = \"a\"\nreed = [\"x\"]", "rules.toml: peer 1: unknown key 'reed'"),
        ("mesh = \"x\"", "rules.toml: unknown key 'mesh'"),
        ("[[peer]]\nread = [\"x\"]", "rules.toml: peer 1: 'name' must be given"),
        ("[[peer]]\nname = \"a\"\nread = \"x\"", "rules.toml: peer 1 ('a'): 'read' must be an array"),
        ("[[peer]]\nname = \"a\"\nread = [\"x\"]\nwhere = { y = \"a = 1\" }", "'where' has a condition on y, which 'read' does not name"),
        ("[[peer]]\nname = \"a\"\nread = [\"x\"]\nwhere = { x = \"a = :b\" }", "the condition on x takes an argument"),
        ("[[peer]]\nname = \"a\"\nread = [\"x\"]\nwhere = { x = \"a = \" }", "the condition on x is not a DQL condition"),
        ("[[peer]]\nname = \"a\"\nread = [\"x\"]\nwhere = { x = \"a = 1) OR (1 = 1\" }", "the condition on x is not a DQL condition"),
        ("[[peer]]\nname = \"a\"\nread = [\"*\"]\nwhere = { x = \"a = 1\" }", "named in 'read', not \"*\""),
        ("[[peer]]\nname = \"a\"\nadmin = \"root\"", "'admin' must be one of none, read, write, operate"),
        ("[[peer]]\nname = \"a\"\nwrite = [\"\"]", "'write' must be an array of collection names, each a non-empty string"),
        ("peer = 3", "'peer' must be an array of tables"),
        ("[[peer]\nname = \"a\"", "rules.toml:1:"),
    ])
    func aMistakeIsNamedWithTheFileTheRuleAndTheKey(text: String, message: String) {
        #expect {
            _ = try AccessRulesFile.parse(text, file: "rules.toml")
        } throws: { error in
            guard let error = error as? ShoalError else { return false }
            return error.code == .invalidConfiguration && error.message.contains(message)
        }
    }

    @Test func aFileThatIsMissingSaysSo() {
        #expect {
            _ = try AccessRulesFile.load("/nonexistent/rules.toml")
        } throws: { ($0 as? ShoalError)?.message.contains("there is no such file") == true }
    }
}

import Foundation
import Shoal
import ShoalNode
import ShoalTesting
import Testing

extension ProcessSuites {
    /// Permissions between real `shoal` processes on TLS links (docs/PERMISSIONS.md):
    /// a hub whose rules let tills read the menu and write orders, and a read-only client.
    @Suite(.serialized) struct ProcessPermissionsTests {
        static let rules = """
            [[peer]]
            name = "till-*"
            read = ["menu"]
            write = ["orders"]

            [[peer]]
            name = "reader"
            read = ["*"]
            admin = "read"

            [[peer]]
            name = "cli"
            read = ["*"]
            write = ["*"]
            admin = "operate"
            """

        static func count(_ node: NodeProcess, _ query: String) throws -> Int {
            try ProcessMeshTests.documents(node, query).count
        }

        static func node(_ name: String, _ pki: MeshPKI, _ dir: String, cli: TLSFiles, _ extra: [String]) throws -> NodeProcess {
            let files = try pki.issue(name)
            let node = try NodeProcess(
                name: name, dataDirectory: dir + "/\(name)-data",
                extra: [
                    "--subscribe", "SELECT * FROM menu", "--subscribe", "SELECT * FROM orders", "--subscribe", "SELECT * FROM staff",
                ] + files.arguments + extra)
            node.clientArguments = cli.arguments
            return node
        }

        /// A till may read the menu only: it never gets an order, nor does a till behind
        /// it. It may write orders only: its transaction touching staff is refused whole
        /// by the hub, its order alone is applied. A client with the read role reads and
        /// cannot write.
        @Test func aHubHoldsEachPeerToWhatItsRulesAllow() throws {
            let dir = TemporaryDirectory(prefix: "shoal-perm")
            defer { dir.remove() }
            let pki = try MeshPKI(in: dir.path)
            let cli = try pki.issue("cli")
            try Self.rules.write(toFile: dir.path + "/permissions.toml", atomically: true, encoding: .utf8)
            let hub = try Self.node("hub", pki, dir.path, cli: cli, ["--permissions", dir.path + "/permissions.toml"])
            #expect(try hub.exec("INSERT INTO menu DOCUMENTS ({'_id': 'soup'})").status == 0)
            #expect(try hub.exec("INSERT INTO orders DOCUMENTS ({'_id': 'o1', 'card': 'secret-card-number'})").status == 0)
            let till = try Self.node("till-1", pki, dir.path, cli: cli, ["--peer", hub.address])
            let far = try Self.node("till-2", pki, dir.path, cli: cli, ["--peer", till.address])

            #expect(try eventually(30) { try Self.count(far, "SELECT * FROM menu") == 1 }, "\(far.log())")
            #expect(try hub.exec("INSERT INTO orders DOCUMENTS ({'_id': 'o2', 'card': 'secret-card-number'})").status == 0)
            #expect(try hub.exec("INSERT INTO menu DOCUMENTS ({'_id': 'bread'})").status == 0)
            #expect(try eventually(30) { try Self.count(far, "SELECT * FROM menu") == 2 }, "\(far.log())")
            for node in [till, far] {
                #expect(try Self.count(node, "SELECT * FROM orders") == 0, "\(node.name) holds an order")
            }

            // One transaction writing an order and staff, then an order alone.
            #expect(
                try till.exec("INSERT INTO orders DOCUMENTS ({'_id': 'mixed'}); INSERT INTO staff DOCUMENTS ({'_id': 'me', 'pay': 1000000})")
                    .status == 0)
            #expect(try till.exec("INSERT INTO orders DOCUMENTS ({'_id': 'plain'})").status == 0)
            #expect(try eventually(30) { try Self.count(hub, "SELECT * FROM orders WHERE _id = 'plain'") == 1 }, "\(hub.log())")
            #expect(try Self.count(hub, "SELECT * FROM orders WHERE _id = 'mixed'") == 0, "never applied in part")
            #expect(try Self.count(hub, "SELECT * FROM staff") == 0)
            #expect(hub.log().contains("may not write staff on this node"), "\(hub.log())")
            // The till is told: its log, and its status for the hub (PERMISSION_DENIED).
            #expect(eventually(20) { till.log().contains("peer hub refused this node's piece of transaction") }, "\(till.log())")
            let told = try #require(try ProcessMeshTests.peers(till).first { $0["address"] as? String == hub.address })
            #expect((told["lastError"] as? String)?.hasSuffix("(PERMISSION_DENIED)") == true, "\(told)")

            // The read-only client.
            let reader = try pki.issue("reader")
            let read = try ShoalBinary.run(["exec", "--node", hub.address, "--json"] + reader.arguments + ["SELECT * FROM menu"])
            #expect(read.status == 0, "\(read.stderr)")
            let write = try ShoalBinary.run(
                ["exec", "--node", hub.address] + reader.arguments + ["INSERT INTO menu DOCUMENTS ({'_id': 'forged'})"])
            #expect(write.status != 0 && write.stderr.contains("admin role 'read'"), "\(write.stderr)")
            #expect(write.stderr.contains("INSERT on menu needs 'write'"), "\(write.stderr)")
            #expect(try Self.count(hub, "SELECT * FROM menu WHERE _id = 'forged'") == 0)

            // A malformed rules file sent with SIGHUP is refused, naming its line, and the
            // rules in force stay: the hub keeps serving (the C++ reader Shoal used
            // aborted the process on this text).
            try "[[peer]]\nname = \"till-*\"\n[[= [\"orderme = \"ar\n".write(
                toFile: dir.path + "/permissions.toml", atomically: true, encoding: .utf8)
            hub.signal(SIGHUP)
            #expect(eventually(15) { hub.log().contains("permissions.toml:3:3: expected a key") }, "\(hub.log())")
            #expect(try hub.exec("INSERT INTO menu DOCUMENTS ({'_id': 'after'})").status == 0)
            #expect(try eventually(30) { try Self.count(far, "SELECT * FROM menu WHERE _id = 'after'") == 1 }, "\(far.log())")
            #expect(try Self.count(till, "SELECT * FROM orders") == 2, "the till's own orders only")
        }
    }
}

import ArgumentParser
import ShoalStorage
import Foundation
import ShoalCRDT
import ShoalNode
import ShoalSync

struct MeshCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mesh",
        abstract: "Show the whole mesh as far as it reports itself: this node, its peers, their peers, and so on.",
        discussion: """
            Starting from --node, asks each node for its status and goes on to the peers \
            it reports (at the address each can be reached at), until no new node \
            appears. Every node must accept the same --mesh-key-file. A peer that cannot \
            be asked is listed as unreachable, with its neighbours' view of it.
            """
    )

    @OptionGroup var client: ClientOptions

    @Flag(name: .long, help: "Print one JSON object: nodes (each with its peers) and unreachable addresses.")
    var json = false

    @Option(name: .long, help: "Ask at most this many nodes.")
    var limit: Int = 100

    struct Seen {
        var status: NodeStatus
        var address: String
    }

    func run() async throws {
        let first: AdminClient
        do {
            first = try client.client()
        } catch let error as ShoalError {
            throw fail(error.message)
        }
        var seen: [SiteID: Seen] = [:]
        var order: [SiteID] = []
        var unreachable: [String: String] = [:]
        var queue = [first.node.description]
        var asked = Set<String>()
        while let address = queue.first, order.count < limit {
            queue.removeFirst()
            guard asked.insert(address).inserted else { continue }
            let status: NodeStatus
            do {
                var c = first
                c.node = try HostAndPort(parsing: address)
                c.timeout = .seconds(min(5, Int(first.timeout.components.seconds)))
                status = try await c.status()
            } catch {
                if address == first.node.description { throw fail(error.message) }
                unreachable[address] = error.message
                continue
            }
            guard seen[status.siteID] == nil else { continue }
            seen[status.siteID] = Seen(status: status, address: address)
            order.append(status.siteID)
            for peer in status.peers where peer.state == "connected" {
                guard let site = peer.siteID, seen[site] == nil, let next = peer.listenAddress else { continue }
                queue.append(next)
            }
        }
        // Addresses that turned out to be nodes already seen are not unreachable.
        let nodes = order.compactMap { seen[$0] }
        if json {
            print(Self.json(nodes, unreachable: unreachable).canonicalJSON)
        } else {
            print(Self.table(nodes, unreachable: unreachable, names: seen.mapValues(\.status.name)))
        }
    }

    static func json(_ nodes: [Seen], unreachable: [String: String]) -> Value {
        .object([
            "nodes": .array(
                nodes.map { node in
                    .object([
                        "siteID": .string(node.status.siteID.description), "name": .string(node.status.name),
                        "address": .string(node.address), "mesh": .string(node.status.meshName),
                        "peers": .array(
                            node.status.peers.filter { $0.siteID != nil }.map { p in
                                .object([
                                    "siteID": .string(p.siteID!.description), "name": .string(p.name), "state": .string(p.state),
                                    "discovered": .bool(p.discovered), "rttMillis": p.rttMillis.map(Value.double) ?? .null,
                                    "lagDeltas": p.lagDeltas.map { .int(Int64($0)) } ?? .null,
                                ])
                            }),
                    ])
                }),
            "unreachable": .object(unreachable.mapValues(Value.string)),
        ])
    }

    static func table(_ nodes: [Seen], unreachable: [String: String], names: [SiteID: String]) -> String {
        let links = Set(nodes.flatMap { node in
            node.status.peers.compactMap { p -> String? in
                guard p.state == "connected", let site = p.siteID else { return nil }
                return [node.status.siteID, site].sorted().map(\.description).joined(separator: "-")
            }
        })
        var out = "Mesh \(nodes.first?.status.meshName ?? "?"): \(nodes.count) node(s), \(links.count) link(s)\n\n"
        out += StatusCommand.render(
            ["NODE", "SITE", "ADDRESS", "PEERS (state, how found, lag)"],
            nodes.map { node in
                let peers = node.status.peers.filter { $0.siteID != nil }.map { p in
                    let name = p.name.isEmpty ? names[p.siteID!] ?? p.siteID!.description : p.name
                    let found = p.discovered ? "discovery" : p.direction == "outbound" ? "static" : "inbound"
                    return "\(name) (\(p.state), \(found)\(p.lagDeltas.map { ", lag \($0)" } ?? ""))"
                }
                return [node.status.name, node.status.siteID.description, node.address, peers.isEmpty ? "-" : peers.joined(separator: "; ")]
            })
        if !unreachable.isEmpty {
            out += "\nReported but not reachable from here\n"
            out += StatusCommand.render(["ADDRESS", "WHY"], unreachable.sorted { $0.key < $1.key }.map { [$0.key, $0.value] })
        }
        return out
    }
}

import ArgumentParser
import ShoalCRDT
import ShoalNode
import ShoalWire

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a node: identity, peers, subscriptions, collections."
    )

    @OptionGroup var client: ClientOptions

    @Flag(name: .long, help: "Print one JSON object, for scripts.")
    var json = false

    func run() async throws {
        let status: Shoal_V1_StatusResponse
        do {
            status = try await client.client().status()
        } catch let error as NodeError {
            throw fail(error.message)
        }
        if json {
            print(Self.json(status).canonicalJSON)
        } else {
            print(Self.table(status))
        }
    }

    static func site(_ raw: UInt64) -> Value { raw == 0 ? .null : .string(SiteID(raw).description) }

    static func json(_ s: Shoal_V1_StatusResponse) -> Value {
        .object([
            "siteID": site(s.siteID),
            "name": .string(s.name),
            "listen": .string(s.listen),
            "mesh": .string(s.meshName),
            "changeLogSequence": .int(Int64(s.changeLogSequence)),
            "warnings": .array(s.warnings.map(Value.string)),
            "peers": .array(
                s.peers.map { p in
                    .object([
                        "siteID": site(p.siteID), "name": .string(p.name), "address": .string(p.address),
                        "state": .string(p.state), "direction": .string(p.direction),
                        "rttMillis": p.rttMillis > 0 ? .double((p.rttMillis * 1000).rounded() / 1000) : .null,
                        "bytesIn": .int(Int64(p.bytesIn)), "bytesOut": .int(Int64(p.bytesOut)),
                    ])
                }),
            "subscriptions": .array(
                s.subscriptions.map { .object(["id": .string($0.id), "query": .string($0.query), "origin": .string($0.origin)]) }),
            "transactions": transactions(s.transactions),
            "collections": .object(
                Dictionary(uniqueKeysWithValues: s.collections.map { ($0.name, Value.object(["documents": .int(Int64($0.documents))])) })),
        ])
    }

    static func pending(_ p: Shoal_V1_PendingTransaction) -> Value {
        .object([
            "id": .string(p.id), "origin": site(p.originSite), "haveDocuments": .int(Int64(p.haveDocuments)),
            "needDocuments": .int(Int64(p.needDocuments)), "ageSeconds": .double((p.ageSeconds * 10).rounded() / 10),
            "askedPeers": .array(p.askedPeers.map(Value.string)), "reason": .string(p.reason),
            "missingCollections": .array(p.missingCollections.map(Value.string)),
        ])
    }

    static func transactions(_ t: Shoal_V1_TransactionStatus) -> Value {
        .object([
            "committedLocal": .int(Int64(t.committedLocal)),
            "appliedRemote": .int(Int64(t.appliedRemote)),
            "waitingForCoverage": .int(Int64(t.waitingForCoverage)),
            "appliedPartial": .int(Int64(t.appliedPartial)),
            "completedLater": .int(Int64(t.completedLater)),
            "waiting": .array(t.waiting.map(pending)),
            "partial": .array(t.partial.map(pending)),
            "bufferedBytes": .int(Int64(t.bufferedBytes)),
            "bufferedBytesLimit": .int(Int64(t.bufferedBytesLimit)),
            "bufferedTransactionsLimit": .int(Int64(t.bufferedTransactionsLimit)),
            "overflows": .int(Int64(t.overflows)),
        ])
    }

    static func table(_ s: Shoal_V1_StatusResponse) -> String {
        var out = "Node \(s.name)  site \(SiteID(s.siteID))  listening on \(s.listen)  mesh \(s.meshName)  log at \(s.changeLogSequence)\n"
        for warning in s.warnings { out += "\nWARNING: \(warning)\n" }
        out += "\nPeers\n"
        out += render(
            ["SITE", "NAME", "ADDRESS", "DIRECTION", "STATE", "RTT ms", "IN", "OUT"],
            s.peers.map { p in
                [p.siteID == 0 ? "-" : SiteID(p.siteID).description, p.name.isEmpty ? "-" : p.name, p.address, p.direction,
                 p.state, p.rttMillis > 0 ? String(format2(p.rttMillis)) : "-", bytes(p.bytesIn), bytes(p.bytesOut)]
            })
        out += "\nSubscriptions\n"
        out += render(["ID", "ORIGIN", "QUERY"], s.subscriptions.map { [$0.id, $0.origin, $0.query] })
        let t = s.transactions
        out += "\nTransactions\n"
        out += "  committed here \(t.committedLocal), applied from peers \(t.appliedRemote), waiting for coverage \(t.waitingForCoverage), applied in part \(t.appliedPartial), completed later \(t.completedLater)\n"
        if t.overflows > 0 {
            out += "  the buffer went over its limits \(t.overflows) time(s) (\(bytes(t.bufferedBytesLimit)), \(t.bufferedTransactionsLimit) transactions): see the log\n"
        }
        let held = t.waiting.map { ("waiting", $0) } + t.partial.map { ("partial", $0) }
        if !held.isEmpty {
            out += render(
                ["ID", "STATE", "HAVE/NEED", "AGE s", "WHY", "MISSING", "ASKED"],
                held.map { state, p in
                    [p.id, state, "\(p.haveDocuments)/\(p.needDocuments)", String(Int(p.ageSeconds)), p.reason,
                     p.missingCollections.joined(separator: ","), p.askedPeers.isEmpty ? "-" : p.askedPeers.joined(separator: ",")]
                })
        }
        out += "\nCollections\n"
        out += render(["NAME", "DOCUMENTS"], s.collections.map { [$0.name, String($0.documents)] })
        return out
    }

    static func format2(_ v: Double) -> String {
        let hundredths = Int((v * 100).rounded())
        let frac = hundredths % 100
        return "\(hundredths / 100).\(frac < 10 ? "0" : "")\(frac)"
    }

    static func bytes(_ n: UInt64) -> String {
        n < 10_000 ? "\(n) B" : n < 10_000_000 ? "\(n / 1024) KiB" : "\(n / (1024 * 1024)) MiB"
    }

    static func render(_ header: [String], _ rows: [[String]]) -> String {
        if rows.isEmpty { return "  (none)\n" }
        let all = [header] + rows
        let widths = header.indices.map { i in all.map { $0[i].count }.max() ?? 0 }
        return all.map { row in
            "  " + row.enumerated().map { i, cell in
                i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count)
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }
}

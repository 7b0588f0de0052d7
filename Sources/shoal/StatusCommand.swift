import ArgumentParser
import ShoalStorage
import Foundation
import ShoalCRDT
import ShoalNode
import ShoalShell
import ShoalSync

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a node: identity, peers, subscriptions, collections."
    )

    @OptionGroup var client: ClientOptions

    @Flag(name: .long, help: "Print one JSON object, for scripts (with a digest of each collection).")
    var json = false

    @Option(name: .long, help: "Refresh every SECONDS in place until interrupted.")
    var watch: Double?

    func validate() throws {
        if let watch, !(watch > 0) { throw ValidationError("--watch takes a positive number of seconds") }
    }

    func run() async throws {
        let client = try self.client.clientOrFail()
        repeat {
            let status: NodeStatus
            do {
                status = try await client.status(digests: json)
            } catch {
                throw fail(error.message)
            }
            let text = json ? Self.json(status).canonicalJSON : Self.table(status)
            if watch != nil {
                // Home the cursor and clear the screen, then draw: a refresh in place.
                print("\u{1B}[H\u{1B}[2J" + text)
            } else {
                print(text)
            }
            fflush(nil)
            if let watch { try await Task.sleep(for: .milliseconds(Int(watch * 1000))) }
        } while watch != nil
    }

    static func site(_ site: SiteID?) -> Value { site.map { .string($0.description) } ?? .null }

    static func json(_ s: NodeStatus) -> Value {
        .object([
            "siteID": site(s.siteID),
            "name": .string(s.name),
            "listen": .string(s.listen),
            "mesh": .string(s.meshName),
            "changeLogSequence": .int(Int64(s.changeLogSequence)),
            "warnings": .array(s.warnings.map(Value.string)),
            "links": .string(s.linkSecurity),
            "tlsIdentity": s.tlsIdentity.map(Value.string) ?? .null,
            "received": received(s),
            "peers": .array(
                s.peers.map { p in
                    .object([
                        "siteID": site(p.siteID), "name": .string(p.name), "address": .string(p.address),
                        "state": .string(p.state), "direction": .string(p.direction),
                        "rttMillis": p.rttMillis.map { .double(($0 * 1000).rounded() / 1000) } ?? .null,
                        "bytesIn": .int(Int64(p.bytesIn)), "bytesOut": .int(Int64(p.bytesOut)),
                        "discovered": .bool(p.discovered),
                        "deltasIn": .int(Int64(p.deltasIn)), "deltasOut": .int(Int64(p.deltasOut)),
                        "deltasDuplicate": .int(Int64(p.deltasDuplicate)),
                        "lagDeltas": p.lagDeltas.map { .int(Int64($0)) } ?? .null,
                        "lastSeenMillisAgo": p.lastSeenMillisAgo.map { .int($0) } ?? .null,
                        "lastError": p.lastError.map(Value.string) ?? .null,
                        "tlsIdentity": p.tlsIdentity.map(Value.string) ?? .null,
                        "routes": .object([
                            "given": p.routesGiven.map(Value.string) ?? .null,
                            "asked": p.routesAsked.map(Value.string) ?? .null,
                            "offersReceived": .int(Int64(p.offersReceived)), "grafts": .int(Int64(p.grafts)),
                        ]),
                    ])
                }),
            "subscriptions": .array(
                s.subscriptions.map { .object(["id": .string($0.id), "query": .string($0.query), "origin": .string($0.origin)]) }),
            "transactions": transactions(s.transactions),
            "storage": s.storage.map(storage) ?? .null,
            "collections": .object(
                Dictionary(
                    uniqueKeysWithValues: s.collections.map { c in
                        (c.name, Value.object(["documents": .int(Int64(c.documents)), "digest": c.digest.map(Value.string) ?? .null]))
                    })),
        ])
    }

    static func received(_ s: NodeStatus) -> Value {
        let (total, duplicate) = s.deltasReceived
        return .object([
            "deltas": .int(Int64(total)), "duplicate": .int(Int64(duplicate)),
            "amplification": s.amplification.map { .double(($0 * 1000).rounded() / 1000) } ?? .null,
        ])
    }

    static func pending(_ p: NodeStatus.Pending) -> Value {
        .object([
            "id": .string(p.id), "origin": site(p.origin), "haveDocuments": .int(Int64(p.haveDocuments)),
            "needDocuments": .int(Int64(p.needDocuments)), "ageSeconds": .double((p.ageSeconds * 10).rounded() / 10),
            "askedPeers": .array(p.askedPeers.map(Value.string)), "reason": .string(p.reason),
            "missingCollections": .array(p.missingCollections.map(Value.string)),
        ])
    }

    /// Unix ms as an ISO 8601 time.
    static func time(_ millis: UInt64) -> String {
        Date(timeIntervalSince1970: Double(millis) / 1000).formatted(.iso8601)
    }

    static func storage(_ s: NodeStatus.Storage) -> Value {
        .object([
            "engine": .string(s.engine),
            "location": .string(s.location),
            "processes": .int(Int64(s.processes)),
            "storeBytes": .int(Int64(s.storeBytes)),
            "changeLogRows": .int(Int64(s.changeLogRows)),
            "compactedThrough": .int(Int64(s.compactedThrough)),
            "compactedAtMillis": s.compactedAtMillis.map { .int(Int64($0)) } ?? .null,
            "documentsForgotten": .int(Int64(s.documentsForgotten)),
            "forgottenThroughMillis": s.forgottenThroughMillis.map { .int(Int64($0)) } ?? .null,
            "freshness": .array(
                s.freshness.sorted { ($0.value, $0.key.rawValue) > ($1.value, $1.key.rawValue) }.map { site, through in
                    .object(["siteID": .string(site.description), "throughMillis": .int(Int64(clamping: through))])
                }),
            "peerPositions": .array(
                s.peerPositions.map { p in
                    .object([
                        "siteID": site(p.siteID), "through": .int(Int64(p.through)),
                        "heardSecondsAgo": .int(Int64(p.heardSecondsAgo)),
                    ])
                }),
        ])
    }

    static func transactions(_ t: NodeStatus.Transactions) -> Value {
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
            "sessions": .array(t.sessions.map(session)),
            "refused": .int(Int64(t.refused)),
            "refusals": .array(
                t.refusals.map { r in
                    .object([
                        "id": .string(r.id), "origin": .string(r.origin.description), "reason": .string(r.reason),
                        "ageSeconds": .double((r.ageSeconds * 10).rounded() / 10), "fromPeers": .array(r.fromPeers.map(Value.string)),
                    ])
                }),
        ])
    }

    /// A transaction an admin session (`shoal shell`) holds open.
    static func session(_ t: SessionTransaction) -> Value {
        .object([
            "id": .string(t.id), "hint": t.hint.map(Value.string) ?? .null, "readOnly": .bool(t.isReadOnly),
            "ageSeconds": .double((t.ageSeconds * 10).rounded() / 10), "client": .string(t.client),
        ])
    }

    static func table(_ s: NodeStatus) -> String {
        var out = "Node \(s.name)  site \(s.siteID)  listening on \(s.listen)  mesh \(s.meshName)  log at \(s.changeLogSequence)\n"
        switch s.linkSecurity {
        case "tls": out += "Links TLS 1.3, this node is \(s.tlsIdentity ?? "?") to its peers\n"
        case "plaintext": out += "Links plaintext: anyone who can see the traffic reads it (shoal run --tls-cert, --tls-key, --tls-ca)\n"
        default: break
        }
        for warning in s.warnings { out += "\nWARNING: \(warning)\n" }
        out += "\nPeers\n"
        out += render(
            ["SITE", "NAME", "CERTIFICATE", "ADDRESS", "FOUND BY", "DIRECTION", "STATE", "RTT ms", "BYTES IN/OUT", "DELTAS IN/OUT", "HELD ALREADY", "LAG", "HEARD"],
            s.peers.map { p in
                [p.siteID?.description ?? "-", p.name.isEmpty ? "-" : p.name, p.tlsIdentity ?? "-", p.address,
                 p.discovered ? "discovery" : p.direction == "outbound" ? "static" : "-", p.direction,
                 p.state, p.rttMillis.map(format2) ?? "-", "\(bytes(p.bytesIn)) / \(bytes(p.bytesOut))",
                 "\(p.deltasIn) / \(p.deltasOut)", "\(p.deltasDuplicate)", p.lagDeltas.map(String.init) ?? "-",
                 p.lastSeenMillisAgo.map { $0 < 1000 ? "\($0) ms ago" : "\($0 / 1000) s ago" } ?? "-"]
            })
        for p in s.peers {
            if let error = p.lastError { out += "  \(p.address): \(error)\n" }
        }
        let routed = s.peers.filter { $0.routesGiven != nil || $0.routesAsked != nil }
        if !routed.isEmpty {
            out += "\nRoutes (eager: sent in full; lazy: offered, asked for when no eager link brings it)\n"
            out += render(
                ["SITE", "NAME", "THIS NODE SENDS", "THIS NODE ASKS", "OFFERS IN", "ASKED"],
                routed.map { p in
                    [p.siteID?.description ?? "-", p.name.isEmpty ? "-" : p.name, p.routesGiven ?? "eager", p.routesAsked ?? "eager",
                     "\(p.offersReceived)", "\(p.grafts)"]
                })
        }
        if let ratio = s.amplification {
            let (total, duplicate) = s.deltasReceived
            out += "  received \(total) deltas, \(duplicate) of them held already: amplification \(format2(ratio))× (received / new)\n"
        }
        out += "\nSubscriptions\n"
        out += render(["ID", "ORIGIN", "QUERY"], s.subscriptions.map { [$0.id, $0.origin, $0.query] })
        let t = s.transactions
        out += "\nTransactions\n"
        out += "  committed here \(t.committedLocal), applied from peers \(t.appliedRemote), waiting for coverage \(t.waitingForCoverage), applied in part \(t.appliedPartial), completed later \(t.completedLater)\n"
        if t.refused > 0 {
            out += "  refused whole \(t.refused) transaction(s) this node cannot hold; the latest:\n"
            for r in t.refusals.suffix(5) { out += "    \(r.id) from \(r.fromPeers.joined(separator: ",")): \(r.reason)\n" }
        }
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
        if !t.sessions.isEmpty {
            out += "  held open by shell sessions:\n"
            out += render(
                ["ID", "HINT", "KIND", "AGE s", "CLIENT"],
                t.sessions.map { [$0.id, $0.hint ?? "-", $0.isReadOnly ? "read-only" : "read-write", String(Int($0.ageSeconds)), $0.client] })
        }
        if let storage = s.storage {
            out += "\nStorage\n"
            if storage.engine == "postgresql" {
                let others = storage.processes - 1
                out += "  a hub on \(storage.location), with \(others == 1 ? "1 other hub" : "\(others) other hubs") connected to it\n"
            } else if !storage.location.isEmpty {
                out += "  \(storage.engine) at \(storage.location)\n"
            }
            out += "  store \(bytes(storage.storeBytes)), change log \(storage.changeLogRows) rows through \(s.changeLogSequence), "
            out += storage.compactedThrough == 0 ? "never compacted\n" : "compacted through \(storage.compactedThrough)\n"
            if let lowest = storage.peerPositions.first {
                out += "  compaction held at \(lowest.through) by peer \(lowest.siteID) (heard \(lowest.heardSecondsAgo) s ago)\n"
            }
            if let forgotten = storage.forgottenThroughMillis {
                out += "  \(storage.documentsForgotten) deleted documents forgotten, deleted up to \(Self.time(forgotten)); peers less fresh are refused as stale\n"
            }
            if let oldest = storage.freshness.values.min() {
                out += "  caught up with \(storage.freshness.count) other nodes' logs, the least recently through \(Self.time(oldest))\n"
            }
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

    static func render(_ header: [String], _ rows: [[String]]) -> String { TextTable.render(header, rows) }
}

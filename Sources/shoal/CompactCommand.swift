import ArgumentParser
import Foundation
import ShoalCRDT
import ShoalNode
import ShoalSync

struct CompactCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact",
        abstract: "Compact the node's change log now, and optionally VACUUM its database.",
        discussion: """
            A transaction leaves the change log once every register it wrote holds a later \
            write and every peer heard from within the compaction horizon has acknowledged \
            past it; the node also does this every --compaction-interval on its own. With \
            --vacuum, SQLite's VACUUM then gives free pages back to the file system (it \
            rewrites the database and holds writers off while it runs). Progress goes to \
            stderr; the result to stdout (--json for one object). Examples:
              shoal compact
              shoal compact --vacuum --json
            """
    )

    @OptionGroup var client: ClientOptions

    @Flag(name: .long, help: "Run VACUUM afterwards, giving free pages back to the file system.")
    var vacuum = false

    @Flag(name: .long, help: "Print the result as one JSON object.")
    var json = false

    func run() async throws {
        let quiet = json
        let result: CompactionProgress
        do {
            result = try await client.client().compact(vacuum: vacuum) { p in
                guard !p.done, !quiet else { return }
                let share = p.through == 0 ? 100 : Int(min(100, p.scannedThrough * 100 / p.through))
                printError("shoal: compacting: \(share)% of the log through \(p.through) scanned, \(p.rowsRemoved) rows removed")
            }
        } catch {
            throw fail(connectionMessage(error, node: client.node))
        }
        if json {
            print(Self.json(result).canonicalJSON)
        } else {
            var line = "compacted through \(result.through): \(result.rowsRemoved) of \(result.rowsBefore) change-log rows removed (\(result.transactionsRemoved) transactions)"
            if result.registersPurged > 0 { line += "; \(result.registersPurged) registers hidden by tombstones or removals past the tombstone horizon purged" }
            if result.documentsForgotten > 0 { line += "; \(result.documentsForgotten) documents deleted before the tombstone horizon forgotten" }
            if let held = result.heldBy { line += "; held back by peer \(held)" }
            if result.vacuumed { line += "; VACUUM: \(result.storeBytesBefore) → \(result.storeBytesAfter) bytes" }
            print(line)
            if !result.expiredPeers.isEmpty {
                printError("shoal: peers past the compaction horizon, which resync when they return: \(result.expiredPeers.joined(separator: ", "))")
            }
        }
    }

    static func json(_ p: CompactionProgress) -> Value {
        .object([
            "through": .int(Int64(p.through)),
            "rowsBefore": .int(Int64(p.rowsBefore)),
            "rowsRemoved": .int(Int64(p.rowsRemoved)),
            "transactionsRemoved": .int(Int64(p.transactionsRemoved)),
            "heldBy": p.heldBy.map(Value.string) ?? .null,
            "expiredPeers": .array(p.expiredPeers.map(Value.string)),
            "storeBytesBefore": .int(Int64(p.storeBytesBefore)),
            "storeBytesAfter": .int(Int64(p.storeBytesAfter)),
            "vacuumed": .bool(p.vacuumed),
            "registersPurged": .int(Int64(p.registersPurged)),
            "documentsForgotten": .int(Int64(p.documentsForgotten)),
        ])
    }
}

import ArgumentParser
import Foundation
import ShoalTesting

/// Shoal's randomized convergence checker: real `shoal` processes on 127.0.0.1 behind
/// fault-injecting proxies, random operations of every kind with a record of each
/// acknowledged one, random faults, and at the end a check of what every node holds
/// against that record (docs/RELIABILITY.md, "The convergence checker").
///
///     swift build && .build/debug/shoal-check --duration 60
///     .build/debug/shoal-check --seed 42      # replays a run's choices
@main
struct ShoalCheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shoal-check",
        abstract: "Run shoal nodes under random operations and faults, then check that nothing acknowledged was lost.",
        discussion: """
            Prints its seed first; --seed replays the same choices (timing still varies). \
            Exits 1 when a check fails, keeping the nodes' data directories and logs.
            """)

    @Option(name: .long, help: "The seed of every random choice (default: a random one, printed).")
    var seed: UInt64?

    @Option(name: .long, help: "Seconds of operations and faults before the nodes are healed and checked.")
    var duration: Double = 60

    @Option(name: .long, help: "How many nodes (2 to 9).")
    var nodes: Int = 3

    @Option(name: .long, help: "line, star, mesh or random (default: chosen by the seed).")
    var topology: Topology?

    @Option(
        name: .long,
        help: """
            How many of the nodes are hubs on one new PostgreSQL database of the server \
            SHOAL_POSTGRES_URL names (scripts/postgres.sh start DIR prints it), one logical \
            node; every other node, a device, dials each hub (default 0).
            """)
    var hubs: Int = 0

    @Option(name: .long, help: "Mutation kinds, comma-separated (default: all): \(OperationKind.allCases.map(\.rawValue).joined(separator: ", ")).")
    var ops: String?

    @Option(name: .long, help: "Fault kinds, comma-separated, or none (default: all): \(FaultKind.allCases.map(\.rawValue).joined(separator: ", ")).")
    var faults: String?

    @Option(name: .long, help: "Documents per collection.")
    var documents: Int = 6

    @Option(name: .long, help: "Clients sending operations at once.")
    var writers: Int = 2

    @Option(name: .long, help: "Seconds the healed nodes have to agree before the checks run anyway.")
    var settle: Double = 120

    @Option(name: .long, help: "Where the run's directory goes (default: the system's temporary folder).")
    var directory: String?

    @Flag(
        name: .long,
        help: "Leave out the operations and faults that find known bugs not fixed yet (listed in docs/RELIABILITY.md), as CI does.")
    var skipKnown = false

    @Flag(name: .long, help: "Keep the run's directory even when every check passes.")
    var keep = false

    @Option(name: .long, help: "The nodes' --log-level (default: theirs, info); debug logs each Subscribe a session sends and receives.")
    var nodeLogLevel: String?

    @Flag(name: .long, help: "Print the summary as one JSON object (and no line per fault).")
    var json = false

    enum Topology: String, ExpressibleByArgument, CaseIterable, Sendable {
        case line, star, mesh, random
    }

    func validate() throws {
        guard (2...9).contains(nodes) else { throw ValidationError("--nodes must be from 2 to 9") }
        guard (0..<nodes).contains(hubs) else { throw ValidationError("--hubs must be from 0 to one less than --nodes (a device at least)") }
        if hubs > 0 && TemporaryPostgresDatabase.serverURL == nil {
            throw ValidationError("--hubs needs a PostgreSQL server: set SHOAL_POSTGRES_URL (scripts/postgres.sh start DIR starts one and prints it)")
        }
        guard duration > 0 else { throw ValidationError("--duration must be more than 0 seconds") }
        guard (1...60).contains(documents) else { throw ValidationError("--documents must be from 1 to 60") }
        guard (1...8).contains(writers) else { throw ValidationError("--writers must be from 1 to 8") }
        guard !(try operationKinds()).isEmpty else { throw ValidationError("--ops leaves no operation to send") }
        _ = try faultKinds()
    }

    func operationKinds() throws -> [OperationKind] {
        try Self.parse(ops, OperationKind.self, option: "--ops").filter { !skipKnown || $0.knownBug == nil }
    }

    func faultKinds() throws -> [FaultKind] {
        try Self.parse(faults, FaultKind.self, option: "--faults").filter { !skipKnown || $0.knownBug == nil }
    }

    static func parse<K: RawRepresentable & CaseIterable>(_ list: String?, _: K.Type, option: String) throws -> [K]
    where K.RawValue == String {
        guard let list else { return Array(K.allCases) }
        if list == "none" { return [] }
        return try list.split(separator: ",").map { name in
            let name = name.trimmingCharacters(in: .whitespaces)
            guard let kind = K(rawValue: name) else {
                throw ValidationError(
                    "\(option): unknown kind '\(name)'; the kinds are \(K.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return kind
        }
    }

    func run() async throws {
        let seed = seed ?? UInt64.random(in: 1...UInt64.max)
        var arguments = ["--seed", "\(seed)", "--nodes", "\(nodes)", "--duration", "\(duration)", "--documents", "\(documents)", "--writers", "\(writers)"]
        if let topology { arguments += ["--topology", topology.rawValue] }
        if hubs > 0 { arguments += ["--hubs", "\(hubs)"] }
        if let ops { arguments += ["--ops", ops] }
        if let faults { arguments += ["--faults", faults] }
        if skipKnown { arguments.append("--skip-known") }
        if let nodeLogLevel { arguments += ["--node-log-level", nodeLogLevel] }
        // With --json, standard output holds the summary alone (the seed is in it too).
        let say = json ? { FileHandle.standardError.write(Data(($0 + "\n").utf8)) } : emit
        say("shoal-check: seed \(seed) (replay: shoal-check \(arguments.joined(separator: " ")))")
        if skipKnown {
            let left = OperationKind.allCases.compactMap { kind in kind.knownBug.map { "\(kind.rawValue) (\($0))" } }
                + FaultKind.allCases.compactMap { kind in kind.knownBug.map { "\(kind.rawValue) (\($0))" } }
            for line in left { say("shoal-check: left out, a known bug: \(line)") }
        }
        let plan = Plan(
            seed: seed, duration: duration, nodes: nodes, hubs: hubs, topology: topology, operations: try operationKinds(),
            faults: try faultKinds(), documents: documents, writers: writers, settle: settle,
            directory: directory ?? NSTemporaryDirectory(), keep: keep, json: json, nodeLogLevel: nodeLogLevel)
        let passed = try await CheckRun(plan: plan).run()
        if !passed { throw ExitCode(1) }
    }
}

/// What the command line asked for.
struct Plan: Sendable {
    var seed: UInt64
    var duration: Double
    var nodes: Int
    /// Nodes 0 to `hubs - 1` are hubs on one PostgreSQL database, one logical node.
    var hubs: Int
    var topology: ShoalCheckCommand.Topology?
    var operations: [OperationKind]
    var faults: [FaultKind]
    var documents: Int
    var writers: Int
    var settle: Double
    var directory: String
    var keep: Bool
    var json: Bool
    var nodeLogLevel: String?
}

/// Writes a line to standard output at once, also into a file or a pipe (where
/// `print` would hold it in a buffer): a long run shows where it is.
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

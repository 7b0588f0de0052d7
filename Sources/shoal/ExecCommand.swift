import ArgumentParser
import ShoalStorage
import ShoalCRDT
import ShoalNode
import ShoalSync

struct ExecCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "exec",
        abstract: "Run DQL statements on a node, as one transaction.",
        discussion: """
            Several statements separated by ';' run as one transaction; the output is \
            the result of the last one. A transaction that writes holds the node's \
            writer until it commits; one that only reads (or runs with --read-only) \
            reads one snapshot, beside the writer. Example:
              shoal exec "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue'})"
              shoal exec --args '{"c": "blue"}' --json "SELECT * FROM cars WHERE color = :c"
              shoal exec --args @car.json "INSERT INTO cars DOCUMENTS (:car)"
              shoal exec --read-only --hint "nightly report" "SELECT COUNT(*) FROM cars"
            Exit status: 0 done; 1 failed, nothing applied; 3 the outcome is unknown (no \
            answer within the timeout, or a hub that lost its database's answer to the \
            COMMIT): read what it wrote before sending it again.
            """
    )

    /// The exit status of a request whose outcome is unknown: it may or may not have been applied.
    static let outcomeUnknown: Int32 = 3

    @OptionGroup var client: ClientOptions

    @Option(name: .long, help: ArgumentsOption.help)
    var args: String?

    @Flag(name: .long, help: "Print one JSON object: items, mutatedDocumentIDs, transactionID.")
    var json = false

    @Option(name: .long, help: "Text naming the transaction in the node's log, should it stay open long.")
    var hint: String?

    @Flag(name: .long, help: "Run in a read-only transaction: a statement that writes fails and nothing runs.")
    var readOnly = false

    @Argument(help: "One or more DQL statements separated by ';'.")
    var statements: String

    func run() async throws {
        let arguments = try ArgumentsOption.load(args)
        let response: ExecResult
        do {
            response = try await client.client().exec(statements, argumentsJSON: arguments, hint: hint, readOnly: readOnly)
        } catch let error as ShoalError where error.code == .timedOut {
            printError("shoal: \(error.message)")
            throw ExitCode(ExecCommand.outcomeUnknown)
        } catch let error as ShoalError {
            throw fail(error.message)
        }
        if json {
            print(response.json)
            return
        }
        for item in response.itemsJSON { print(item) }
        if let transaction = response.transactionID {
            print("mutated \(response.mutatedDocumentIDs.count) document(s) in transaction \(transaction)")
        } else if response.itemsJSON.isEmpty {
            print("(no documents)")
        }
    }
}

extension ExecResult {
    /// `{"items": [...], "mutatedDocumentIDs": [...], "transactionID": "..." | null}`
    var json: String {
        let transactionJSON = transactionID.map { Value.string($0).canonicalJSON } ?? "null"
        return "{\"items\":[\(itemsJSON.joined(separator: ","))],\"mutatedDocumentIDs\":[\(mutatedDocumentIDs.joined(separator: ","))],\"transactionID\":\(transactionJSON)}"
    }
}

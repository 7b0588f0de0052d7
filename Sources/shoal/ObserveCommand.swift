import ArgumentParser
import ShoalStorage
import Foundation
import ShoalNode
import ShoalSync

struct ObserveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "observe",
        abstract: "Print a query's result now and again after every change, until interrupted.",
        discussion: """
            With --json each state is one line: {"items": [...], "transactionIDs": [...]}, \
            where transactionIDs names the commits that produced it (empty for the first line).
            """
    )

    @OptionGroup var client: ClientOptions

    @Option(name: .long, help: ArgumentsOption.help)
    var args: String?

    @Flag(name: .long, help: "One JSON object per line.")
    var json = false

    @Argument(help: "A SELECT query.")
    var query: String

    func run() async throws {
        let json = json
        let arguments = try ArgumentsOption.load(args)
        do {
            try await client.client().observe(query, argumentsJSON: arguments) { observation in
                if json {
                    let ids = observation.transactionIDs.map { "\"\($0)\"" }.joined(separator: ",")
                    print("{\"items\":[\(observation.itemsJSON.joined(separator: ","))],\"transactionIDs\":[\(ids)]}")
                } else {
                    let cause = observation.transactionIDs.isEmpty ? "now" : observation.transactionIDs.joined(separator: ", ")
                    print("-- \(observation.itemsJSON.count) document(s) (\(cause))")
                    for item in observation.itemsJSON { print(item) }
                }
                fflush(nil)
            }
        } catch let error as ShoalError {
            throw fail(error.message)
        }
    }
}

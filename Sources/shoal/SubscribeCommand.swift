import ArgumentParser
import ShoalStorage
import ShoalCRDT
import ShoalNode
import ShoalSync

struct SubscribeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subscribe",
        abstract: "Add a sync subscription to a running node; it is kept across restarts.",
        discussion: """
            Peers are told at once and send what the query matches, including what they \
            already held. Example:
              shoal subscribe "SELECT * FROM cars WHERE color = :c" --args '{"c": "blue"}'
            """
    )

    @OptionGroup var client: ClientOptions

    @Option(name: .long, help: ArgumentsOption.help)
    var args: String?

    @Flag(name: .long, help: "Print the subscription as JSON: id, query, origin.")
    var json = false

    @Argument(help: "A SELECT * FROM collection [WHERE ...] query.")
    var query: String

    func run() async throws {
        let arguments = try ArgumentsOption.load(args)
        let status: SubscriptionInfo
        do {
            status = try await client.client().subscribe(query, argumentsJSON: arguments)
        } catch let error as ShoalError {
            throw fail(error.message)
        }
        print(json ? subscriptionJSON(status) : "subscribed \(status.id): \(status.query)")
    }
}

struct UnsubscribeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unsubscribe",
        abstract: "Remove a subscription added with `shoal subscribe`, by its ID or its query."
    )

    @OptionGroup var client: ClientOptions

    @Flag(name: .long, help: "Print the removed subscription as JSON: id, query, origin.")
    var json = false

    @Argument(help: "The subscription's ID (from shoal status) or its exact query text.")
    var subscription: String

    func run() async throws {
        let status: SubscriptionInfo
        do {
            status = try await client.client().unsubscribe(subscription)
        } catch let error as ShoalError {
            throw fail(error.message)
        }
        print(json ? subscriptionJSON(status) : "unsubscribed \(status.id): \(status.query)")
    }
}

func subscriptionJSON(_ s: SubscriptionInfo) -> String {
    Value.object(["id": .string(s.id), "query": .string(s.query), "origin": .string(s.origin)]).canonicalJSON
}

// An app that embeds Shoal, as an app developer would write one: it imports only
// `Shoal`. CI builds and runs it (`.build/debug/shoal-example`); it exits non-zero,
// saying which step failed, if anything an app relies on stops working.
//
// Two nodes in one process sync over TCP on 127.0.0.1: documents written as Codable
// structs and read back as them, a live query, subscriptions registered and cancelled,
// sync stopped and started, a transaction rolled back by the app's own error, and a
// port already taken reported as an error.
import Foundation
import Observation
import Shoal

struct Car: Codable, Equatable {
    var _id: String
    var doors: Int
    var color: String?
}

struct ExampleFailure: Error, CustomStringConvertible {
    var description: String
}

/// Waits up to `seconds` for `condition`, or fails with `what`.
func waitFor(_ what: String, seconds: Double = 30, _ condition: () async throws -> Bool) async throws {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    throw ExampleFailure(description: "timed out after \(Int(seconds)) s waiting for \(what)")
}

func step(_ text: String) { print("shoal-example: \(text)") }

func run() async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("shoal-example-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: directory) }

    // Port 0: the system chooses, and `ready()` says which.
    let alpha = try ShoalNode(
        configuration: NodeConfiguration(
            dataDirectory: directory + "/alpha", listen: HostAndPort(host: "127.0.0.1", port: 0), name: "alpha",
            subscriptions: ["SELECT * FROM cars"]))
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await alpha.run() }
        let alphaAddress = try await alpha.ready()
        step("alpha listens on \(alphaAddress)")

        var configuration = NodeConfiguration(dataDirectory: directory + "/beta", listen: HostAndPort(host: "127.0.0.1", port: 0))
        configuration.name = "beta"
        configuration.peers = [alphaAddress]
        configuration.subscriptions = ["SELECT * FROM cars"]
        let beta = try ShoalNode(configuration: configuration)
        group.addTask { try await beta.run() }
        _ = try await beta.ready()

        // A live query on beta, held by the store until cancelled.
        let seen = LockedCars()
        let observer = try beta.store.registerObserver("SELECT * FROM cars WHERE doors >= :doors", arguments: ["doors": 4]) { update in
            seen.set(update.items.count)
        }

        // Written on alpha as a struct, read on beta as one.
        let doors = 4
        let written = Car(_id: "a", doors: doors, color: "blue")
        let result = try await alpha.store.execute("INSERT INTO cars DOCUMENTS (:car)", arguments: ["car": try Value(encoding: written)])
        guard let id = result.transactionID else { throw ExampleFailure(description: "the insert committed no transaction") }
        step("alpha wrote car a in transaction \(id)")
        try await waitFor("car a on beta") {
            try await beta.store.execute("SELECT * FROM cars WHERE _id = 'a'").items.decode(as: Car.self) == [written]
        }
        try await waitFor("beta's observer to see car a") { seen.get() == 1 }
        step("beta holds car a as it was written, and its observer saw it")

        // Several statements, one transaction.
        let moved = try await alpha.store.transaction(hint: "two more cars") { tx in
            _ = try await tx.execute("INSERT INTO cars DOCUMENTS ({'_id': 'b', 'doors': 2})")
            _ = try await tx.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c', 'doors': 5})")
            return .commit
        }
        try await waitFor("cars b and c on beta") { try await beta.store.execute("SELECT * FROM cars").items.count == 3 }
        try await waitFor("the observer to see car c") { seen.get() == 2 }
        step("a transaction of two cars (\(moved.transactionID.map { "\($0)" } ?? "none")) crossed whole")

        // The app's own error out of a transaction: one typed error, the app's inside it.
        struct OutOfStock: Error {}
        let thrown: ShoalError?
        do throws(ShoalError) {
            try await alpha.store.transaction(hint: "sell a car") { tx in
                _ = try await tx.execute("UPDATE cars SET color = 'sold' WHERE _id = 'a'")
                throw OutOfStock()
            }
            thrown = nil
        } catch {
            thrown = error
        }
        guard let thrown, thrown.code == .aborted, thrown.underlyingError is OutOfStock else {
            throw ExampleFailure(description: "a transaction whose body threw OutOfStock threw \(String(describing: thrown))")
        }
        let color = try await alpha.store.execute("SELECT color FROM cars WHERE _id = 'a'").items.first?["color"]
        guard color == "blue" else { throw ExampleFailure(description: "a rolled-back transaction left color \(String(describing: color))") }
        step("a transaction whose body threw rolled back: \(thrown)")

        // Two handles of one subscription: it stays until both are cancelled.
        let first = try beta.sync.registerSubscription("SELECT * FROM boats")
        let second = try beta.sync.registerSubscription("SELECT * FROM boats")
        first.cancel()
        guard beta.sync.subscriptions.entries.contains(where: { $0.query == "SELECT * FROM boats" }), !second.isCancelled else {
            throw ExampleFailure(description: "cancelling one handle took the other's subscription away")
        }
        second.cancel()
        guard !beta.sync.subscriptions.entries.contains(where: { $0.query == "SELECT * FROM boats" }) else {
            throw ExampleFailure(description: "the subscription outlived both of its handles")
        }
        step("a subscription registered twice went with its second cancel, not its first")

        // Sync stopped on beta: alpha's writes wait, and cross once it starts again.
        await beta.sync.stopSync()
        _ = try await alpha.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'd', 'doors': 3})")
        try await Task.sleep(for: .milliseconds(500))
        guard try await beta.store.execute("SELECT * FROM cars WHERE _id = 'd'").items.isEmpty else {
            throw ExampleFailure(description: "car d crossed while beta's sync was stopped")
        }
        beta.sync.startSync()
        try await waitFor("car d after sync started again") {
            try await !beta.store.execute("SELECT * FROM cars WHERE _id = 'd'").items.isEmpty
        }
        step("with sync stopped, car d waited; started again, it crossed")

        // A port already taken: `ready()` throws what ended `run()`, it does not hang.
        let taken = try ShoalNode(configuration: NodeConfiguration(dataDirectory: directory + "/gamma", listen: alphaAddress))
        do {
            try await withThrowingTaskGroup(of: Void.self) { inner in
                inner.addTask { try await taken.run() }
                _ = try await taken.ready()
                inner.cancelAll()
            }
            throw ExampleFailure(description: "a third node started on alpha's port")
        } catch let error as ShoalError where error.code == .invalidConfiguration {
            step("a third node on alpha's port: \(error)")
        }

        observer.cancel()
        group.cancelAll()
    }
    step("passed")
}

/// The observer's latest count, read by the waits. `@Observable` as a SwiftUI model
/// would be: Shoal's names leave the Observation module's alone.
@Observable
final class LockedCars: @unchecked Sendable {  // `count` behind `lock`
    @ObservationIgnored private let lock = NSLock()
    private var count = 0
    func set(_ value: Int) { lock.withLock { count = value } }
    func get() -> Int { lock.withLock { count } }
}

do {
    try await run()
} catch {
    FileHandle.standardError.write(Data("shoal-example: FAILED: \(error)\n".utf8))
    exit(1)
}

import ArgumentParser
import ShoalStorage
import Foundation
import ShoalCRDT
import ShoalNode
import ShoalShell
import ShoalSync

struct ShellCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shell",
        abstract: "Type DQL statements at a prompt, with transactions held across them.",
        discussion: """
            Statements end with ';' and may span lines. BEGIN [READ ONLY] [HINT 'text'] \
            opens a transaction on the shell's connection: the statements after it run in \
            it, and see its writes, until COMMIT or ROLLBACK; a read-write one holds the \
            node's writer meanwhile, so other writers wait. Leaving the shell, or losing \
            the connection, rolls it back. On a terminal the line can be edited, Up and \
            Down walk the history ($SHOAL_HISTORY, or ~/.shoal_history), Ctrl-C drops \
            the statement being typed and Ctrl-D (or \\q) leaves. Statements can be piped \
            in; then the first error stops the shell with exit status 1 (3 when it is a write \
            whose outcome the node cannot tell, as `shoal exec` says):
              echo "BEGIN; INSERT INTO cars DOCUMENTS ({'_id': 'a'}); COMMIT;" | shoal shell
            """
    )

    @OptionGroup var client: ClientOptions

    @Flag(name: .long, help: "Print each result as one JSON object per line.")
    var json = false

    func run() async throws {
        let client = try self.client.clientOrFail()
        let lines = ShellInput(interactive: LineEditor.standardInputIsTerminal)
        var shell = Shell(json: json, interactive: lines.interactive)
        do {
            try await client.withSession { session in
                try await shell.run(session: session, lines: lines)
            }
        } catch let error as ShoalError {
            throw fail(shell.explain(error))
        } catch {
            throw fail("cannot reach a Shoal node at \(self.client.node): \(error)")
        }
        if shell.failed { throw ExitCode(shell.outcomeUnknown ? ExecCommand.outcomeUnknown : 1) }
    }
}

/// The shell's loop: reads statements, runs them on one admin session, prints results.
struct Shell {
    let json: Bool
    let interactive: Bool
    /// The transaction the session holds, as the node last described it.
    var open: SessionTransaction?
    var splitter = StatementSplitter()
    /// A statement failed (piped input stops there), or the input ended inside a transaction.
    var failed = false
    /// The statement that stopped piped input was a write whose outcome the node cannot
    /// tell (a hub's `OUTCOME_UNKNOWN`): the exit status is 3, as `shoal exec`'s.
    var outcomeUnknown = false

    /// How often the shell pings the node while it waits for input, well inside the
    /// node's 30 s idle timeout, so a quiet shell keeps its connection and transaction.
    static let keepalive = Duration.seconds(5)

    init(json: Bool, interactive: Bool) {
        self.json = json
        self.interactive = interactive
    }

    var prompt: String {
        guard interactive else { return "" }
        return splitter.isEmpty ? (open == nil ? "shoal> " : "shoal*> ") : (open == nil ? "  ...> " : "  ..*> ")
    }

    mutating func run(session: AdminSession, lines: ShellInput) async throws {
        if interactive {
            print("Connected to \(session.node). End statements with ';'. \\? for help, \\q to quit.")
        }
        reading: while true {
            let input = try await lines.next(prompt: prompt) { try await session.ping() }
            switch input {
            case .interrupted:
                splitter.reset()
            case .end:
                if let last = splitter.finish(), !(try await run(last, on: session)) { break reading }
                break reading
            case .line(let line):
                if splitter.isEmpty {
                    switch line.trimmingCharacters(in: .whitespaces) {
                    case "\\q", "quit", "exit": break reading
                    case "\\?", "help":
                        print(Self.help)
                        continue reading
                    default: break
                    }
                }
                for statement in splitter.add(line: line) {
                    if !(try await run(statement, on: session)) { break reading }
                }
            }
        }
        if let open {
            let rolledBack = try? await session.rollback()
            printError("shoal: leaving the shell inside transaction \(open.id): \(rolledBack == nil ? "the node rolls it back" : "rolled back")")
            if !interactive { failed = true }
        }
    }

    /// Runs one statement and prints its outcome; false when the shell must stop
    /// (a failure in piped input).
    mutating func run(_ text: String, on session: AdminSession) async throws -> Bool {
        do {
            switch try ShellStatement.parse(text) {
            case .begin(let readOnly, let hint):
                let transaction = try await session.begin(hint: hint, readOnly: readOnly)
                open = transaction
                report(transaction)
            case .commit:
                defer { open = nil }
                report(try await session.commit())
            case .rollback:
                defer { open = nil }
                report(try await session.rollback())
            case .dql(let statement):
                report(try await session.exec(statement), of: statement)
            }
            return true
        } catch let error as ShellError {
            printError("shoal: \(error.message)")
        } catch let error as ShoalError where (error.code == .requestFailed || error.code == .timedOut) && session.endedByNode == nil {
            // A session waits as long as a statement takes, so `.timedOut` is the node's
            // answer that it cannot tell whether a write committed (a hub whose COMMIT
            // answer its database connection lost), not the client giving up: the
            // connection still serves the next statement. One the node ended (its Error
            // frame) does not, and ends the shell as a lost connection does.
            printError("shoal: \(error.message)")
            outcomeUnknown = error.code == .timedOut
        }
        // Anything else (the connection failed) ends the shell through its caller.
        fflush(nil)
        guard interactive else {
            failed = true
            return false
        }
        return true
    }

    func report(_ transaction: SessionTransaction) {
        if json {
            print(StatusCommand.session(transaction).merging(["state": .string(transaction.state.rawValue), "transactionID": transaction.transactionID.map(Value.string) ?? .null]).canonicalJSON)
        } else {
            switch transaction.state {
            case .open:
                let kind = transaction.isReadOnly ? "read-only" : "read-write"
                print("BEGIN \(kind) transaction \(transaction.id)\(transaction.hint.map { " (hint '\($0)')" } ?? "")")
            case .committed:
                print("COMMIT" + (transaction.transactionID.map { " as transaction \($0)" } ?? " (nothing written)"))
            case .rolledBack:
                print("ROLLBACK")
            }
        }
        fflush(nil)
    }

    func report(_ result: ExecResult, of statement: String) {
        if json {
            print(result.json)
        } else if !result.itemsJSON.isEmpty || Self.reads(statement) {
            let documents = result.itemsJSON.map { (try? JSON.parse($0)) ?? .string($0) }
            print(TextTable.render(documents: documents), terminator: "")
        } else {
            let count = result.mutatedDocumentIDs.count
            print("mutated \(count) document(s)" + (result.transactionID.map { " in transaction \($0)" } ?? ""))
        }
        fflush(nil)
    }

    /// Whether a statement's result is rows (SELECT, SHOW), so none is "(0 rows)".
    static func reads(_ statement: String) -> Bool {
        let word = statement.prefix { $0.isLetter }.uppercased()
        return word == "SELECT" || word == "SHOW"
    }

    /// The message for a connection that failed, saying what became of the transaction.
    func explain(_ error: ShoalError) -> String {
        guard let open else { return error.message }
        return "\(error.message); transaction \(open.id) was not committed (the node rolls it back)"
    }

    static let help = """
        Statements end with ';' and may span lines.
          BEGIN [READ ONLY] [HINT 'text']   open a transaction held by this shell
          COMMIT | ROLLBACK                 end it
          SELECT | INSERT | UPDATE | DELETE | EVICT | ALTER SYSTEM | SHOW ...
        \\q (or Ctrl-D) quits; Ctrl-C drops the statement being typed.
        """
}

extension Value {
    /// An object with `other`'s fields added (or replacing its own).
    func merging(_ other: [String: Value]) -> Value {
        guard case .object(let object) = self else { return self }
        return .object(object.merging(other) { _, new in new })
    }
}

/// Where the shell's lines come from: the line editor on a terminal, plain lines
/// otherwise. Each line is read on a thread of its own, so the session can ping the
/// node while the reader waits.
final class ShellInput: Sendable {
    let interactive: Bool
    /// Used by one reading thread at a time: the shell waits for each line before it asks for the next.
    private let editor: Locked<LineEditor>?
    private let historyPath: String?

    init(interactive: Bool) {
        self.interactive = interactive
        historyPath = interactive ? History.defaultPath : nil
        editor = interactive ? Locked(LineEditor(history: historyPath.map { History.load(path: $0) } ?? History())) : nil
    }

    /// The next line, calling `keepalive` every `Shell.keepalive` while it waits.
    func next(prompt: String, keepalive: () async throws -> Void) async throws -> LineEditor.Input {
        let pending = PendingLine()
        Thread.detachNewThread { [self] in pending.set(self.read(prompt: prompt)) }
        while true {
            if let input = await pending.wait(upTo: Shell.keepalive) { return input }
            try await keepalive()
        }
    }

    private func read(prompt: String) -> LineEditor.Input {
        guard let editor else { return readLine(strippingNewline: true).map { .line($0) } ?? .end }
        return editor.withLock { editor in
            let input: LineEditor.Input
            do {
                input = try editor.readLine(prompt: prompt)
            } catch {
                return readLine(strippingNewline: true).map { .line($0) } ?? .end
            }
            if case .line = input, let historyPath {
                do throws(ShellError) {
                    try editor.history.save(path: historyPath)
                } catch {
                    printError("shoal: \(error.message)")
                }
            }
            return input
        }
    }
}

/// A line being read on another thread, awaited with a time limit.
final class PendingLine: Sendable {
    private struct State {
        var input: LineEditor.Input?
        var waiter: CheckedContinuation<LineEditor.Input?, Never>?
    }

    private let state = Locked(State())

    func set(_ input: LineEditor.Input) {
        state.withLock { s in
            s.input = input
            defer { s.waiter = nil }
            return s.waiter
        }?.resume(returning: input)
    }

    /// The line, or nil if it has not come within `limit`.
    func wait(upTo limit: Duration) async -> LineEditor.Input? {
        await withTaskGroup(of: LineEditor.Input?.self) { group in
            group.addTask { await self.value() }
            group.addTask {
                try? await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
    }

    /// The line once it has come; nil if the task is cancelled first.
    private func value() async -> LineEditor.Input? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<LineEditor.Input?, Never>) in
                let ready = state.withLock { s -> LineEditor.Input?? in
                    if let input = s.input { return .some(input) }
                    if Task.isCancelled { return .some(nil) }
                    s.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            state.withLock { s in
                defer { s.waiter = nil }
                return s.waiter
            }?.resume(returning: nil)
        }
    }
}

import ShoalCRDT
import ShoalQuery
import ShoalTesting
import Testing

/// The `dql-statements` and `dql-match` examples of `Protocol/DQL.md`, each run
/// against the parser and the evaluator: the file says what DQL is, these say that the
/// node agrees.
@Suite struct DQLExampleTests {
    static let examples = DQLExamples.all

    /// Every example block is read whole: a line that follows no format fails here
    /// rather than being skipped, and each kind of example is there.
    @Test func theExamplesAreAllRead() {
        #expect(Self.examples.problems.isEmpty, "\(Self.examples.problems)")
        #expect(Self.examples.statements.contains { $0.accepted } && Self.examples.statements.contains { !$0.accepted })
        #expect(Set(Self.examples.matches.map(\.outcome)) == [.true, .false, .error])
    }

    @Test(arguments: examples.statements)
    func statement(_ example: DQLExamples.Parse) {
        do throws(QueryError) {
            _ = try Parser.parse(example.text)
            #expect(example.accepted, "parsed, though DQL.md says it is refused")
        } catch {
            #expect(!example.accepted, "refused: \(error)")
            if let says = example.says {
                #expect(error.message.contains(says), "the message is: \(error.message)")
            }
        }
    }

    /// The example's expression as the WHERE clause of a SELECT, on its document.
    @Test(arguments: examples.matches)
    func match(_ example: DQLExamples.Match) throws {
        let document = try JSON.parse(example.document)
        let arguments = try ArgumentsJSON.parse(example.arguments)
        guard case .select(let select) = try Parser.parseStatement("SELECT * FROM c WHERE \(example.expression)") else {
            Issue.record("not a SELECT")
            return
        }
        let outcome: DQLExamples.Match.Outcome
        do throws(QueryError) {
            outcome = try Evaluator.matches(select.whereClause, document: document, arguments: arguments) ? .true : .false
        } catch {
            outcome = .error
        }
        #expect(outcome == example.outcome)
    }
}

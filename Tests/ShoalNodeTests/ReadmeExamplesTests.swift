import Foundation
import Testing

/// README.md's Swift examples are compiled, as the README shows them, in
/// `ReadmeExamples.swift` (made by `scripts/readme-examples.py`): this fails when a
/// block of the README is not there line for line, so neither can drift.
@Suite struct ReadmeExamplesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test func everySwiftBlockOfTheReadmeIsCompiled() throws {
        let readme = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
        let compiled = try String(
            contentsOf: Self.root.appendingPathComponent("Tests/ShoalNodeTests/ReadmeExamples.swift"), encoding: .utf8)
        let blocks = readme.components(separatedBy: "```swift\n").dropFirst().compactMap { $0.components(separatedBy: "```").first }
        let examples = blocks.filter { !$0.hasPrefix("// swift-tools-version") }
        #expect(examples.count >= 4, "the README's Swift examples were not found")
        for example in examples {
            let lines = example.split(separator: "\n", omittingEmptySubsequences: false)
                .filter { !$0.hasPrefix("import ") }
                .map { $0.isEmpty ? "" : "        " + $0 }
                .drop { $0.isEmpty }
            let indented = lines.joined(separator: "\n").trimmingCharacters(in: .newlines)
            #expect(
                compiled.contains(indented),
                "README.md has a Swift example that ReadmeExamples.swift does not compile as written: run scripts/readme-examples.py\n\(indented)")
        }
    }
}

import Foundation
import ShoalShell
import Testing

@Suite struct HistoryTests {
    @Test func upAndDownWalkTheEntriesAndBringBackTheTypedLine() {
        var history = History(entries: ["one", "two"])
        #expect(history.previous(current: "typing") == "two")
        #expect(history.previous(current: "two") == "one")
        #expect(history.previous(current: "one") == nil)
        #expect(history.next() == "two")
        #expect(history.next() == "typing")
        #expect(history.next() == nil)
    }

    @Test func addingSkipsBlanksAndRepeatsAndKeepsTheNewest() {
        var history = History(limit: 2)
        for line in ["a", "a", "  ", "b", "c"] { history.add(line) }
        #expect(history.entries == ["b", "c"])
        _ = history.previous(current: "")
        history.add("d")
        #expect(history.previous(current: "") == "d")
    }

    @Test func savesToAPrivateFileAndLoadsMultiLineEntries() throws {
        let path = NSTemporaryDirectory() + "shoal-history-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: path) }
        var history = History()
        history.add("SELECT *\nFROM cars;")
        history.add("COMMIT;")
        try history.save(path: path)
        #expect(History.load(path: path).entries == ["SELECT *\nFROM cars;", "COMMIT;"])
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(History.load(path: path + "-missing").entries.isEmpty)
    }
}

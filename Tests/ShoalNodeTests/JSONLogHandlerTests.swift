import Foundation
import Logging
import ShoalNode
import ShoalCRDT
import Testing

/// `--log-format json`: one JSON object per line, fixed fields first, metadata keys as fields.
struct JSONLogHandlerTests {
    /// What a handler wrote.
    final class Lines: Sendable {
        let written = Locked<[String]>([])
        func withLock<T>(_ body: (inout [String]) -> T) -> T { written.withLock { body(&$0) } }
    }

    /// A logger whose lines land in `lines`, dated 2026-05-01T09:30:00.125Z.
    static func logger(_ lines: Lines, level: Logger.Level = .info) -> Logger {
        var handler = JSONLogHandler(
            label: "shoal", now: { Date(timeIntervalSince1970: 1_777_627_800.125) },
            write: { line in lines.withLock { $0.append(line) } })
        handler.logLevel = level
        return Logger(label: "shoal") { _ in handler }
    }

    static func object(_ line: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }

    @Test func aLineIsOneObjectWithTheFixedFieldsAndTheMetadata() throws {
        let lines = Lines()
        var logger = Self.logger(lines)
        logger[metadataKey: "shoal.name"] = "kitchen"
        logger.info(
            "ready to accept connections on 127.0.0.1:7470",
            metadata: ["shoal.peer.site": "5f3a01", "shoal.count": "\(3)", "shoal.list": ["a", "b"], "shoal.map": ["k": "v"]])
        let written = lines.withLock { $0 }
        #expect(written.count == 1)
        let line = try #require(written.first)
        #expect(line.hasSuffix("}\n") && line.dropLast().allSatisfy { $0 != "\n" }, "one line, ended by a newline")
        #expect(line.hasPrefix("{\"timestamp\":\"2026-05-01T09:30:00.125Z\",\"level\":\"info\",\"label\":\"shoal\",\"message\":"))
        let object = try Self.object(line)
        #expect(object["timestamp"] as? String == "2026-05-01T09:30:00.125Z")
        #expect(object["level"] as? String == "info")
        #expect(object["label"] as? String == "shoal")
        #expect(object["message"] as? String == "ready to accept connections on 127.0.0.1:7470")
        #expect(object["shoal.peer.site"] as? String == "5f3a01")
        #expect(object["shoal.name"] as? String == "kitchen", "the logger's own metadata is a field too")
        #expect(object["shoal.count"] as? String == "3")
        #expect(object["shoal.list"] as? [String] == ["a", "b"])
        #expect(object["shoal.map"] as? [String: String] == ["k": "v"])
        #expect(object.count == 9)
    }

    @Test func messagesAreEscapedAndLevelsFiltered() throws {
        let lines = Lines()
        let logger = Self.logger(lines, level: .notice)
        logger.info("not written: below the level")
        logger.warning("two\nlines and a \"quote\"", metadata: ["message": "must not hide the message"])
        let written = lines.withLock { $0 }
        #expect(written.count == 1)
        let object = try Self.object(try #require(written.first))
        #expect(object["message"] as? String == "two\nlines and a \"quote\"")
        #expect(object["level"] as? String == "warning")
        #expect(written.first?.filter { $0 == "\n" }.count == 1)
    }
}

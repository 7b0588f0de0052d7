import Logging
@testable import ShoalSync
import ShoalTesting
import Testing

/// A commit's body may run more than once; what it warns of is logged once, from the
/// attempt that was kept, and only when told to.
@Suite struct DeferredLogTests {
    @Test func onlyTheLastAttemptIsLoggedAndOnlyOnce() {
        let records = LogRecords()
        var logger = Logger(label: "shoal.test") { _ in CapturingLogHandler(records: records) }
        logger.logLevel = .info
        let deferred = DeferredLog()

        var first = deferred.attempt(of: logger)
        first[metadataKey: "shoal.attempt"] = "1"
        first.warning("over the soft limit", metadata: ["shoal.txn": "a:1"])
        #expect(records.all.isEmpty, "nothing is logged while the write may still run again")

        let second = deferred.attempt(of: logger)
        second.warning("over the soft limit", metadata: ["shoal.txn": "a:1"])
        second.debug("below the logger's level")
        deferred.flush(to: logger)
        deferred.flush(to: logger)

        #expect(records.all.map(\.message) == ["over the soft limit"], "the kept attempt's warning, once")
        #expect(records.all.first?.metadata["shoal.txn"] == "a:1")
        #expect(records.all.first?.metadata["shoal.attempt"] == nil, "the first attempt's records are gone")
        #expect(records.all.first?.level == .warning)
    }
}
